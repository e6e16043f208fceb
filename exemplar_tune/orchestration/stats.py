"""Keep-or-restore decision for one tuning layer: the statistical contract of the tuning loop.

The loop is *baseline benchmark -> apply one layer -> re-benchmark -> keep or roll back*. This
module decides "keep", "restore" or "continue" (collect another A/B pair of runs). Standard
library only (``statistics``, ``math``); the Student t quantile is computed here.

The rule (criterion.rs noise band + confidence interval, pyperf ``compare_to``)
------------------------------------------------------------------------------
1. **Unit.** The independent unit is a benchmark *run*. A run yields one value per workload
   shape (e.g. the median step time of that run, or busbw). Steps inside a run are summarised
   by their median (:func:`run_value`) and never pooled across runs as if independent; the only
   place steps are pooled is the tail test of rule 6, which says so.
2. **Effect.** ``r = (mean_B - mean_A) / mean_A`` (A = baseline, B = candidate), signed so that
   "good" is positive: for lower-is-better metrics (step time) the sign is flipped.
3. **Interval.** Welch's t on the two run samples with the delta method for the ratio:
   ``se^2 = s_B^2/(n_B mean_A^2) + mean_B^2 s_A^2/(n_A mean_A^4)``, Welch-Satterthwaite degrees
   of freedom from the same two terms, ``CI = r +- t_{1-alpha/2, df} * se``.
4. **Verdict of one shape** (``m = min_effect``, default 0; the CI at ``confidence``,
   default 90 %: each bound a one-sided 95 % bound, as in two one-sided tests):
   ``better`` if the whole CI lies above ``+m``; ``worse`` if it lies below ``-m``;
   ``equivalent`` if it lies inside ``(-m, +m)``; ``no_benefit`` if it lies below ``+m`` but
   reaches below ``-m`` (a futility stop: whatever the truth, it is not a ``+m`` gain);
   ``inconclusive`` otherwise.
5. **Several shapes** (:func:`decide_shapes`): restore if any shape is ``worse``; keep if at
   least one is ``better`` (and none worse) -- an inconclusive shape blocks nothing; restore
   ("no benefit") if every shape is ``equivalent``/``no_benefit``; otherwise continue.
6. **Tail credit** (lower-is-better step times only, when the steps of every run are given):
   a shape that is not ``worse`` and whose point estimate is not below ``-m`` also counts as
   ``better`` when its tail fraction (steps > p50 + max(50 ms, 5 MAD), see :func:`tail_stats`)
   drops significantly: a one-sided two-proportion z-test on the tail steps pooled over the runs
   of each arm at the look's level of rule 7 for :data:`TAIL_SHARE` of the keep error, and the
   candidate keeps at most half the baseline tail. Pooling steps treats stalls as independent
   across steps; that is the documented simplification (a stall that sticks to one run would
   overstate the evidence).
7. **Sequential** (:class:`SequentialTest`): runs interleave A B B A (:meth:`next_arm`); the
   first look is at ``min_runs`` pairs (default 2: one A B B A block, in which linear drift
   cancels), then one look after every further pair up to ``max_runs`` (default 10).

   * A keep needs two things at the same look: the shape is ``better`` (rule 4), and its gain
     is clear of zero at the look's group-sequential boundary (:mod:`.boundary`):
     the one-sided keep error ``(1 - confidence) / 2`` (5 %) is spent over the looks by an
     O'Brien-Fleming-type Lan-DeMets function at information fraction ``runs / max_runs``,
     so the first looks are strict (nominal 0.001 % at 2 of 10 runs) and the last is close to
     a fixed-sample test (nominal 2.9 % at 10 of 10), and the chance that a shape with no gain
     is ever kept stays at 5 % however many looks are taken. Where the tail test of rule 6
     applies it takes :data:`TAIL_SHARE` (a fifth) of that error and the median test the
     rest, so median and tail together stay within 5 % per shape. With several shapes, any
     one of them can keep. The nominal levels are applied to Student's t at each look's
     degrees of freedom.
   * An early restore (``worse``, ``equivalent``, ``no_benefit``) is read on a looser
     interval, ``stop_confidence`` (default 80 %), because its only possible error is a missed
     gain: a non-binding futility boundary, which can only lower the false-keep rate.
   * Curtailment, also a restore (``no_benefit``, "a keep is out of reach"): even if the
     effect were :data:`OPTIMISM` (1) standard error better than estimated, the interval at
     ``max_runs`` (each arm's spread as now, the largest degrees of freedom) would not clear
     ``+m`` or the last look's boundary. This is what keeps the number of runs down with a
     ``max_runs`` of 10; it costs some keeps of small gains (below).
   * A futility restore waits while the candidate's tail drop (rule 6) is significant at
     ``stop_confidence`` and the median is not ``worse``: more runs may still credit it (a
     median estimate below ``-m`` from a few noisy runs is no reason to give up on it).
   * Still inconclusive at ``max_runs`` -> restore (the safe side).

   Changes that need a reboot are measured in blocks instead. A block measured without
   interleaving (the baseline before the reboot, the loop's final measurement) has at least
   :data:`BLOCK_RUNS` runs, whatever ``min_runs`` says: its spread is all the loop knows.

Why these parameters: ``bench/decision.py --format json`` measures every cell (250 trials,
seed 1; run-to-run CV 0.5-3 %, effects -4..+4 %, stall rates 0 and 2 %) and judges the targets
per cell; its output and the README carry the figures. The trade, measured there: a cluster's
gap is made of 2-4 % layers, and a missed +2 % costs more than a kept neutral change, so the
default minimum effect is 0 and the boundary, not a band, bounds the false keeps. Splitting
the error evenly over the looks (Bonferroni) kept a +2 % gain at CV 1 % too rarely; Pocock
spending stops earlier (fewer runs) but its flat boundary misses the same cell more often.
Gains near zero at high CV are what the extra runs are spent on. ``--min-effect`` restores a
practical-significance floor for users who want one.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Literal

from exemplar_tune.orchestration.boundary import nominal_levels

Action = Literal["keep", "restore", "continue"]
Verdict = Literal["better", "worse", "equivalent", "no_benefit", "inconclusive"]
BASELINE, CANDIDATE = "A", "B"
STALL_FLOOR_S = 0.050  # tail threshold floor: p50 + 50 ms
MAD_FACTOR = 5.0
CONFIDENCE = 0.90  # rule 4: each bound of the interval a one-sided 95 % bound
MIN_RUNS, MAX_RUNS, STOP_CONFIDENCE = 2, 10, 0.80  # rule 7 defaults
OPTIMISM = 1.0  # standard errors of benefit of the doubt before a keep is out of reach
BLOCK_RUNS = 3  # fewest runs of a block measured without interleaving (rule 7)
SPENDING = "obrien-fleming"  # rule 7's alpha-spending function (orchestration.boundary)
MIN_EFFECT = 0.0  # rule 4's default minimum effect
TAIL_SHARE = 0.2  # the tail test's share of the keep error (rule 6)

_ACTION: dict[str, Action] = {"better": "keep", "worse": "restore", "equivalent": "restore",
                              "no_benefit": "restore", "inconclusive": "continue"}


# ---------------------------------------------------------------- Student t quantile


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                    -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbt + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with ``df`` (> 0, may be fractional) degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + x * x))
    return 1.0 - tail if x >= 0 else tail


def t_ppf(p: float, df: float) -> float:
    """Quantile of Student's t: incomplete-beta CDF inverted by bisection-safeguarded Newton.

    ``df`` may be fractional (Welch); ``math.inf`` gives the normal quantile.
    """
    if not 0.0 < p < 1.0 or math.isnan(df) or df <= 0:
        raise ValueError(f"t quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    z = statistics.NormalDist().inv_cdf(p)
    if math.isinf(df) or df > 1e7:
        return z
    lo, hi = 0.0, max(1.0, 2 * z)
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2
    x = min(max(z + (z ** 3 + z) / (4 * df), lo), hi)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(100):
        err = t_cdf(x, df) - p
        if abs(err) < 1e-14:
            break
        lo, hi = (x, hi) if err < 0 else (lo, x)
        pdf = math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))
        step = x - err / pdf
        x = step if lo < step < hi else (lo + hi) / 2
    return x


# ---------------------------------------------------------------- one comparison


@dataclass(frozen=True)
class Comparison:
    """Relative change of the candidate (B) against the baseline (A); positive means better."""

    shape: str
    rel_change: float
    ci_low: float
    ci_high: float
    n_baseline: int
    n_candidate: int
    verdict: Verdict
    note: str = ""
    confidence: float = CONFIDENCE

    @property
    def action(self) -> Action:
        """What this shape alone would decide."""
        return _ACTION[self.verdict]


def _check_sample(values: list[float], arm: str) -> None:
    if len(values) < 2:
        raise ValueError(f"{arm}: need at least 2 runs, got {len(values)}")
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise ValueError(f"{arm}: values must be finite numbers, got {bad[0]!r}")


def classify(ci_low: float, ci_high: float, min_effect: float) -> Verdict:
    """Rule 4 of the module docstring: place an interval of r against the +-min_effect band."""
    if ci_low > min_effect:
        return "better"
    if ci_high < -min_effect:
        return "worse"
    if ci_high < min_effect:
        return "equivalent" if ci_low > -min_effect else "no_benefit"
    return "inconclusive"


def variance_terms(baseline: list[float], candidate: list[float]) -> tuple[float, float]:
    """Each arm's share of the variance of ``mean_B / mean_A`` (delta method, rule 3); their
    sum is ``se^2``. Needs 2+ values per arm and a positive baseline mean."""
    mean_a, mean_b = statistics.fmean(baseline), statistics.fmean(candidate)
    u_a = (mean_b / mean_a) ** 2 * statistics.variance(baseline) / len(baseline) / mean_a ** 2
    u_b = statistics.variance(candidate) / len(candidate) / mean_a ** 2
    return u_a, u_b


def compare(baseline: list[float], candidate: list[float], *, higher_is_better: bool,
            min_effect: float = MIN_EFFECT, confidence: float = CONFIDENCE,
            shape: str = "default") -> Comparison:
    """Welch/delta-method CI of the good-positive relative change and its verdict."""
    _check_sample(baseline, "baseline")
    _check_sample(candidate, "candidate")
    if not 0.0 < confidence < 1.0 or min_effect < 0:
        raise ValueError(f"need 0 < confidence < 1 and min_effect >= 0, got {confidence}, "
                         f"{min_effect}")
    mean_a, mean_b = statistics.fmean(baseline), statistics.fmean(candidate)
    if mean_a <= 0:
        raise ValueError(f"baseline mean must be positive, got {mean_a!r}")
    sign = 1.0 if higher_is_better else -1.0
    rel = sign * (mean_b - mean_a) / mean_a
    u_a, u_b = variance_terms(baseline, candidate)
    se = math.sqrt(u_a + u_b)
    if se == 0.0:
        half = 0.0
    else:
        df = (u_a + u_b) ** 2 / (u_a ** 2 / (len(baseline) - 1) + u_b ** 2 / (len(candidate) - 1))
        half = t_ppf(1.0 - (1.0 - confidence) / 2.0, df) * se
    low, high = rel - half, rel + half
    return Comparison(shape, rel, low, high, len(baseline), len(candidate),
                      classify(low, high, min_effect), confidence=confidence)


# ---------------------------------------------------------------- tails and stalls


def run_value(step_times: list[float]) -> float:
    """The run's value for step times: their median (rule 1)."""
    if not step_times:
        raise ValueError("a run needs at least one step time")
    return statistics.median(step_times)


