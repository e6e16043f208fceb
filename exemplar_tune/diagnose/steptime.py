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

import copy
import math
import statistics
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

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
from exemplar_tune.diagnose.steplog import Line, NoTiming, Samples, Series
from exemplar_tune.diagnose.steplog_formats import (
    StepLines,
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
MAX_SPIKES_SHOWN = 64  # stall iterations listed in the summary (all count)
BLOCK = 1 << 16  # splits scored at once (:func:`best_split`)


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


def _floats(values: Any) -> np.ndarray:
    """Values as a float array (a view of an ``array('d')`` or an array, no copy)."""
    return np.asarray(values, dtype=np.float64)


def _exact(values: np.ndarray) -> memoryview:
    """The values as Python floats for :mod:`statistics`' and ``math.fsum``'s exact sums,
    read in place."""
    return memoryview(np.ascontiguousarray(values, dtype=np.float64))


def _mean(values: np.ndarray) -> float:
    """The correctly rounded mean (``statistics.fmean``)."""
    return math.fsum(_exact(values)) / len(values)


def _middle(ordered: np.ndarray) -> float:
    """The median of sorted values (``statistics.median``), without a copy."""
    half = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[half])
    return float((ordered[half - 1] + ordered[half]) / 2)


def percentile(ordered: Any, q: float) -> float:
    """Linear-interpolated percentile ``q`` (0-100) of sorted values."""
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))


def separation(low: Any, high: Any, median: float) -> dict[str, float]:
    """Means of two groups, Ashman's D and the gap relative to ``median``."""
    low, high = _exact(_floats(low)), _exact(_floats(high))
    spread = math.sqrt(statistics.pvariance(low) + statistics.pvariance(high)) or 1e-9
    gap = statistics.fmean(high) - statistics.fmean(low)
    return {"ashman_d": round(math.sqrt(2) * abs(gap) / spread, 2),
            "gap_pct": round(100.0 * gap / median, 2) if median else 0.0}


def best_split(values: np.ndarray, first: int, end: int, last: bool = False) -> int:
    """The ``k`` in ``[first, end)`` that best splits ``values`` into ``values[:k]`` and
    ``values[k:]``: the largest ``k (n - k) (mean before - mean after)^2`` (Otsu's
    between-group variance, times ``n^2``); of equal ones the first, or the ``last``. Scored
    :data:`BLOCK` splits at a time, so it holds a few arrays of that size beside the sums."""
    n = len(values)
    sums = np.cumsum(values)
    total = sums[-1]
    best_k, best = first, -1.0
    for start in range(first, end, BLOCK):
        k = np.arange(start, min(start + BLOCK, end))
        left = sums[k - 1]
        score = k * (n - k) * (left / k - (total - left) / (n - k)) ** 2
        j = len(score) - 1 - int(np.argmax(score[::-1])) if last else int(np.argmax(score))
        if score[j] > best or (last and score[j] == best):
            best_k, best = start + j, float(score[j])
    return best_k


def two_clusters(values: Any) -> dict[str, Any]:
    """Best two-group split of the values (Otsu), and whether it meets the bimodality rule;
    of equally good splits, the highest."""
    xs = _floats(values)
    if not (xs[1:] >= xs[:-1]).all():  # sorted already when step_stats asks
        xs = np.sort(xs)
    n = len(xs)
    cut = best_split(xs, 1, n, last=True)
    low, high = xs[:cut], xs[cut:]
    sep = separation(low, high, _middle(xs))
    share = len(high) / n
    bimodal = (n >= MIN_JUDGE and MODE_SHARE <= share <= 1 - MODE_SHARE
               and sep["ashman_d"] >= ASHMAN_D and sep["gap_pct"] >= 100 * MIN_GAP)
    return {"low_ms": round(_mean(low), 2), "high_ms": round(_mean(high), 2),
            "cut_ms": round(float(high[0]), 3), "high_fraction": round(share, 4), **sep,
            "bimodal": bimodal}


