"""Choosing among several values of a setting: the statistical contract of ``sweep``.

The arms are the *incumbent* (the hosts as they are) and the candidates. Measurement goes in
rounds: every arm still in the race gets one benchmark run per round, in a rotating balanced
order (:meth:`ArmSelection.order`: the arms rotated by one place each round and reversed every
other round, so each arm takes every position and a linear drift falls on all arms alike).

A run's value is the geometric mean of its time-like shape values (throughput inverted, as in
:mod:`.tune`), so every arm is one series of run values; arms are compared with
the incumbent on the relative change of their means (Welch, delta method: see
:mod:`exemplar_tune.orchestration.stats`), "good" positive.

After each round from ``min_rounds`` on (a *look*):

* **Keep error over arms and looks.** The one-sided error ``(1 - confidence) / 2`` of choosing
  a candidate that is not better than the incumbent is spent over the looks by the
  group-sequential boundary of :mod:`exemplar_tune.orchestration.boundary` (information fraction
  ``round / max_rounds``) and over the candidates by Holm's step-down: sorted by one-sided
  p-value, the ``i``-th smallest must lie below ``level / (K - i + 1)`` (``K`` candidates,
  eliminated ones included) and every smaller one must have passed. When one sweep makes
  ``family`` such choices at once (one per message size, ``sweep --per-size``), ``level`` is
  first divided by ``family`` (Bonferroni over the choices, Holm within each).
* **Elimination** (read on ``stop_confidence``, a non-binding futility rule that can only miss
  a gain, never add a wrong pick): a candidate leaves the race when its interval against the
  incumbent lies below zero, when its interval against the current leader (the live
  candidate with the best mean) lies below zero, or (from the second look on: two runs
  say little of a spread) when even an effect one standard error
  better could not clear the last look's boundary by ``max_rounds``.
* **Choice.** A candidate is chosen when it passes Holm and every other candidate has left the
  race. All candidates gone: the incumbent stays. At ``max_rounds``: the candidate with the best
  mean among those that pass Holm, otherwise the incumbent.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Literal

from exemplar_tune.orchestration.boundary import nominal_levels
from exemplar_tune.orchestration.stats import (
    CONFIDENCE,
    MAX_RUNS,
    MIN_RUNS,
    OPTIMISM,
    SPENDING,
    STOP_CONFIDENCE,
    compare,
    t_cdf,
    t_ppf,
    variance_terms,
)

Outcome = Literal["continue", "choose", "incumbent"]


@dataclass(frozen=True)
class ArmEstimate:
    """One candidate against the incumbent at a look (``rel_change`` positive is better)."""

    arm: str
    runs: int
    rel_change: float
    ci_low: float
    ci_high: float
    p_value: float
    passes: bool = False
    eliminated: str = ""  # why the arm left the race; empty while it is in


@dataclass(frozen=True)
class Selection:
    """The outcome of one look: continue, choose ``arm``, or keep the incumbent."""

    outcome: Outcome
    arm: str | None
    reason: str
    estimates: list[ArmEstimate] = field(default_factory=list)


class ArmSelection:
    """Sequential choice among an incumbent and candidates (see the module docstring)."""

    def __init__(self, incumbent: str, candidates: list[str], *, confidence: float = CONFIDENCE,
                 stop_confidence: float = STOP_CONFIDENCE, min_rounds: int = MIN_RUNS,
                 max_rounds: int = MAX_RUNS, spending: str = SPENDING, family: int = 1) -> None:
        if not candidates or incumbent in candidates or len(set(candidates)) != len(candidates):
            raise ValueError("need one or more distinct candidates besides the incumbent")
        if not 2 <= min_rounds <= max_rounds:
            raise ValueError(f"need 2 <= min_rounds <= max_rounds, got {min_rounds}, "
                             f"{max_rounds}")
        self.incumbent, self.candidates = incumbent, list(candidates)
        self.confidence, self.stop_confidence = confidence, stop_confidence
        self.min_rounds, self.max_rounds, self.spending = min_rounds, max_rounds, spending
        self.levels = nominal_levels((1.0 - confidence) / 2.0 / max(1, family),
                                     [r / max_rounds for r in range(min_rounds, max_rounds + 1)],
                                     spending)
        self._values: dict[str, list[float]] = {arm: [] for arm in self.arms}
        self.eliminated: dict[str, str] = {}

    @property
    def arms(self) -> list[str]:
        """The incumbent, then the candidates in the order given."""
        return [self.incumbent, *self.candidates]

    def live(self) -> list[str]:
        """The arms still measured: the incumbent and the candidates not eliminated."""
        return [a for a in self.arms if a not in self.eliminated]

    def rounds(self) -> int:
        """Complete rounds: the fewest runs of any live arm."""
        return min(len(self._values[a]) for a in self.live())

    def order(self) -> list[str]:
        """The live arms in this round's order, rotated one place per round: over as many
        rounds as there are arms, each arm runs once in every position."""
        live, index = self.live(), self.rounds()
        shift = index % len(live)
        return live[shift:] + live[:shift]

    def add(self, arm: str, value: float) -> None:
        """Record one run's time-like value (lower is better) for ``arm``."""
        if arm not in self._values:
            raise ValueError(f"unknown arm {arm!r}")
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"run value must be a positive finite number, got {value!r}")
        self._values[arm].append(value)

    def values(self, arm: str) -> list[float]:
        """The run values recorded for ``arm``."""
        return list(self._values[arm])

    def level(self) -> float:
        """This look's one-sided nominal level before Holm's division."""
        look = min(max(self.rounds(), self.min_rounds), self.max_rounds)
        return self.levels[look - self.min_rounds]

    def decide(self) -> Selection:
        """Continue, choose a candidate or keep the incumbent, given the runs so far."""
        done = self.rounds()
        if any(len(self._values[a]) != done for a in self.live()):
            return Selection("continue", None, "the round is not complete yet")
        if done < self.min_rounds:
            return Selection("continue", None, f"{done} of {self.min_rounds} minimum rounds")
        estimates = {a: self._estimate(a) for a in self.candidates}
        passing = self._holm(estimates)
        self._eliminate(estimates, passing)
        estimates = {a: _with(e, a in passing, self.eliminated.get(a, ""))
                     for a, e in estimates.items()}
        return self._choose(done, estimates, passing)

    def _choose(self, done: int, estimates: dict[str, ArmEstimate],
                passing: set[str]) -> Selection:
        listed = list(estimates.values())
        live = [a for a in self.candidates if a not in self.eliminated]
        if not live:
            return Selection("incumbent", self.incumbent, "no candidate beats the incumbent: "
                             + _summary(listed), listed)
        if len(live) == 1 and live[0] in passing:
            return Selection("choose", live[0], f"{live[0]} beats the incumbent and every other "
                             "candidate: " + _summary(listed), listed)
        if done < self.max_rounds:
            return Selection("continue", None, _summary(listed), listed)
        best = max((estimates[a] for a in passing), key=lambda e: e.rel_change, default=None)
        if best is None:
            return Selection("incumbent", self.incumbent, f"no candidate clear of the incumbent "
                             f"after {done} rounds: " + _summary(listed), listed)
        return Selection("choose", best.arm, f"{best.arm} has the best mean of the candidates "
                         f"clear of the incumbent after {done} rounds: " + _summary(listed),
                         listed)

    def _estimate(self, arm: str) -> ArmEstimate:
        base, cand = self._values[self.incumbent], self._values[arm]
        comp = compare(base, cand, higher_is_better=False, confidence=self.stop_confidence,
                       shape=arm)
        return ArmEstimate(arm, len(cand), comp.rel_change, comp.ci_low, comp.ci_high,
                           _p_better(base, cand))

    def _holm(self, estimates: dict[str, ArmEstimate]) -> set[str]:
        """Candidates better than the incumbent at this look, Holm over all candidates."""
        level, total, passing = self.level(), len(self.candidates), set()
        ranked = sorted(estimates.values(), key=lambda e: e.p_value)
        for index, estimate in enumerate(ranked):
            if estimate.p_value > level / (total - index):
                break
            passing.add(estimate.arm)
        return passing

    def _eliminate(self, estimates: dict[str, ArmEstimate], passing: set[str]) -> None:
        """Drop candidates that are clearly worse than the incumbent or the leader, or that
        can no longer clear the boundary (see the module docstring)."""
        live = [a for a in self.candidates if a not in self.eliminated]
        leader = min(live, key=lambda a: statistics.fmean(self._values[a]), default=None)
        for arm in live:
            estimate = estimates[arm]
            if estimate.ci_high < 0:
                self.eliminated[arm] = "worse than the incumbent"
            elif arm != leader and leader is not None and self._behind(arm, leader):
                self.eliminated[arm] = f"worse than {leader}"
            elif arm not in passing and self.rounds() > self.min_rounds \
                    and self._out_of_reach(arm):
                self.eliminated[arm] = "cannot beat the incumbent by the last round"

    def _behind(self, arm: str, leader: str) -> bool:
        comp = compare(self._values[leader], self._values[arm], higher_is_better=False,
                       confidence=self.stop_confidence)
        return comp.ci_high < 0

    def _out_of_reach(self, arm: str) -> bool:
        """Even ``OPTIMISM`` standard errors better, could ``arm`` pass the last look's Holm
        level at ``max_rounds`` (spreads as now)?"""
        base, cand = self._values[self.incumbent], self._values[arm]
        if len(cand) >= self.max_rounds:
            return False
        u_a, u_b = variance_terms(base, cand)
        mean_a, mean_b = statistics.fmean(base), statistics.fmean(cand)
        rel = (mean_a - mean_b) / mean_a
        best_case = rel + OPTIMISM * math.sqrt(u_a + u_b)
        final_se = math.sqrt((u_a * len(base) + u_b * len(cand)) / self.max_rounds)
        level = self.levels[-1] / len(self.candidates)
        df = 2 * self.max_rounds - 2
        return best_case - t_ppf(1.0 - level, df) * final_se <= 0


