"""perf report / perf top text: the share of cycles in SMMUv3 command-queue symbols.

Rows: ``perf report --stdio`` prints ``7.59%  comm  dso  [k] sym``
(with ``--children`` two percentages, Children then Self), ``perf top`` prints
``27.43%  [kernel]  [k] sym``. Without Grace CMDQ-V, every IOMMU map/unmap serialises on the
single SMMU command queue: ``arm_smmu_cmdq_issue_cmdlist`` and its callees and callers
(``arm_smmu_cmdq_poll_until_sync``, ``arm_smmu_tlb_inv_range*``, ``arm_smmu_atc_inv_domain*``,
``__arm_smmu_tlb_inv_range``, ``arm_smmu_tlb_inv_context`` ...) take several % of all cycles.
A file may hold several tables (``Samples:`` / ``PerfTop:`` headers start a new one); each is
judged on its own, self overhead summed over those symbols.
"""

from __future__ import annotations

import re
from typing import Any

from exemplar_tune.diagnose.base import (
    FAIL,
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
_ROW = re.compile(r"^\s*(?:(\d+\.\d+)%\s+)?(\d+\.\d+)%\s+(.*?)\s*\[([k.gujH])\]\s+(\S+)")
_SMMU = re.compile(r"^_*arm_smmu_(cmdq_|tlb_inv|atc_inv|sync|cmdq)")
_SUFFIX = re.compile(r"\.(constprop|isra|part|cold|llvm)\.?\d*.*$|>$")
_NEW_TABLE = re.compile(r"^\s*#?\s*(Samples:|PerfTop:)")
_EVENT = re.compile(r"Samples:\s*\S+\s+of event '([^']+)'|PerfTop:.*\[\d+Hz ([^\]]+)\]")


def sniff(text: str) -> bool:
    return sum(1 for line in text.splitlines() if _ROW.match(line)) >= 3


def symbol(raw: str) -> str:
    """The symbol without compiler suffixes (``.constprop.42``) or a truncation mark."""
    return _SUFFIX.sub("", raw)


def parse_tables(text: str) -> list[dict[str, Any]]:
    """``[{"event", "line", "rows": [(line, self_pct, symbol)]}]``, one per table."""
    tables: list[dict[str, Any]] = []
    current: dict[str, Any] = {"event": None, "line": 1, "rows": []}
    for n, line in numbered(text):
        if _NEW_TABLE.match(line) and current["rows"]:
            tables.append(current)
            current = {"event": None, "line": n, "rows": []}
        if m := _EVENT.search(line):
            current["event"] = m.group(1) or m.group(2)
        elif m := _ROW.match(line):
            current["rows"].append((n, float(m.group(2)), symbol(m.group(5))))
    return [t for t in [*tables, current] if t["rows"]]


def judge(source: str, table: dict[str, Any]) -> Finding:
    smmu = [(n, pct, sym) for n, pct, sym in table["rows"] if _SMMU.match(sym)]
    share = round(sum(pct for _, pct, _ in smmu), 2)
    by_symbol: dict[str, float] = {}
    for _, pct, sym in smmu:
        by_symbol[sym] = round(by_symbol.get(sym, 0.0) + pct, 2)
    status = FAIL if share > FAIL_PCT else WARN if share >= WARN_PCT else PASS
    top = ", ".join(f"{s} {p:g} %" for s, p in sorted(by_symbol.items(), key=lambda i: -i[1]))
    event = table["event"] or "samples"
    text = f"SMMU command-queue symbols take {share:g} % of {event}"
    text += f" ({top})" if top else ""
    lines = [n for n, _, _ in smmu] or [table["line"]]
    return finding(CHECK, status, text, [cite(source, lines)], smmu_pct=share,
                   symbols=by_symbol, event=table["event"])


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    tables = parse_tables(text)
    if not tables:
        raise DiagnoseError(f"{source}: perf output without overhead rows")
    findings = [judge(source, t) for t in tables]
    summary = {"tables": [
        {"event": t["event"], "rows": len(t["rows"]), "smmu_pct": f.values["smmu_pct"],
         "top": [{"symbol": s, "pct": p} for _, p, s in t["rows"][:5]]}
        for t, f in zip(tables, findings, strict=True)]}
    return Report(source, KIND, summary, findings)


ANALYZER = Analyzer(KIND, sniff, analyze)
