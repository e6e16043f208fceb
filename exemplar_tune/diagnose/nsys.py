"""Nsight Systems ``nsys stats`` reports: kernel, CUDA API, NVTX, OS runtime and memcpy tables.

Reports read (Nsight Systems Post-Collection Analysis Guide, "Statistical Reports Shipped With
Nsight Systems", https://docs.nvidia.com/nsight-systems/AnalysisGuide/index.html), with the
names older releases gave them: ``cuda_gpu_kern_sum`` (``gpukernsum``), ``cuda_api_sum``
(``cudaapisum``), ``nvtx_sum`` / ``nvtx_pushpop_sum`` (``nvtxsum`` / ``nvtxppsum``),
``osrt_sum`` (``osrtsum``) and ``cuda_gpu_mem_time_sum`` (``gpumemtimesum``). Every table
starts with ``Time (%)`` and ``Total Time (<unit>)``, then a count (``Instances``, ``Num
Calls``, ``Calls`` or ``Count``), the statistics (``Avg``/``Med``/``Min``/``Max``/``StdDev``,
``Average``/``Minimum``/``Maximum`` before 2022) and the text columns (``Name``, ``Range``
with ``Style``, ``Operation``). Units come from the header (``--timeunit``), else ns.

Three layouts: the text table (columns apart by two or more spaces, a dashed rule, ``,``
thousands separators), ``--format csv`` (the same column names, comma-separated, names
quoted when they hold commas) and ``--format table`` (``|``-delimited). Several reports in
one file follow each other, each announced by ``** CUDA GPU Kernel Summary
(cuda_gpu_kern_sum):``, ``[6/8] Executing 'cuda_gpu_kern_sum' stats report``, ``Processing
[..] with [../cuda_gpu_kern_sum.py]`` or the old ``CUDA Kernel Statistics`` banners; a table
with no banner is named from its columns. What is not read is named in ``skipped``: a report
this reader does not know, a table with unknown columns, a row cut short, nsys's ``SKIPPED:``.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from typing import Any

from exemplar_tune.diagnose import nsys_judge
from exemplar_tune.diagnose.base import Analyzer, DiagnoseError, Report, numbered, to_float

KIND = nsys_judge.KIND
ALIASES = {"gpukernsum": "cuda_gpu_kern_sum", "cudaapisum": "cuda_api_sum",
           "nvtxsum": "nvtx_sum", "nvtxppsum": "nvtx_pushpop_sum", "osrtsum": "osrt_sum",
           "gpumemtimesum": "cuda_gpu_mem_time_sum"}
READ = frozenset(ALIASES.values())
_OLD_BANNERS = {"CUDA Kernel Statistics": "gpukernsum", "CUDA API Statistics": "cudaapisum",
                "NVTX Push-Pop Range Statistics": "nvtxppsum",
                "Operating System Runtime API Statistics": "osrtsum",
                "CUDA Memory Operation Statistics (by time)": "gpumemtimesum"}
_OLD = "|".join(map(re.escape, _OLD_BANNERS))
_BANNER = re.compile(r"^\s*(?:\[\d+/\d+\]\s+)?Executing '(\w+)' stats report"
                     r"|^\s*\*\*\s+.*\((\w+)\):\s*$"
                     r"|^\s*Processing \[.*\] with \[(?:.*/)?(\w+)\.py\]"
                     rf"|^\s*(?:Generating\s+)?({_OLD})(?!\w)")
_SKIPPED = re.compile(r"^\s*SKIPPED:\s*(.*)$")
# (?:[,|]\s*)? rather than [,|]?\s*: two runs of blanks side by side split a long run of
# blanks every way there is before failing (quadratic)
_HEADER = re.compile(r"""^\s*(?:\|\s*)?"?Time\s*\(%\)"?\s*(?:[,|]\s*)?"?Total Time\b""")
_RULE = re.compile(r"^[\s\-+|=]*-[\s\-+|=]*$")
# the unit at a name's end: searched from its "(" (a lazy name before optional blanks to the
# end reads a run of blanks again from each of its characters)
_UNIT = re.compile(r"\(\s*(%|ns|us|ms|s|nsec|usec|msec|sec)\s*\)\s*$")
_KNOWN = re.compile(r"Time\s*\(%\)|Total Time(?:\s*\(\w+\))?|Num Calls|Instances|Calls|Count"
                    r"|(?:Average|Avg|Median|Med|Minimum|Min|Maximum|Max|StdDev)(?:\s*\(\w+\))?"
                    r"|Style|Range|Name|Operation")
