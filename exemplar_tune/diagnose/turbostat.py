"""turbostat captures: busy-core frequency, deep C-state residency and the PM QoS banner.

Format (``linux:tools/power/x86/turbostat/turbostat.8``): an optional
banner (``/dev/cpu_dma_latency: N usec (default|constrained)``, ``TSC: N MHz``,
``CPUID(0x16): base_mhz: B max_mhz: M``), then a header line and rows, tab-separated with
``--show``/``--out`` and space-aligned otherwise; each interval starts with a header (or, when
headers are not repeated, with its system summary row: ``-`` in ``Package Core CPU``), per-CPU
rows follow. Rows may stop short of the header (per-core and per-package columns are printed
on the first CPU of a core or package only), and columns differ by CPU and version (AMD has no
``CPU%cN``; the turbostat of Linux 4.0 and before says ``%Busy`` for ``Busy%``; ``--show
sysfs`` prints only the cpuidle request columns, with no topology and no ``Busy%``).
``Bzy_MHz`` is APERF/MPERF x TSC, the frequency while busy. ``CPU%c6``, ``CPU%c7``,
``CPU%c8`` ... ``CPU%c10`` are the hardware core C-state residencies, each counted apart, so
their sum is the time in C6 or deeper; ``C6%``-style columns are the software request only.
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
C6_IDLE_MIN_PCT = 1.0  # idle cores below this residency in C6 or deeper never reach it
DEEP_STATE = 6  # CPU%c6 and deeper hardware states count as deep
# older turbostat header names -> current ones (Linux 4.0 and before; the 3.x names)
ALIASES = {"%Busy": "Busy%", "%c0": "Busy%", "pk": "Package", "cor": "Core", "core": "Core",
           "cr": "Core", "GHz": "Bzy_MHz", "TSC": "TSC_MHz", "CTMP": "CoreTmp",
           "PTMP": "PkgTmp", **{f"%c{n}": f"CPU%c{n}" for n in (1, 3, 6, 7)},
           **{f"%pc{n}": f"Pkg%pc{n}" for n in (2, 3, 6, 7)}}
SCALE = {"GHz": 1000.0, "TSC": 1000.0}  # 3.x columns in GHz, read as MHz
TOPOLOGY = ("Package", "Die", "Node", "L3", "Core", "CPU")
_DMA = re.compile(r"^/dev/cpu_dma_latency:\s*(\d+)\s*usec\s*\((\w+)\)")
_TSC = re.compile(r"^TSC:\s*(\d+)\s*MHz")
_MAXMHZ = re.compile(r"max_mhz:\s*(\d+)")
_SW_STATE = re.compile(r"^(C\d\w*|POLL)%$")
_HW_STATE = re.compile(r"^CPU%c(\d+)$")
_SYSFS_COLUMN = re.compile(r"^(?:C\d\w*|POLL)%?$|^(?:Package|Die|Node|L3|Core|CPU|APIC|X2APIC|"
                           r"usec|Time_Of_Day_Seconds)$")


@dataclass(frozen=True)
class Row:
    """One table row: its line, CPU label (``-`` for the system summary), interval index,
    the core it belongs to (``None`` without a ``Core`` column) and column -> value."""

    line: int
    cpu: str
    values: dict[str, float | None]
    interval: int = 0
    core: tuple[str, ...] | None = None


def _names(tokens: list[str]) -> list[str]:
    return [ALIASES.get(t, t) for t in tokens]


def is_header(line: str) -> bool:
    """A turbostat column header: ``Busy%`` (or ``%Busy``) with a frequency column, or a
    ``--show sysfs``-style line of cpuidle columns with at least one residency (``C6%``)."""
    if "%" not in line:  # either kind names a percentage column: the common line costs no split
        return False
    tokens = line.split()
    names = _names(tokens)
    if "Busy%" in names and ("Bzy_MHz" in names or "Avg_MHz" in names):
        return True
    return (len(tokens) >= 3 and any(_SW_STATE.match(t) for t in tokens)
            and all(_SYSFS_COLUMN.match(t) for t in tokens))


def sniff(text: str) -> bool:
    return "turbostat version" in text or any(is_header(line) for line in text.splitlines())


def _scales(tokens: list[str]) -> dict[str, float]:
    """Per current column name, the factor its values are read with (GHz columns: 1000)."""
    return {ALIASES[t]: SCALE[t] for t in tokens if t in SCALE}


def _blank_topology(line: str, header_line: str, header: list[str]) -> int:
    """How many leading topology columns a space-aligned row leaves blank: the 3.x system
    summary row starts right of the header's last leading topology name."""
    leading = 0
    while leading < len(header) and header[leading] in TOPOLOGY:
        leading += 1
    if not leading or "\t" in line:
        return 0
    last = header_line.split()[leading - 1]
    end = header_line.index(last) + len(last)
    indent = len(line) - len(line.lstrip())
    return leading if indent >= end else 0


