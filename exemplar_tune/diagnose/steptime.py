"""Training step-time logs: distribution, warm-up, stalls, bimodality and level shifts.

The log is read by :mod:`.steplog_formats` (Megatron-LM and its forks, NeMo / Lightning,
``step_time=``, litgpt, torchtitan, DeepSpeed, HF Trainer, tqdm bars, one number per line)
into one series. The rules, with the figures they use (the constants below):

* **Samples.** Fewer than ``MIN_SAMPLES`` (3) are shown as they are (each step's time, line
  and iteration) with ``info`` findings that say no distribution can be judged from them
  (``summary.judged`` false); a family seen without timing refuses the file: ``no per-step
  timing found (why)``.
* **Ranks.** Lines from several launcher sources are never merged into one series: the
  lowest rank's series is read, and the summary's ``notes`` say so.
* **Intervals.** A sample may be the mean over several iterations (Megatron's
  ``--log-interval``; the steps between two timestamped lines): ``log_interval``. Warm-up,
  the stall threshold and the stall period count iterations, not log lines.
* **Warm-up.** The first W iterations of training: ``warmup_steps``, else 10 or 5 % of the
  iterations the log spans, at most a quarter. A log that starts later (mid-run) has none. When
  dropping the window would leave fewer than ``MIN_JUDGE`` samples, only its part up to the
  last sample that stands out (above the series' stall threshold) is dropped, and the default
  never leaves fewer than ``MIN_SAMPLES``.
* **Excluded.** Where a sample is the wall time between two log lines, one whose interval
  holds logged non-training work (an evaluation, a profiler dump, a checkpoint save) is left
  out of the judgement and named under ``excluded``: it is not a stall.
* **Judgement** needs ``MIN_JUDGE`` (20) samples; fewer give ``info`` findings with figures.
* **Stall.** A sample above median + max(50 ms / interval, 5 x MAD); a small fraction of steps
  stalling by 50-100 ms, often at a fixed period, is the mark of housekeeping work (kernel
  threads, IRQs, timers) landing on the training job's CPUs. ``summary.read`` describes every
  sample read; the other figures describe the judged ones.
* **Bimodality.** The best two-group split (Otsu) is bimodal when: at least ``MIN_JUDGE``
  samples; each group at least ``MODE_SHARE`` (10 %) of them; the gap between the group means
  at least ``MIN_GAP`` (3 %) of the median; and Ashman's D at least ``ASHMAN_D`` (3.5), i.e.
  the gap is about 2.5 times the groups' combined spread or more. Noise (6060.5 vs 6076.5 ms
  at a CV of 0.15 %) fails the gap; gradient accumulation (94 vs 205 ms) passes.
* **Level shift.** The best split of the series into an earlier and a later run (each at least
  2 samples, at least ``SHIFT_MIN`` in all) with the same gap and D figures: a lasting change of
  step time, reported even in a short log.
* **Ranks.** A log with several ranks' lines is also judged rank against rank
  (:mod:`.slow_ranks`, ``workload.slow-ranks``).
* **Rates.** tqdm's smoothed ``it/s``, a throughput per interval: described, with a trend
  when monotone, never judged as step times.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import replace
from typing import Any

from exemplar_tune.diagnose import slow_ranks
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
from exemplar_tune.diagnose.steplog import Line, NoTiming, Sample, Series
from exemplar_tune.diagnose.steplog_formats import (
    read_lines,
    read_series,
    recognised,
    wanted,
    wraps,
)

KIND = "step-time"
CHECK_STALLS = "cpu.housekeeping-overlap"
CHECK_SHAPE = "workload.step-time-stability"
MIN_SAMPLES = 3
MIN_JUDGE = 20
STALL_MIN_MS = 50.0
STALL_MAD = 5.0
WIDESPREAD = 0.10  # more slow steps than this is not "a few stalls"
LOST_FAIL_PCT = 1.0  # time lost to stalls, % of the run
ASHMAN_D = 3.5  # a normal (2.7) or uniform (3.5) split stays below this
MIN_GAP = 0.03  # gap between two modes (or levels), fraction of the median
MODE_SHARE = 0.10
SHIFT_MIN = 5


def sniff(text: str) -> bool:
    """A training log of a known family, even one that will be refused for lack of timing."""
    return recognised(text)


def parse_steps(text: str) -> tuple[str, str, list[tuple[int, float, int | None]]]:
    """``(format, unit note, [(line, milliseconds, iteration)])``; no samples for a rate."""
    try:
        series = read_series(text)
    except NoTiming:
        return "", "", []
    if series.rate:
        return series.fmt, series.unit, []
    return series.fmt, series.unit, [(s.line, s.value, s.iteration) for s in series.samples]


def percentile(ordered: list[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` (0-100) of sorted values."""
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def separation(low: list[float], high: list[float], median: float) -> dict[str, float]:
    """Means of two groups, Ashman's D and the gap relative to ``median``."""
    spread = math.sqrt(statistics.pvariance(low) + statistics.pvariance(high)) or 1e-9
    gap = statistics.fmean(high) - statistics.fmean(low)
    return {"ashman_d": round(math.sqrt(2) * abs(gap) / spread, 2),
            "gap_pct": round(100.0 * gap / median, 2) if median else 0.0}