def level_shift(values: Any, median: float | None = None) -> dict[str, Any] | None:
    """The best before/after split of the series when it meets the level-shift rule; of
    equally good splits, the earliest. ``median``: the values', when it is known."""
    values = _floats(values)
    n = len(values)
    if n < SHIFT_MIN:
        return None
    best = best_split(values, 2, n - 1)
    before, after = values[:best], values[best:]
    sep = separation(before, after, float(np.median(values)) if median is None else median)
    if sep["ashman_d"] < ASHMAN_D or abs(sep["gap_pct"]) < 100 * MIN_GAP:
        return None
    return {"at": best, "before_ms": round(_mean(before), 2),
            "after_ms": round(_mean(after), 2), **sep}


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


def step_stats(ms: Any, log_interval: int = 1) -> dict[str, Any]:
    """Distribution of the kept steps, the stall threshold and the stalls above it
    (``spike_positions``: their indices in ``ms``; ``median``: not rounded)."""
    ms = _floats(ms)
    ordered = np.sort(ms)
    med = _middle(ordered)
    deviation = ordered - med
    mad = float(np.median(np.abs(deviation, out=deviation), overwrite_input=True))
    del deviation
    threshold = med + max(STALL_MIN_MS / log_interval, STALL_MAD * mad)
    spikes = np.flatnonzero(ms > threshold)
    excess = ms[spikes] - med
    total = math.fsum(_exact(ordered))
    mean = total / len(ms)
    return {
        "steps": len(ms), "mean_ms": round(mean, 3), "median_ms": round(med, 3),
        "p95_ms": round(percentile(ordered, 95), 2), "p99_ms": round(percentile(ordered, 99), 2),
        "cv": round(statistics.pstdev(_exact(ordered)) / mean, 4) if mean else 0.0,
        "mad_ms": round(mad, 3), "stall_threshold_ms": round(threshold, 2),
        "tail_fraction": round(len(spikes) / len(ms), 4),
        "stall_ms": round(float(np.median(excess)), 2) if len(excess) else 0.0,
        "lost_pct": round(100.0 * math.fsum(_exact(excess)) / total, 2) if total else 0.0,
        "spike_positions": spikes, "median": med,
        "clusters": two_clusters(ordered) if len(ms) > 2 else None,
        "periodicity": periodicity(spikes.tolist()),
    }


def describe(values: Any, suffix: str = "_ms") -> dict[str, float]:
    """Mean, median, CV, min and max of every sample read."""
    values = _floats(values)
    mean = _mean(values)
    return {f"mean{suffix}": round(mean, 4),
            f"median{suffix}": round(float(np.median(values)), 4),
            "cv": round(statistics.pstdev(_exact(values)) / mean, 5) if mean else 0.0,
            f"min{suffix}": round(float(values.min()), 4),
            f"max{suffix}": round(float(values.max()), 4)}


# --- warm-up and exclusions ----------------------------------------------------------------

def _first_iterations(samples: Samples) -> np.ndarray:
    """The first iteration each sample covers (counted from 1 when the log has no numbers)."""
    iterations = np.frombuffer(samples.iterations, dtype=np.int64)
    spans = np.frombuffer(samples.spans, dtype=np.int64)
    if (iterations >= 0).all():
        return iterations - spans + 1
    return np.concatenate(([1], 1 + np.cumsum(spans)[:-1]))


def warmup(samples: Samples, expectations: dict[str, Any], interval: int) -> tuple[int, str]:
    """How many leading samples are warm-up, and the rule that said so."""
    firsts = _first_iterations(samples)
    start = int(firsts[0])
    spanned = int(firsts[-1]) + samples.spans[-1] - start
    explicit = "warmup_steps" in expectations
    width = int(expectations["warmup_steps"]) if explicit else default_warmup(spanned)
    window = int((firsts <= width).sum())
    first = f"the first {_plural(width, 'iteration')}"
    if window == 0:
        if start > 1:
            return 0, f"none: the log starts at iteration {start}" + (
                f", after {first}" if width else "")
        return 0, "none: the log is too short for a warm-up window"
    if explicit:
        return window, f"{first} (warmup_steps)"
    if len(samples) - window >= MIN_JUDGE:
        return window, f"{first} (10 or 5 % of the {spanned} the log spans, at most a quarter)"
    values = _floats(samples.values)
    threshold = step_stats(values, interval)["stall_threshold_ms"]
    outstanding = np.flatnonzero(values[:window] > threshold)
    if not len(outstanding):
        return 0, f"none: no sample in {first} stands out"
    keep = int(outstanding[-1]) + 1
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
    samples = series.samples
    lines = np.frombuffer(samples.lines, dtype=np.int64)
    sinces = np.frombuffer(samples.sinces, dtype=np.int64)
    before = np.concatenate(([-1], lines[:-1]))
    lo = np.where(sinces >= 0, sinces, before)[start:]
    hi = lines[start:]
    at = np.array([n for n, _ in series.events], dtype=np.int64)
    first = np.searchsorted(at, lo, side="right")  # the first event after each interval's start
    inside = (first < len(at)) & (at[np.minimum(first, len(at) - 1)] < hi)
    if start == 0 and sinces[0] < 0:
        inside[0] = False  # the first sample's interval starts nowhere
    return {start + int(i): series.events[int(first[i])][1] for i in np.flatnonzero(inside)}


