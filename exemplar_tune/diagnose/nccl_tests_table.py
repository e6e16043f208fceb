"""Reading nccl-tests result tables, across the generations of the format.

Format (``NVIDIA/nccl-tests:src/util.cu``, ``common.cu``): a ``#`` preamble (``# nThread 1 nGpus
1 ...``, one ``#  Rank  N Group G Pid P on HOST device D`` line per rank), a column header
``# size count type redop root time algbw busbw #wrong time algbw busbw #wrong`` (the first
group is out-of-place, the second in-place; ``-C 1`` renames ``time`` to ``cputime``, ``-I 1``
adds ``i_min i_max i_p99 i_cv%`` after each ``#wrong``), one row per size, and a footer
(``# Out of bounds values : 0 OK``, ``# Avg bus bandwidth : 138.589``, and in newer builds
``# Collective test concluded: all_gather_perf``).

Columns are matched by the header's names, so collapsed whitespace, new widths and extra
columns read the same. The measured groups (from the first ``time`` on) are aligned from the
right, so a blank leading column (alltoall's empty ``redop`` in some builds) or a missing one
(old builds have no ``root`` or no ``redop``) shifts nothing; a row cut short after its
out-of-place ``busbw`` is read from the left. Old builds print ``error`` (the
largest deviation seen) instead of ``#wrong``: a half is wrong when it exceeds the tolerance
nccl-tests applied to the type (its ``DeltaMaxValue``: integer types exact, float 1e-5, double
1e-12, half and bfloat16 up to 5e-2). A row is wrong when either half is.

A table ends at its footer; rows after it without a new header are another run with the same
columns. Sizes that go back or repeat inside one table are rows of several runs interleaved
(nccl-tests built without MPI support runs a whole test in every launched process). Rows with
no column header anywhere in the text are read by their shape only when they have the 13
columns of the current default layout.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from exemplar_tune.diagnose.base import KEEP_LINES, numbered, to_float

DEFAULT_NAMES = ["size", "count", "type", "redop", "root",
                 "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"]
NAME = re.compile(r"Collective test (?:starting|concluded):\s*(\w+)|\b(\w+?)_perf\b")
AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
UNITS = re.compile(r"^#\s*\(B\)\s+\(elements\)")
_RENAME = {"time": "time_us", "cputime": "cputime_us", "#wrong": "wrong"}
RANK = re.compile(r"^#\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+"
                  r"(?P<host>\S+)\s+device\s+\d+")
# Each part below is searched from where the part before it ended, once per line: a pattern
# "A.*B" searched whole is tried again from each A of a line that repeats A, each try reading
# the rest of the line (quadratic)
_INFO = re.compile(r"\bNCCL INFO\b")
_NRANKS = re.compile(r"\bnranks (\d+)")
_LAUNCHER = re.compile(r"\b(?:mpirun|mpiexec|srun)\b")
_NP = re.compile(r"\s(?:-np|-n|--ntasks|--np)[\s=](\d+)\b")
_PERF = re.compile(r"\b\w+_perf\w*\b")


def nranks_of(line: str) -> re.Match[str] | None:
    """The last ``nranks N`` after the line's first ``NCCL INFO``."""
    info = _INFO.search(line)
    found = list(_NRANKS.finditer(line, info.end())) if info else []
    return found[-1] if found else None


def launched_ranks(line: str) -> int | None:
    """``-np N`` of an ``mpirun``/``srun`` line that starts a ``*_perf`` binary, times its
    ``-g`` (GPUs per process) and ``-t`` (threads)."""
    launcher = _LAUNCHER.search(line)
    count = _NP.search(line, launcher.end()) if launcher else None
    perf = _PERF.search(line, count.end()) if count else None
    if perf is None:
        return None
    args = line[perf.end():]
    per = [int(f.group(1)) if (f := re.search(rf"\s-{flag}\s+(\d+)", args)) else 1
           for flag in ("g", "t")]
    return int(count.group(1)) * per[0] * per[1]


