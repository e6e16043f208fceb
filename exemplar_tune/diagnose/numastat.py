"""numastat output: remote allocations per node, per-process memory off its main node, and
per-node memory (``-m``).

Formats (``linux:Documentation/admin-guide/numastat.rst``, ``numactl:numastat.8``): plain
``numastat`` prints counters in pages since boot, one column per node (``numa_hit``,
``numa_miss``, ``numa_foreign``, ``interleave_hit``, ``local_node``, ``other_node``;
``numastat -n`` prints the same in MB with capitalised names and a ``Total`` column).
``other_node`` counts pages allocated on this node by a process running on another node, so
``other_node / (local_node + other_node)`` is the node's remote-allocation ratio. A node with
no CPU (CXL, HBM, a GH200 GPU-memory node) can only be allocated from elsewhere: 100 % remote
by construction. numastat does not say which nodes have CPUs, so a node with no local
allocations at all (or with no CPUs in a ``numactl -H`` listing in the same file) is named as
memory-only and not judged, nor is a node with fewer allocations than :data:`MIN_VOLUME_MB`.
``numastat -p`` prints MB per node per process (``Huge Heap Stack Private Total`` rows, one
block per process); ``-c`` compacts it to one row per process (``701 (hot_cold) 501 0 601
1101``, the name cut short, ``)`` included, at the column width), and several processes end
with a ``Total`` row that is their sum. ``-m`` prints ``/proc/meminfo``-like rows per node
(``MemTotal``, ``MemFree``, ``MemUsed`` ...). A file may hold several of these; every table
is read, and several counter tables are judged each on its own, named by the line above it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
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
MIN_VOLUME_MB = 64.0  # a process, or a node's allocations, below this is reported, not judged
PAGE_BYTES = 4096  # default numastat counts pages; the smallest page size gives the largest floor
EVEN_SPREAD = 0.9  # nodes holding at least this share of the largest node's: no main node
LOW_FREE, HIGH_FREE = 0.10, 0.50  # -m: one node this full while another is this free
_COUNTERS = ("numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node",
             "other_node")
_PROC_TITLE = re.compile(r"Per-node process memory usage \(in MBs\)(?: for PID (\d+) \((.*)\))?")
_MEM_TITLE = re.compile(r"Per-node system memory usage \(in MBs\)")
_INFO_TITLE = re.compile(r"Per-node numastat info \(in MBs\)")
_HEADER = re.compile(r"(?:node\s?\d+\s*)+", re.I)
_PID = re.compile(r"^PID\s+")
# "1740 (dbus-daemon)  6.70  6.70", or a name numastat cut ("70718 (qemu-syst  58  539"): its
# words after the first do not start as a number does, so where the values start is never in
# doubt (a name read lazily up to values that must reach the line's end is tried again at each
# character, each try reading the rest of the line)
_COMPACT_ROW = re.compile(r"^\s*(\d+)\s+\((?:([^)]*)\)|([^)\s]*(?: [^)\s\d.-][^)\s]*)*))"
                          r"\s+(-?[\d.]+(?:\s+-?[\d.]+)*)\s*$")
_BLOCK_ROWS = ("Huge", "Heap", "Stack", "Private")
_NUMACTL_CPUS = re.compile(r"^node (\d+) cpus:(.*)$")


def sniff(text: str) -> bool:
    # [ \t]* and not \s*: a blank at a line's start never runs on over the next lines
    return bool(re.search(r"^[ \t]*numa_hit\s+\d", text, re.M | re.I)) or any(
        t.search(text) for t in (_PROC_TITLE, _MEM_TITLE, _INFO_TITLE))


def _nodes(line: str) -> list[str]:
    """``["node0", "node1"]`` from a column header line (``node0 node1``, ``PID Node 0 ...``)."""
    rest = _PID.sub("", line.strip())
    if rest.endswith("Total"):  # by hand: "\s*Total" searched reads a run of blanks again
        rest = rest[:-len("Total")].rstrip()  # from each of its characters
    if not _HEADER.fullmatch(rest):
        return []
    return [f"node{n}" for n in re.findall(r"node\s?(\d+)", rest, re.I)]


def _mb(value: float) -> str:
    return f"{value:.10g}"


@dataclass
class Capture:
    """Everything read from one file."""

    tables: list[dict[str, Any]] = field(default_factory=list)  # counter tables
    processes: list[dict[str, Any]] = field(default_factory=list)
    total_rows: list[dict[str, Any]] = field(default_factory=list)  # sums of several PIDs
    memory: dict[str, dict[str, float]] = field(default_factory=dict)  # node -> field -> MB
    memory_lines: list[int] = field(default_factory=list)
    cpu_less: set[str] = field(default_factory=set)  # from a numactl -H listing


@dataclass
class _State:
    section: str | None = None  # "process", "memory", "info"
    nodes: list[str] = field(default_factory=list)
    has_total: bool = False
    table: dict[str, Any] | None = None
    block: dict[str, Any] | None = None
    prose: str = ""  # the last line that was not part of a table


def _values(tokens: list[str], state: _State) -> tuple[dict[str, float], float | None] | None:
    """``({node: value}, printed total or None)`` from a row's numbers, or ``None``."""
    numbers = [to_float(t) for t in tokens]
    if len(numbers) < len(state.nodes) or None in numbers[:len(state.nodes)]:
        return None
    width = len(state.nodes)
    total = numbers[width] if state.has_total and len(numbers) > width else None
    return dict(zip(state.nodes, numbers[:width], strict=True)), total


