"""Training step-time logs: distribution, tail, bimodality and periodic stalls.

Accepted lines: Megatron-LM (``iteration  100/ 1000 | ... | elapsed time per iteration (ms):
1234.5 | ...``; each line averages ``--log-interval`` iterations), NeMo / Lightning
(``train_step_timing in s: 1.23``, ``step_time=1.23`` in seconds unless suffixed ``ms``) and
plain files with one number per line (milliseconds, or seconds when the median is under 10).
Warm-up steps are dropped first. A step is a stall when it exceeds the median by more than
``max(50 ms, 5 x MAD)`` (scaled down by the log interval); a small fraction of steps stalling by
50-100 ms, often at a fixed period, is the mark of housekeeping work (kernel threads, IRQs,
timers) landing on the training job's CPUs.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
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

KIND = "step-time"
CHECK_STALLS = "cpu.housekeeping-overlap"
CHECK_SHAPE = "workload.step-time-stability"
STALL_MIN_MS = 50.0
STALL_MAD = 5.0
WIDESPREAD = 0.10  # more slow steps than this is not "a few stalls"
LOST_FAIL_PCT = 1.0  # time lost to stalls, % of the run
ASHMAN_D = 3.5  # a normal (2.7) or uniform (3.5) split stays below this
_MEGATRON = re.compile(r"elapsed time per iteration \(ms\):\s*([\d.]+)")
_ITERATION = re.compile(r"iteration\s+(\d+)\s*/\s*\d+")
_NEMO = re.compile(r"train_step_timing(?: in s)?\s*[:=]\s*([\d.]+)")
_STEP_TIME = re.compile(r"\bstep_time\s*[=:]\s*([\d.]+)\s*(ms|s)?\b")
_PLAIN = re.compile(r"^\s*(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*$")


def _matches(text: str) -> tuple[str, list[tuple[int, float, int | None]]]:
    """The first format with matching lines: ``(format, [(line, value, iteration)])``."""
    lines = numbered(text)
    for name, rx in (("megatron", _MEGATRON), ("nemo", _NEMO), ("step_time", _STEP_TIME)):
        found = [(n, float(m.group(1)), _iteration(line)) for n, line in lines
                 if (m := rx.search(line))]
        if found:
            if rx is _STEP_TIME and all(rx.search(ln).group(2) == "ms" for n, ln in lines
                                        if rx.search(ln)):
                name = "step_time_ms"
            return name, found
    body = [(n, line) for n, line in lines if line.strip() and not line.lstrip().startswith("#")]
    plain = [(n, float(m.group(1)), None) for n, line in body if (m := _PLAIN.match(line))]
    return ("plain", plain) if body and len(plain) == len(body) else ("", [])


def _iteration(line: str) -> int | None:
    m = _ITERATION.search(line)
    return int(m.group(1)) if m else None


def sniff(text: str) -> bool:
    name, found = _matches(text)
    return len(found) >= (10 if name == "plain" else 3)


def parse_steps(text: str) -> tuple[str, str, list[tuple[int, float, int | None]]]:
    """``(format, unit note, [(line, milliseconds, iteration)])``."""
    name, found = _matches(text)
    if name in ("nemo", "step_time"):
        return name, "s", [(n, v * 1000.0, it) for n, v, it in found]
    if name == "plain" and found and statistics.median(v for _, v, _ in found) < 10:
        return name, "s (assumed: median under 10)", [(n, v * 1000.0, it) for n, v, it in found]
    return name, "ms", found


def percentile(ordered: list[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` (0-100) of sorted values."""
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def two_clusters(values: list[float]) -> dict[str, float]:
    """Best two-group split of the values (Otsu) and Ashman's D of the two groups."""
    xs = sorted(values)
    n, total = len(xs), sum(xs)
    best, left = (-1.0, 1), 0.0
    for i in range(1, n):
        left += xs[i - 1]
        between = i * (n - i) * (left / i - (total - left) / (n - i)) ** 2
        best = max(best, (between, i))
    low, high = xs[:best[1]], xs[best[1]:]
    spread = math.sqrt(statistics.pvariance(low) + statistics.pvariance(high)) or 1e-9
    d = math.sqrt(2) * (statistics.fmean(high) - statistics.fmean(low)) / spread
    return {"low_ms": round(statistics.fmean(low), 2), "high_ms": round(statistics.fmean(high), 2),
            "high_fraction": round(len(high) / n, 4), "ashman_d": round(d, 2)}


def periodicity(spikes: list[int]) -> dict[str, Any]:
    """Most common interval between spike positions (within +-1) and its share of intervals."""
    gaps = [b - a for a, b in zip(spikes, spikes[1:], strict=False)]
    if len(gaps) < 2:
        return {"period_steps": None, "share": 0.0, "intervals": len(gaps), "periodic": False}
    counts = Counter(gaps)
    period = max(counts, key=lambda k: (sum(c for g, c in counts.items() if abs(g - k) <= 1),
                                        counts[k]))
    share = sum(c for g, c in counts.items() if abs(g - period) <= 1) / len(gaps)
    return {"period_steps": period, "share": round(share, 2), "intervals": len(gaps),
            "periodic": len(gaps) >= 3 and share >= 0.5 and period >= 4}