def tail_stats(step_times: list[float]) -> dict[str, float]:
    """p50, p99, tail_fraction and stall_ms_mean of one run's step times (seconds).

    A tail step is slower than ``p50 + max(50 ms, 5 * MAD)`` (MAD unscaled);
    ``stall_ms_mean`` is the mean excess over p50 of the tail steps, in ms (0 without tail).
    """
    if not step_times or not all(math.isfinite(s) for s in step_times):
        raise ValueError("step times must be a non-empty list of finite numbers")
    p50 = statistics.median(step_times)
    mad = statistics.median(abs(s - p50) for s in step_times)
    limit = p50 + max(STALL_FLOOR_S, MAD_FACTOR * mad)
    tail = [s - p50 for s in step_times if s > limit]
    ordered = sorted(step_times)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return {"p50": p50, "p99": p99, "tail_fraction": len(tail) / len(step_times),
            "stall_ms_mean": 1000 * statistics.fmean(tail) if tail else 0.0}


def tail_count(step_times: list[float]) -> tuple[int, int]:
    """(tail steps, steps) of one run, judged against the run's own p50 and MAD."""
    return round(tail_stats(step_times)["tail_fraction"] * len(step_times)), len(step_times)


def tail_drop(baseline: list[tuple[int, int]], candidate: list[tuple[int, int]],
              confidence: float) -> tuple[bool, str]:
    """Rule 6: did the pooled tail fraction drop significantly (one-sided two-proportion z)?

    ``baseline``/``candidate`` hold one :func:`tail_count` per run.
    """
    t_a, n_a = map(sum, zip(*baseline, strict=True))
    t_b, n_b = map(sum, zip(*candidate, strict=True))
    p_a, p_b = t_a / n_a, t_b / n_b
    pooled = (t_a + t_b) / (n_a + n_b)
    if pooled in (0.0, 1.0) or p_b > p_a / 2:
        return False, f"tail {p_a:.2%} -> {p_b:.2%}"
    z = (p_a - p_b) / math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    significant = z > statistics.NormalDist().inv_cdf(confidence)
    return significant, f"tail {p_a:.2%} -> {p_b:.2%} (z={z:.2f})"