KEYS = {"Time": "time_pct", "Total Time": "total", "Instances": "instances",
        "Num Calls": "instances", "Calls": "instances", "Count": "instances", "Avg": "avg",
        "Average": "avg", "Med": "med", "Median": "med", "Min": "min", "Minimum": "min",
        "Max": "max", "Maximum": "max", "StdDev": "stddev", "Name": "name", "Range": "name",
        "Operation": "name", "Style": "style"}
TEXT_KEYS = ("style", "name")
SCALE = {"ns": 1, "nsec": 1, "us": 1e3, "usec": 1e3, "ms": 1e6, "msec": 1e6, "s": 1e9,
         "sec": 1e9}


@dataclass
class Header:
    """A table's columns: the names as printed, their keys and the ns factor of time columns."""

    layout: str  # text, csv or table
    names: list[str]
    keys: list[str | None]
    scale: float = 1.0

    @property
    def numeric(self) -> int:
        """How many columns come before the first text column (all of them numbers)."""
        return next(i for i, k in enumerate(self.keys) if k in TEXT_KEYS)


@dataclass
class Table:
    """One report table: its report name (as the banner named it, or inferred), rows, lines."""

    header: Header
    line: int
    named: str | None
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def report(self) -> str:
        if self.named:
            return ALIASES.get(self.named, self.named)
        return infer_report(self.header, self.rows)


def infer_report(header: Header, rows: list[dict[str, Any]]) -> str:
    """The report a banner-less table is, from its columns (and CUDA API names for calls)."""
    text_names = [n for n, k in zip(header.names, header.keys, strict=True) if k in TEXT_KEYS]
    count = next((n for n, k in zip(header.names, header.keys, strict=True)
                  if k == "instances"), "")
    if "Range" in text_names or "Style" in text_names:
        return "nvtx_sum"
    if "Operation" in text_names:
        return "cuda_gpu_mem_time_sum"
    if count == "Instances":
        return "cuda_gpu_kern_sum"
    cuda = sum(1 for r in rows if re.match(r"cu[A-Z]", r["name"]))
    return "cuda_api_sum" if rows and cuda * 2 > len(rows) else "osrt_sum"


def split_fields(line: str, layout: str) -> list[str]:
    """The cells of a csv or ``|`` table line; ``ValueError`` for a csv line the csv module
    refuses (a cell longer than its field limit, 128 KiB)."""
    if layout == "csv":
        try:
            return next(csv.reader([line.strip()]), [])
        except csv.Error as exc:
            raise ValueError(f"csv line unreadable: {exc}") from None
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_header(line: str) -> Header | None:
    """The header of a report table (``Time (%)`` then ``Total Time``), else ``None``.

    Columns this reader does not know get the key ``None``; the caller names them.
    """
    if not _HEADER.match(line):
        return None
    stripped = line.strip()
    layout = "table" if stripped.startswith("|") else "csv" if "," in stripped else "text"
    if layout != "text":
        names = [c.strip().strip('"') for c in split_fields(stripped, layout)]
    elif not _KNOWN.sub(" ", stripped).strip():  # known names, however far apart (pasted)
        names = _KNOWN.findall(stripped)
    else:  # an unknown column: names apart by two spaces, so that it can be named
        names = re.split(r"\s{2,}", stripped)
        if len(names) == 1:
            names = [*_KNOWN.findall(stripped), " ".join(_KNOWN.sub(" ", stripped).split())]
    keys, scale = [], 1.0
    for name in names:
        m = _UNIT.search(name)
        base, unit = (name[:m.start()].rstrip(), m.group(1)) if m else (name.rstrip(), None)
        keys.append(KEYS.get(base))
        scale = SCALE.get(unit or "", scale) if keys[-1] == "total" else scale
    return Header(layout, names, keys, scale)