def two_clusters(values: list[float]) -> dict[str, Any]:
    """Best two-group split of the values (Otsu), and whether it meets the bimodality rule."""
    xs = sorted(values)
    n, total = len(xs), sum(xs)
    best, left = (-1.0, 1), 0.0
    for i in range(1, n):
        left += xs[i - 1]
        between = i * (n - i) * (left / i - (total - left) / (n - i)) ** 2
        best = max(best, (between, i))
    low, high = xs[:best[1]], xs[best[1]:]
    sep = separation(low, high, statistics.median(xs))
    share = len(high) / n
    bimodal = (n >= MIN_JUDGE and MODE_SHARE <= share <= 1 - MODE_SHARE
               and sep["ashman_d"] >= ASHMAN_D and sep["gap_pct"] >= 100 * MIN_GAP)
    return {"low_ms": round(statistics.fmean(low), 2), "high_ms": round(statistics.fmean(high), 2),
            "cut_ms": round(high[0], 3), "high_fraction": round(share, 4), **sep,
            "bimodal": bimodal}


def level_shift(values: list[float]) -> dict[str, Any] | None:
    """The best before/after split of the series when it meets the level-shift rule."""
    n = len(values)
    if n < SHIFT_MIN:
        return None
    prefix = [0.0]
    for v in values:
        prefix.append(prefix[-1] + v)
    best = max(range(2, n - 1), key=lambda k: k * (n - k) * (
        prefix[k] / k - (prefix[n] - prefix[k]) / (n - k)) ** 2)
    before, after = values[:best], values[best:]
    sep = separation(before, after, statistics.median(values))
    if sep["ashman_d"] < ASHMAN_D or abs(sep["gap_pct"]) < 100 * MIN_GAP:
        return None
    return {"at": best, "before_ms": round(statistics.fmean(before), 2),
            "after_ms": round(statistics.fmean(after), 2), **sep}


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
    """10 iterations or 5 % of the run, whichever is more, but never more than a quarter."""
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
        "steps": len(ms), "mean_ms": round(mean, 3), "median_ms": round(med, 3),
        "p95_ms": round(percentile(ordered, 95), 2), "p99_ms": round(percentile(ordered, 99), 2),
        "cv": round(statistics.pstdev(ordered) / mean, 4) if mean else 0.0,
        "mad_ms": round(mad, 3), "stall_threshold_ms": round(threshold, 2),
        "tail_fraction": round(len(spikes) / len(ms), 4),
        "stall_ms": round(statistics.median(excess), 2) if excess else 0.0,
        "lost_pct": round(100.0 * sum(excess) / sum(ordered), 2) if sum(ordered) else 0.0,
        "spike_positions": spikes, "clusters": two_clusters(ms) if len(ms) > 2 else None,
        "periodicity": periodicity(spikes),
    }


def describe(values: list[float], suffix: str = "_ms") -> dict[str, float]:
    """Mean, median, CV, min and max of every sample read."""
    mean = statistics.fmean(values)
    return {f"mean{suffix}": round(mean, 4), f"median{suffix}": round(statistics.median(values), 4),
            "cv": round(statistics.pstdev(values) / mean, 5) if mean else 0.0,
            f"min{suffix}": round(min(values), 4), f"max{suffix}": round(max(values), 4)}


# --- warm-up and exclusions ----------------------------------------------------------------

def _first_iterations(samples: list[Sample]) -> list[int]:
    """The first iteration each sample covers (counted from 1 when the log has no numbers)."""
    if all(s.iteration is not None for s in samples):
        return [(s.iteration or 0) - s.span + 1 for s in samples]
    out, at = [], 1
    for s in samples:
        out.append(at)
        at += s.span
    return out


