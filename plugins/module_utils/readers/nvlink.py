"""NVLink link state and error counters per GPU, from ``nvidia-smi nvlink -s`` (``--status``)
and ``nvidia-smi nvlink -e`` (``--errorcounters``).

The report prints one header per GPU, ``GPU 0: NVIDIA H200 (UUID: GPU-...)``, then one line per
link, ``Link 0: 26.562 GB/s`` for an active link or ``Link 3: <inactive>`` for one that is down
(Azure/azhpc-diagnostics#73 shows both on a V100). A GPU whose links are all down, or that has
links but none trained (no NVLink bridge fitted, a lone superchip), prints ``Unable to retrieve
NVLink information as all links are inActive`` instead of link lines (``NVML: `` before it, and
``NVLink`` or ``Nvlink``, depending on the driver branch). A GPU without NVLink prints its header
and nothing else. Lines of dots or ``[...]`` mark where a pasted report was cut.

``-e`` prints the same headers, then ``Link 0: Replay Errors: 0`` lines, one per link and
counter (a tab and a blank before ``Link``, a blank line after each link's group: driver 535 on
an A100, stas00/ml-engineering on an H100). Which counters depend on the generation: ``Replay
Errors``, ``Recovery Errors`` and ``CRC Errors`` up to Hopper; Blackwell drivers print others
(``Link recovery failed events``, ``Effective Errors``, ``FEC Errors - 0`` ..., their casing
varying), so counters are keyed by their name in lower case, whatever it is.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.values import parse_count
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

COMMAND = "nvidia-smi-nvlink-s.txt"
SOURCE = "nvidia-smi nvlink -s"
ERRORS_COMMAND = "nvidia-smi-nvlink-e.txt"
ERRORS_SOURCE = "nvidia-smi nvlink -e"
_HEADER = re.compile(r"GPU (\d+): (.*?)(?: \(UUID: ([^)]*)\))?")
_LINK = re.compile(r"Link (\d+): (?:<inactive>|(\d+(?:\.\d+)?) GB/s)")
_COUNTER = re.compile(r"Link (\d+): (.*?\S):\s+(\d+)")
ALL_INACTIVE = "all links are inactive"
_ELISION = re.compile(r"\.{3,}|\[\.\.\.\]")  # where a pasted report was cut: ``....``, ``[...]``


def _by_gpu(text: str, source: str) -> list[tuple[dict[str, Any], list[str]]]:
    """Each GPU's header fields and the stripped lines after it, in the report's order;
    ``ParseError`` for a line before the first header that is not a cut mark."""
    gpus: list[tuple[dict[str, Any], list[str]]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or _ELISION.fullmatch(line):
            continue
        if header := _HEADER.fullmatch(line):
            gpus.append(({"index": parse_count(header.group(1), f"{source}:{number}"),
                          "name": header.group(2),
                          "uuid": header.group(3)}, []))
        elif not gpus:
            raise ParseError(f"{source}:{number}", line[:80], "not a 'GPU N: ...' header")
        else:
            gpus[-1][1].append(line)
    return gpus


def parse_nvlink_status(text: str, source: str = SOURCE) -> list[dict[str, Any]]:
    """Per GPU, in the report's order: ``index``, ``name``, ``uuid``, ``links`` (how many were
    listed), ``active`` (how many), ``inactive`` (their numbers), ``all_inactive`` (the
    driver's all-links-inactive line), ``gbps_min`` and ``gbps_max`` (of the active links).

    ``ParseError`` for a line before the first GPU header that is not a cut mark; other lines
    after a header (notes) are left alone.
    """
    gpus = []
    for header, lines in _by_gpu(text, source):
        gpu = {**header, "links": 0, "active": 0, "inactive": [], "all_inactive": False,
               "gbps_min": None, "gbps_max": None}
        speeds = []
        for line in lines:
            if link := _LINK.fullmatch(line):
                gpu["links"] += 1
                if link.group(2) is None:
                    gpu["inactive"].append(parse_count(link.group(1), source))
                else:
                    gpu["active"] += 1
                    speeds.append(float(link.group(2)))
            elif ALL_INACTIVE in line.lower():
                gpu["all_inactive"] = True
        if speeds:
            gpu["gbps_min"], gpu["gbps_max"] = min(speeds), max(speeds)
        gpus.append(gpu)
    return gpus


def parse_nvlink_errors(text: str, source: str = ERRORS_SOURCE) -> list[dict[str, Any]]:
    """Per GPU, in the report's order: ``index``, ``name``, ``uuid`` and ``links``, each link's
    counters by number (``{"0": {"replay errors": 0, ...}}``: names in lower case, whole
    counts only; a BER or ``N/A`` is left out). ``ParseError`` as for the status report."""
    gpus = []
    for header, lines in _by_gpu(text, source):
        links: dict[str, dict[str, int]] = {}
        for line in lines:
            if counter := _COUNTER.fullmatch(line):
                name = " ".join(counter.group(2).lower().split())
                links.setdefault(counter.group(1), {})[name] = parse_count(
                    counter.group(3), source)
        gpus.append({**header, "links": links})
    return gpus


def read_nvlink_status(root: Sysroot) -> list[dict[str, Any]]:
    """``parse_nvlink_status`` of the host's ``nvidia-smi nvlink -s``; ``NotSupported`` when
    nvidia-smi is absent or the capture lacks it, ``CommandFailed`` when it fails."""
    out = root.command(COMMAND).checked()
    return parse_nvlink_status(out.stdout, out.source)


def read_nvlink_errors(root: Sysroot) -> list[dict[str, Any]]:
    """``parse_nvlink_errors`` of the host's ``nvidia-smi nvlink -e``; ``NotSupported`` and
    ``CommandFailed`` as for the status report."""
    out = root.command(ERRORS_COMMAND).checked()
    return parse_nvlink_errors(out.stdout, out.source)