def number(token: str) -> float | None:
    """A table cell as a number (``1,234.5`` too), ``None`` when it is not one."""
    return to_float(token.replace(",", "").strip('"'))


def row_values(header: Header, cells: list[str]) -> dict[str, Any]:
    """The row dict from its cells: times in ns, the count an int, text as printed."""
    row: dict[str, Any] = {}
    for key, cell in zip(header.keys, cells, strict=True):
        if key in TEXT_KEYS:
            row[key] = cell.strip()
            continue
        value = number(cell)
        value = value if value is not None and math.isfinite(value) else None
        if key in ("total", "avg", "med", "min", "max", "stddev") and value is not None:
            value = value * header.scale
            key = f"{key}_ns"
        if value is not None and value == int(value) and key != "time_pct":
            value = int(value)
        row[str(key)] = value
    return row


def parse_row(header: Header, line: str) -> dict[str, Any] | str | None:
    """A row; ``"cut"`` when it is a row cut short; ``None`` when it is no row at all."""
    if header.layout != "text":
        cells = split_fields(line, header.layout)
        numeric = cells[:header.numeric]
        if not numeric or any(number(c) is None for c in numeric):
            return None
        return row_values(header, cells) if len(cells) == len(header.names) else "cut"
    tokens = line.split()
    numeric = tokens[:header.numeric]
    if not numeric or any(number(t) is None for t in numeric):
        return None
    texts = len(header.names) - header.numeric
    if len(tokens) < header.numeric + texts:
        return "cut"
    rest = line.strip().split(None, header.numeric)[-1]
    cells = numeric + (rest.split(None, texts - 1) if texts > 1 else [rest])
    return row_values(header, cells)


@dataclass
class Parse:
    """What a file held: its tables, what was skipped and the report a banner announced."""

    tables: list[Table] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    pending: tuple[str, int] | None = None
    current: Table | None = None
    last: str | None = None

    def close(self) -> None:
        if self.current is not None:
            if self.current.rows:
                self.tables.append(self.current)
            else:
                self.skipped.append(f"line {self.current.line}: {self.current.report} "
                                    "header without rows")
        self.current = None

    def announce(self, named: str | None, n: int) -> None:
        """A banner: the report of the next table; one that has no table is named skipped.

        nsys may announce one report twice (``Processing [..] with [x.py]`` then ``** ..
        (x):``): a repeated banner with no table between changes nothing.
        """
        self.close()
        if named is not None and named == self.last:
            return
        self.last = named
        if self.pending:
            self.skipped.append(not_read(*self.pending))
        self.pending = None
        if named is not None and ALIASES.get(named, named) in READ:
            self.pending = (named, n)
        elif named is not None:
            self.skipped.append(not_read(named, n))

    def start(self, header: Header, n: int) -> None:
        """A header: a table to read, unless its report is not read (already named) or
        its columns are not all known."""
        self.close()
        named, _ = self.pending or (None, n)
        unread = self.last is not None and ALIASES.get(self.last, self.last) not in READ
        self.pending, self.last = None, None
        unknown = [name for name, key in zip(header.names, header.keys, strict=True)
                   if key is None]
        if unread:
            return
        if unknown or not in_order(header.keys):
            self.skipped.append(f"line {n}: a table with columns not read: "
                                f"{', '.join(unknown) or 'no name column after the numbers'}")
        else:
            self.current = Table(header, n, named)