def header_names(line: str) -> list[str] | None:
    """Column names of a ``# size count type ...`` header line, else ``None``."""
    names = line.lstrip("#").split()
    if line.startswith("#") and names[:3] == ["size", "count", "type"] and "busbw" in names:
        return names
    return None


def collective(name: str) -> str:
    """``all_gather`` from ``all_gather_perf`` / ``reduce_scatter_perf_mpi``."""
    return re.sub(r"_perf.*$", "", name)


def _number_like(token: str) -> bool:
    return token.lstrip("-").isdigit()


def _leading(names: list[str], tokens: list[str]) -> dict[str, str] | None:
    """The columns between ``type`` and ``time``. With fewer tokens than names each token
    takes the next name its shape fits (``root`` a number, ``redop`` a word); a token that
    fits none means the line is no row."""
    if len(tokens) == len(names):
        return dict(zip(names, tokens, strict=True))
    out: dict[str, str] = {}
    free = list(names)
    for token in tokens:
        fit = next((n for n in free if (n == "root") == _number_like(token)), None)
        if fit is None:
            return None
        out[fit] = token
        free = free[free.index(fit) + 1:]
    return out


def _groups(names: list[str], tokens: list[str]) -> list[dict[str, Any]] | None:
    """One dict per ``time``-led group; ``None`` when a time is not a number >= 0."""
    groups: list[dict[str, Any]] = []
    for name, token in zip(names, tokens, strict=True):
        value = to_float(token)
        if name in ("time", "cputime"):
            if value is None or value < 0:
                return None
            groups.append({})
        groups[-1][_RENAME.get(name, name)] = value
    return groups


def parse_row(names: list[str], tokens: list[str]) -> dict[str, Any] | None:
    """A result row read against the header ``names``, or ``None`` when ``tokens`` are none:
    size, count, type and the columns up to the first time column, then ``out_of_place`` and
    ``in_place`` (the measured groups, aligned from the right; a row cut short after its
    out-of-place ``busbw`` from the left), ``busbw`` (out-of-place) and ``wrong_result``
    (either half wrong; ``None`` when neither was validated)."""
    split = next((i for i, n in enumerate(names) if n in ("time", "cputime")), None)
    if split is None:
        return None
    row = _aligned(names, tokens, split, len(tokens) - (len(names) - split))
    if row is None and split + 3 <= len(tokens) < len(names):
        row = _aligned(names[:len(tokens)], tokens, split, split)
    return row


def _aligned(names: list[str], tokens: list[str], split: int, cut: int) -> dict[str, Any] | None:
    """The row when ``tokens[cut:]`` are the columns ``names[split:]``."""
    lead = tokens[:cut]
    if not (3 <= len(lead) <= split and lead[0].isdigit() and lead[1].isdigit()
            and to_float(lead[2]) is None):
        return None
    between = _leading(names[3:split], lead[3:])
    groups = _groups(names[split:], tokens[cut:])
    if between is None or groups is None or groups[0].get("busbw") is None:
        return None
    row: dict[str, Any] = {"size": int(lead[0]), "count": int(lead[1]), "type": lead[2],
                           **between, "out_of_place": groups[0],
                           "in_place": groups[1] if len(groups) > 1 else {}}
    row["busbw"] = row["out_of_place"]["busbw"]
    row["wrong_result"] = _row_wrong(row)
    return row


def tolerance(dtype: str) -> float:
    """The largest ``error`` an old nccl-tests build accepted for ``dtype``."""
    name = dtype.lower()
    if "int" in name or name in ("char", "byte"):
        return 0.0
    if name in ("double", "float64"):
        return 1e-12
    if name in ("float", "float32"):
        return 1e-5
    return 5e-2  # half, bfloat16, fp8: the widest tolerance nccl-tests used