def _p_better(base: list[float], cand: list[float]) -> float:
    """One-sided p-value of "the candidate's mean time is below the incumbent's" (Welch,
    delta method on the ratio)."""
    u_a, u_b = variance_terms(base, cand)
    mean_a, mean_b = statistics.fmean(base), statistics.fmean(cand)
    rel = (mean_a - mean_b) / mean_a
    if u_a + u_b == 0:
        return 0.0 if rel > 0 else 1.0
    df = (u_a + u_b) ** 2 / (u_a ** 2 / (len(base) - 1) + u_b ** 2 / (len(cand) - 1))
    return 1.0 - t_cdf(rel / math.sqrt(u_a + u_b), df)


def _with(estimate: ArmEstimate, passes: bool, eliminated: str) -> ArmEstimate:
    return ArmEstimate(estimate.arm, estimate.runs, estimate.rel_change, estimate.ci_low,
                       estimate.ci_high, estimate.p_value, passes, eliminated)


def _summary(estimates: list[ArmEstimate]) -> str:
    return "; ".join(f"{e.arm} {e.rel_change:+.2%} [{e.ci_low:+.2%}, {e.ci_high:+.2%}]"
                     + (f" ({e.eliminated})" if e.eliminated else "") for e in estimates)


def run_score(values: list[float]) -> float:
    """One run's value over several shapes: the geometric mean of their time-like values."""
    if not values or any(v <= 0 or not math.isfinite(v) for v in values):
        raise ValueError(f"shape values must be positive finite numbers, got {values!r}")
    return math.exp(statistics.fmean(math.log(v) for v in values))