# --- findings ------------------------------------------------------------------------------

def judge_stalls(source: str, st: dict[str, Any], lines: np.ndarray, interval: int,
                 judged: bool) -> Finding:
    """Housekeeping stalls: pass, warn or fail on the judged samples; info when too few."""
    ev = [cite(source, lines, "step time")] if len(lines) else []
    vals = {k: st[k] for k in ("tail_fraction", "stall_ms", "lost_pct", "stall_threshold_ms",
                               "median_ms", "periodicity")}
    if not judged:
        return finding(CHECK_STALLS, INFO, f"stalls not judged: {st['steps']} samples (at "
                       f"least {MIN_JUDGE} needed); {len(lines)} above the "
                       f"{st['stall_threshold_ms']:g} ms threshold", ev, **vals)
    if not len(lines):
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


def judge_shape(source: str, st: dict[str, Any], samples: Samples, judged: np.ndarray,
                shift: dict[str, Any] | None) -> Finding:
    """Stability: a level shift, bimodality, else the CV (info when too few to judge);
    ``judged``: the indices of the judged samples."""
    cl = st["clusters"]
    ev = [cite(source, np.frombuffer(samples.lines, dtype=np.int64)[judged], "step time")]
    vals = {"cv": st["cv"], "clusters": cl, "shift": shift}
    if shift:
        at = samples[int(judged[shift["at"]])]
        where = f"iteration {at.iteration}" if at.iteration is not None else f"line {at.line}"
        return finding(CHECK_SHAPE, WARN, f"level shift: step time {shift['before_ms']:g} ms -> "
                       f"{shift['after_ms']:g} ms ({shift['gap_pct']:+g} %) from {where}", ev,
                       bimodal=False, **vals)
    if cl and cl["bimodal"]:
        return finding(CHECK_SHAPE, WARN, f"bimodal step time: {cl['low_ms']:g} ms and "
                       f"{cl['high_ms']:g} ms ({cl['high_fraction']:.0%} of steps)"
                       f"{_accumulation(samples, judged, cl)}", ev, bimodal=True, **vals)
    text = f"step time CV {st['cv']:.1%}, p99 {st['p99_ms']:g} ms vs median {st['median_ms']:g} ms"
    if st["steps"] < MIN_JUDGE:
        return finding(CHECK_SHAPE, INFO, f"{text}; {st['steps']} samples: too few to judge "
                       f"bimodality (at least {MIN_JUDGE} needed)", ev, bimodal=False, **vals)
    status = WARN if st["cv"] > 0.10 else PASS
    return finding(CHECK_SHAPE, status, text, ev, bimodal=False, **vals)


def _accumulation(samples: Samples, judged: np.ndarray, cl: dict[str, Any]) -> str:
    """A note when the slow mode is exactly the iterations the log marks as optimizer steps."""
    if "optimizer.step" not in samples.tags:
        return ""
    marked = np.array([samples.tags[i] == "optimizer.step" for i in judged], dtype=bool)
    slow = _floats(samples.values)[judged] >= cl["cut_ms"]
    both, most = int((marked & slow).sum()), max(int(marked.sum()), int(slow.sum()))
    if not marked.any() or both < 0.9 * most:
        return ""
    return "; the slow mode is the iterations that end an optimizer step (gradient accumulation)"


# --- reports -------------------------------------------------------------------------------