def _merge(old: tuple[dict[str, float], float | None] | None,
           new: tuple[dict[str, float], float | None]) -> tuple[dict[str, float], float | None]:
    """A row numastat folded at the screen width: a later section carries further nodes."""
    if old is None or set(old[0]) & set(new[0]):
        return new
    return {**old[0], **new[0]}, new[1] if new[1] is not None else old[1]


def _flush_block(cap: Capture, state: _State) -> None:
    """A ``-p PID`` block ends: its Total line, or (none printed) the sum of its rows."""
    block, state.block = state.block, None
    if not block or (not block["rows"] and block["total"] is None):
        return
    if block["total"] is not None:
        node_mb, total = block["total"]
        summed = False
    else:
        node_mb = {n: round(sum(r[0].get(n, 0.0) for r in block["rows"].values()), 2)
                   for n in next(iter(block["rows"].values()))[0]}
        totals = [r[1] for r in block["rows"].values()]
        total = round(sum(totals), 2) if None not in totals else None
        summed = True
    cap.processes.append({"pid": block["pid"], "name": block["name"], "line": block["line"],
                          "node_mb": node_mb, "total_mb": total, "summed_rows": summed,
                          "rows": {k: v[0] for k, v in block["rows"].items()}})


def _title(cap: Capture, state: _State, line: str, n: int) -> bool:
    """Section titles: ``-p``/``-c`` processes, ``-m`` memory, ``-n`` counters in MB."""
    if m := _PROC_TITLE.search(line):
        _flush_block(cap, state)
        state.section = "process"
        if m.group(1):
            state.block = {"pid": m.group(1), "name": m.group(2), "line": n, "rows": {},
                           "total": None}
        return True
    for section, pattern in (("memory", _MEM_TITLE), ("info", _INFO_TITLE)):
        if pattern.search(line):
            _flush_block(cap, state)
            state.section = section
            return True
    return False


def _counter_row(cap: Capture, state: _State, name: str,
                 read: tuple[dict[str, float], float | None], n: int) -> None:
    if state.table is None:
        last = cap.tables[-1] if cap.tables else None
        if last and last["title"] == state.prose and not set(last["nodes"]) & set(state.nodes):
            last["nodes"] += state.nodes  # the same table, folded at the screen width
            state.table = last
        else:
            state.table = {"line": n, "title": state.prose, "nodes": list(state.nodes),
                           "unit": "MB" if state.section == "info" else "pages",
                           "counters": {}, "lines": {}}
            cap.tables.append(state.table)
    counters = state.table["counters"]
    counters[name] = {**counters.get(name, {}), **read[0]}
    state.table["lines"].setdefault(name, []).append(n)


def _memory_row(cap: Capture, name: str, read: tuple[dict[str, float], float | None],
                n: int) -> None:
    for node, mb in read[0].items():
        cap.memory.setdefault(node, {})[name] = mb
    if read[1] is not None:
        cap.memory.setdefault("total", {})[name] = read[1]
    cap.memory_lines.append(n)


def _process_row(cap: Capture, state: _State, line: str, n: int) -> bool:
    """A ``-p PID`` block row, the sum row of several PIDs, or a one-line process row."""
    tokens = line.split()
    read = _values(tokens[1:], state)
    if state.block is not None and read and tokens[0] in (*_BLOCK_ROWS, "Total"):
        if tokens[0] == "Total":
            state.block["total"] = _merge(state.block["total"], read)
            state.block["line"] = n
        else:
            state.block["rows"][tokens[0]] = _merge(state.block["rows"].get(tokens[0]), read)
        return True
    if read and tokens[0] == "Total":
        last = cap.total_rows[-1] if cap.total_rows else None
        if last and not set(last["node_mb"]) & set(read[0]):
            last["node_mb"], last["total_mb"] = _merge((last["node_mb"], last["total_mb"]), read)
        else:
            cap.total_rows.append({"line": n, "node_mb": read[0], "total_mb": read[1]})
        return True
    if not (m := _COMPACT_ROW.match(line)) or not (read := _values(m.group(4).split(), state)):
        return False
    folded = next((p for p in cap.processes if p["pid"] == m.group(1)
                   and not set(p["node_mb"]) & set(read[0])), None)
    if folded:
        folded["node_mb"], folded["total_mb"] = _merge(
            (folded["node_mb"], folded["total_mb"]), read)
    else:
        cap.processes.append({"pid": m.group(1), "name": (m.group(2) or m.group(3)).strip(),
                              "line": n,
                              "node_mb": read[0], "total_mb": read[1], "summed_rows": False})
    return True


