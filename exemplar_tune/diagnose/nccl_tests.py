"""nccl-tests results (``all_reduce_perf`` and friends): bus bandwidth per message size.

Format (``NVIDIA/nccl-tests:src/util.cu``): a ``#`` preamble, a column
header ``# size count type redop root time algbw busbw #wrong time algbw busbw #wrong`` (the
first group is out-of-place, the second in-place; ``-C 1`` renames ``time`` to ``cputime``,
``-I 1`` adds ``i_min i_max i_p99 i_cv%`` after each ``#wrong``), one row per size, and a
footer (``# Out of bounds values : 0 OK``, ``# Avg bus bandwidth : 138.589``, and in newer
builds ``# Collective test concluded: all_gather_perf``). Columns are matched by the header's
names, so collapsed whitespace and extra columns parse the same. ``busbw`` below is the
out-of-place value; the in-place one is kept alongside.
"""

from __future__ import annotations

import math
import re
from typing import Any

from exemplar_tune.diagnose.base import (
    FAIL,
    INFO,
    PASS,
    Analyzer,
    DiagnoseError,
    Finding,
    Report,
    cite,
    finding,
    numbered,
    to_float,
)

KIND = "nccl-tests"
CHECK_BW = "fabric.nccl-settings"
CHECK_WRONG = "fabric.nccl-validation"
_NAME = re.compile(r"Collective test (?:starting|concluded):\s*(\w+)|\b(\w+?)_perf\b")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_RENAME = {"time": "time_us", "cputime": "cputime_us", "#wrong": "wrong"}


def header_names(line: str) -> list[str] | None:
    """Column names of a ``# size count type ...`` header line, else ``None``."""
    names = line.lstrip("#").split()
    if line.startswith("#") and names[:3] == ["size", "count", "type"] and "busbw" in names:
        return names
    return None


def sniff(text: str) -> bool:
    return any(header_names(line) for line in text.splitlines())


def collective(name: str) -> str:
    """``all_gather`` from ``all_gather_perf`` / ``reduce_scatter_perf_mpi``."""
    return re.sub(r"_perf.*$", "", name)


def parse_row(names: list[str], tokens: list[str]) -> dict[str, Any]:
    """A result row: the leading columns, then one dict per ``time``-led group."""
    split = next(i for i, n in enumerate(names) if n in ("time", "cputime"))
    row: dict[str, Any] = {"size": int(tokens[0]), "count": int(tokens[1])}
    row.update({n: t for n, t in zip(names[2:split], tokens[2:split], strict=False)})
    groups: list[dict[str, Any]] = []
    for name, tok in zip(names[split:], tokens[split:], strict=False):
        if name in ("time", "cputime"):
            groups.append({})
        groups[-1][_RENAME.get(name, name)] = to_float(tok)
    row["out_of_place"] = groups[0] if groups else {}
    row["in_place"] = groups[1] if len(groups) > 1 else {}
    row["busbw"] = row["out_of_place"].get("busbw")
    return row


def parse_tests(text: str) -> list[dict[str, Any]]:
    """One entry per table: collective, rows (each with its line) and the footer values."""
    tests: list[dict[str, Any]] = []
    name, names = "", None
    for n, line in numbered(text):
        tokens = line.split()
        if m := _NAME.search(line):
            name = collective(m.group(1) or m.group(2))
            if tests and "concluded" in line:
                tests[-1]["collective"] = name
        if header := header_names(line):
            names = header
            tests.append({"collective": name or "unknown", "line": n, "rows": [],
                          "avg_busbw": None, "out_of_bounds": None})
        elif names and tokens and tokens[0].isdigit() and len(tokens) > 5 \
                and tokens[1].isdigit():
            row = parse_row(names, tokens)
            if row["busbw"] is not None:  # a row cut short
                tests[-1]["rows"].append({**row, "line": n})
        elif tests and (m := _AVG.match(line)):
            tests[-1]["avg_busbw"] = float(m.group(1))
        elif tests and (m := _OOB.match(line)):
            tests[-1]["out_of_bounds"] = int(m.group(1))
    return tests


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
    name = test["collective"]
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
    wrong = [(r["line"], g.get("wrong")) for r in test["rows"]
             for g in (r["out_of_place"], r["in_place"]) if "wrong" in g]
    bad = [n for n, w in wrong if w]
    oob = test["out_of_bounds"]
    if bad or oob:
        return finding(CHECK_WRONG, FAIL, f"{test['collective']}: wrong results on "
                       f"{len(bad)} row(s), {oob or 0} out-of-bounds values",
                       [cite(source, bad or [test["line"]], "#wrong")],
                       wrong_rows=len(bad), out_of_bounds=oob)
    if not any(w is not None for _, w in wrong):
        return finding(CHECK_WRONG, INFO, f"{test['collective']}: results not validated (-c 0)")
    return finding(CHECK_WRONG, PASS, f"{test['collective']}: no wrong results",
                   [cite(source, [n for n, _ in wrong], "#wrong")], wrong_rows=0,
                   out_of_bounds=oob)


def test_summary(test: dict[str, Any]) -> dict[str, Any]:
    return {"collective": test["collective"], "avg_busbw": test["avg_busbw"],
            "out_of_bounds": test["out_of_bounds"],
            "sizes": [{k: v for k, v in r.items() if k != "line"} for r in test["rows"]]}


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    tests = [t for t in parse_tests(text) if t["rows"]]
    if not tests:
        raise DiagnoseError(f"{source}: nccl-tests output without result rows")
    expected = expected_busbw(expectations)
    findings = [f for t in tests for f in (judge_bandwidth(source, t, expected),
                                           judge_wrong(source, t))]
    return Report(source, KIND, {"tests": [test_summary(t) for t in tests]}, findings)


def compare_nccl_tests(report_a: Report, report_b: Report) -> dict[str, Any]:
    """busbw of run B over run A per common size, per collective, with the geometric mean.

    Sizes where either run shows 0 GB/s (rounded small messages) are left out of the mean.
    Two runs of one collective each but different ones are compared with a warning; runs
    with no collective in common are not compared (a warning says so).
    """
    tests_a = {t["collective"]: t for t in report_a.summary["tests"]}
    tests_b = {t["collective"]: t for t in report_b.summary["tests"]}
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


def _compare_one(name: str, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    bw_a = {r["size"]: r["busbw"] for r in a["sizes"]}
    sizes = []
    for row in b["sizes"]:
        have_a, have_b = bw_a.get(row["size"]), row["busbw"]
        if have_a is None or have_b is None:
            continue
        ratio = round(have_b / have_a, 4) if have_a else None
        sizes.append({"size": row["size"], "busbw_a": have_a, "busbw_b": have_b, "ratio": ratio})
    ratios = [s["ratio"] for s in sizes if s["ratio"]]
    geomean = round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 4) if ratios else None
    return {"collective": name, "sizes": sizes, "geomean_ratio": geomean}


ANALYZER = Analyzer(KIND, sniff, analyze)