def default_warmup(n: int) -> int:
    """10 steps or 5 % of the run, whichever is more, but never more than a quarter of it."""
    return min(max(10, round(0.05 * n)), n // 4)


def step_stats(ms: list[float], log_interval: int = 1) -> dict[str, Any]:
    """Distribution of the kept steps, the stall threshold and the stalls above it."""
    ordered = sorted(ms)
    med = statistics.median(ordered)
    mad = statistics.median(abs(v - med) for v in ordered)
    threshold = med + max(STALL_MIN_MS / log_interval, STALL_MAD * mad)
    spikes = [i for i, v in enumerate(ms) if v > threshold]
    excess = [ms[i] - med for i in spikes]
    mean = statistics.fmean(ordered)
    return {
        "steps": len(ms), "mean_ms": round(mean, 2), "median_ms": round(med, 2),
        "p95_ms": round(percentile(ordered, 95), 2), "p99_ms": round(percentile(ordered, 99), 2),
        "cv": round(statistics.pstdev(ordered) / mean, 4) if mean else 0.0,
        "mad_ms": round(mad, 2), "stall_threshold_ms": round(threshold, 2),
        "tail_fraction": round(len(spikes) / len(ms), 4),
        "stall_ms": round(statistics.median(excess), 2) if excess else 0.0,
        "lost_pct": round(100.0 * sum(excess) / sum(ordered), 2) if sum(ordered) else 0.0,
        "spike_positions": spikes, "clusters": two_clusters(ms) if len(ms) > 2 else None,
        "periodicity": periodicity(spikes),
    }


def judge_stalls(source: str, st: dict[str, Any], lines: list[int]) -> Finding:
    ev = [cite(source, lines, "step time")] if lines else []
    vals = {k: st[k] for k in ("tail_fraction", "stall_ms", "lost_pct", "stall_threshold_ms",
                               "median_ms", "periodicity")}
    if not lines:
        return finding(CHECK_STALLS, PASS, f"no stalls: no step above "
                       f"{st['stall_threshold_ms']:g} ms (median {st['median_ms']:g} ms)", **vals)
    period = st["periodicity"]
    periodic = period["periodic"]
    text = (f"{st['tail_fraction']:.1%} of steps stall by ~{st['stall_ms']:g} ms over the "
            f"{st['median_ms']:g} ms median ({st['lost_pct']:g} % of run time)")
    text += f", every ~{period['period_steps']} steps" if periodic else ""
    if st["tail_fraction"] > WIDESPREAD:
        return finding(CHECK_STALLS, WARN, text + "; too many for housekeeping alone", ev,
                       **vals)
    heavy = st["lost_pct"] >= LOST_FAIL_PCT or (periodic and st["tail_fraction"] >= 0.01)
    return finding(CHECK_STALLS, FAIL if heavy else WARN, text, ev, **vals)


def judge_shape(source: str, st: dict[str, Any], lines: list[int]) -> Finding:
    cl = st["clusters"]
    ev = [cite(source, lines, "step time")]
    if cl and cl["ashman_d"] > ASHMAN_D and 0.1 <= cl["high_fraction"] <= 0.9:
        return finding(CHECK_SHAPE, WARN, f"bimodal step time: {cl['low_ms']:g} ms and "
                       f"{cl['high_ms']:g} ms ({cl['high_fraction']:.0%} of steps)", ev,
                       bimodal=True, cv=st["cv"], clusters=cl)
    status = WARN if st["cv"] > 0.10 else PASS
    return finding(CHECK_SHAPE, status, f"step time CV {st['cv']:.1%}, p99 {st['p99_ms']:g} ms "
                   f"vs median {st['median_ms']:g} ms", ev, bimodal=False, cv=st["cv"],
                   clusters=cl)


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    fmt, unit, steps = parse_steps(text)
    iters = [it for _, _, it in steps if it is not None]
    interval = max(1, statistics.median(b - a for a, b in zip(iters, iters[1:], strict=False))
                   ) if len(iters) > 1 else 1
    warmup = int(expectations.get("warmup_steps", default_warmup(len(steps))))
    kept = steps[warmup:]
    if len(kept) < 3:
        raise DiagnoseError(f"{source}: step-time log with {len(kept)} steps after warm-up")
    st = step_stats([v for _, v, _ in kept], int(interval))
    spike_lines = [kept[i][0] for i in st["spike_positions"]]
    summary = {"format": fmt, "unit": unit, "log_interval": int(interval), "warmup": warmup,
               **{k: v for k, v in st.items() if k != "spike_positions"},
               "spike_steps": [kept[i][2] if kept[i][2] is not None else warmup + i + 1
                               for i in st["spike_positions"]]}
    findings = [judge_stalls(source, st, spike_lines),
                judge_shape(source, st, [n for n, _, _ in kept])]
    return Report(source, KIND, summary, findings)


ANALYZER = Analyzer(KIND, sniff, analyze)