def credit_tail(comparison: Comparison, dropped: bool, note: str,
                min_effect: float) -> Comparison:
    """Upgrade a shape to ``better`` when its tail dropped and its median is not worse."""
    median_ok = comparison.verdict != "worse" and comparison.rel_change >= -min_effect
    if dropped and median_ok and comparison.verdict != "better":
        return replace(comparison, verdict="better", note=f"{note}; credited for the tail")
    return replace(comparison, note="; ".join(filter(None, (comparison.note, note))))


# ---------------------------------------------------------------- shapes and sequence


@dataclass(frozen=True)
class Decision:
    """Outcome of one look: the action, one line of reason, and the per-shape evidence."""

    action: Action
    reason: str
    comparisons: list[Comparison]


def _describe(c: Comparison) -> str:
    text = (f"{c.shape} {c.rel_change:+.2%} [{c.ci_low:+.2%}, {c.ci_high:+.2%}] "
            f"@{c.confidence:.2%}")
    return f"{text} ({c.note})" if c.note else text


def decide_shapes(comparisons: list[Comparison]) -> tuple[Action, str]:
    """Rule 5: combine the verdicts of all workload shapes into one action."""
    if not comparisons:
        raise ValueError("decide_shapes needs at least one comparison")
    worse = [c for c in comparisons if c.verdict == "worse"]
    if worse:
        return "restore", "worse: " + "; ".join(_describe(c) for c in worse)
    better = [c for c in comparisons if c.verdict == "better"]
    if better:
        return "keep", "better: " + "; ".join(_describe(c) for c in better)
    if all(c.action == "restore" for c in comparisons):
        return "restore", "no benefit: " + "; ".join(_describe(c) for c in comparisons)
    return "continue", "inconclusive: " + "; ".join(
        _describe(c) for c in comparisons if c.verdict == "inconclusive")


