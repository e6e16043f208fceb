"""``numactl -H`` (``--hardware``): the NUMA nodes, their CPUs and memory, and the distances.

A node with memory and no CPUs is a memory-only node: CXL memory expanders and HBM appear so
(``linux:Documentation/admin-guide/mm/numaperf.rst``). It is a memory tier next to the CPU
node it is nearest to, not remote allocation and not a misconfiguration; one whose size reads
0 MB has no memory online (a CXL device in devdax mode, or memory not onlined). The reading
is information for the placement check numastat feeds (``cpu.job-cpus-gpu-local``): which
nodes hold CPUs, and which hold only memory and near which socket.
"""

from __future__ import annotations

import re
from typing import Any

from exemplar_tune.diagnose.base import INFO, Analyzer, DiagnoseError, Report, cite, finding

KIND = "numactl -H"
CHECK = "cpu.job-cpus-gpu-local"
_AVAILABLE = re.compile(r"^available: (\d+) nodes?\b", re.MULTILINE)
_FIELD = re.compile(r"^node (\d+) (cpus|size|free):(.*)$")
_ROW = re.compile(r"^\s*(\d+):((?:\s+\d+)+)")
_MB = re.compile(r"^\s*(\d+) MB\b")


def sniff(text: str) -> bool:
    """The ``available: N nodes`` line and ``node N cpus:`` lines."""
    head = text[:65536]
    return bool(_AVAILABLE.search(head)) and "\nnode 0 cpus:" in f"\n{head}"


def parse(text: str) -> dict[str, Any]:
    """``{"nodes": {n: {"cpus": count (None: elided), "size_mb", "free_mb", "line"}},
    "distances": {n: [d0, d1, ...]}}``; annotations after a value are ignored."""
    nodes: dict[int, dict[str, Any]] = {}
    distances: dict[int, list[int]] = {}
    in_distances = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("node distances:"):
            in_distances = True
            continue
        if in_distances and (row := _ROW.match(line)):
            distances[int(row.group(1))] = [int(v) for v in row.group(2).split()]
            continue
        if field := _FIELD.match(line):
            node = nodes.setdefault(int(field.group(1)), {"line": number})
            node.update(_value(field.group(2), field.group(3)))
    return {"nodes": nodes, "distances": distances}


def _value(name: str, raw: str) -> dict[str, Any]:
    if name == "cpus":
        words = raw.split()
        elided = any("..." in w for w in words)  # a list shortened where it was pasted
        return {"cpus": None if elided else sum(w.isdigit() for w in words),
                "cpus_elided": elided}
    amount = _MB.match(raw)
    return {f"{name}_mb": int(amount.group(1)) if amount else None}


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    del expectations
    doc = parse(text)
    nodes = doc["nodes"]
    if not nodes:
        raise DiagnoseError(f"{source}: numactl -H without 'node N cpus:' lines")
    memory_only = [n for n, node in nodes.items() if node.get("cpus") == 0]
    summary = {"nodes": {str(n): v for n, v in nodes.items()},
               "distances": {str(n): v for n, v in doc["distances"].items()},
               "memory_only_nodes": memory_only}
    found = [finding(CHECK, INFO, _memory_only(n, nodes, doc["distances"]),
                     [cite(source, [nodes[n]["line"]])], node=n) for n in memory_only]
    if not found:
        found = [finding(CHECK, INFO, f"{len(nodes)} NUMA nodes, each with CPUs: no memory-only "
                         "node", [source])]
    return Report(source, KIND, summary, found)


def _memory_only(n: int, nodes: dict[int, dict[str, Any]], distances: dict[int, list[int]]
                 ) -> str:
    """The reading of memory-only node ``n``: its size and the CPU node nearest to it."""
    size = nodes[n].get("size_mb")
    row = distances.get(n) or []
    near = [(row[c], c) for c, node in nodes.items() if node.get("cpus") != 0 and c < len(row)]
    nearest = f", nearest CPU node {min(near)[1]} (distance {min(near)[0]})" if near else ""
    if size == 0:
        return (f"node {n}: memory-only node with 0 MB online{nearest}: its memory is not "
                "usable as system RAM now (a CXL device in devdax mode, or not onlined); not a "
                "DRAM fault")
    amount = f"{size} MB" if size is not None else "memory"
    return (f"node {n}: memory-only node ({amount}, no CPUs){nearest}: a memory tier (CXL "
            "expander or HBM), not remote allocation")


ANALYZER = Analyzer(KIND, sniff, analyze, label="numactl -H")
