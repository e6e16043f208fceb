"""perf report / perf top text: the share of cycles in SMMUv3 command-queue symbols.

Rows: ``perf report --stdio`` prints ``7.59%  comm  dso  [k] sym``
(with ``--children`` two percentages, Children then Self), ``perf top`` prints
``27.43%  [kernel]  [k] sym``. The header line (``# Overhead  Command  Shared Object  Symbol``,
without ``#`` in the TUI) names the columns, which ``-s``/``-F`` change: a branch stack
(``-b``) has ``Source Symbol`` and ``Target Symbol`` (or ``Source Address`` / ``Target
Address``) with a ``[k]``/``[.]`` mark each, ``-s comm,cgroup`` or ``perf top -s pid,cpu,comm``
have no symbol column at all. Under a header, rows are read by its columns, an author's mark
before the percentage (``old:``, ``==>``) kept as the row's label; without one, only rows with
a ``[k]``/``[.]`` symbol are read. Without Grace CMDQ-V, every IOMMU map/unmap serialises on the
single SMMU command queue: ``arm_smmu_cmdq_issue_cmdlist`` and its callees and callers
(``arm_smmu_cmdq_poll_until_sync``, ``arm_smmu_tlb_inv_range*``, ``arm_smmu_atc_inv_domain*``,
``__arm_smmu_tlb_inv_range``, ``arm_smmu_tlb_inv_context`` ...) take several % of all cycles.
A file may hold several tables (``Samples:`` / ``PerfTop:`` lines, or a header after rows,
start a new one); each is judged on its own, self overhead summed over those symbols.
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
)

KIND = "perf"
CHECK = "vm.cmdqv"
WARN_PCT, FAIL_PCT = 1.0, 5.0
TOP_N = 5
_ROW = re.compile(r"^\s*(?:(\d+\.\d+)%\s+)?(\d+\.\d+)%\s+(.*?)\s*\[([k.gujH])\]\s+(\S+)")
_SMMU = re.compile(r"^_*arm_smmu_(cmdq_|tlb_inv|atc_inv|sync|cmdq)")
_SUFFIX = re.compile(r"\.(constprop|isra|part|cold|llvm)\.?\d*.*$|>$")
# (?:#\s*)? rather than #?\s*: two runs of blanks side by side split a long run of blanks
# every way there is before failing (quadratic)
_NEW_TABLE = re.compile(r"^\s*(?:#\s*)?(Samples:|PerfTop:)")
_EVENT = re.compile(r"Samples:\s*\S+\s+of event '([^']+)'|PerfTop:.*\[\d+Hz ([^\]]+)\]")
_HEADER = re.compile(r"^\s*(?:#\s*)?(?:Children\s+Self|Overhead)\s+[A-Z]")
_PCT = re.compile(r"^\d+\.\d+%$")
_MARK = re.compile(r"(?=\[[k.gujHv]\]\s)")
_CELL_GAP = re.compile(r"\t+\s*|\s{2,}")
# perf's multi-word column titles (util/sort.c); the rest are single words
_TITLES = ("Source Shared Object", "Target Shared Object", "Shared Object", "Source Symbol",
           "Target Symbol", "Source Address", "Target Address", "Basic Block Cycles",
           "Basic Block Cycle", "Data Symbol", "Data Object", "Local Weight", "Memory access",
           "TLB access", "Branch Mispredicted", "Parent symbol", "Cgroup ID", "Trace output",
           "Code Page Size", "Data Page Size")
PCT_COLUMNS = ("Children", "Self", "Overhead")
SYMBOL_COLUMNS = {"Symbol": "symbol", "Source Symbol": "from", "Target Symbol": "to",
                  "Source Address": "from", "Target Address": "to", "Data Symbol": "symbol"}
MODES = {"k": "kernel", ".": "user", "g": "guest_kernel", "u": "guest_user", "H": "hypervisor"}
KEYS = {"Command": "comm", "Pid:Command": "pid", "Pid": "pid", "Tid": "tid", "CPU": "cpu",
        "Cgroup": "cgroup", "Cgroup ID": "cgroup_id", "Shared Object": "dso",
        "Source Shared Object": "dso", "Target Shared Object": "target_dso",
        "Samples": "samples", "Period": "period", "Socket": "socket"}


@dataclass
class Table:
    """One perf table: where it starts, its event, header columns and rows read."""

    line: int
    event: str | None = None
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)


def header_columns(line: str) -> list[str]:
    """The column titles of a perf header line (``[]`` when the line is not one)."""
    if not _HEADER.match(line):
        return []
    text = line.strip().lstrip("#").strip().rstrip(">").strip()
    for title in _TITLES:
        text = re.sub(rf"\b{title}\b", title.replace(" ", "\x00"), text)
    return [c.replace("\x00", " ") for c in text.split()]


def symbol(raw: str) -> str:
    """The symbol without compiler suffixes (``.constprop.42``) or a truncation mark."""
    return _SUFFIX.sub("", raw)


def _mode(mark: str) -> str:
    return MODES.get(mark, mark)


def _is_glyph(cell: str) -> bool:
    """A TUI scrollbar or box-drawing character (U+2500-U+25FF), not data."""
    return all("\u2500" <= c <= "\u25ff" for c in cell)


def _cells(rest: str) -> list[str]:
    """The text after the percentages, cut into cells at tabs, runs of spaces and marks."""
    cells = [p.strip() for c in _CELL_GAP.split(rest) for p in _MARK.split(c)]
    return [c for c in cells if c and not _is_glyph(c)]


def _split_row(line: str) -> tuple[str | None, list[float], str] | None:
    """``(label, percentages, rest)``: an optional author's mark, then one or two ``N.NN%``."""
    tokens = line.split()
    label = None
    if len(tokens) > 1 and not _PCT.match(tokens[0]) and _PCT.match(tokens[1]):
        label, line = tokens[0].rstrip(":") or tokens[0], line.split(None, 1)[1]
    m = re.match(r"^\s*((?:\d+\.\d+%\s+){1,2})(.*)$", line)
    if not m:
        return None
    return label, [float(p.rstrip("%")) for p in m.group(1).split()], m.group(2)


