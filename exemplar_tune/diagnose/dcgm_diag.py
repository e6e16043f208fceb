"""``dcgmi diag`` results (JSON or table, :mod:`exemplar_tune.dcgm`) as gpu-layer findings
(``gpu.dcgm-diag``, the check ``preflight --dcgm-level`` runs)."""

from __future__ import annotations

import re
from typing import Any

from exemplar_tune.dcgm import ROOTS, parse, problems
from exemplar_tune.diagnose.base import (
    FAIL,
    INFO,
    PASS,
    WARN,
    Analyzer,
    DiagnoseError,
    Report,
    finding,
)

KIND = "dcgmi diag"
CHECK = "gpu.dcgm-diag"
STATUS = {"fail": FAIL, "warn": WARN, "pass": PASS, "info": INFO}


def sniff(text: str) -> bool:
    """A dcgmi diag JSON document or table."""
    head = text.lstrip()[:400]
    return any(f'"{root}"' in head for root in ROOTS) or (
        "| Diagnostic" in text[:2000] and "| Result" in text[:2000]) or bool(
        re.search(r"^[|+]-----  (Deployment|Integration|Hardware|Stress)  -", text, re.M))


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    del expectations
    try:
        doc = parse(text)
    except ValueError as exc:
        raise DiagnoseError(f"{source}: dcgmi diag output unreadable ({exc})") from None
    summary = {k: doc[k] for k in ("version", "driver")} | {
        "tests": [{k: t[k] for k in ("category", "test", "status", "results")}
                  for t in doc["tests"]], "complete": doc.get("complete", True)}
    found = [finding(CHECK, STATUS[status], message, [source],
                     **({"warnings": test["warnings"], "results": test["results"]}
                        if test else {}))
             for status, message, test in problems(doc)]
    return Report(source, KIND, summary, found)


ANALYZER = Analyzer(KIND, sniff, analyze)