def warmup(samples: list[Sample], expectations: dict[str, Any], interval: int) -> tuple[int, str]:
    """How many leading samples are warm-up, and the rule that said so."""
    firsts = _first_iterations(samples)
    spanned = firsts[-1] + samples[-1].span - firsts[0]
    explicit = "warmup_steps" in expectations
    width = int(expectations["warmup_steps"]) if explicit else default_warmup(spanned)
    window = sum(1 for f in firsts if f <= width)
    first = f"the first {_plural(width, 'iteration')}"
    if window == 0:
        if firsts[0] > 1:
            return 0, f"none: the log starts at iteration {firsts[0]}" + (
                f", after {first}" if width else "")
        return 0, "none: the log is too short for a warm-up window"
    if explicit:
        return window, f"{first} (warmup_steps)"
    if len(samples) - window >= MIN_JUDGE:
        return window, f"{first} (10 or 5 % of the {spanned} the log spans, at most a quarter)"
    threshold = step_stats([s.value for s in samples], interval)["stall_threshold_ms"]
    outstanding = [i for i in range(window) if samples[i].value > threshold]
    if not outstanding:
        return 0, f"none: no sample in {first} stands out"
    keep = outstanding[-1] + 1
    if len(samples) - keep < MIN_SAMPLES:
        return 0, (f"not dropped: the first {_plural(keep, 'sample')}, through the last that "
                   f"stands out in {first}, would leave fewer than {MIN_SAMPLES}")
    return keep, (f"{_plural(keep, 'sample')}, through the last that stands out in {first} "
                  "(a short log keeps the rest of the window)")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def excluded(series: Series, start: int) -> dict[int, str]:
    """Samples (index in the series, from ``start``) whose interval holds non-training work."""
    if not series.wallclock or not series.events:
        return {}
    out = {}
    for i in range(start, len(series.samples)):
        since = series.samples[i].since
        if since is None and i == 0:
            continue
        lo = since if since is not None else series.samples[i - 1].line
        hi = series.samples[i].line
        why = next((w for n, w in series.events if lo < n < hi), None)
        if why:
            out[i] = why
    return out


# --- findings ------------------------------------------------------------------------------

def judge_stalls(source: str, st: dict[str, Any], lines: list[int], interval: int,
                 judged: bool) -> Finding:
    """Housekeeping stalls: pass, warn or fail on the judged samples; info when too few."""
    ev = [cite(source, lines, "step time")] if lines else []
    vals = {k: st[k] for k in ("tail_fraction", "stall_ms", "lost_pct", "stall_threshold_ms",
                               "median_ms", "periodicity")}
    if not judged:
        return finding(CHECK_STALLS, INFO, f"stalls not judged: {st['steps']} samples (at "
                       f"least {MIN_JUDGE} needed); {len(lines)} above the "
                       f"{st['stall_threshold_ms']:g} ms threshold", ev, **vals)
    if not lines:
        return finding(CHECK_STALLS, PASS, f"no stalls: no step above "
                       f"{st['stall_threshold_ms']:g} ms (median {st['median_ms']:g} ms)", **vals)
    period = st["periodicity"]
    periodic = period["periodic"]
    unit = "steps" if interval == 1 else f"{interval}-iteration intervals"
    text = (f"{st['tail_fraction']:.1%} of {unit} stall by ~{st['stall_ms']:g} ms over the "
            f"{st['median_ms']:g} ms median ({st['lost_pct']:g} % of run time)")
    text += f", every ~{period['period_steps']} iterations" if periodic else ""
    if st["tail_fraction"] > WIDESPREAD:
        return finding(CHECK_STALLS, WARN, text + "; too many for housekeeping alone", ev,
                       **vals)
    heavy = st["lost_pct"] >= LOST_FAIL_PCT or (periodic and st["tail_fraction"] >= 0.01)
    return finding(CHECK_STALLS, FAIL if heavy else WARN, text, ev, **vals)


def judge_shape(source: str, st: dict[str, Any], judged: list[Sample],
                shift: dict[str, Any] | None) -> Finding:
    """Stability: a level shift, bimodality, else the CV (info when too few to judge)."""
    cl = st["clusters"]
    ev = [cite(source, [s.line for s in judged], "step time")]
    vals = {"cv": st["cv"], "clusters": cl, "shift": shift}
    if shift:
        at = judged[shift["at"]]
        where = f"iteration {at.iteration}" if at.iteration is not None else f"line {at.line}"
        return finding(CHECK_SHAPE, WARN, f"level shift: step time {shift['before_ms']:g} ms -> "
                       f"{shift['after_ms']:g} ms ({shift['gap_pct']:+g} %) from {where}", ev,
                       bimodal=False, **vals)
    if cl and cl["bimodal"]:
        return finding(CHECK_SHAPE, WARN, f"bimodal step time: {cl['low_ms']:g} ms and "
                       f"{cl['high_ms']:g} ms ({cl['high_fraction']:.0%} of steps)"
                       f"{_accumulation(judged, cl)}", ev, bimodal=True, **vals)
    text = f"step time CV {st['cv']:.1%}, p99 {st['p99_ms']:g} ms vs median {st['median_ms']:g} ms"
    if st["steps"] < MIN_JUDGE:
        return finding(CHECK_SHAPE, INFO, f"{text}; {st['steps']} samples: too few to judge "
                       f"bimodality (at least {MIN_JUDGE} needed)", ev, bimodal=False, **vals)
    status = WARN if st["cv"] > 0.10 else PASS
    return finding(CHECK_SHAPE, status, text, ev, bimodal=False, **vals)