def _assign(columns: list[str], cells: list[str]) -> dict[str, Any] | None:
    """Cells to columns: marked cells (``[k] sym``) to symbol columns in order, the others to
    the remaining columns in order (split at single spaces when too few)."""
    sym_cols = [c for c in columns if c in SYMBOL_COLUMNS]
    other_cols = [c for c in columns if c not in SYMBOL_COLUMNS and c not in PCT_COLUMNS]
    marked = [c for c in cells if _MARK.match(c)]
    plain = [c for c in cells if not _MARK.match(c)]
    if len(plain) < len(other_cols):
        plain = [t for c in plain for t in c.split()]
    if sym_cols and not marked:
        return None
    row: dict[str, Any] = {}
    for col, cell in zip(sym_cols, marked, strict=False):
        key = SYMBOL_COLUMNS[col]
        mode, _, name = cell.partition(" ")
        row[key] = symbol(name.strip()) if col.endswith("Symbol") else name.strip()
        row[f"{key}_mode" if key in ("from", "to") else "mode"] = _mode(mode.strip("[]"))
    for col, cell in zip(other_cols, plain, strict=False):
        key = KEYS.get(col, col.lower().replace(" ", "_"))
        row[key] = int(cell) if key in ("samples", "period") and cell.isdigit() else cell
    return row


def parse_row(line: str, columns: list[str]) -> dict[str, Any] | None:
    """One row under ``columns`` (or a plain ``[k] sym`` row without a header), or ``None``."""
    if not columns:
        m = _ROW.match(line)
        if not m:
            return None
        return {"pct": float(m.group(2)), "symbol": symbol(m.group(5)), "mode": _mode(m.group(4)),
                **({"children": float(m.group(1))} if m.group(1) else {})}
    split = _split_row(line)
    pct_cols = [c for c in columns if c in PCT_COLUMNS]
    if not split or len(split[1]) != len(pct_cols):
        return None
    label, pcts, rest = split
    row = _assign(columns, _cells(rest))
    if row is None:
        return None
    row["pct"] = pcts[-1]  # Self with --children, else Overhead
    if len(pcts) == 2:
        row["children"] = pcts[0]
    if label:
        row["label"] = label
    return row


