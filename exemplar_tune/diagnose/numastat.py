"""numastat output: remote allocations per node, and per-process memory off its main node.

Formats (``linux:Documentation/admin-guide/numastat.rst``): plain
``numastat`` prints counters in pages since boot, one column per node (``numa_hit``,
``numa_miss``, ``numa_foreign``, ``interleave_hit``, ``local_node``, ``other_node``;
``numastat -n`` prints the same in MB with capitalised names and a ``Total`` column).
``other_node`` counts pages allocated on this node by a process running on another node, so
``other_node / (local_node + other_node)`` is the node's remote-allocation ratio.
``numastat -p`` prints MB per node per process (``Huge Heap Stack Private Total`` rows, one
block per process); ``-c`` compacts it to one row per process (``701 (hot_cold) 501 0 601
1101``).
"""

from __future__ import annotations

import re
from typing import Any

from exemplar_tune.diagnose.base import (
    FAIL,
    INFO,
    PASS,
    WARN,
    Analyzer,
    DiagnoseError,
    Finding,
    Report,
    cite,
    finding,
    numbered,
    to_float,
)

KIND = "numastat"
CHECK = "cpu.job-cpus-gpu-local"
REMOTE_WARN, REMOTE_FAIL = 0.05, 0.20  # other_node share of a node's allocations
OFF_NODE_WARN, OFF_NODE_FAIL = 0.10, 0.25  # a process's memory off its main node
MIN_PROCESS_MB = 64.0  # smaller processes are reported, not judged
_COUNTERS = ("numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node",
             "other_node")
_PROC_TITLE = re.compile(r"Per-node process memory usage \(in MBs\)(?: for PID (\d+) \((.*)\))?")
_HEADER = re.compile(r"(?:node\s?\d+\s*)+", re.I)
_COMPACT_ROW = re.compile(r"^\s*(\d+)\s+\((.*?)\)\s+([\d.\s]+)$")


def sniff(text: str) -> bool:
    return bool(re.search(r"^\s*numa_hit\s+\d", text, re.M | re.I)) or bool(
        _PROC_TITLE.search(text))


def _nodes(line: str) -> list[str]:
    """``["node0", "node1"]`` from a column header line (``node0 node1``, ``PID Node 0 ...``)."""
    rest = re.sub(r"^\s*(PID\s+)?|\s*Total\s*$", "", line)
    if not _HEADER.fullmatch(rest):
        return []
    return [f"node{n}" for n in re.findall(r"node\s?(\d+)", rest, re.I)]


def parse_default(text: str) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """``{counter: {node: value}}`` and the line of each counter, from plain ``numastat``."""
    counters: dict[str, dict[str, float]] = {}
    lines: dict[str, int] = {}
    nodes: list[str] = []
    for n, line in numbered(text):
        tokens = line.split()
        if _nodes(line):
            nodes = _nodes(line)
        elif tokens and tokens[0].lower() in _COUNTERS and nodes:
            values = [to_float(t) for t in tokens[1:1 + len(nodes)]]
            if len(values) == len(nodes) and None not in values:
                counters[tokens[0].lower()] = dict(zip(nodes, values, strict=True))
                lines[tokens[0].lower()] = n
    return counters, lines


def parse_processes(text: str) -> list[dict[str, Any]]:
    """One entry per process from ``numastat -p`` (block or ``-c`` compact form), in MB."""
    procs: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    nodes: list[str] = []
    for n, line in numbered(text):
        if m := _PROC_TITLE.search(line):
            current = {"pid": m.group(1), "name": m.group(2), "line": n}
        elif _nodes(line):
            nodes = _nodes(line)
        elif current and line.split()[:1] == ["Total"] and nodes:
            mb = [to_float(t) for t in line.split()[1:1 + len(nodes)]]
            if len(mb) < len(nodes):
                continue
            procs.append({**current, "node_mb": dict(zip(nodes, mb, strict=True)), "line": n})
            current = None
        elif nodes and (m := _COMPACT_ROW.match(line)):
            mb = [to_float(t) for t in m.group(3).split()[:len(nodes)]]
            if len(mb) < len(nodes):
                continue
            procs.append({"pid": m.group(1), "name": m.group(2), "line": n,
                          "node_mb": dict(zip(nodes, mb, strict=True))})
    return procs


def judge_default(source: str, counters: dict[str, dict[str, float]],
                  lines: dict[str, int]) -> Finding:
    local, other = counters.get("local_node"), counters.get("other_node")
    if not local or not other:
        raise DiagnoseError(f"{source}: numastat output without local_node/other_node rows")
    ratios = {node: round(other[node] / (local[node] + other[node]), 4)
              if local[node] + other[node] else 0.0 for node in local}
    worst = max(ratios, key=ratios.get)
    status = FAIL if ratios[worst] >= REMOTE_FAIL else WARN if ratios[worst] >= REMOTE_WARN \
        else PASS
    ev = [cite(source, [lines["local_node"], lines["other_node"]])]
    return finding(CHECK, status, f"{ratios[worst]:.1%} of {worst}'s allocations came from "
                   "processes running on another node (since boot, all processes)", ev,
                   remote_ratio=ratios, worst_node=worst)


def judge_process(source: str, proc: dict[str, Any]) -> Finding:
    node_mb = {k: v for k, v in proc["node_mb"].items() if v is not None}
    total = sum(node_mb.values())
    main = max(node_mb, key=node_mb.get) if node_mb else None
    off = round(1 - node_mb[main] / total, 4) if main and total else 0.0
    who = f"PID {proc['pid']} ({proc['name']})" if proc["pid"] else "process"
    text = f"{who}: {off:.1%} of {total:g} MB is off its main node {main}"
    vals = {"pid": proc["pid"], "name": proc["name"], "node_mb": node_mb, "main_node": main,
            "off_node_share": off}
    ev = [cite(source, [proc["line"]])]
    if total < MIN_PROCESS_MB:
        return finding(CHECK, INFO, text + f" (under {MIN_PROCESS_MB:g} MB, not judged)", ev,
                       **vals)
    status = FAIL if off >= OFF_NODE_FAIL else WARN if off >= OFF_NODE_WARN else PASS
    return finding(CHECK, status, text, ev, **vals)


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    counters, lines = parse_default(text)
    procs = parse_processes(text)
    findings = [judge_default(source, counters, lines)] if counters else []
    findings += [judge_process(source, p) for p in procs]
    if not findings:
        raise DiagnoseError(f"{source}: numastat output without counters or process rows")
    summary = {"format": "default" if counters else "per-process",
               "counters": counters, "processes": [
                   {k: p[k] for k in ("pid", "name", "node_mb")} for p in procs]}
    return Report(source, KIND, summary, findings)


ANALYZER = Analyzer(KIND, sniff, analyze)