def block_runs(min_runs: int) -> int:
    """Runs of a block measured without interleaving: ``min_runs``, at least :data:`BLOCK_RUNS`
    (its spread is all the loop knows of that arm)."""
    return max(min_runs, BLOCK_RUNS)


class SequentialTest:
    """A/B runs with a decision after every complete pair (rule 7), so at most
    ``max_runs - min_runs + 1`` looks, over which the confidence is Bonferroni-split.

    Interleaved (A B B A ..., the default) when the arms can be switched at runtime; otherwise
    (``interleave=False``, changes that need a reboot) in blocks: :func:`block_runs` baseline
    runs, then candidate runs until the decision is clear or ``max_runs`` candidate runs.
    """

    def __init__(self, *, higher_is_better: bool, min_effect: float = MIN_EFFECT,
                 confidence: float = CONFIDENCE, stop_confidence: float = STOP_CONFIDENCE,
                 min_runs: int = MIN_RUNS, max_runs: int = MAX_RUNS,
                 interleave: bool = True, spending: str = SPENDING,
                 tail_share: float = TAIL_SHARE) -> None:
        if not 2 <= min_runs <= max_runs:
            raise ValueError(f"need 2 <= min_runs <= max_runs, got {min_runs}, {max_runs}")
        if not 0.0 < stop_confidence < 1.0 or not 0.0 < confidence < 1.0:
            raise ValueError(f"confidences must lie in (0, 1), got {confidence}, "
                             f"{stop_confidence}")
        self.higher_is_better, self.min_effect = higher_is_better, min_effect
        self.confidence, self.stop_confidence = confidence, stop_confidence
        self.min_runs, self.max_runs, self.interleave = min_runs, max_runs, interleave
        self.spending, self.tail_share = spending, tail_share
        self.look_alpha(max_runs)  # an unknown spending function fails here, not mid-loop
        self._values: dict[tuple[str, str], list[float]] = {}
        self._tail_counts: dict[tuple[str, str], list[tuple[int, int] | None]] = {}

    def look_alpha(self, look: int | None = None, *, share: float = 1.0) -> float:
        """One-sided nominal level at ``look`` (run pairs, or candidate runs in blocks;
        default the current look) of a test given ``share`` of the keep error
        ``(1 - confidence) / 2``, spent over the looks ``min_runs .. max_runs`` by the
        group-sequential boundary of rule 7."""
        look = self._look() if look is None else look
        levels = nominal_levels(share * (1.0 - self.confidence) / 2.0, self._fractions(),
                                self.spending)
        return levels[min(max(look, self.min_runs), self.max_runs) - self.min_runs]

    def look_confidence(self, look: int | None = None, *, share: float = 1.0) -> float:
        """The two-sided interval whose lower bound must clear zero for a keep (rule 7)."""
        return 1.0 - 2.0 * self.look_alpha(look, share=share)

    def _median_share(self, shape: str) -> float:
        """The median test's share of the keep error: all of it, or what the tail test of
        rule 6 leaves when it applies to ``shape``."""
        return 1.0 if self._tails(shape) is None else 1.0 - self.tail_share

    def _fractions(self) -> tuple[float, ...]:
        """Information fraction of each possible look: runs so far over ``max_runs``."""
        return tuple(n / self.max_runs for n in range(self.min_runs, self.max_runs + 1))

    def _look(self) -> int:
        """The current look: complete pairs, or candidate runs when measured in blocks."""
        pairs = min(self.runs(BASELINE), self.runs(CANDIDATE))
        return pairs if self.interleave else self.runs(CANDIDATE)

    def add(self, arm: str, shape: str, value: float, *,
            steps: list[float] | None = None) -> None:
        """Record one run's value (and optionally its step times) for an arm and shape."""
        if arm not in (BASELINE, CANDIDATE):
            raise ValueError(f"arm must be {BASELINE!r} or {CANDIDATE!r}, got {arm!r}")
        if not math.isfinite(value):
            raise ValueError(f"run value must be finite, got {value!r}")
        self._values.setdefault((arm, shape), []).append(value)
        tails = tail_count(steps) if steps is not None else None
        self._tail_counts.setdefault((arm, shape), []).append(tails)

    def arm_limit(self, arm: str) -> int:
        """The most runs ``arm`` can get: ``max_runs``, or a baseline block's size."""
        return block_runs(self.min_runs) if arm == BASELINE and not self.interleave \
            else self.max_runs

    def runs(self, arm: str) -> int:
        """Complete runs of an arm: the fewest values recorded for any shape."""
        shapes = self.shapes()
        return min((len(self._values.get((arm, s), [])) for s in shapes), default=0)

    def shapes(self) -> list[str]:
        """Workload shapes seen so far, in order of first appearance."""
        return list(dict.fromkeys(shape for _, shape in self._values))

    def next_arm(self) -> str:
        """A B B A A B B A ... (interleaved pairs in ABBA order: linear drift cancels within
        every four runs, and the arms switch only every second run), or the blocks."""
        if not self.interleave:
            return BASELINE if self.runs(BASELINE) < self.arm_limit(BASELINE) else CANDIDATE
        order = (BASELINE, CANDIDATE, CANDIDATE, BASELINE)
        return order[(self.runs(BASELINE) + self.runs(CANDIDATE)) % 4]

    def _interval(self, shape: str, confidence: float) -> Comparison:
        return compare(self._values[(BASELINE, shape)], self._values[(CANDIDATE, shape)],
                       higher_is_better=self.higher_is_better, min_effect=self.min_effect,
                       confidence=confidence, shape=shape)

    def _tails(self, shape: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]] | None:
        """Tail counts of both arms when rule 6 applies (lower is better, steps everywhere)."""
        tails_a = self._tail_counts[(BASELINE, shape)]
        tails_b = self._tail_counts[(CANDIDATE, shape)]
        if self.higher_is_better or None in tails_a or None in tails_b:
            return None
        return tails_a, tails_b  # type: ignore[return-value]

    def _out_of_reach(self, comp: Comparison) -> bool:
        """Curtailment (rule 7): even an effect :data:`OPTIMISM` standard errors better than the
        estimate would not give a keep at ``max_runs`` (beyond ``+m`` and clear of zero), each
        arm's spread staying as it is."""
        values_a = self._values[(BASELINE, comp.shape)]
        values_b = self._values[(CANDIDATE, comp.shape)]
        final_a = self.max_runs if self.interleave else len(values_a)
        if len(values_b) >= self.max_runs:
            return False
        u_a, u_b = variance_terms(values_a, values_b)
        final_se = math.sqrt(u_a * len(values_a) / final_a + u_b * len(values_b) / self.max_runs)
        df = final_a + self.max_runs - 2
        t_final = t_ppf(1.0 - (1.0 - comp.confidence) / 2.0, df)
        best_case = comp.rel_change + OPTIMISM * math.sqrt(u_a + u_b)
        last = self.look_alpha(self.max_runs, share=self._median_share(comp.shape))
        return (best_case - t_final * final_se <= self.min_effect
                or best_case - t_ppf(1.0 - last, df) * final_se <= 0)

    def _clear_of_zero(self, comp: Comparison) -> Comparison:
        """A ``better`` shape whose gain is not yet clear of zero at :attr:`look_confidence`
        becomes ``inconclusive`` (rule 7)."""
        if comp.verdict != "better":
            return comp
        alpha = self.look_alpha(share=self._median_share(comp.shape))
        strict = self._interval(comp.shape, 1.0 - 2.0 * alpha)
        if strict.ci_low > 0:
            return comp
        return replace(comp, verdict="inconclusive",
                       note=f"not yet clear of 0 at this look's boundary (one-sided "
                            f"{alpha:.2g}): lower bound {strict.ci_low:+.2%}")

    def _compare_shape(self, shape: str) -> Comparison:
        """Keep on the interval at ``confidence`` when the gain is also clear of zero at
        :attr:`look_confidence`. Restore early on the looser ``stop_confidence`` or when a keep
        is out of reach, unless the median is not ``worse`` and the candidate's tail drop is
        significant at ``stop_confidence`` (rule 6 may still credit it)."""
        comp = self._clear_of_zero(self._interval(shape, self.confidence))
        tails = self._tails(shape)
        if comp.verdict != "better":
            stop = self._interval(shape, self.stop_confidence)
            tail_pending = (stop.verdict != "worse" and tails is not None
                            and tail_drop(*tails, self.stop_confidence)[0])
            if stop.action != "restore" and self._out_of_reach(comp):
                stop = replace(stop, verdict="no_benefit", note="a keep is out of reach")
            early = stop.action == "restore" and not tail_pending
            comp = stop if early else replace(comp, verdict="inconclusive")
        if tails is None:
            return comp
        dropped, note = tail_drop(*tails, 1.0 - self.look_alpha(share=self.tail_share))
        return credit_tail(comp, dropped, note, self.min_effect)

    def decide(self) -> Decision:
        """Keep, restore or continue, given the runs so far."""
        pairs = min(self.runs(BASELINE), self.runs(CANDIDATE))
        if self.interleave and self.runs(BASELINE) != self.runs(CANDIDATE):
            return Decision("continue", "the pair is not complete yet", [])
        if pairs < self.min_runs:
            return Decision("continue", f"{pairs} of {self.min_runs} minimum run pairs", [])
        comparisons = [self._compare_shape(s) for s in self.shapes()]
        action, reason = decide_shapes(comparisons)
        if action == "continue" and self._look() >= self.max_runs:
            return Decision("restore", f"inconclusive after {self.runs(BASELINE)}+"
                            f"{self.runs(CANDIDATE)} runs: {reason}", comparisons)
        return Decision(action, reason, comparisons)