def parse_tables(text: str) -> tuple[list[Table], int]:
    """The tables with rows, and how many were empty (a ``perf top`` snapshot with no rows)."""
    tables = [Table(0)]
    for n, line in numbered(text):
        columns = header_columns(line)
        starts = _NEW_TABLE.match(line) or (columns and (tables[-1].columns or tables[-1].rows))
        if starts and (tables[-1].rows or tables[-1].event or tables[-1].columns):
            tables.append(Table(n))
        current = tables[-1]
        if m := _EVENT.search(line):
            current.event = m.group(1) or m.group(2)
        elif columns:
            current.columns = columns
        elif row := parse_row(line, current.columns):
            current.rows.append({"line": n, **row})
        else:
            continue
        current.line = current.line or n
    full = [t for t in tables if t.rows]
    return full, sum(1 for t in tables if not t.rows and (t.event or t.columns))


def sniff(text: str) -> bool:
    lines = text.splitlines()
    if sum(1 for line in lines if _ROW.match(line)) >= 3:
        return True
    return any(header_columns(line) for line in lines) and bool(parse_tables(text)[0])


def _names(row: dict[str, Any]) -> list[str]:
    return [row[k] for k in ("symbol", "from", "to") if isinstance(row.get(k), str)]


def judge(source: str, table: Table) -> Finding:
    """SMMU command-queue symbols' share of the table's samples (Self overhead)."""
    event = table.event or "samples"
    if not any("symbol" in r or "from" in r for r in table.rows):
        shown = ", ".join(table.columns) or "no header"
        return finding(CHECK, INFO, f"no symbol column ({shown}): SMMU share of {event} not "
                       "judged", [cite(source, [table.line])], smmu_pct=None, symbols={},
                       event=table.event)
    smmu = [(r, next(s for s in _names(r) if _SMMU.match(s))) for r in table.rows
            if any(_SMMU.match(s) for s in _names(r))]
    share = round(sum(r["pct"] for r, _ in smmu), 2)
    by_symbol: dict[str, float] = {}
    for r, sym in smmu:
        by_symbol[sym] = round(by_symbol.get(sym, 0.0) + r["pct"], 2)
    status = FAIL if share > FAIL_PCT else WARN if share >= WARN_PCT else PASS
    top = ", ".join(f"{s} {p:g} %" for s, p in sorted(by_symbol.items(), key=lambda i: -i[1]))
    text = f"SMMU command-queue symbols take {share:g} % of {event}"
    text += f" ({top})" if top else ""
    lines = [r["line"] for r, _ in smmu] or [table.line]
    return finding(CHECK, status, text, [cite(source, lines)], smmu_pct=share,
                   symbols=by_symbol, event=table.event)


def _top(row: dict[str, Any]) -> dict[str, Any]:
    """A row as the summary shows it: its symbol (or branch source and target with their
    modes, or, without a symbol column, the columns that name it), overhead, Children and the
    author's label."""
    if "symbol" in row:
        keep = ["symbol"]
    elif "from" in row:  # a branch: the marks tell user from kernel (cpumode) on each side
        keep = ["from", "to", *(k for k in ("from_mode", "to_mode") if k in row)]
    else:
        keep = [k for k in row if k not in ("line", "pct", "children", "label", "samples",
                                            "period")]
    extra = [k for k in ("children", "label") if k in row]
    return {k: row.get(k) for k in (*keep, "pct", *extra)}  # a cut row may lack its target


def _modes(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Overhead by the (source) symbol's mark: ``[k]`` kernel, ``[.]`` user, ..."""
    out: dict[str, float] = {}
    for r in rows:
        mode = r.get("mode") or r.get("from_mode")
        if mode:
            out[mode] = round(out.get(mode, 0.0) + r["pct"], 2)
    return out


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    tables, empty = parse_tables(text)
    if not tables:
        raise DiagnoseError(f"{source}: perf output without overhead rows")
    findings = [judge(source, t) for t in tables]
    summary = {"tables": [
        {"event": t.event, "line": t.line, "columns": t.columns, "rows": len(t.rows),
         "smmu_pct": f.values["smmu_pct"], "modes": _modes(t.rows),
         "top": [_top(r) for r in t.rows[:TOP_N]]}
        for t, f in zip(tables, findings, strict=True)], "empty_tables": empty}
    return Report(source, KIND, summary, findings)


ANALYZER = Analyzer(KIND, sniff, analyze)