def _tokens(line: str) -> list[str]:
    line = line.strip()
    return [t.strip() for t in (line.split("\t") if "\t" in line else line.split())]


def _label(header: list[str], tokens: list[str], position: int) -> str:
    """The row's CPU: its CPU column, else Core or Package; unlabelled rows (``--show sysfs``)
    by position, the first of each interval being the system summary."""
    for name in ("CPU", "Core", "Package"):
        if name in header:
            return tokens[header.index(name)]
    return "-" if position == 0 else f"#{position}"


def parse_rows(text: str) -> list[Row]:
    """Every table row under every header line, as column -> value (``None`` for ``-``)."""
    rows: list[Row] = []
    header: list[str] | None = None
    header_line, scale = "", {}
    interval, position = -1, 0
    for n, line in numbered(text):
        tokens = _tokens(line)
        if is_header(line):
            header, interval, position = _names(tokens), interval + 1, 0
            header_line, scale = line, _scales(tokens)
            continue
        if header is None or not tokens or not all(t == "-" or to_float(t) is not None
                                                   for t in tokens if t):
            header = None if header is not None and line.strip() else header
            continue
        blank = _blank_topology(line, header_line, header)
        if blank and len(tokens) == len(header) - blank:
            tokens = ["-"] * blank + tokens
        topology = [header.index(c) for c in TOPOLOGY if c in header]
        if topology and len(tokens) <= max(topology):
            continue
        values = {name: to_float(tok) for name, tok in zip(header, tokens, strict=False) if tok}
        values = {k: v * scale[k] if v is not None and k in scale else v
                  for k, v in values.items()}
        if "Busy%" in header and "Busy%" not in values:  # a row cut short before Busy%
            continue
        cpu = _label(header, tokens, position)
        if cpu == "-" and position:  # headers not repeated: a summary row opens an interval
            interval += 1
        position += 1
        core = tuple(tokens[header.index(c)] for c in TOPOLOGY[:5] if c in header) \
            if "Core" in header else None
        rows.append(Row(n, cpu, values, interval, core))
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
                    turbo: float | None, columns: set[str] | None = None) -> Finding:
    """Busy cores should run well above nominal; deep C-states off starves them of turbo."""
    if columns is not None and "Busy%" not in columns:
        return finding(CHECK, INFO, "no Busy% column (e.g. --show sysfs); busy-core frequency "
                       "not judged")
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


def _depth(column: str) -> int:
    m = _HW_STATE.match(column)
    return int(m.group(1)) if m else -1


def _busy_cores(rows: list[Row], threshold: float) -> set[tuple[int, tuple[str, ...]]]:
    return {(r.interval, r.core) for r in rows
            if r.core is not None and (r.values.get("Busy%") or 0.0) >= threshold}


def _software_info(source: str, idle: list[Row], columns: list[str], hw: list[str]) -> Finding:
    sw = {c: _mean(idle, c) for c in columns if _SW_STATE.match(c)}
    seen = {c: v for c, v in sw.items() if v is not None}
    shown = ", ".join(f"{c} {v:g}" for c, v in sorted(seen.items(), key=lambda i: -i[1]))
    what = (f"only shallow hardware states ({', '.join(hw)})" if hw else
            "no hardware CPU%cN column (AMD, acpi_idle, --show sysfs, or hidden)")
    return finding(CHECK, INFO, f"{what}: C6-or-deeper residency not judged; software idle "
                   f"requests on idle cores: {shown or 'none shown'}",
                   [cite(source, [r.line for r in idle])], software_pct=seen)


