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
_GPU = re.compile(r"GPU\d+")
_LEGEND = re.compile(r"(NIC\d+):\s*(\S+)")
# nearest first: how far a GPU's traffic to a NIC travels over PCIe
DISTANCE = ("PIX", "PXB", "PHB", "NODE", "SYS")


def parse_topology(text: str, source: str = SOURCE) -> dict[str, Any]:
    """``{"gpus": {"GPU0": {"nics": {"NIC0": "PIX", ...}, "cpu_affinity", "numa_affinity"}},
    "nics": {"NIC0": "mlx5_0"}, "notes": [...]}``; ``ParseError`` without a header of GPU
    columns.

    Device columns are the header's names before ``CPU Affinity``: ``GPU#`` and ``NIC#``, or,
    from older drivers, the RDMA devices themselves (``mlx5_1 mlx5_0``, in the driver's order,
    mapped by name). Where the GPU rows lost their NIC columns (a damaged paste) but the NIC
    rows are there, each GPU's distance is read from the NIC rows, and ``notes`` says so.
    """
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    # the header row names GPU0 first; GPU0's own row follows it with X
    header = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]
                   and line.split()[1:2] != ["X"]), None)
    columns = _device_columns(lines[header]) if header is not None else []
    if not columns:
        raise ParseError(source, text.strip()[:80], "no 'GPU0 GPU1 ... NIC0' header row")
    gpus: dict[str, Any] = {}
    nic_rows: dict[str, list[str]] = {}
    for line in lines[header + 1:]:
        tokens = line.split()
        if gpus and tokens[:1] == ["Legend:"]:
            break
        if not tokens or tokens[0] not in columns and not _DEVICE.fullmatch(tokens[0]):
            continue
        if _GPU.fullmatch(tokens[0]) and len(tokens) > len(columns):
            links = dict(zip(columns, tokens[1:len(columns) + 1], strict=True))
            rest = tokens[len(columns) + 1:]
            gpus[tokens[0]] = {"nics": {c: v for c, v in links.items() if not _GPU.fullmatch(c)},
                               "cpu_affinity": rest[0] if rest else None,
                               "numa_affinity": rest[1] if len(rest) > 1 else None}
        elif not _GPU.fullmatch(tokens[0]):
            nic_rows[tokens[0]] = tokens[1:]
    notes = _nics_from_rows(gpus, columns, nic_rows)
    legend = dict(_LEGEND.findall("\n".join(line for line in lines if "NIC" in line
                                             and ":" in line and "=" not in line)))
    nics = {c: c for c in columns if not _GPU.fullmatch(c) and not _DEVICE.fullmatch(c)}
    nics.update({k: v for k, v in legend.items() if not v.startswith("NIC")})
    return {"gpus": gpus, "nics": nics, "notes": notes}


def _device_columns(header: str) -> list[str]:
    """The header's device names: every token before ``CPU`` (``CPU Affinity``)."""
    tokens = header.split()
    return tokens[:tokens.index("CPU")] if "CPU" in tokens else \
        [t for t in tokens if _DEVICE.fullmatch(t)]


def _nics_from_rows(gpus: dict[str, Any], columns: list[str],
                    nic_rows: dict[str, list[str]]) -> list[str]:
    """Fill each GPU's NICs from the NIC rows where the header has no NIC column; the note
    that says so (none when nothing was missing)."""
    gpu_columns = [c for c in columns if _GPU.fullmatch(c)]
    missing = {nic: values for nic, values in nic_rows.items()
               if nic not in columns and len(values) >= len(gpu_columns)}
    if not missing or not gpus:
        return []
    for nic, values in missing.items():
        for gpu, value in zip(gpu_columns, values, strict=False):
            if gpu in gpus:
                gpus[gpu]["nics"][nic] = value
    return [f"the GPU rows have no column for {', '.join(missing)} (a damaged capture): "
            "each GPU's distance to them is read from their own rows"]


def read_topology(root: Sysroot) -> dict[str, Any]:
    """``parse_topology`` of the host's ``nvidia-smi topo -m``; ``NotSupported`` where
    nvidia-smi is absent or the capture lacks it."""
    out = root.command(COMMAND).checked()
    return parse_topology(out.stdout, out.source)