def _row_wrong(row: dict[str, Any]) -> bool | None:
    verdicts = []
    for group in (row["out_of_place"], row["in_place"]):
        if group.get("wrong") is not None:
            verdicts.append(group["wrong"] > 0)
        elif group.get("error") is not None:
            verdicts.append(group["error"] > tolerance(str(row["type"])))
    return any(verdicts) if verdicts else None


def _table(name: str, line: int, header: bool) -> dict[str, Any]:
    return {"collective": name or "unknown", "line": line, "rows": [], "avg_busbw": None,
            "out_of_bounds": None, "header": header}


def went_back(rows: list[dict[str, Any]]) -> list[int]:
    """Lines where the size went back or repeated (only a size rounded to 0 repeats)."""
    return [b["line"] for a, b in zip(rows, rows[1:], strict=False)
            if b["size"] < a["size"] or b["size"] == a["size"] > 0]


def _row_of(names: list[str] | None, line: str) -> dict[str, Any] | None:
    tokens = line.split()
    if not tokens or not tokens[0].isdigit():
        return None
    if names is None and len(tokens) != len(DEFAULT_NAMES):
        return None  # no header: read by shape only when the row is whole
    return parse_row(names or DEFAULT_NAMES, tokens)


def parse_tests(text: str) -> list[dict[str, Any]]:
    """One entry per table: ``collective``, ``line``, ``rows`` (each with its ``line``),
    ``avg_busbw``, ``out_of_bounds``, ``header`` (``False``: columns read by shape) and
    ``interleaved`` (the lines where the size went back or repeated)."""
    reader = TableReader()
    for n, line in numbered(text):
        reader.feed(n, line)
    return reader.tables()


class Scale:
    """How many ranks (and hosts) the run about to print its table has, from the lines before
    it: the ``# Rank`` lines (the largest rank + 1; hosts when every rank is listed), else
    NCCL INFO's ``nranks``, else the launcher's ``-np`` line. A table with none of them before
    it belongs to the run of the table before."""

    def __init__(self) -> None:
        self.ranks: dict[int, str] = {}
        self.nranks = self.launched = None
        self.last: tuple[int | None, int | None] = (None, None)

    def feed(self, line: str) -> None:
        if line.startswith("#"):
            if "Rank" in line and (m := RANK.match(line)):
                self.ranks.setdefault(int(m["rank"]), m["host"])
        elif "nranks" in line and (m := nranks_of(line)):
            self.nranks = max(self.nranks or 0, int(m.group(1)))
        elif "_perf" in line and (launched := launched_ranks(line)):
            self.launched = launched

    def take(self) -> tuple[int | None, int | None]:
        """``(ranks, hosts)`` of the table starting now; what was seen is then forgotten."""
        if self.ranks:
            count = max(self.ranks) + 1
            hosts = len(set(self.ranks.values())) if len(self.ranks) == count else None
            self.last = (count, hosts)
        elif self.nranks or self.launched:
            self.last = (self.nranks or self.launched, None)
        self.ranks, self.nranks, self.launched = {}, None, None
        return self.last


