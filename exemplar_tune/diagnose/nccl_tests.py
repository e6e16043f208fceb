"""nccl-tests results (``all_reduce_perf`` and friends): bus bandwidth per message size.

The tables are read by :mod:`nccl_tests_table` (every generation of the format, several runs
in one file, rows of runs interleaved). Per table: the bandwidth (an INFO finding, or judged
against expectations ``{size_bytes: busbw}``), the wrong results (a row is wrong when either
half is), and a warning when the rows of several runs are interleaved. The summary names the
ranks and hosts where the text shows them and the NCCL version; NCCL WARN lines and error
returns in the output become findings as in an NCCL debug log (:mod:`nccl_warn`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from exemplar_tune.diagnose import nccl_log, nccl_warn
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
    read_all,
)
from exemplar_tune.diagnose.nccl_tests_table import (
    AVG,
    DEFAULT_NAMES,
    OOB,
    RANK,
    UNITS,
    TableReader,
    collective,
    header_names,
    launched_ranks,
    nranks_of,
    parse_row,
    parse_tests,
    wrong_rows,
)

__all__ = ["ANALYZER", "KIND", "analyze", "collective", "compare_nccl_tests", "header_names",
           "human", "parse_row", "parse_tests", "sniff", "wrong_rows"]

KIND = "nccl-tests"
CHECK_BW = "fabric.nccl-settings"
CHECK_WRONG = "fabric.nccl-validation"
_PREAMBLE = re.compile(r"^#\s*nThread\s+\d+\s+nGpus\s+\d+")


def sniff(text: str) -> bool:
    """A column header, or the units line or footer of a table whose header was cut."""
    return any(header_names(line) or UNITS.match(line) or AVG.match(line) or OOB.match(line)
               for line in text.splitlines())


def human(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def expected_busbw(expectations: dict[str, Any]) -> dict[int, float]:
    """``{size_bytes: busbw}`` from ``expectations["busbw"]`` or from size keys at top level."""
    raw = expectations.get("busbw", expectations)
    return {int(k): float(v) for k, v in raw.items() if str(k).isdigit()}


def judge_bandwidth(source: str, test: dict[str, Any], expected: dict[int, float]) -> Finding:
    rows = {r["size"]: r for r in test["rows"]}
    name = test["name"]
    if not expected:
        peak = max(test["rows"], key=lambda r: r["busbw"] or 0.0)
        last = test["rows"][-1]
        return finding(CHECK_BW, INFO, f"{name}: busbw {last['busbw']:g} GB/s at "
                       f"{human(last['size'])}, peak {peak['busbw']:g} GB/s at "
                       f"{human(peak['size'])} (no expectation given)",
                       [cite(source, [last["line"], peak["line"]], "busbw")],
                       peak_busbw=peak["busbw"], peak_size=peak["size"],
                       largest_size=last["size"], largest_busbw=last["busbw"])
    missing = sorted(s for s in expected if s not in rows)
    below = {s: (rows[s]["busbw"], want) for s, want in sorted(expected.items())
             if s in rows and (rows[s]["busbw"] or 0.0) < want}
    ev = [cite(source, [rows[s]["line"] for s in expected if s in rows], "busbw")]
    vals = {"below": {str(s): {"busbw": h, "expected": w} for s, (h, w) in below.items()},
            "missing_sizes": missing}
    if below:
        shown = ", ".join(f"{human(s)} {h:g} < {w:g}" for s, (h, w) in below.items())
        return finding(CHECK_BW, FAIL, f"{name}: busbw below expectation: {shown} GB/s", ev,
                       **vals)
    status = FAIL if len(missing) == len(expected) else PASS
    text = f"{name}: busbw meets expectation at {len(expected) - len(missing)} size(s)"
    text += f"; not measured: {', '.join(human(s) for s in missing)}" if missing else ""
    return finding(CHECK_BW, status, text, ev, **vals)


def judge_wrong(source: str, test: dict[str, Any]) -> Finding:
    """Wrong results per row (``#wrong`` > 0, or an old build's ``error`` above tolerance)."""
    bad = [row["line"] for row in wrong_rows(test)]
    oob = test["out_of_bounds"]
    old = any("error" in row["out_of_place"] for row in test["rows"])
    column = "error" if old else "#wrong"
    if bad or oob:
        why = f" (error above the tolerance for {test['rows'][0]['type']})" if old and bad else ""
        return finding(CHECK_WRONG, FAIL, f"{test['name']}: wrong results on "
                       f"{len(bad)} row(s){why}, {oob or 0} out-of-bounds values",
                       [cite(source, bad or [test["line"]], column)],
                       wrong_rows=len(bad), out_of_bounds=oob)
    if all(row["wrong_result"] is None for row in test["rows"]):
        return finding(CHECK_WRONG, INFO, f"{test['name']}: results not validated (-c 0)")
    return finding(CHECK_WRONG, PASS, f"{test['name']}: no wrong results",
                   [cite(source, [r["line"] for r in test["rows"]], column)], wrong_rows=0,
                   out_of_bounds=oob)


def judge_interleaved(source: str, test: dict[str, Any]) -> list[Finding]:
    """A warning when a table holds the rows of several runs (the size goes back)."""
    at = test["interleaved"]
    if not at:
        return []
    return [finding(CHECK_BW, WARN, f"{test['name']}: rows of several runs interleaved "
                    f"(the size goes back or repeats at {len(at)} row(s)): each process ran its "
                    "own test (nccl-tests without MPI support, launched once per rank?); the "
                    "bandwidths are per process, not one measurement across the job",
                    [cite(source, at, "size")], interleaved_lines=at)]


def named(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each table with its ``name``: the collective, and its rank count (and hosts) when the
    output holds that collective at several scales, which are reported apart."""
    scales: dict[str, set] = {}
    for test in tests:
        scales.setdefault(test["collective"], set()).add(test["ranks"])
    return [{**t, "name": _scaled(t) if len(scales[t["collective"]]) > 1 else t["collective"]}
            for t in tests]


def _scaled(test: dict[str, Any]) -> str:
    name = "the test" if test["collective"] == "unknown" else test["collective"]
    if test["ranks"] is None:
        return f"{name} (rank count not shown)"
    hosts = f", {test['hosts']} host{'s' * (test['hosts'] != 1)}" if test["hosts"] else ""
    return f"{name} at {test['ranks']} ranks{hosts}"


def test_summary(test: dict[str, Any]) -> dict[str, Any]:
    return {"collective": test["collective"], "name": test["name"], "ranks": test["ranks"],
            "hosts": test["hosts"], "avg_busbw": test["avg_busbw"],
            "out_of_bounds": test["out_of_bounds"], "header": test["header"],
            "wrong_rows": len(wrong_rows(test)), "interleaved_lines": test["interleaved"],
            "sizes": [{k: v for k, v in r.items() if k != "line"} for r in test["rows"]],
            **{k: test[k] for k in ("runs", "run_lines") if k in test}}


class RunFacts:
    """Ranks, hosts and runs where the output shows them, gathered line by line: the ``#
    Rank`` lines, the preambles, NCCL INFO ``nranks``, the launcher command line, and the
    hosts of the launcher prefixes :mod:`normalize` removed."""

    def __init__(self) -> None:
        self.listed: dict[int, str] = {}  # rank: host, from the "# Rank" lines
        self.preambles = self.zeros = 0
        self.nranks: int | None = None
        self.launched: int | None = None
        self.source_hosts: set[str] = set()

    def feed(self, line: str, source: str | None) -> None:
        if source and not source.startswith(("rank", "local")):
            self.source_hosts.add(source.split()[0])
        if line.startswith("#"):
            if "Rank" in line and (m := RANK.match(line)):
                self.listed.setdefault(int(m["rank"]), m["host"])
                self.zeros += m["rank"] == "0"
            elif "nThread" in line:
                self.preambles += bool(_PREAMBLE.match(line))
        elif "nranks" in line and (m := nranks_of(line)):
            self.nranks = max(self.nranks or 0, int(m.group(1)))
        elif self.launched is None and "_perf" in line:
            self.launched = launched_ranks(line)

    def merge(self, other: RunFacts) -> None:
        """Fold ``other``, the facts of the lines after these: what feeding this reader those
        lines too would hold (the first host per rank and launcher count kept)."""
        for rank, host in other.listed.items():
            self.listed.setdefault(rank, host)
        self.preambles += other.preambles
        self.zeros += other.zeros
        if other.nranks is not None:
            self.nranks = max(self.nranks or 0, other.nranks)
        if self.launched is None:
            self.launched = other.launched
        self.source_hosts |= other.source_hosts

    @property
    def runs(self) -> int | None:
        """How many runs printed a preamble: ``# nThread`` lines or ``# Rank 0`` lines."""
        return max(self.preambles, self.zeros) or None

    def summary(self, log: nccl_log.LogReader) -> dict[str, Any]:
        """``ranks``, ``hosts`` and ``runs``: from the ``# Rank`` lines (hosts only when every
        rank is listed), else from NCCL INFO lines (``nranks``, line prefixes), else from the
        launcher command line."""
        if self.listed:
            count = max(self.listed) + 1
            complete = len(self.listed) == count
            return {"ranks": count,
                    "hosts": len(set(self.listed.values())) if complete else None,
                    "runs": self.runs}
        hosts = log.hosts or self.source_hosts
        return {"ranks": self.nranks or self.launched, "hosts": len(hosts) or None,
                "runs": self.runs}


def _no_rows(source: str, tables: int, runs: int | None) -> str:
    if not tables:
        return (f"{source}: nccl-tests output without its column header ('#  size  count  type "
                f"... busbw') and no row of the default {len(DEFAULT_NAMES)}-column layout: "
                "the columns cannot be told apart")
    if max(tables, runs or 0) > 1:
        return (f"{source}: nccl-tests output without result rows ({max(tables, runs or 0)} "
                "runs interleaved: each process ran its own test)")
    return f"{source}: nccl-tests output without result rows"


class NcclTestsReader:
    """An nccl-tests output read as a stream (:class:`~.base.LineReader`): its tables, runs
    of one test folded (:class:`~.nccl_tests_table.Runs`), NCCL lines and failures."""

    def __init__(self, source: str, expectations: dict[str, Any]) -> None:
        self.source = source
        self.expected = expected_busbw(expectations)
        self.tables = TableReader(fold=True)
        self.facts = RunFacts()
        self.log = nccl_log.LogReader()
        self.problems = nccl_warn.ProblemReader()

    def feed(self, n: int, line: str, source: str | None, raw: str) -> None:
        self.tables.feed(n, line)
        self.facts.feed(line, source)
        self.log.feed(n, line, source)
        self.problems.feed(n, line, source)

    # a job read in chunks (:class:`~.base.ChunkReader`): only the tables depend on what came
    # before (the header, the collective's name, the rank count, a table still open)
    def later(self) -> None:
        self.tables.later()

    def seal(self) -> None:
        """Nothing to do: the state travels as it is."""

    def reopen(self) -> None:
        """Nothing to do: lines are fed as usual."""

    def fits(self, other: NcclTestsReader) -> str | None:
        return self.tables.fits(other.tables)

    def merge(self, other: NcclTestsReader, line_offset: int) -> None:
        self.tables.merge(other.tables, line_offset)
        self.facts.merge(other.facts)
        self.log.merge(other.log, line_offset)
        self.problems.merge(other.problems, line_offset)

    def report(self, files: tuple[tuple[str, int], ...]) -> Report:
        source = self.source
        tests = named([t for t in self.tables.tables() if t["rows"]])
        if not tests:
            raise DiagnoseError(_no_rows(source, self.tables.count, self.facts.runs))
        problems = self.problems.problems()
        findings = nccl_warn.judge_problems(source, problems)
        findings += [f for t in tests for f in (*judge_interleaved(source, t),
                                                judge_bandwidth(source, t, self.expected),
                                                judge_wrong(source, t))]
        scales = sorted({t["ranks"] for t in tests if t["ranks"] is not None})
        run = self.facts.summary(self.log)
        if len(scales) > 1:  # one count for the file would be one of its runs'
            run.update(ranks=None, hosts=None)
        summary = {"tests": [test_summary(t) for t in tests], **run, "scales": scales,
                   "nccl_version": self.log.version,
                   "transports": sorted(self.log.transports),
                   "problems": [p.to_dict() for p in problems]}
        return Report(source, KIND, summary, findings)


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    """The report of a whole output (:class:`NcclTestsReader` fed every line)."""
    return read_all(NcclTestsReader(source, expectations), text)


def compare_nccl_tests(report_a: Report, report_b: Report) -> dict[str, Any]:
    """busbw of run B over run A per common size, per collective (and rank count, where a
    file holds several), with the geometric mean.

    Sizes where either run shows 0 GB/s (rounded small messages) are left out of the mean.
    Two runs of one collective each but different ones are compared with a warning; runs
    with no collective in common are not compared (a warning says so).
    """
    tests_a = {t["name"]: t for t in report_a.summary["tests"]}  # a scale of its own apart
    tests_b = {t["name"]: t for t in report_b.summary["tests"]}
    pairs = [(c, tests_a[c], tests_b[c]) for c in tests_a if c in tests_b]
    warnings = []
    if not pairs and len(tests_a) == len(tests_b) == 1:
        pairs = [(f"{c_a} vs {c_b}", tests_a[c_a], tests_b[c_b])
                 for c_a, c_b in zip(tests_a, tests_b, strict=True)]
        warnings.append(f"different collectives ({pairs[0][0]}): their bus bandwidths are "
                        "not a like-for-like comparison")
    elif not pairs:
        warnings.append(f"no collective in common ({', '.join(tests_a) or 'none'} vs "
                        f"{', '.join(tests_b) or 'none'}): nothing compared")
    return {"a": report_a.source, "b": report_b.source, "warnings": warnings,
            "collectives": [_compare_one(c, a, b) for c, a, b in pairs]}


# nccl-tests rounds each size it prints down to whole elements per rank (ranks x the element
# size: 576 B at 72 ranks of float): a requested 128 MiB is the row 134217600 at 72 ranks.
ROUNDING_BYTES = 1024 * 8  # the most a size can lose: 1024 ranks x an 8-byte element
ROUNDING_SHARE = 0.01  # ... and on large sizes, at most this share


def row_size(sizes: Iterable[int], wanted: int) -> int | None:
    """The size of the row nccl-tests printed for a requested ``wanted`` bytes, at any rank
    count: ``wanted`` itself, else the largest size below it that rounding can explain (at
    most :data:`ROUNDING_BYTES` or :data:`ROUNDING_SHARE` less, and less than half: never the
    row of the next smaller request of a doubling range); None when no row is."""
    below = [size for size in sizes if size <= wanted]
    if not below:
        return None
    found = max(below)
    loss = wanted - found
    return found if loss <= max(ROUNDING_BYTES, wanted * ROUNDING_SHARE) and 2 * loss < wanted \
        else None


def _compare_one(name: str, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Rows of B against the rows of A for the same requested size (two runs at different
    rank counts round the same request to different sizes: the larger of the pair is taken
    as the request, and each run's row for it is compared)."""
    bw_a = {r["size"]: r["busbw"] for r in a["sizes"]}
    sizes = []
    for row in b["sizes"]:
        size_a = _same_request(bw_a, row["size"])
        have_a, have_b = bw_a.get(size_a) if size_a is not None else None, row["busbw"]
        if have_a is None or have_b is None:
            continue
        ratio = round(have_b / have_a, 4) if have_a else None
        sizes.append({"size": row["size"], "busbw_a": have_a, "busbw_b": have_b, "ratio": ratio})
    ratios = [s["ratio"] for s in sizes if s["ratio"]]
    geomean = round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 4) if ratios else None
    return {"collective": name, "sizes": sizes, "geomean_ratio": geomean}


def _same_request(sizes: Iterable[int], size: int) -> int | None:
    """The size among ``sizes`` that another run printed for the request behind ``size``."""
    found = row_size(sizes, size)
    if found is not None:
        return found
    above = [s for s in sizes if s > size and row_size([size], s) == size]
    return min(above) if above else None


ANALYZER = Analyzer(KIND, sniff, analyze, NcclTestsReader)
