"""NVLink link state per GPU, from ``nvidia-smi nvlink -s`` (``--status``).

The report prints one header per GPU, ``GPU 0: NVIDIA H200 (UUID: GPU-...)``, then one line per
link, ``Link 0: 26.562 GB/s`` for an active link or ``Link 3: <inactive>`` for one that is down
(Azure/azhpc-diagnostics#73 shows both on a V100). A GPU whose links are all down, or that has
links but none trained (no NVLink bridge fitted, a lone superchip), prints ``Unable to retrieve
NVLink information as all links are inActive`` instead of link lines (``NVML: `` before it, and
``NVLink`` or ``Nvlink``, depending on the driver branch). A GPU without NVLink prints its header
and nothing else. Lines of dots or ``[...]`` mark where a pasted report was cut.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

COMMAND = "nvidia-smi-nvlink-s.txt"
SOURCE = "nvidia-smi nvlink -s"
_HEADER = re.compile(r"GPU (\d+): (.*?)(?: \(UUID: ([^)]*)\))?")
_LINK = re.compile(r"Link (\d+): (?:<inactive>|([\d.]+) GB/s)")
ALL_INACTIVE = "all links are inactive"
_ELISION = re.compile(r"\.{3,}|\[\.\.\.\]")  # where a pasted report was cut: ``....``, ``[...]``


def parse_nvlink_status(text: str, source: str = SOURCE) -> list[dict[str, Any]]:
    """Per GPU, in the report's order: ``index``, ``name``, ``uuid``, ``links`` (how many were
    listed), ``active`` (how many), ``inactive`` (their numbers), ``all_inactive`` (the
    driver's all-links-inactive line), ``gbps_min`` and ``gbps_max`` (of the active links).

    ``ParseError`` for a line before the first GPU header that is not a cut mark; other lines
    after a header (notes) are left alone.
    """
    gpus: list[dict[str, Any]] = []
    speeds: list[list[float]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or _ELISION.fullmatch(line):
            continue
        if header := _HEADER.fullmatch(line):
            gpus.append({"index": int(header.group(1)), "name": header.group(2),
                         "uuid": header.group(3), "links": 0, "active": 0, "inactive": [],
                         "all_inactive": False, "gbps_min": None, "gbps_max": None})
            speeds.append([])
        elif not gpus:
            raise ParseError(f"{source}:{number}", line[:80], "not a 'GPU N: ...' header")
        elif link := _LINK.fullmatch(line):
            gpu = gpus[-1]
            gpu["links"] += 1
            if link.group(2) is None:
                gpu["inactive"].append(int(link.group(1)))
            else:
                gpu["active"] += 1
                speeds[-1].append(float(link.group(2)))
        elif ALL_INACTIVE in line.lower():
            gpus[-1]["all_inactive"] = True
    for gpu, found in zip(gpus, speeds, strict=True):
        if found:
            gpu["gbps_min"], gpu["gbps_max"] = min(found), max(found)
    return gpus


def read_nvlink_status(root: Sysroot) -> list[dict[str, Any]]:
    """``parse_nvlink_status`` of the host's ``nvidia-smi nvlink -s``; ``NotSupported`` when
    nvidia-smi is absent or the capture lacks it, ``CommandFailed`` when it fails."""
    out = root.command(COMMAND).checked()
    return parse_nvlink_status(out.stdout, out.source)