def _accumulation(judged: list[Sample], cl: dict[str, Any]) -> str:
    """A note when the slow mode is exactly the iterations the log marks as optimizer steps."""
    marked = {i for i, s in enumerate(judged) if s.tag == "optimizer.step"}
    slow = {i for i, s in enumerate(judged) if s.value >= cl["cut_ms"]}
    if not marked or len(marked & slow) < 0.9 * max(len(marked), len(slow)):
        return ""
    return "; the slow mode is the iterations that end an optimizer step (gradient accumulation)"


# --- reports -------------------------------------------------------------------------------

class StepReader:
    """A step-time log read as a stream (:class:`~.base.LineReader`): it keeps the lines a
    family could use (:func:`~.steplog_formats.wanted`), the two after a Megatron record that
    may wrap, and the first other written line (a column of numbers is one only without it);
    the series are read from those when the report is asked for. What it holds grows with the
    steps logged, not with the other lines."""

    def __init__(self, source: str, expectations: dict[str, Any]) -> None:
        self.source, self.expectations = source, expectations
        self.lines: list[Line] = []
        self._follow = 0
        self._other = False

    def feed(self, n: int, line: str, source: str | None, raw: str) -> None:
        if wanted(line, raw):
            self._follow = 2 if wraps(line) else max(self._follow - 1, 0)
        elif self._follow:
            self._follow -= 1
        elif self._other or not line.strip() or line.lstrip().startswith("#"):
            return
        else:
            self._other = True
        self.lines.append(Line(n, line, raw, source))

    def report(self, files: tuple[tuple[str, int], ...]) -> Report:
        return report_of(self.lines, self.source, self.expectations, files)


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    """The step-time report of a whole log (:class:`StepReader` fed every line)."""
    return read_all(StepReader(source, expectations), text)


def report_of(lines: list[Line], source: str, expectations: dict[str, Any],
              files: tuple[tuple[str, int], ...] = ()) -> Report:
    """The step-time report of a log's ``lines`` (those a family can use, in order);
    ``DiagnoseError`` (one line) when it cannot be made."""
    try:
        series = read_lines(lines)
    except NoTiming as exc:
        raise DiagnoseError(f"{source}: {exc}") from None
    n = len(series.samples)
    head = {"format": series.fmt, "unit": series.unit, "timing": series.timing,
            "sample_is": series.sample_is, "samples": n,
            "log_interval": int(statistics.median(s.span for s in series.samples))}
    if series.notes:
        head["notes"] = list(series.notes)
    if n < MIN_SAMPLES:
        report = _short_report(series, source, head)
    elif series.rate:
        report = _rate_report(series, source, head)
    else:
        report = _time_report(series, source, head, expectations)
    ranks = slow_ranks.judge(source, slow_ranks.rank_series(lines), files)
    return replace(report, findings=[*report.findings, ranks]) if ranks else report


def _short_report(series: Series, source: str, head: dict[str, Any]) -> Report:
    """One or two samples: shown as they are; nothing about a distribution is judged."""
    unit = "ms" if not series.rate else series.unit
    shown = [f"{s.value:g} {unit}" + _per_iteration(s.value, series.unit)
             + (f" (iteration {s.iteration})" if s.iteration is not None else f" (line {s.line})")
             for s in series.samples]
    n = len(series.samples)
    ev = [cite(source, [s.line for s in series.samples], series.unit)]
    why = (f"{_plural(n, 'rate value' if series.rate else 'timed step')} in the log: no "
           f"distribution can be judged (at least {MIN_SAMPLES} needed)")
    steps = [{"iteration": s.iteration, "line": s.line, "value": s.value, "span": s.span}
             for s in series.samples]
    summary = {**head, "judged": False, "steps": steps,
               "read": describe([s.value for s in series.samples],
                                "_ms" if not series.rate else "")}
    return Report(source, KIND, summary, [
        finding(CHECK_STALLS, INFO, f"stalls not judged: {why}", ev),
        finding(CHECK_SHAPE, INFO, f"{series.sample_is}: {', '.join(shown)}; {why}", ev)])


