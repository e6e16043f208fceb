"""turbostat captures: busy-core frequency, C6 residency and the PM QoS banner.

Format (``linux:tools/power/x86/turbostat/turbostat.8``): an optional
banner (``/dev/cpu_dma_latency: N usec (default|constrained)``, ``TSC: N MHz``,
``CPUID(0x16): base_mhz: B max_mhz: M``), then a header line and rows, tab-separated with
``--show``/``--out`` and space-aligned otherwise. The first row of each interval is the system
summary with ``-`` in ``Package Core CPU``; per-CPU rows follow. Rows may stop short of the
header (per-core and per-package columns), and columns differ by CPU (AMD has no ``CPU%c6``).
``Bzy_MHz`` is APERF/MPERF x TSC, the frequency while busy; ``CPU%c6`` is the hardware C6
residency, ``C6%``-style columns are the software request only.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
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

KIND = "turbostat"
CHECK = "cpu.deep-cstates-disabled"
BUSY_PCT = 50.0  # a per-CPU row above this Busy% is a busy core
C6_IDLE_MIN_PCT = 1.0  # idle cores below this CPU%c6 never reach C6
_DMA = re.compile(r"^/dev/cpu_dma_latency:\s*(\d+)\s*usec\s*\((\w+)\)")
_TSC = re.compile(r"^TSC:\s*(\d+)\s*MHz")
_MAXMHZ = re.compile(r"max_mhz:\s*(\d+)")
_SW_STATE = re.compile(r"^(C\d\w*|POLL)%$")
_HW_STATE = re.compile(r"^CPU%c(\d+)$")


@dataclass(frozen=True)
class Row:
    line: int
    cpu: str  # "-" for the summary row
    values: dict[str, float | None]


def is_header(line: str) -> bool:
    tokens = line.split()
    return "Busy%" in tokens and ("Bzy_MHz" in tokens or "Avg_MHz" in tokens)


def sniff(text: str) -> bool:
    return "turbostat version" in text or any(is_header(line) for line in text.splitlines())


def parse_rows(text: str) -> list[Row]:
    """Every table row under every header line, as column -> value (``None`` for ``-``)."""
    rows: list[Row] = []
    header: list[str] | None = None
    for n, line in numbered(text):
        tokens = line.split("\t") if "\t" in line else line.split()
        tokens = [t.strip() for t in tokens]
        if is_header(line):
            header = tokens
            continue
        if header is None or not tokens or not all(t == "-" or to_float(t) is not None
                                                   for t in tokens if t):
            header = None if header is not None and line.strip() else header
            continue
        if "CPU" in header and len(tokens) <= header.index("CPU"):
            continue
        values = {name: to_float(tok) for name, tok in zip(header, tokens, strict=False) if tok}
        cpu = tokens[header.index("CPU")] if "CPU" in header else "-"
        if "Busy%" not in values:  # a row cut short before its Busy% column
            continue
        rows.append(Row(n, cpu, values))
    return rows


def parse_banner(text: str) -> dict[str, Any]:
    """The banner facts the analysis uses: PM QoS request, TSC and max frequency."""
    found: dict[str, Any] = {}
    for n, line in numbered(text):
        if m := _DMA.match(line.strip()):
            found.setdefault("pm_qos", []).append((n, int(m.group(1)), m.group(2)))
        elif m := _TSC.match(line.strip()):
            found["tsc_mhz"] = float(m.group(1))
        elif (m := _MAXMHZ.search(line)) and line.startswith("CPUID(0x16)"):
            found["max_mhz"] = float(m.group(1))
    return found


def _mean(rows: list[Row], column: str) -> float | None:
    vals = [r.values[column] for r in rows if r.values.get(column) is not None]
    return round(statistics.fmean(vals), 2) if vals else None


def judge_frequency(source: str, busy: list[Row], nominal: float | None,
                    turbo: float | None) -> Finding:
    """Busy cores should run well above nominal; deep C-states off starves them of turbo."""
    if not busy:
        return finding(CHECK, INFO, f"no busy cores (Busy% >= {BUSY_PCT:g}) in the capture; "
                       "busy-core frequency not judged")
    mhz = _mean(busy, "Bzy_MHz")
    ev = [cite(source, [r.line for r in busy], "Bzy_MHz")]
    vals = {"busy_cpus": sorted({r.cpu for r in busy}), "busy_mhz": mhz,
            "nominal_mhz": nominal, "turbo_mhz": turbo}
    if mhz is None or not nominal:
        return finding(CHECK, INFO, "no Bzy_MHz or TSC_MHz column; frequency not judged", ev,
                       **vals)
    text = f"busy cores run at {mhz:g} MHz (nominal {nominal:g} MHz"
    text += f", expected turbo {turbo:g} MHz)" if turbo else ")"
    if turbo and mhz >= 0.9 * turbo:
        return finding(CHECK, PASS, text, ev, **vals)
    if mhz <= 1.02 * nominal:
        return finding(CHECK, FAIL, text + ": no turbo on busy cores", ev, **vals)
    if not turbo:
        return finding(CHECK, PASS, text, ev, **vals)
    return finding(CHECK, WARN, text + ": below 90 % of turbo", ev, **vals)


def judge_c6(source: str, per_cpu: list[Row], summary_rows: list[Row]) -> Finding:
    """Idle cores must reach hardware C6 (``CPU%c6``); software ``C6%`` is a request only."""
    idle = [r for r in per_cpu if (r.values.get("Busy%") or 0.0) < BUSY_PCT] or summary_rows
    columns = sorted({c for r in idle for c in r.values})
    hw = sorted((c for c in columns if _HW_STATE.match(c)),
                key=lambda c: int(_HW_STATE.match(c).group(1)))
    sw = {c: _mean(idle, c) for c in columns if _SW_STATE.match(c)}
    if "CPU%c6" not in hw:
        deepest = {c: v for c, v in sw.items() if v is not None}
        shown = ", ".join(f"{c} {v:g}" for c, v in sorted(deepest.items(), key=lambda i: -i[1]))
        return finding(CHECK, INFO, "no hardware CPU%c6 column (AMD, acpi_idle, or not shown); "
                       f"software idle residency on idle cores: {shown or 'none'}",
                       [cite(source, [r.line for r in idle])], software_pct=deepest)
    c6 = _mean(idle, "CPU%c6")
    ev = [cite(source, [r.line for r in idle], "CPU%c6")]
    vals = {"idle_cpu_c6_pct": c6, "software_pct": sw, "idle_rows": len(idle)}
    if c6 is not None and c6 < C6_IDLE_MIN_PCT:
        return finding(CHECK, FAIL, f"idle cores spend {c6:g} % in hardware C6", ev, **vals)
    return finding(CHECK, PASS, f"idle cores spend {c6} % in hardware C6", ev, **vals)


def judge_pm_qos(source: str, banner: dict[str, Any]) -> Finding | None:
    """A constrained ``/dev/cpu_dma_latency`` (any banner in the file) blocks deep C-states."""
    if not banner.get("pm_qos"):
        return None
    constrained = [q for q in banner["pm_qos"] if q[2] == "constrained"]
    line, us, state = (constrained or banner["pm_qos"])[0]
    ev = [cite(source, [line])]
    if state == "constrained":
        return finding(CHECK, WARN, f"a PM QoS request holds /dev/cpu_dma_latency at {us} usec; "
                       "idle states slower to exit are blocked", ev, cpu_dma_latency_us=us)
    return finding(CHECK, PASS, "/dev/cpu_dma_latency unconstrained", ev,
                   cpu_dma_latency_us=us)


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    rows, banner = parse_rows(text), parse_banner(text)
    if not rows and not banner.get("pm_qos"):
        raise DiagnoseError(f"{source}: turbostat output without a table or PM QoS banner")
    summary_rows = [r for r in rows if r.cpu == "-"]
    per_cpu = [r for r in rows if r.cpu != "-"]
    threshold = float(expectations.get("busy_pct", BUSY_PCT))
    busy = [r for r in per_cpu if (r.values.get("Busy%") or 0.0) >= threshold]
    tsc = [r.values["TSC_MHz"] for r in per_cpu or rows if r.values.get("TSC_MHz")]
    nominal = banner.get("tsc_mhz") or (statistics.median(tsc) if tsc else None)
    turbo = expectations.get("turbo_mhz") or banner.get("max_mhz")
    findings = [f for f in (judge_pm_qos(source, banner),) if f]
    if rows:
        findings += [judge_frequency(source, busy, nominal, turbo),
                     judge_c6(source, per_cpu, summary_rows)]
    summary = {"rows": len(rows), "summary_rows": len(summary_rows),
               "cpus": len({r.cpu for r in per_cpu}), "busy_cpus": len({r.cpu for r in busy}),
               "nominal_mhz": nominal, "max_mhz": banner.get("max_mhz"),
               "cpu_dma_latency_us": [q[1] for q in banner.get("pm_qos", [])],
               "avg_busy_pct": _mean(summary_rows or rows, "Busy%"),
               "columns": sorted({c for r in rows for c in r.values})}
    return Report(source, KIND, summary, findings)


ANALYZER = Analyzer(KIND, sniff, analyze)