class TableReader:
    """:func:`parse_tests` fed one line at a time. With ``fold``, a table is folded, once the
    next one starts or the input ends, into the :class:`Runs` of the tables with its
    collective, sizes and rank count (:class:`Scale`: runs at 1, 2 and 20 racks are three
    tables, never one mean): memory per distinct table, not per run."""

    def __init__(self, fold: bool = False) -> None:
        self.fold = fold
        self.tests: list[dict[str, Any]] = []  # every table; when folding, the open one only
        self.runs: dict[tuple, Runs] = {}
        self.count = 0  # tables seen, with rows or not
        self.scale = Scale()
        self._name = ""
        self._names: list[str] | None = None
        self._open = False
        self._lead: Lead | None = None  # a later chunk: what its lines before a table read

    def feed(self, n: int, line: str) -> None:
        self.scale.feed(line)
        if ("_perf" in line or "Collective test" in line) and (m := NAME.search(line)):
            self._name = collective(m.group(1) or m.group(2))
            if self.tests and "concluded" in line:
                self.tests[-1]["collective"] = self._name
                if self._lead is not None and self.count == 1:
                    self._lead.renamed = True  # the chunk's first table: its name is this
            elif self._lead is not None and "concluded" in line:
                self._lead.concluded = self._name  # the table before the chunk's
            if self._lead is not None:
                self._lead.named = True
        if line.startswith("#"):  # a header or a footer
            if "busbw" in line and (header := header_names(line)):
                self._names, self._open = header, True
                self._start(_table(self._name, n, True))
            elif "Avg bus" in line and (m := AVG.match(line)):
                if self.tests:
                    self.tests[-1]["avg_busbw"] = float(m.group(1))
                    self._open = False
                elif self._lead is not None:
                    self._lead.avg, self._lead.closed = float(m.group(1)), True
            elif "Out of bounds" in line and (m := OOB.match(line)):
                if self.tests:
                    self.tests[-1]["out_of_bounds"] = int(m.group(1))
                elif self._lead is not None:
                    self._lead.oob = int(m.group(1))
        elif line[:1].isspace() or line[:1].isdigit():
            row = _row_of(self._names, line)
            if self._lead is not None and self._names is None and not self._lead.tried:
                tokens = line.split()  # a row without a header: an earlier one may read it
                self._lead.tried = bool(tokens) and tokens[0].isdigit()
            if row:
                if not self._open:
                    self._start(_table(self._name, n, self._names is not None))
                    self._open = True
                self.tests[-1]["rows"].append({**row, "line": n})

    def _start(self, table: dict[str, Any]) -> None:
        self.count += 1
        lead = self._lead
        first = lead is not None and lead.take is None  # this chunk's first table
        if lead is not None and first:
            scale = self.scale
            lead.take = (bool(scale.ranks), scale.nranks, scale.launched)
            lead.named_first, lead.header_first = lead.named, table["header"]
        table["ranks"], table["hosts"] = self.scale.take()
        if lead is not None and first:
            lead.result = (table["ranks"], table["hosts"])
        if self.fold and self.tests:
            self._fold(self.tests.pop())
        self.tests.append(table)

    def _fold(self, table: dict[str, Any]) -> None:
        table["interleaved"] = went_back(table["rows"])
        key = (table["collective"], table["header"], table["ranks"],
               tuple(r["size"] for r in table["rows"]))
        if key in self.runs:
            self.runs[key].add(table)
        else:
            self.runs[key] = Runs(table)

    def later(self) -> None:
        """Read a chunk of a job that is not its first: note what its lines before its first
        table read of the state a chunk before may leave (the collective's name, the header,
        an open table, the rank count seen), for :meth:`fits` and :meth:`merge`."""
        self._lead = Lead()

    def fits(self, other: TableReader) -> str | None:
        """``None`` when ``other``, the next chunk read after :meth:`later`, folds into this
        reader exactly (:meth:`merge`); else why not."""
        lead = other._lead
        if lead is None or not self.fold or not other.fold:
            return "not a folding reader of a later chunk"
        if lead.tried and self._names is not None:
            return "rows before the chunk's first header would be read by an earlier header"
        if lead.take is None:
            return None
        if not lead.named_first and not lead.renamed and self._name:
            return "the chunk's first table is named by a line before it"
        if not lead.header_first and self._open and not lead.closed:
            return "the chunk's first rows go on the table open before it"
        scale = self.scale
        had_ranks, nranks, launched = lead.take
        if scale.ranks:
            return "'# Rank' lines after the last table before the chunk"
        if not had_ranks:
            count = max(scale.nranks or 0, nranks or 0) or None
            launch = launched or scale.launched
            expected = (count or launch, None) if count or launch else scale.last
            if expected != lead.result:
                return "the rank count of the chunk's first table is read before it"
        return None

    def merge(self, other: TableReader, line_offset: int) -> None:
        """Fold ``other``, the next chunk read after :meth:`later` (it :meth:`fits`), whose
        line 1 is line ``line_offset + 1`` here: the footer and name lines it read before its
        first table close and name the last one before it, then its tables follow (runs of one
        test folded, :meth:`Runs.merge`). ``other`` is used up."""
        lead = other._lead
        assert lead is not None
        if self.tests:
            last = self.tests[-1]
            if lead.concluded is not None:
                last["collective"] = lead.concluded
            if lead.avg is not None:
                last["avg_busbw"] = lead.avg
            if lead.oob is not None:
                last["out_of_bounds"] = lead.oob
            if lead.closed:
                self._open = False
        self.count += other.count
        if lead.take is not None:  # it started a table: the one open before is folded
            if self.tests:
                self._fold(self.tests.pop())
            for key, runs in other.runs.items():
                if key in self.runs:
                    self.runs[key].merge(runs, line_offset)
                else:
                    runs.shift(line_offset)
                    self.runs[key] = runs
            self.tests = [_shifted(t, line_offset) for t in other.tests]
            self._open = other._open
            self.scale = other.scale
        else:
            for rank, host in other.scale.ranks.items():
                self.scale.ranks.setdefault(rank, host)
            if other.scale.nranks is not None:
                self.scale.nranks = max(self.scale.nranks or 0, other.scale.nranks)
            self.scale.launched = other.scale.launched or self.scale.launched
        if lead.named:  # the last name any line gave
            self._name = other._name
        if other._names is not None:
            self._names = other._names

    def tables(self) -> list[dict[str, Any]]:
        """Every table read (folding: one per distinct table, its runs folded), in order."""
        if not self.fold:
            for test in self.tests:
                test["interleaved"] = went_back(test["rows"])
            return self.tests
        while self.tests:
            self._fold(self.tests.pop())
        return [runs.table() for runs in self.runs.values()]


