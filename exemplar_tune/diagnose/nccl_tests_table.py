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

import re
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

    def feed(self, n: int, line: str) -> None:
        self.scale.feed(line)
        if ("_perf" in line or "Collective test" in line) and (m := NAME.search(line)):
            self._name = collective(m.group(1) or m.group(2))
            if self.tests and "concluded" in line:
                self.tests[-1]["collective"] = self._name
        if line.startswith("#"):  # a header or a footer
            if "busbw" in line and (header := header_names(line)):
                self._names, self._open = header, True
                self._start(_table(self._name, n, True))
            elif self.tests and "Avg bus" in line and (m := AVG.match(line)):
                self.tests[-1]["avg_busbw"] = float(m.group(1))
                self._open = False
            elif self.tests and "Out of bounds" in line and (m := OOB.match(line)):
                self.tests[-1]["out_of_bounds"] = int(m.group(1))
        elif (line[:1].isspace() or line[:1].isdigit()) and (row := _row_of(self._names, line)):
            if not self._open:
                self._start(_table(self._name, n, self._names is not None))
                self._open = True
            self.tests[-1]["rows"].append({**row, "line": n})

    def _start(self, table: dict[str, Any]) -> None:
        self.count += 1
        table["ranks"], table["hosts"] = self.scale.take()
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

    def tables(self) -> list[dict[str, Any]]:
        """Every table read (folding: one per distinct table, its runs folded), in order."""
        if not self.fold:
            for test in self.tests:
                test["interleaved"] = went_back(test["rows"])
            return self.tests
        while self.tests:
            self._fold(self.tests.pop())
        return [runs.table() for runs in self.runs.values()]


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
        self.busbw = [[r["busbw"] or 0.0] * 3 for r in table["rows"]]  # sum, least, most
        self.wrong = [r["wrong_result"] for r in table["rows"]]
        avg = table["avg_busbw"]
        self.avg_sum, self.avg_runs = (avg, 1) if avg is not None else (0.0, 0)
        self.out_of_bounds = table["out_of_bounds"]
        self.interleaved = list(table["interleaved"])

    def add(self, table: dict[str, Any]) -> None:
        self.count += 1
        if len(self.lines) < KEEP_LINES:
            self.lines.append(table["line"])
        for stats, row in zip(self.busbw, table["rows"], strict=True):
            value = row["busbw"] or 0.0
            stats[0] += value
            stats[1], stats[2] = min(stats[1], value), max(stats[2], value)
        self.wrong = [_either(a, row["wrong_result"])
                      for a, row in zip(self.wrong, table["rows"], strict=True)]
        if table["avg_busbw"] is not None:
            self.avg_sum, self.avg_runs = self.avg_sum + table["avg_busbw"], self.avg_runs + 1
        if table["out_of_bounds"] is not None:
            self.out_of_bounds = (self.out_of_bounds or 0) + table["out_of_bounds"]
        self.interleaved += table["interleaved"][:max(0, KEEP_LINES - len(self.interleaved))]

    def table(self) -> dict[str, Any]:
        """The first table, or with several runs: each row's busbw the mean over the runs
        (``busbw_min``, ``busbw_max`` beside it), wrong when any run was, ``runs`` and
        ``run_lines`` added."""
        if self.count == 1:
            return self.first
        rows = []
        for row, (total, least, most), wrong in zip(self.first["rows"], self.busbw, self.wrong,
                                                    strict=True):
            rows.append({**row, "busbw": round(total / self.count, 3), "busbw_min": least,
                         "busbw_max": most, "wrong_result": wrong})
        avg = round(self.avg_sum / self.avg_runs, 3) if self.avg_runs else None
        return {**self.first, "rows": rows, "avg_busbw": avg, "runs": self.count,
                "run_lines": self.lines, "out_of_bounds": self.out_of_bounds,
                "interleaved": self.interleaved}


def wrong_rows(test: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a table with a wrong result in either half (each row counted once)."""
    return [row for row in test["rows"] if row.get("wrong_result")]