def in_order(keys: list[str | None]) -> bool:
    """Numbers first, then one or more text columns: the layout every read report has."""
    first = next((i for i, k in enumerate(keys) if k in TEXT_KEYS), None)
    return first is not None and first > 0 and all(k in TEXT_KEYS for k in keys[first:])


def not_read(named: str, n: int) -> str:
    report = ALIASES.get(named, named)
    why = "no table under it" if report in READ else "a report this reader does not read"
    return f"line {n}: {named} ({why})"


def banner(line: str) -> str | None:
    """The report a banner line announces (the name as given), else ``None``."""
    m = _BANNER.match(line)
    if not m:
        return None
    old = m.group(4)
    return _OLD_BANNERS[old] if old else m.group(1) or m.group(2) or m.group(3)


def parse_tables(text: str) -> tuple[list[Table], list[str]]:
    """Every report table in ``text`` and the list of what was skipped (with line numbers)."""
    state = Parse()
    for n, line in numbered(text):
        if (named := banner(line)) is not None:
            state.announce(named, n)
        elif m := _SKIPPED.match(line):
            state.close()
            what = state.pending[0] if state.pending else "a report"
            state.skipped.append(f"line {n}: nsys skipped {what}: {m.group(1).strip()}")
            state.pending = None
        elif header := parse_header(line):
            state.start(header, n)
        elif state.current is not None:
            add_line(state, line, n)
    state.announce(None, 0)
    return state.tables, state.skipped


def add_line(state: Parse, line: str, n: int) -> None:
    """A line inside a table: a row, a rule, a row cut short, or the table's end."""
    table = state.current
    assert table is not None
    if not line.strip() or _RULE.match(line):
        if table.rows and not line.strip():
            state.close()
        return
    row = parse_row(table.header, line)
    if row == "cut":
        state.skipped.append(f"line {n}: {table.report} row cut short")
    elif isinstance(row, dict):
        table.rows.append({**row, "line": n})
    else:
        state.close()


def sniff(text: str) -> bool:
    return any(parse_header(line) or _BANNER.match(line) for line in text.splitlines())


def table_summary(table: Table) -> dict[str, Any]:
    return {"report": table.report, "named": table.named, "format": table.header.layout,
            "line": table.line, "columns": table.header.names, "rows": len(table.rows),
            "top": [{k: v for k, v in r.items() if k != "line"} for r in table.rows[:5]]}


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    tables, skipped = parse_tables(text)
    if not tables:
        why = f" (skipped: {'; '.join(skipped)})" if skipped else ""
        raise DiagnoseError(f"{source}: nsys stats output without a table this reader "
                            f"reads{why}")
    kernels = [t for t in tables if t.report == "cuda_gpu_kern_sum"]
    nvtx = next((t for t in tables if t.report in ("nvtx_sum", "nvtx_pushpop_sum")), None)
    api = next((t for t in tables if t.report == "cuda_api_sum"), None)
    skipped += [f"line {t.line}: a further cuda_gpu_kern_sum table (the first is judged)"
                for t in kernels[1:]]
    summary: dict[str, Any] = {"format": tables[0].header.layout,
                               "tables": [table_summary(t) for t in tables],
                               "nccl": None, "kernels": None, "steps": None,
                               "skipped": skipped}
    findings = []
    if nvtx is not None:
        summary["steps"] = nsys_judge.steps_from_ranges(nvtx.rows)
    if kernels:
        judged = nsys_judge.judge_kernel_table(source, kernels[0].rows, summary["steps"],
                                               api.rows if api else [])
        summary.update(nccl=judged.nccl, kernels=judged.kernels)
        findings = judged.findings
    return Report(source, KIND, summary, findings)


ANALYZER = Analyzer(KIND, sniff, analyze, label="nsys stats")
