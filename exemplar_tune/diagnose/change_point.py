"""Change points: where a series of time-like values changed level, with an interval for where
and a significance, or nothing when the data do not support a change.

A series is one rank's per-iteration excess over the ranks' median (:mod:`.slow_ranks`) or one
host's successive benchmark runs (:func:`run_change`), in the order they were measured. The
method, per series:

* **Test.** The centred CUSUM of the series' scores, ``C_k = sum_{i<k} (s_i - mean(s))``. With
  no change, ``max_k |C_k| / (sigma sqrt(n))`` tends to the supremum of a Brownian bridge,
  whose tail (Kolmogorov's) is the p-value (:func:`bridge_tail`); the maximum over a finite
  series lies below the continuous one, so on few values the p-value is conservative. The
  scores are the values' mid-ranks (Pettitt's test: free of the noise's distribution, and a
  stall of one step counts as one rank, not as its size), ``sigma`` the ranks' long-run
  standard deviation: their variance (what it is when nothing changed) times
  ``(1 + rho) / (1 - rho)``, ``rho`` the lag-1 autocorrelation of the ranks about the two
  means of the best split less its bias on ``n`` values (``-(1 + 3 rho) / n``, Marriott and
  Pope), clipped to ``[0, RHO_MAX]``, so a slowly wandering series is not read as a change.
  When the noise of one value is known (``noise``: from other series, e.g. a fleet's
  run-to-run spread) the scores are the values and ``sigma`` the larger of that noise and
  their own spread about the two means: a handful of runs can then show a change that their
  ranks never could.
* **Where.** The least-squares split (the largest between-group sum of squares of the scores)
  among those that leave at least ``min_size`` values on each side; ``index`` is the first
  value after the change.
* **Interval.** Siegmund's likelihood-ratio set: every allowed split whose squared error
  exceeds the best one's by at most ``c sigma^2`` (``sigma`` here the scores' long-run spread
  about the two means), with ``c = -2 ln(1 - sqrt(level))``, the ``level`` quantile of the
  larger of the two one-sided maxima of ``2 W(t) - |t|`` (each exponential with mean 2),
  reported as the set's hull ``[low, high]``.
* **Levels.** The median of the values on each side of a change, up to the next change.
* **Several changes.** Binary segmentation (:func:`change_points`): each side of a significant
  split is tested again at the same ``alpha`` while it holds ``2 min_size`` values, in the order
  found, at most ``2 max_changes + 1`` tests. A split is reported as a change only when the
  medians on its two sides differ by ``min_shift`` or more; a significant smaller one is not
  reported but still divides the search. A stationary series is tested once, so the chance
  of reporting any change in it is the first test's: at most about ``alpha``.

Cost per test: a sort of the segment for its ranks (O(n log n)) and a few passes over arrays
of its length; no test holds more than a few arrays of the series' length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ALPHA = 0.01  # the chance of reporting a change in a series that has none
LEVEL = 0.90  # coverage of the interval for where a change happened
MIN_SIZE = 2  # values each side of a change
MAX_CHANGES = 8
RHO_MAX = 0.9  # lag-1 autocorrelation credited at most (the long-run variance x19)
MIN_SLOWDOWN = 0.01  # run_change: a host slower than this after its change, relative
MIN_RUNS = 2  # run_change: runs after the change (one slow run is a stall, not a change)


@dataclass(frozen=True)
class ChangePoint:
    """A change of level in a series: ``values[index:]`` are after it (up to the next change),
    ``[low, high]`` the interval for ``index`` (inclusive, at ``LEVEL``), ``before`` and
    ``after`` the medians of the values on each side (each up to the neighbouring change),
    ``p_value`` the test's, ``length`` how many values the ``after`` side holds."""

    index: int
    low: int
    high: int
    before: float
    after: float
    p_value: float
    length: int

    @property
    def relative(self) -> float:
        """``after / before - 1``: how much slower (positive) a time-like series became;
        ``nan`` when ``before`` is not positive."""
        return self.after / self.before - 1.0 if self.before > 0 else math.nan

    def to_dict(self) -> dict[str, float | int | list[int]]:
        return {"index": self.index, "interval": [self.low, self.high],
                "before": self.before, "after": self.after, "p_value": self.p_value}


