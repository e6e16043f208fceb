"""Group-sequential efficacy boundaries: how much error each look of a sequential test may spend.

A test that looks at its data after every run pair and stops at the first significant look
must not test each look at the full level: the chance of crossing *some* look grows with
their number. An alpha-spending function ``alpha(t)`` (Lan and DeMets, 1983) says how much of
the one-sided level ``alpha`` may be spent by information fraction ``t`` (runs so far over the
most runs); the boundary of look ``k`` is then set so that, under no effect, the probability
of crossing first at look ``k`` is exactly ``alpha(t_k) - alpha(t_{k-1})``. Unlike splitting
``alpha`` evenly (Bonferroni), this accounts for the looks sharing their data, so the last
look is tested at close to the fixed-sample level.

Spending functions (``t`` in (0, 1], ``alpha(1) = alpha``):

* ``obrien-fleming``: ``2 - 2 Phi(z_{1-alpha/2} / sqrt(t))`` -- strict early looks, the last
  look close to a fixed-sample test;
* ``pocock``: ``alpha * ln(1 + (e - 1) t)`` -- nearly equal levels, earlier stops, a stricter
  last look.

The boundaries are computed for the standardised statistic of a Brownian motion in
information time (independent increments), by numerical integration of the density of the
statistic over the continuation region look by look (Jennison and Turnbull, *Group Sequential
Methods*, 2000, ch. 19). The callers read them as *nominal* one-sided levels and apply them
to Student's t at each look's degrees of freedom, the usual way to use a normal boundary with
an estimated variance. Standard library only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from functools import cache

SPENDING_FUNCTIONS = ("obrien-fleming", "pocock")
_LOWEST_Z = -8.0  # the continuation region's lower end: below it the density is negligible
_POINTS = 201  # Simpson grid points per look (odd)
_NORMAL = statistics.NormalDist()


def spent(spending: str, alpha: float, fraction: float) -> float:
    """One-sided error spent by information ``fraction`` (0..1] under ``spending``."""
    if not 0.0 < fraction <= 1.0 + 1e-12:
        raise ValueError(f"information fraction must lie in (0, 1], got {fraction}")
    if spending == "obrien-fleming":
        return 2.0 - 2.0 * _NORMAL.cdf(_NORMAL.inv_cdf(1.0 - alpha / 2.0) / math.sqrt(fraction))
    if spending == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * min(fraction, 1.0))
    raise ValueError(f"spending function {spending!r}: one of {', '.join(SPENDING_FUNCTIONS)}")


def nominal_levels(alpha: float, fractions: Sequence[float],
                   spending: str = "obrien-fleming") -> tuple[float, ...]:
    """The one-sided nominal level of each look at increasing information ``fractions``
    (the last one 1): a look is significant when its one-sided p-value is below its level.
    Cached per (alpha, fractions, spending)."""
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha}")
    points = tuple(float(f) for f in fractions)
    if not points or any(b <= a for a, b in zip(points, points[1:], strict=False)):
        raise ValueError(f"information fractions must increase, got {list(fractions)}")
    return _levels(alpha, points, spending)


@cache
def _levels(alpha: float, fractions: tuple[float, ...], spending: str) -> tuple[float, ...]:
    bounds: list[float] = []
    density: list[tuple[float, float]] = []  # (z, weight * density) on the continuation region
    previous_t, previous_spent = 0.0, 0.0
    for t in fractions:
        target = spent(spending, alpha, t) - previous_spent
        if not bounds:
            bound = _NORMAL.inv_cdf(1.0 - target)
        else:
            bound = _solve(lambda c, d=density, t=t, pt=previous_t: _crossing(d, pt, t, c),
                           target)
        bounds.append(bound)
        density = _propagate(density, previous_t, t, bound)
        previous_t, previous_spent = t, previous_spent + target
    return tuple(1.0 - _NORMAL.cdf(b) for b in bounds)


def _upper_tail(x: float) -> float:
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def _crossing(density: list[tuple[float, float]], t_prev: float, t: float, bound: float) -> float:
    """P(continue until the previous look, then Z_t >= bound) under no effect."""
    spread = math.sqrt(t - t_prev)
    root_t, root_prev = math.sqrt(t), math.sqrt(t_prev)
    return sum(mass * _upper_tail((bound * root_t - z * root_prev) / spread)
               for z, mass in density)


def _solve(crossing: Callable[[float], float], target: float) -> float:
    """The bound whose crossing probability is ``target`` (bisection; crossing decreases)."""
    low, high = -2.0, 12.0
    if target <= 0.0:
        return high
    for _ in range(80):
        mid = (low + high) / 2.0
        low, high = (mid, high) if crossing(mid) > target else (low, mid)
    return (low + high) / 2.0


def _propagate(density: list[tuple[float, float]], t_prev: float, t: float,
               bound: float) -> list[tuple[float, float]]:
    """Weighted sub-density of Z_t on [_LOWEST_Z, bound) given no earlier crossing."""
    step = (bound - _LOWEST_Z) / (_POINTS - 1)
    grid = [_LOWEST_Z + i * step for i in range(_POINTS)]
    weights = [step / 3.0 * (1 if i in (0, _POINTS - 1) else 4 if i % 2 else 2)
               for i in range(_POINTS)]
    if not density:
        values = [_NORMAL.pdf(y) for y in grid]
    else:
        spread = math.sqrt(t - t_prev)
        root_t, root_prev = math.sqrt(t), math.sqrt(t_prev)
        scale = root_t / spread / math.sqrt(2.0 * math.pi)
        values = [scale * sum(mass * math.exp(-0.5 * ((y * root_t - z * root_prev) / spread) ** 2)
                              for z, mass in density) for y in grid]
    return [(y, w * v) for y, w, v in zip(grid, weights, values, strict=True)]