def _row(cap: Capture, state: _State, line: str, n: int) -> bool:
    """One table row in the current section; ``False`` when the line is none."""
    tokens = line.split()
    if not tokens or not state.nodes:
        return False
    read = _values(tokens[1:], state)
    if read and tokens[0].lower() in _COUNTERS:
        _counter_row(cap, state, tokens[0].lower(), read, n)
        return True
    if state.section == "memory" and read:
        _memory_row(cap, tokens[0], read, n)
        return True
    return state.section in (None, "process") and _process_row(cap, state, line, n)


def parse(text: str) -> Capture:
    """Every counter table, process row, per-node memory row and ``numactl -H`` CPU list."""
    cap, state = Capture(), _State()
    for n, line in numbered(text):
        if m := _NUMACTL_CPUS.match(line.strip()):
            if not m.group(2).strip():
                cap.cpu_less.add(f"node{m.group(1)}")
        elif _title(cap, state, line, n):
            continue
        elif nodes := _nodes(line):
            state.nodes, state.table = nodes, None
            state.has_total = bool(re.search(r"\bTotal\s*$", line))
            continue
        elif re.fullmatch(r"[\s-]*", line) or _row(cap, state, line, n):
            continue
        if line.strip():
            _flush_block(cap, state)  # a -p PID block ends at the first line outside it
            state.prose = line.strip()
    _flush_block(cap, state)
    return cap


def _floor(unit: str) -> float:
    return MIN_VOLUME_MB if unit == "MB" else MIN_VOLUME_MB * 2**20 / PAGE_BYTES


def _skipped(table: dict[str, Any], cpu_less: set[str]) -> dict[str, str]:
    """The nodes whose remote share is not judged, and why."""
    local, other = table["counters"]["local_node"], table["counters"]["other_node"]
    why = {}
    for node in local:
        volume = local[node] + other[node]
        if node in cpu_less:
            why[node] = "no CPUs in numactl -H"
        elif local[node] == 0 and other[node] > 0:
            why[node] = "no local allocations, looks memory-only: CXL, HBM or GPU memory"
        elif volume < _floor(table["unit"]):
            why[node] = (f"only {_mb(volume)} {table['unit']} allocated "
                         f"(under {MIN_VOLUME_MB:g} MB)")
    return why


def judge_table(source: str, table: dict[str, Any], cpu_less: set[str],
                name: str = "") -> Finding:
    """The worst remote-allocation ratio among the nodes that can be judged."""
    local, other = table["counters"]["local_node"], table["counters"]["other_node"]
    ratios = {node: round(other[node] / (local[node] + other[node]), 4)
              if local[node] + other[node] else 0.0 for node in local}
    skipped = _skipped(table, cpu_less)
    judged = {node: r for node, r in ratios.items() if node not in skipped}
    ev = [cite(source, [*table["lines"]["local_node"], *table["lines"]["other_node"]])]
    vals = {"remote_ratio": ratios, "not_judged": skipped, "table": table["title"] or None}
    tail = "; not judged: " + "; ".join(f"{n} ({w})" for n, w in skipped.items()) \
        if skipped else ""
    if not judged:
        return finding(CHECK, INFO, f"{name}no node can be judged{tail}", ev, worst_node=None,
                       **vals)
    worst = max(judged, key=judged.get)
    status = FAIL if judged[worst] >= REMOTE_FAIL else WARN if judged[worst] >= REMOTE_WARN \
        else PASS
    return finding(CHECK, status, f"{name}{judged[worst]:.1%} of {worst}'s allocations came "
                   f"from processes running on another node (since boot, all processes){tail}",
                   ev, worst_node=worst, **vals)


