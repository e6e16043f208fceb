"""``dcgmi diag`` results, read from its JSON (``-j``) or its table.

JSON, as NVIDIA/DCGM writes it (``dcgmi/Diag.cpp``, key names in
``nvvs/include/NvvsJsonStrings.h``, the schema in ``testing/python3/dcgm_diag_schema.json``):
DCGM 4 writes ``{"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name",
"results": [{"entity_group", "entity_id", "status", "warnings": [{"warning", "error_id",
...}], "info": [...]}], "test_summary": {"status"}}]}], "runtime_error"?}, "metadata":
{"version", "Driver Version Detected"}}``; DCGM 3 writes ``"DCGM GPU Diagnostic"`` with
``"gpu_ids": "0,1"`` (or ``"gpu_id"``) in place of the entity, ``null`` entries between tests
and upper-case statuses. Statuses are ``Pass``, ``Fail``, ``Warn``, ``Skip``, ``Not Run``.

The table (``dcgmi diag -r N`` without ``-j``) has one ``| name | result |`` row per test under
``-----  Category  ---`` rows; a result is ``Pass``, ``Fail - All``, ``Fail - GPU: 0`` or, from
DCGM 4, a ``software | Pass`` row followed by ``GPU0: Pass`` rows; ``Warning`` and ``Info`` rows
(wrapped over several rows, cut mid-word) belong to the test above them.
"""

from __future__ import annotations

import json
import re
from typing import Any

ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
ORDER = ("fail", "warn", "pass", "skip", "not run")
_SECTION = re.compile(r"^[|+]-+\s+(\S.*?)\s+-+[+|]")
_RESULT = re.compile(r"^(?:GPU\s?(\d+):\s*)?(Pass|Fail|Warn|Skip|Not Run)\b(?:\s*-\s*(.*))?$",
                     re.I)


def _status(text: str) -> str:
    return text.strip().lower()


def _entities(result: dict[str, Any]) -> str:
    if "entity_id" in result:
        return f"{result.get('entity_group', 'GPU')} {result['entity_id']}"
    ids = str(result.get("gpu_ids", result.get("gpu_id", "")))
    return f"GPU{'s' if ',' in ids else ''} {ids}" if ids else "all"


def _row(line: str) -> tuple[str, str] | None:
    """``(name, value)`` of a table row ``| name | value |`` (the closing bar optional), or
    ``None``; one pass over the line, whatever its blanks."""
    if not line.startswith("|"):
        return None
    name, bar, value = line[1:].partition("|")
    if not bar:
        return None
    value = value.rstrip()
    value = value[:-1].rstrip() if value.endswith("|") else value
    return _after_one_blank(name).rstrip(), _after_one_blank(value)


def _after_one_blank(text: str) -> str:
    return text[1:] if text[:1].isspace() else text


