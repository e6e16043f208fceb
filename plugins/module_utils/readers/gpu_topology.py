"""How each GPU reaches each NIC over PCIe, from ``nvidia-smi topo -m``.

The matrix has a header row of device names (``GPU0 ... NIC0 ...``, then the ``CPU Affinity``,
``NUMA Affinity`` and ``GPU NUMA ID`` columns), one row per device with one connection per
device column (``X`` itself, ``NV#`` bonded NVLinks, ``PIX`` at most one PCIe bridge, ``PXB``
several bridges without the host bridge, ``PHB`` through a PCIe host bridge, ``NODE`` between
host bridges of one NUMA node, ``SYS`` across the SMP interconnect), then its affinity columns.
``NIC Legend:`` maps ``NIC0`` to its RDMA device (``mlx5_0``). Columns are separated by tabs in
the terminal and by spaces where the output was pasted; terminals may underline the header
with ANSI escapes.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

COMMAND = "nvidia-smi-topo-m.txt"
SOURCE = "nvidia-smi topo -m"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE = re.compile(r"(GPU|NIC)\d+")
_LEGEND = re.compile(r"(NIC\d+):\s*(\S+)")
# nearest first: how far a GPU's traffic to a NIC travels over PCIe
DISTANCE = ("PIX", "PXB", "PHB", "NODE", "SYS")


def parse_topology(text: str, source: str = SOURCE) -> dict[str, Any]:
    """``{"gpus": {"GPU0": {"nics": {"NIC0": "PIX", ...}, "cpu_affinity", "numa_affinity"}},
    "nics": {"NIC0": "mlx5_0"}}``; ``ParseError`` without a header of GPU columns."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    # the header row names GPU0 first; GPU0's own row follows it with X
    header = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]
                   and line.split()[1:2] != ["X"]), None)
    columns = [t for t in lines[header].split() if _DEVICE.fullmatch(t)] if header is not None \
        else []
    if not columns:
        raise ParseError(source, text.strip()[:80], "no 'GPU0 GPU1 ... NIC0' header row")
    gpus: dict[str, Any] = {}
    for line in lines[header + 1:]:
        tokens = line.split()
        if not tokens or not _DEVICE.fullmatch(tokens[0]):
            if gpus and tokens[:1] == ["Legend:"]:
                break
            continue
        if tokens[0].startswith("GPU") and len(tokens) > len(columns):
            links = dict(zip(columns, tokens[1:len(columns) + 1], strict=True))
            rest = tokens[len(columns) + 1:]
            gpus[tokens[0]] = {"nics": {c: v for c, v in links.items() if c.startswith("NIC")},
                               "cpu_affinity": rest[0] if rest else None,
                               "numa_affinity": rest[1] if len(rest) > 1 else None}
    nics = dict(_LEGEND.findall("\n".join(line for line in lines if "NIC" in line
                                           and ":" in line and "=" not in line)))
    return {"gpus": gpus, "nics": {k: v for k, v in nics.items() if not v.startswith("NIC")}}


def read_topology(root: Sysroot) -> dict[str, Any]:
    """``parse_topology`` of the host's ``nvidia-smi topo -m``; ``NotSupported`` where
    nvidia-smi is absent or the capture lacks it."""
    out = root.command(COMMAND).checked()
    return parse_topology(out.stdout, out.source)