class StepReader:
    """A step-time log read as a stream (:class:`~.base.LineReader`): every family reads the
    lines it could use (:func:`~.steplog_formats.wanted`), the two after a Megatron record
    that may wrap, and the first other written line (a column of numbers is one only without
    it), once for the whole log and once for the line's own source (:class:`~.slow_ranks.
    RankLines`). What it holds grows with the steps logged, not with the lines."""

    def __init__(self, source: str, expectations: dict[str, Any]) -> None:
        self.source, self.expectations = source, expectations
        self.log = StepLines()
        self.ranks: slow_ranks.RankLines | RankPart = slow_ranks.RankLines(self.log)
        self._follow = 0
        self._other = False
        self._met: bool | None = None  # a later chunk: whether it met a line of anything else
        self._opening: list[tuple[bool, bool]] | None = None  # a later chunk's first lines
        self._part: RankPart | None = None  # the ranks read apart, while lines are fed here

    def feed(self, n: int, line: str, source: str | None, raw: str) -> None:
        if self._opening is not None and len(self._opening) < 2:
            self._opening.append((wanted(line, raw), wraps(line)))
        if wanted(line, raw):
            self._follow = 2 if wraps(line) else max(self._follow - 1, 0)
        elif self._follow:
            self._follow -= 1
        elif self._other or not line.strip() or line.lstrip().startswith("#"):
            if self._met is False and self._other and line.strip() and \
                    not line.lstrip().startswith("#"):
                self._met = True  # the first other line of the job, unless one came before
            return
        else:
            self._other = True
        kept = Line(n, line, raw, source)
        self.ranks.feed(kept)  # first: it may copy the whole log's reading so far
        self.log.feed(kept)

    # a job read in chunks (:class:`~.base.ChunkReader`). A later chunk assumes that a line
    # of anything else came before it (as in every real log) and notes whether it met one;
    # each chunk's ranks are read into their series where the chunk was read (:class:`RankPart`)
    def later(self) -> None:
        self._other, self._met, self._opening = True, False, []
        self.log.later()

    def seal(self) -> None:
        """Each rank's series read (:class:`RankPart`), folded into the ranks before."""
        if isinstance(self.ranks, RankPart):
            return
        part = RankPart.of(self.ranks)
        if self._part is not None:
            self._part.merge(part, 0)
            part, self._part = self._part, None
        self.ranks = part

    def reopen(self) -> None:
        """Lines are fed here again: a chunk's ranks read apart from those before."""
        assert isinstance(self.ranks, RankPart)
        self._part = self.ranks
        self.ranks = slow_ranks.RankLines(self.log)
        self.ranks.whole = None  # sources seen before: every source is read on its own

    def fits(self, other: StepReader) -> str | None:
        if self._follow and _diverges(self._follow, other._opening or []):
            return "the lines after a Megatron record at the chunk's end are read with it"
        if (why := self.log.carried()) is not None:
            return why
        if not self._other and other._met:
            return "no line of anything else came before the chunk's first one"
        assert isinstance(self.ranks, RankPart) and isinstance(other.ranks, RankPart)
        if set(self.ranks.seen) & set(other.ranks.seen):
            return "a source logs in two chunks"
        return None

    def merge(self, other: StepReader, line_offset: int) -> None:
        assert isinstance(self.ranks, RankPart) and isinstance(other.ranks, RankPart)
        self.log.merge(other.log, line_offset)
        self.ranks.merge(other.ranks, line_offset)
        self._follow = other._follow
        self._other = self._other or bool(other._met)

    def report(self, files: tuple[tuple[str, int], ...]) -> Report:
        """The step-time report; ``DiagnoseError`` (one line) when it cannot be made."""
        try:
            series = self.log.series()
        except NoTiming as exc:
            raise DiagnoseError(f"{self.source}: {exc}") from None
        times = self.ranks.times()
        self.log = StepLines()  # its records are read into the series: let them go
        report = report_of(series, self.source, self.expectations)
        ranks = slow_ranks.judge(self.source, times, files)
        return replace(report, findings=[*report.findings, ranks]) if ranks else report


def _diverges(follow: int, opening: list[tuple[bool, bool]]) -> bool:
    """Whether a chunk's first lines (``opening``: wanted, wraps) are fed otherwise when the
    lines before leave ``follow`` lines to feed after a Megatron record than when none."""
    before, alone = follow, 0
    for is_wanted, wrapping in opening:
        if before == alone:
            return False
        if not is_wanted:  # fed after the record, not alone
            return True
        before = 2 if wrapping else max(before - 1, 0)
        alone = 2 if wrapping else max(alone - 1, 0)
    return before != alone