@dataclass
class Lead:
    """What a later chunk's lines before its first table read (:meth:`TableReader.later`):
    whether they named the collective (``named``; ``named_first``: before the first table;
    ``renamed``: the first table by its own ``concluded`` line), the last ``concluded`` name,
    average and out-of-bounds footer seen before the first table (they belong to the table
    before the chunk; ``closed``: a footer closed it), whether a line led by a number was
    tried as a row without a header (``tried``), how the first table started
    (``header_first``) and its rank count: what was pending then (``take``: '# Rank' lines
    seen, ``nranks``, launcher count) and what it read (``result``)."""

    named: bool = False
    named_first: bool = False
    renamed: bool = False
    concluded: str | None = None
    avg: float | None = None
    oob: int | None = None
    closed: bool = False
    tried: bool = False
    header_first: bool = False
    take: tuple[bool, int | None, int | None] | None = None
    result: tuple[int | None, int | None] | None = None


def _shifted(table: dict[str, Any], line_offset: int) -> dict[str, Any]:
    """``table`` (changed in place) with its line numbers ``line_offset`` on."""
    table["line"] += line_offset
    for row in table["rows"]:
        row["line"] += line_offset
    if "interleaved" in table:
        table["interleaved"] = [n + line_offset for n in table["interleaved"]]
    return table


def _add(partials: list[float], value: float) -> None:
    """Add ``value`` to a sum held exactly as non-overlapping floats (Shewchuk's, as
    :func:`math.fsum` keeps it): ``math.fsum(partials)`` is the sum correctly rounded, in
    whatever order the values came (runs read apart and folded give the same mean)."""
    i = 0
    for other in partials:
        if abs(value) < abs(other):
            value, other = other, value
        high = value + other
        low = other - (high - value)
        if low:
            partials[i] = low
            i += 1
        value = high
    partials[i:] = [value]


def _either(a: bool | None, b: bool | None) -> bool | None:
    """Wrong when either run was; ``None`` only when neither was validated."""
    return b if a is None else a if b is None else a or b