def parse_json(text: str) -> dict[str, Any]:
    """``{"version", "driver", "runtime_error", "tests": [{"category", "test", "status",
    "results": {entities: status}, "warnings", "info"}]}``; ``ValueError`` when not one."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])  # lines before it: dcgmi's notes
    except RecursionError:
        raise ValueError("JSON nested too deep") from None
    if isinstance(doc, dict) and "iterations" in doc:  # --iterations N: the last one
        doc = (doc["iterations"] or [{}])[-1]
    root = next((doc[r] for r in ROOTS if isinstance(doc, dict) and r in doc), None)
    if not isinstance(root, dict):
        raise ValueError(f"no {' or '.join(map(repr, ROOTS))} object")
    tests = []
    for category in root.get("test_categories") or []:
        for test in category.get("tests") or []:
            if not isinstance(test, dict):
                continue  # DCGM 3 writes null between tests
            results = [r for r in test.get("results") or [] if isinstance(r, dict)]
            tests.append({
                "category": category.get("category"), "test": test.get("name"),
                "results": {_entities(r): _status(r.get("status", "")) for r in results},
                "warnings": [w.get("warning", "") if isinstance(w, dict) else str(w)
                             for r in results for w in r.get("warnings") or []],
                "info": [str(i) for r in results for i in r.get("info") or []]})
    meta = doc.get("metadata") or {}
    return {"version": meta.get("version") or root.get("version"),
            "driver": meta.get("Driver Version Detected"),
            "runtime_error": root.get("runtime_error"), "tests": _summed(tests)}


def parse_table(text: str) -> dict[str, Any]:
    """The same shape as :func:`parse_json`, from the table. A wrapped warning is joined
    with a space where its row ended short of the column's width (a break between words)
    and without one where the row is full (DCGM cut a word)."""
    tests: list[dict[str, Any]] = []
    meta: dict[str, str] = {}
    category, field, previous = None, None, 0
    lines = [line.strip() for line in text.splitlines()]
    rows = [_row(line) for line in lines]
    width = max((len(r[1]) for r in rows if r), default=0)
    for line, row in zip(lines, rows, strict=True):
        if section := _SECTION.match(line):
            category, field = section.group(1), None
            continue
        if not row or set(line) <= set("+-=|"):
            continue
        name, value = row
        last, previous = previous, len(value)
        if category == "Metadata" and name:
            meta[name] = value
        elif name in ("Warning", "Info") and tests:
            field = "warnings" if name == "Warning" else "info"
            tests[-1][field].append(value)
        elif name and name not in ("Diagnostic",) and category:
            tests.append({"category": category, "test": name, "results": {},
                          "warnings": [], "info": []})
            field = None
            _add_result(tests[-1], value)
        elif not name and tests:
            if field:
                tests[-1][field][-1] += ("" if last >= width else " ") + value
            else:
                _add_result(tests[-1], value)
    if not tests:
        raise ValueError("no test rows under a '-----  Category  ---' row")
    return {"version": meta.get("DCGM Version"), "driver": meta.get("Driver Version Detected"),
            "runtime_error": None, "tests": _summed(tests), "complete": _closed(lines)}


def _closed(lines: list[str]) -> bool:
    """Whether the table ends with its closing border (``+---+---+``): a table cut short
    (``| head``, a paste that stopped) ends on a row or a category line instead."""
    last = next((line for line in reversed(lines) if line), "")
    return len(last) > 1 and last[0] == last[-1] == "+" and set(last) <= set("+-=")


def _add_result(test: dict[str, Any], value: str) -> None:
    found = _RESULT.match(value.strip())
    if found:
        gpu, status, rest = found.groups()
        where = f"GPU {gpu}" if gpu else (rest or "All").replace("GPU: ", "GPU ").replace(
            "All", "all GPUs")
        test["results"][where] = _status(status)


def _summed(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each test with ``status``: the worst of its results."""
    for test in tests:
        seen = set(test["results"].values())
        test["status"] = next((s for s in ORDER if s in seen), "not run")
    return tests


def parse(text: str) -> dict[str, Any]:
    """:func:`parse_json` or :func:`parse_table`, whichever the text is."""
    return parse_json(text) if any(f'"{root}"' in text[:4096] for root in ROOTS) \
        else parse_table(text)


def problems(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any] | None]]:
    """``(status, message, test)`` per failing or warning test (``fail`` for a run that could
    not run at all, with test ``None``), or one ``pass`` line when there is none. A table cut
    short (``complete`` false) never passes: its tests before the cut are one ``info`` line
    that says the rest is unknown."""
    out: list[tuple[str, str, dict[str, Any] | None]] = []
    if doc.get("runtime_error"):
        out.append(("fail", f"dcgmi diag could not run: {doc['runtime_error']}", None))
    for test in doc["tests"]:
        if test["status"] in ("fail", "warn"):
            where = ", ".join(e for e, s in test["results"].items() if s == test["status"])
            why = f": {test['warnings'][0]}" if test["warnings"] else ""
            out.append((test["status"], f"{test['category']} / {test['test']}: "
                        f"{test['status']} on {where}{why}", test))
    counts = {s: sum(t["status"] == s for t in doc["tests"]) for s in ORDER}
    passed = f"{counts['pass']} DCGM tests passed" + "".join(
        f", {n} {s}" for s, n in counts.items() if n and s not in ("pass", "fail", "warn"))
    if doc.get("complete") is False:
        out.append(("info", "dcgmi diag table cut short (no closing border): incomplete, "
                    f"{passed} before the cut, the tests after it unknown", None))
    elif not out:
        out.append(("pass", passed, None))
    return out


# -- running it on hosts ------------------------------------------------------------------------

LEVEL_TIME = {1: "seconds", 2: "about 2 minutes", 3: "about 15 minutes", 4: "an hour or more"}
CAPTURE = ".exemplar/commands/dcgmi-diag.json"


def from_output(level: int, stdout: str, stderr: str, rc: int | None) -> dict[str, Any]:
    """One host's ``dcgmi diag -r LEVEL -j`` run: its results with ``level``, or ``{"absent":
    why}`` where DCGM is not installed, its host engine does not answer, or it printed no
    results (dcgmi exits non-zero when a test fails: the JSON is read all the same)."""
    text = stdout.strip()
    if any(f'"{root}"' in text for root in ROOTS):
        try:
            return {**parse_json(text), "level": level}
        except ValueError as exc:
            return {"absent": f"dcgmi diag printed no readable JSON ({exc})"}
    said = next((line.strip() for line in (stderr + "\n" + stdout).splitlines()
                 if line.strip()), f"exit status {rc}")
    return {"absent": f"dcgmi diag -r {level} -j gave no results: {said[:200]}"}