class RankPart:
    """The ranks of a chunk of a job, read: the sources in the order they first logged (at
    most :data:`~.slow_ranks.MAX_RANKS`), and the series of step times of those that have one
    (rates and unreadable sources left out), as :meth:`~.slow_ranks.RankLines.times` reads
    them. Parts of a job's chunks fold in order (:meth:`merge`); :meth:`times` is then what
    reading the chunks' lines in one :class:`~.slow_ranks.RankLines` gives."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.samples: dict[str, Samples] = {}

    @classmethod
    def of(cls, lines: slow_ranks.RankLines) -> RankPart:
        """Each source's series, read from its lines; the whole reading is the one source's
        while every line came from it."""
        ranks = lines.ranks
        if lines.whole is not None and lines.solo is not None:
            ranks = {lines.solo: copy.deepcopy(lines.whole)}
        part = cls()
        part.seen = list(ranks)
        for source, log in ranks.items():
            try:
                series = log.series()
            except NoTiming:
                continue
            if not series.rate and series.samples:
                part.samples[source] = series.samples
        return part

    def merge(self, other: RankPart, line_offset: int) -> None:
        """Fold the part of the next chunk (its lines numbered from 1 there, ``line_offset``
        on here): its sources after these, as many as :data:`~.slow_ranks.MAX_RANKS` leaves."""
        for source in other.seen[:max(0, slow_ranks.MAX_RANKS - len(self.seen))]:
            self.seen.append(source)
            if (samples := other.samples.get(source)) is not None:
                samples.shift(line_offset)
                self.samples[source] = samples

    def times(self) -> slow_ranks.RankTimes:
        """Every rank's step times in rank order (:class:`~.slow_ranks.RankTimes`); none for
        one source: nothing to compare."""
        out = slow_ranks.RankTimes()
        if len(self.seen) < 2:
            return out
        for source in sorted(self.samples):
            out.add(source, self.samples.pop(source))
        return out


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    """The step-time report of a whole log (:class:`StepReader` fed every line)."""
    return read_all(StepReader(source, expectations), text)


def report_of(series: Series, source: str, expectations: dict[str, Any]) -> Report:
    """The step-time report of one series; ``DiagnoseError`` (one line) when it cannot be
    made."""
    n = len(series.samples)
    head = {"format": series.fmt, "unit": series.unit, "timing": series.timing,
            "sample_is": series.sample_is, "samples": n,
            "log_interval": int(np.median(np.frombuffer(series.samples.spans, dtype=np.int64)))}
    if series.notes:
        head["notes"] = list(series.notes)
    if n < MIN_SAMPLES:
        return _short_report(series, source, head)
    if series.rate:
        return _rate_report(series, source, head)
    return _time_report(series, source, head, expectations)


def _short_report(series: Series, source: str, head: dict[str, Any]) -> Report:
    """One or two samples: shown as they are; nothing about a distribution is judged."""
    unit = "ms" if not series.rate else series.unit
    shown = [f"{s.value:g} {unit}" + _per_iteration(s.value, series.unit)
             + (f" (iteration {s.iteration})" if s.iteration is not None else f" (line {s.line})")
             for s in series.samples]
    n = len(series.samples)
    ev = [cite(source, series.samples.lines, series.unit)]
    why = (f"{_plural(n, 'rate value' if series.rate else 'timed step')} in the log: no "
           f"distribution can be judged (at least {MIN_SAMPLES} needed)")
    steps = [{"iteration": s.iteration, "line": s.line, "value": s.value, "span": s.span}
             for s in series.samples]
    summary = {**head, "judged": False, "steps": steps,
               "read": describe(series.samples.values, "_ms" if not series.rate else "")}
    return Report(source, KIND, summary, [
        finding(CHECK_STALLS, INFO, f"stalls not judged: {why}", ev),
        finding(CHECK_SHAPE, INFO, f"{series.sample_is}: {', '.join(shown)}; {why}", ev)])


def _time_report(series: Series, source: str, head: dict[str, Any],
                 expectations: dict[str, Any]) -> Report:
    """Warm-up, exclusions, statistics and findings of a series of times."""
    samples, interval = series.samples, head["log_interval"]
    n = len(samples)
    warm, rule = warmup(samples, expectations, interval)
    if n - warm < MIN_SAMPLES:
        raise DiagnoseError(f"{source}: step-time log with {n - warm} steps "
                            f"after warm-up ({rule}; at least {MIN_SAMPLES} needed)")
    out = excluded(series, warm)
    if n - warm - len(out) < MIN_SAMPLES:
        out = {}
    judged = np.arange(warm, n)
    if out:
        judged = judged[~np.isin(judged, list(out))]
    values = _floats(samples.values)
    values = values[judged] if out else values[warm:]
    st = step_stats(values, interval)
    spikes = judged[st.pop("spike_positions")]
    if st["periodicity"]["period_steps"]:
        st["periodicity"]["period_steps"] *= interval
    shift = level_shift(values, st.pop("median"))
    iterations = np.frombuffer(samples.iterations, dtype=np.int64)
    summary = {**head, "read": describe(samples.values), "warmup": warm, "warmup_rule": rule,
               "excluded": [{"iteration": samples[i].iteration, "line": samples[i].line,
                             "why": why} for i, why in out.items()],
               **st, "shift": shift,
               "spike_steps": [int(iterations[i]) if iterations[i] >= 0 else int(i) + 1
                               for i in spikes[:MAX_SPIKES_SHOWN]]}
    if len(spikes) > MAX_SPIKES_SHOWN:
        summary["spike_steps_shown"] = f"the first {MAX_SPIKES_SHOWN} of {len(spikes)}"
    stalls = judge_stalls(source, st, np.frombuffer(samples.lines, dtype=np.int64)[spikes],
                          interval, len(judged) >= MIN_JUDGE)
    if out:
        left = ", ".join(f"{why} in the interval to iteration {samples[i].iteration}"
                         if samples[i].iteration is not None else
                         f"{why} in the interval to line {samples[i].line}"
                         for i, why in out.items())
        stalls = replace(stalls, message=f"{stalls.message}; {_plural(len(out), 'sample')} "
                         f"left out, not stalls: {left}")
    return Report(source, KIND, summary, [stalls, judge_shape(source, st, samples, judged,
                                                              shift)])


def _per_iteration(value: float, unit: str) -> str:
    """`` = 218 ms per iteration`` for a tqdm rate; empty for anything else."""
    if unit == "it/s" and value > 0:
        return f" = {1000.0 / value:.4g} ms per iteration"
    return f" = {1000.0 * value:.4g} ms per iteration" if unit == "s/it" else ""


def _rate_report(series: Series, source: str, head: dict[str, Any]) -> Report:
    """A rate series described (mean, CV, trend); never judged as step times."""
    values = _floats(series.samples.values)
    read = describe(values, "")
    if series.unit in ("it/s", "s/it"):
        rated = values[values != 0]
        per_it = 1000.0 / rated if series.unit == "it/s" else 1000.0 * rated
        if len(per_it):
            read.update({k if k != "cv" else "cv_ms": v for k, v in describe(per_it).items()})
    trend = _trend(values)
    ev = [cite(source, series.samples.lines, series.unit)]
    what = f"{series.sample_is} ({len(values)} values)"
    stalls = finding(CHECK_STALLS, INFO, f"stalls not judged: the log gives {what}", ev)
    text = (f"{series.unit} mean {read['mean']:.4g}, CV {read['cv']:.1%}; not judged for "
            "bimodality: not step times")
    if trend:
        text += (f"; it {trend} over all {len(values)} samples ({float(values[0]):g} -> "
                 f"{float(values[-1]):g} {series.unit})")
        faster = (trend == "rises") == (series.unit != "s/it")
        if series.smoothed and faster:
            text += ": a smoothed average still leaving the slow first steps"
    shape = finding(CHECK_SHAPE, INFO, text, ev, trend=trend, cv=read["cv"])
    return Report(source, KIND, {**head, "read": read, "trend": trend}, [stalls, shape])


def _trend(values: np.ndarray) -> str | None:
    """``rises`` or ``falls`` when every step of the series does, else ``None``."""
    if len(values) < MIN_SAMPLES:
        return None
    steps = np.diff(values)
    if (steps > 0).all():
        return "rises"
    return "falls" if (steps < 0).all() else None


ANALYZER = Analyzer(KIND, sniff, analyze, StepReader, label="step-time log")