class Runs:
    """Tables of one collective with the same sizes (runs of one test), folded: the first as
    read, and per row the mean, least and greatest busbw and whether any run was wrong."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.first = table
        self.count = 1
        self.lines = [table["line"]]
        self.busbw: list[list[Any]] = []  # per row: the sum (exact), the least, the most
        for row in table["rows"]:
            value = row["busbw"] or 0.0
            self.busbw.append([[value], value, value])
        self.wrong = [r["wrong_result"] for r in table["rows"]]
        avg = table["avg_busbw"]
        self.avg_sum, self.avg_runs = ([avg], 1) if avg is not None else ([], 0)
        self.out_of_bounds = table["out_of_bounds"]
        self.interleaved = list(table["interleaved"])

    def add(self, table: dict[str, Any]) -> None:
        self.count += 1
        if len(self.lines) < KEEP_LINES:
            self.lines.append(table["line"])
        for stats, row in zip(self.busbw, table["rows"], strict=True):
            value = row["busbw"] or 0.0
            _add(stats[0], value)
            stats[1], stats[2] = min(stats[1], value), max(stats[2], value)
        self.wrong = [_either(a, row["wrong_result"])
                      for a, row in zip(self.wrong, table["rows"], strict=True)]
        if table["avg_busbw"] is not None:
            _add(self.avg_sum, table["avg_busbw"])
            self.avg_runs += 1
        if table["out_of_bounds"] is not None:
            self.out_of_bounds = (self.out_of_bounds or 0) + table["out_of_bounds"]
        self.interleaved += table["interleaved"][:max(0, KEEP_LINES - len(self.interleaved))]

    def merge(self, other: Runs, line_offset: int) -> None:
        """Fold ``other``, runs of the same test read after these (their lines numbered from
        1 there, ``line_offset`` on here): what :meth:`add` of each of its tables gives."""
        self.count += other.count
        room = KEEP_LINES - len(self.lines)
        self.lines += [n + line_offset for n in other.lines[:max(0, room)]]
        for stats, (sums, least, most) in zip(self.busbw, other.busbw, strict=True):
            for value in sums:
                _add(stats[0], value)
            stats[1], stats[2] = min(stats[1], least), max(stats[2], most)
        self.wrong = [_either(a, b) for a, b in zip(self.wrong, other.wrong, strict=True)]
        for value in other.avg_sum:
            _add(self.avg_sum, value)
        self.avg_runs += other.avg_runs
        if other.out_of_bounds is not None:
            self.out_of_bounds = (self.out_of_bounds or 0) + other.out_of_bounds
        room = KEEP_LINES - len(self.interleaved)
        self.interleaved += [n + line_offset for n in other.interleaved[:max(0, room)]]

    def shift(self, line_offset: int) -> None:
        """Move every line number held ``line_offset`` on (in place)."""
        _shifted(self.first, line_offset)
        self.lines = [n + line_offset for n in self.lines]
        self.interleaved = [n + line_offset for n in self.interleaved]

    def table(self) -> dict[str, Any]:
        """The first table, or with several runs: each row's busbw the mean over the runs
        (``busbw_min``, ``busbw_max`` beside it), wrong when any run was, ``runs`` and
        ``run_lines`` added."""
        if self.count == 1:
            return self.first
        rows = []
        for row, (total, least, most), wrong in zip(self.first["rows"], self.busbw, self.wrong,
                                                    strict=True):
            rows.append({**row, "busbw": round(math.fsum(total) / self.count, 3),
                         "busbw_min": least, "busbw_max": most, "wrong_result": wrong})
        avg = round(math.fsum(self.avg_sum) / self.avg_runs, 3) if self.avg_runs else None
        return {**self.first, "rows": rows, "avg_busbw": avg, "runs": self.count,
                "run_lines": self.lines, "out_of_bounds": self.out_of_bounds,
                "interleaved": self.interleaved}


def wrong_rows(test: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a table with a wrong result in either half (each row counted once)."""
    return [row for row in test["rows"] if row.get("wrong_result")]