def _time_report(series: Series, source: str, head: dict[str, Any],
                 expectations: dict[str, Any]) -> Report:
    """Warm-up, exclusions, statistics and findings of a series of times."""
    interval = head["log_interval"]
    warm, rule = warmup(series.samples, expectations, interval)
    if len(series.samples) - warm < MIN_SAMPLES:
        raise DiagnoseError(f"{source}: step-time log with {len(series.samples) - warm} steps "
                            f"after warm-up ({rule}; at least {MIN_SAMPLES} needed)")
    out = excluded(series, warm)
    if len(series.samples) - warm - len(out) < MIN_SAMPLES:
        out = {}
    kept = [(i, s) for i, s in enumerate(series.samples) if i >= warm and i not in out]
    judged = [s for _, s in kept]
    st = step_stats([s.value for s in judged], interval)
    spikes = [kept[i] for i in st.pop("spike_positions")]
    if st["periodicity"]["period_steps"]:
        st["periodicity"]["period_steps"] *= interval
    shift = level_shift([s.value for s in judged])
    summary = {**head, "read": describe([s.value for s in series.samples]), "warmup": warm,
               "warmup_rule": rule,
               "excluded": [{"iteration": series.samples[i].iteration,
                             "line": series.samples[i].line, "why": why}
                            for i, why in out.items()],
               **st, "shift": shift,
               "spike_steps": [s.iteration if s.iteration is not None else i + 1
                               for i, s in spikes]}
    stalls = judge_stalls(source, st, [s.line for _, s in spikes], interval,
                          len(judged) >= MIN_JUDGE)
    if out:
        left = ", ".join(f"{why} in the interval to iteration {series.samples[i].iteration}"
                         if series.samples[i].iteration is not None else
                         f"{why} in the interval to line {series.samples[i].line}"
                         for i, why in out.items())
        stalls = replace(stalls, message=f"{stalls.message}; {_plural(len(out), 'sample')} "
                         f"left out, not stalls: {left}")
    return Report(source, KIND, summary, [stalls, judge_shape(source, st, judged, shift)])


def _per_iteration(value: float, unit: str) -> str:
    """`` = 218 ms per iteration`` for a tqdm rate; empty for anything else."""
    if unit == "it/s" and value > 0:
        return f" = {1000.0 / value:.4g} ms per iteration"
    return f" = {1000.0 * value:.4g} ms per iteration" if unit == "s/it" else ""


def _rate_report(series: Series, source: str, head: dict[str, Any]) -> Report:
    """A rate series described (mean, CV, trend); never judged as step times."""
    values = [s.value for s in series.samples]
    read = describe(values, "")
    if series.unit in ("it/s", "s/it"):
        per_it = [1000.0 / v if series.unit == "it/s" else 1000.0 * v for v in values if v]
        if per_it:
            read.update({k if k != "cv" else "cv_ms": v for k, v in describe(per_it).items()})
    trend = _trend(values)
    ev = [cite(source, [s.line for s in series.samples], series.unit)]
    what = f"{series.sample_is} ({len(values)} values)"
    stalls = finding(CHECK_STALLS, INFO, f"stalls not judged: the log gives {what}", ev)
    text = (f"{series.unit} mean {read['mean']:.4g}, CV {read['cv']:.1%}; not judged for "
            "bimodality: not step times")
    if trend:
        text += (f"; it {trend} over all {len(values)} samples ({values[0]:g} -> "
                 f"{values[-1]:g} {series.unit})")
        faster = (trend == "rises") == (series.unit != "s/it")
        if series.smoothed and faster:
            text += ": a smoothed average still leaving the slow first steps"
    shape = finding(CHECK_SHAPE, INFO, text, ev, trend=trend, cv=read["cv"])
    return Report(source, KIND, {**head, "read": read, "trend": trend}, [stalls, shape])


def _trend(values: list[float]) -> str | None:
    """``rises`` or ``falls`` when every step of the series does, else ``None``."""
    pairs = list(zip(values, values[1:], strict=False))
    if len(values) < MIN_SAMPLES:
        return None
    if all(b > a for a, b in pairs):
        return "rises"
    return "falls" if all(b < a for a, b in pairs) else None


ANALYZER = Analyzer(KIND, sniff, analyze, StepReader)