def judge_process(source: str, proc: dict[str, Any]) -> Finding:
    """Memory off the process's main node, on its printed Total; an even spread over several
    nodes has no main node and is reported, not judged."""
    node_mb = {k: v for k, v in proc["node_mb"].items() if v is not None}
    total = proc.get("total_mb") or round(sum(node_mb.values()), 2)
    main = max(node_mb, key=node_mb.get) if node_mb else None
    ties = [n for n, v in node_mb.items() if main and v > 0 and v >= EVEN_SPREAD * node_mb[main]]
    off_mb = sum(v for n, v in node_mb.items() if n != main)
    off = round(min(1.0, off_mb / total), 4) if main and total else 0.0
    who = f"PID {proc['pid']} ({proc['name']})" if proc["pid"] else "process"
    text = f"{who}: {off:.1%} of {_mb(total)} MB is off its main node {main}"
    vals = {"pid": proc["pid"], "name": proc["name"], "node_mb": node_mb, "total_mb": total,
            "main_node": main, "off_node_share": off}
    ev = [cite(source, [proc["line"]])]
    if total < MIN_VOLUME_MB:
        return finding(CHECK, INFO, text + f" (under {MIN_VOLUME_MB:g} MB, not judged)", ev,
                       **vals)
    if len(ties) > 1:
        return finding(CHECK, INFO, f"{who}: {_mb(total)} MB spread evenly over "
                       f"{', '.join(ties)} (interleaved?): no main node, not judged", ev,
                       **{**vals, "main_node": None, "spread_over": ties})
    status = FAIL if off >= OFF_NODE_FAIL else WARN if off >= OFF_NODE_WARN else PASS
    return finding(CHECK, status, text, ev, **vals)


def judge_memory(source: str, memory: dict[str, dict[str, float]], lines: list[int]) -> Finding:
    """``-m``: per-node memory; one node nearly full while another is mostly free warns."""
    nodes = {n: v for n, v in memory.items() if n != "total"}
    ev = [cite(source, lines)]
    fields = sorted({f for v in nodes.values() for f in v})
    if not all("MemTotal" in v and "MemFree" in v for v in nodes.values()):
        return finding(CHECK, INFO, f"per-node memory rows {', '.join(fields)} read; no "
                       "MemTotal/MemFree: balance not judged", ev, memory=memory)
    empty = [n for n, v in nodes.items() if v["MemTotal"] == 0]
    free = {n: round(v["MemFree"] / v["MemTotal"], 4) for n, v in nodes.items()
            if v["MemTotal"] >= MIN_VOLUME_MB}
    shown = ", ".join(f"{n} {_mb(nodes[n]['MemTotal'])} MB ({f:.0%} free)"
                      for n, f in free.items())
    text = f"memory per node: {shown}" + (f"; no memory: {', '.join(empty)}" if empty else "")
    full = [n for n, f in free.items() if f < LOW_FREE]
    roomy = [n for n, f in free.items() if f > HIGH_FREE]
    vals = {"free_share": free, "memoryless_nodes": empty}
    if full and roomy:
        return finding(CHECK, WARN, f"{text}: {', '.join(full)} nearly full while "
                       f"{', '.join(roomy)} mostly free; allocations from CPUs on "
                       f"{', '.join(full)} go remote", ev, **vals)
    return finding(CHECK, INFO, text, ev, **vals)


def _table_names(tables: list[dict[str, Any]]) -> list[str]:
    if len(tables) < 2:
        return [""] * len(tables)
    return [f"table {i} of {len(tables)} (line {t['line']}"
            + (f", after {t['title']!r}" if t["title"] else "") + "): "
            for i, t in enumerate(tables, start=1)]


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    cap = parse(text)
    usable = [t for t in cap.tables if {"local_node", "other_node"} <= set(t["counters"])]
    findings = [judge_table(source, t, cap.cpu_less, name)
                for t, name in zip(usable, _table_names(usable), strict=True)]
    findings += [judge_process(source, p) for p in cap.processes]
    if cap.memory:
        findings.append(judge_memory(source, cap.memory, cap.memory_lines))
    if not findings:
        what = "local_node/other_node rows" if cap.tables else \
            "counters, process rows or per-node memory rows"
        raise DiagnoseError(f"{source}: numastat output without {what}")
    formats = [f for f, seen in (("default", usable), ("per-process", cap.processes),
                                 ("meminfo", cap.memory)) if seen]
    summary = {"format": "+".join(formats),
               "counters": usable[-1]["counters"] if usable else {},
               "tables": [{k: t[k] for k in ("line", "title", "unit", "nodes", "counters")}
                          for t in usable],
               "tables_skipped": [t["line"] for t in cap.tables if t not in usable],
               "processes": [{k: p[k] for k in ("pid", "name", "node_mb", "total_mb", "rows")
                              if k in p} for p in cap.processes],
               "total_rows": [{k: t[k] for k in ("node_mb", "total_mb")}
                              for t in cap.total_rows],
               "memory": cap.memory, "cpu_less_nodes": sorted(cap.cpu_less)}
    return Report(source, KIND, summary, findings)


ANALYZER = Analyzer(KIND, sniff, analyze)