@dataclass(frozen=True)
class _Split:
    at: int
    low: int
    high: int
    p_value: float


def bridge_tail(x: float) -> float:
    """``P(sup |B(t)| > x)`` for a Brownian bridge ``B`` on [0, 1] (Kolmogorov's
    distribution): ``2 sum_{j>=1} (-1)^(j-1) exp(-2 j^2 x^2)``."""
    if x <= 0.1:
        return 1.0
    j = np.arange(1, 101, dtype=np.float64)
    terms = np.exp(-2.0 * j * j * x * x) * np.where(j % 2 == 1, 1.0, -1.0)
    return float(min(1.0, max(0.0, 2.0 * terms.sum())))


def mid_ranks(values: np.ndarray) -> np.ndarray:
    """The values' ranks, 1 to n, tied values sharing the mean of their ranks."""
    n = len(values)
    order = np.argsort(values)  # ties share their mean rank: the order among them is moot
    ordered = values[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    ends = np.append(starts[1:], n)
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def profile_bound(level: float) -> float:
    """``c`` of the interval: the ``level`` quantile of ``max(E1, E2)``, ``E`` exponential with
    mean 2 (the two one-sided maxima of ``2 W(t) - |t|``)."""
    return -2.0 * math.log(1.0 - math.sqrt(level))


def _split(values: np.ndarray, alpha: float, min_size: int, noise: float | None,
           level: float) -> _Split | None:
    """The single change test on one segment: the least-squares split with its interval and
    p-value when the p-value is at most ``alpha``, else ``None``."""
    n = len(values)
    if n < 2 * min_size:
        return None
    scores = values if noise is not None else mid_ranks(values)
    centred = scores - scores.mean()
    cusum = np.cumsum(centred)[:-1]  # C_k for k = 1 .. n-1: the first k values before
    k = np.arange(1, n, dtype=np.float64)
    between = cusum * cusum * n / (k * (n - k))  # between-group sum of squares at each k
    allowed = slice(min_size - 1, n - min_size)  # k = min_size .. n - min_size
    best = min_size + int(np.argmax(between[allowed]))
    left, right = scores[:best], scores[best:]
    residual = np.concatenate((left - left.mean(), right - right.mean()))
    squares = float(np.square(residual).sum())  # sums, not BLAS: no threads to wake
    spread = squares / (n - 2) if n > 2 else 0.0  # about the two levels: the interval's
    if noise is not None:
        spread = null = max(spread, noise * noise)
    else:  # the test's variance is the ranks' own (exact with no change); both long-run
        null = float(np.square(centred).sum()) / (n - 1)
        rho = float((residual[1:] * residual[:-1]).sum()) / squares if squares > 0 else 0.0
        rho = min(max(rho + (1.0 + 3.0 * rho) / n, 0.0), RHO_MAX)  # less its bias on n values
        factor = (1.0 + rho) / (1.0 - rho)
        spread, null = spread * factor, null * factor
    if not null > 0:
        return None  # every value alike: no change to find
    p_value = bridge_tail(float(np.max(np.abs(cusum))) / math.sqrt(n * null))
    if p_value > alpha:
        return None
    inside = np.flatnonzero(between[allowed] >= between[best - 1] - profile_bound(level)
                            * max(spread, 1e-300)) + min_size
    return _Split(best, int(inside[0]), int(inside[-1]), p_value)


def _series(values: Sequence[float] | np.ndarray) -> np.ndarray:
    series = np.asarray(values, dtype=np.float64)
    if series.ndim != 1:
        raise ValueError("a change point is found in one series of numbers")
    if not np.isfinite(series).all():
        raise ValueError("a series for change points holds a value that is not a finite number")
    return series


def change_points(values: Sequence[float] | np.ndarray, *, alpha: float = ALPHA,
                  min_size: int = MIN_SIZE, min_shift: float = 0.0,
                  noise: float | None = None, level: float = LEVEL,
                  max_changes: int = MAX_CHANGES) -> list[ChangePoint]:
    """Every change of level the series supports (binary segmentation, see the module), in
    order; empty when none. ``noise``: the standard deviation of one value where it is known
    from elsewhere (ranks are used when not). ``ValueError`` (one line) for anything but one
    series of finite numbers."""
    series = _series(values)
    found: list[_Split] = []
    pending = [(0, len(series))]
    tests = 0
    while pending and len(found) < max_changes and tests < 2 * max_changes + 1:
        start, end = pending.pop(0)
        tests += 1
        split = _split(series[start:end], alpha, min_size, noise, level)
        if split is None:
            continue
        at = start + split.at
        if abs(float(np.median(series[at:end])) - float(np.median(series[start:at]))) \
                >= min_shift:
            found.append(_Split(at, start + split.low, start + split.high, split.p_value))
        pending += [(start, at), (at, end)]
    found.sort(key=lambda s: s.at)
    edges = [0, *(s.at for s in found), len(series)]
    levels = [float(np.median(series[a:b])) for a, b in zip(edges, edges[1:], strict=False)]
    return [ChangePoint(s.at, s.low, s.high, levels[i], levels[i + 1], s.p_value,
                        edges[i + 2] - s.at) for i, s in enumerate(found)]


def change_point(values: Sequence[float] | np.ndarray, *, alpha: float = ALPHA,
                 min_size: int = MIN_SIZE, min_shift: float = 0.0,
                 noise: float | None = None, level: float = LEVEL) -> ChangePoint | None:
    """The one change the series supports best (a single test, no segmentation): its index,
    interval, levels and p-value; ``None`` when the p-value is above ``alpha`` or the medians
    on the two sides differ by less than ``min_shift``."""
    found = change_points(values, alpha=alpha, min_size=min_size, min_shift=min_shift,
                          noise=noise, level=level, max_changes=1)
    return found[0] if found else None


def run_change(values: Sequence[float], *, noise: float | None = None,
               reference: Sequence[float] | None = None, alpha: float = ALPHA,
               min_slowdown: float = MIN_SLOWDOWN, min_runs: int = MIN_RUNS
               ) -> ChangePoint | None:
    """Where a host turned slow among its successive benchmark runs, or ``None``.

    ``values``: the host's run values, time-like (larger is slower), in the order they ran.
    ``noise``: the run-to-run coefficient of variation of one run, as the fleet shows it
    (e.g. the median over hosts of stdev / mean); without it the runs' own ranks are used,
    which need about 20 runs before any change can be significant. ``reference``: the fleet's
    value at each of the same runs (e.g. the median of the other hosts' run ``i``); when given
    the host's runs are divided by it, so a change the whole fleet shared is not the host's.
    The result is the first change, at ``alpha``, after which the level (median) is at least
    ``min_slowdown`` above the level before (``relative``) and at least ``min_runs`` runs
    long; ``index`` is the run (0-based) it began at, ``[low, high]`` its interval, ``before``
    and ``after`` in the values' units (ratios to ``reference`` where given). ``ValueError``
    (one line) for values that are not positive finite numbers or a ``reference`` of another
    length."""
    series = _series(values)
    if reference is not None:
        fleet = _series(reference)
        if len(fleet) != len(series):
            raise ValueError(f"reference holds {len(fleet)} runs, the host {len(series)}")
        if not (fleet > 0).all():
            raise ValueError("a reference run value is not positive")
        series = series / fleet
    if not (series > 0).all():
        raise ValueError("a run value is not positive: runs are time-like")
    if len(series) < 2 * min_runs:
        return None
    sigma = None if noise is None else noise * float(np.median(series))
    for found in change_points(series, alpha=alpha, min_size=min_runs, noise=sigma):
        if found.relative >= min_slowdown:
            return found
    return None