def judge_c6(source: str, per_cpu: list[Row], summary_rows: list[Row],
             threshold: float = BUSY_PCT) -> Finding:
    """Idle cores must reach hardware C6 or deeper (``CPU%c6`` + ``CPU%c7`` + ... ``CPU%c10``);
    a core is idle when none of its CPUs is busy in that interval (a busy hyperthread holds its
    sibling's core in C0/C1). Software ``C6%`` is a request only."""
    busy_cores = _busy_cores(per_cpu, threshold)
    idle = [r for r in per_cpu if (r.values.get("Busy%") or 0.0) < threshold] or summary_rows
    columns = sorted({c for r in idle for c in r.values})
    hw = sorted((c for c in columns if _HW_STATE.match(c)), key=_depth)
    deep = [c for c in hw if _depth(c) >= DEEP_STATE]
    if not deep:
        return _software_info(source, idle, columns, hw)
    cores = [r for r in idle if any(r.values.get(c) is not None for c in deep)
             and (r.interval, r.core) not in busy_cores]
    if not cores:
        return finding(CHECK, INFO, "every core with a C-state column has a busy CPU; "
                       "C6-or-deeper residency not judged", [cite(source, [r.line for r in idle])])
    residency = {c: _mean(cores, c) for c in deep}
    per_row = [sum(r.values.get(c) or 0.0 for c in deep) for r in cores]
    deep_pct = round(statistics.fmean(per_row), 2)
    shown = ", ".join(f"{c} {v:g}" for c, v in residency.items() if v is not None)
    ev = [cite(source, [r.line for r in cores], ",".join(deep))]
    vals = {"idle_cpu_c6_pct": residency.get("CPU%c6"), "deep_pct": deep_pct,
            "residency_pct": residency, "idle_rows": len(cores),
            "software_pct": {c: _mean(cores, c) for c in columns if _SW_STATE.match(c)}}
    text = f"idle cores spend {deep_pct:g} % in hardware C6 or deeper ({shown})"
    return finding(CHECK, FAIL if deep_pct < C6_IDLE_MIN_PCT else PASS, text, ev, **vals)


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


def intervals(rows: list[Row]) -> list[dict[str, Any]]:
    """Per interval: its first line, how many per-CPU rows and the system summary row."""
    out: list[dict[str, Any]] = []
    for index in sorted({r.interval for r in rows}):
        block = [r for r in rows if r.interval == index]
        system = next((r for r in block if r.cpu == "-"), None)
        values = {c: v for c, v in (system.values if system else {}).items()
                  if c not in TOPOLOGY and v is not None}
        out.append({"line": block[0].line, "cpus": sum(1 for r in block if r.cpu != "-"),
                    "system": values or None})
    return out


def _notes(rows: list[Row], text: str) -> list[str]:
    notes = []
    if any(r.cpu.startswith("#") for r in rows):
        notes.append("rows carry no CPU column (--show sysfs): the first row of each interval "
                     "is read as the system summary")
    seen = dict.fromkeys(t for line in text.splitlines() if is_header(line)
                         for t in line.split() if t in ALIASES)
    if seen:
        notes.append("old header names read as current ones: " + ", ".join(
            f"{a} as {ALIASES[a]}" + (" (GHz x 1000)" if a in SCALE else "") for a in seen))
    return notes


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
    columns = {c for r in rows for c in r.values}
    findings = [f for f in (judge_pm_qos(source, banner),) if f]
    if rows:
        findings += [judge_frequency(source, busy, nominal, turbo, columns),
                     judge_c6(source, per_cpu, summary_rows, threshold)]
    summary = {"rows": len(rows), "summary_rows": len(summary_rows),
               "cpus": len({r.cpu for r in per_cpu}), "busy_cpus": len({r.cpu for r in busy}),
               "nominal_mhz": nominal, "max_mhz": banner.get("max_mhz"),
               "cpu_dma_latency_us": [q[1] for q in banner.get("pm_qos", [])],
               "avg_busy_pct": _mean(summary_rows or rows, "Busy%"),
               "columns": sorted(columns), "intervals": intervals(rows),
               "notes": _notes(rows, text)}
    return Report(source, KIND, summary, findings)


ANALYZER = Analyzer(KIND, sniff, analyze)
