"""Detection power of ``slow-nodes``: how many runs per host it needs to name a host that is a
given fraction slower (``slow-nodes --detect 2%``).

The model is the judge's own (:func:`~exemplar_tune.orchestration.slow_nodes.judge`): ``hosts``
hosts run ``runs`` times each, every run's time-like value varies around its host's level with
coefficient of variation ``noise_cv`` (gaussian, independent runs), one host's level is
``1 + slowdown`` times the others'. That host is compared with the pooled runs of the other
``hosts - 1`` (Welch, delta method, ``stats.compare``) at ``1 - (1 - confidence) / hosts``, and
named when the whole interval lies above zero and the estimated slowdown is at least
``min_slowdown``. Its power is

    P(slowdown_hat > max(min_slowdown, t_q(df) * se_hat))

where ``slowdown_hat`` is normal around ``slowdown`` with the delta method's standard error
``(1 + slowdown) * noise_cv * sqrt((1 + 1 / (hosts - 1)) / runs)``, ``t_q(df)`` is the
judge's Student quantile at the Welch degrees of freedom, and ``se_hat`` its estimated
standard error. The slow host's sample variance (``runs - 1`` degrees of freedom, independent
of its mean for gaussian runs) is integrated out exactly (its chi distribution, Simpson's
rule); the pooled reference's variance, estimated on ``(hosts - 1) * runs - 1`` degrees of
freedom, is taken at its expectation. ``bench/slow_power.py`` checks this against the judge
itself on simulated fleets, and prints both side by side.

Standard library only, as :mod:`.stats`. Bad inputs raise ``ValueError`` with one line.
"""

from __future__ import annotations

import math
import re
import statistics

from exemplar_tune.errors import UserError
from exemplar_tune.orchestration.slow_nodes import MIN_HOSTS, MIN_RUNS, MIN_SLOWDOWN
from exemplar_tune.orchestration.stats import CONFIDENCE, t_ppf

POWER = 0.95  # the default chance of naming the slow host
MAX_RUNS_NEEDED = 100_000  # beyond this, runs_needed refuses: the slowdown is out of reach
_INTERVALS = 96  # Simpson intervals over the slow host's sample standard deviation
_NORMAL = statistics.NormalDist()


def _check(slowdown: float, noise_cv: float, hosts: int, confidence: float,
           min_slowdown: float) -> None:
    if not isinstance(slowdown, int | float) or not 0 < slowdown < 10 or math.isnan(slowdown):
        raise ValueError(f"slowdown {slowdown!r}: a fraction above 0, e.g. 0.02 for 2 %")
    if not isinstance(noise_cv, int | float) or not 0 <= noise_cv < 1 or math.isnan(noise_cv):
        raise ValueError(f"noise cv {noise_cv!r}: a fraction from 0 to 1, e.g. 0.01 for 1 %")
    if isinstance(hosts, bool) or not isinstance(hosts, int) or hosts < MIN_HOSTS:
        raise ValueError(f"hosts {hosts!r}: a whole number of at least {MIN_HOSTS}")
    if not isinstance(confidence, int | float) or not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence!r}: a fraction between 0 and 1, e.g. 0.9")
    if not isinstance(min_slowdown, int | float) or not 0 <= min_slowdown < 1:
        raise ValueError(f"min slowdown {min_slowdown!r}: a fraction from 0 to 1")


def detection_power(slowdown: float, noise_cv: float, hosts: int, runs: int,
                    confidence: float = CONFIDENCE,
                    min_slowdown: float = MIN_SLOWDOWN) -> float:
    """The chance that ``slow-nodes`` names one host ``slowdown`` slower than the others
    (fractions: 0.02 is 2 %), at ``noise_cv`` run-to-run noise, ``hosts`` hosts and ``runs``
    runs each, with its ``confidence`` and ``min_slowdown`` (the module docstring's model).
    ``ValueError`` for inputs outside the judge's domain (fewer than ``MIN_RUNS`` runs or
    ``MIN_HOSTS`` hosts, fractions out of range)."""
    _check(slowdown, noise_cv, hosts, confidence, min_slowdown)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < MIN_RUNS:
        raise ValueError(f"runs {runs!r}: a whole number of at least {MIN_RUNS}")
    if noise_cv == 0:
        return 1.0 if slowdown >= min_slowdown else 0.0
    quantile = 1.0 - (1.0 - confidence) / (2.0 * hosts)
    scale = (1.0 + slowdown) ** 2 * noise_cv ** 2 / runs  # a host's variance of its mean
    u_ref = scale / (hosts - 1)  # the pooled reference's share, at its expectation
    sd = math.sqrt(scale + u_ref)
    ref_df, own_df = (hosts - 1) * runs - 1, runs - 1

    def named(chi: float) -> float:
        """P(named) when the slow host's sample sd is ``chi / sqrt(own_df)`` of its true sd."""
        u_own = scale * chi * chi / own_df
        se = math.sqrt(u_own + u_ref)
        df = (u_own + u_ref) ** 2 / (u_ref ** 2 / ref_df + u_own ** 2 / own_df)
        bar = max(min_slowdown, t_ppf(quantile, df) * se)
        return 1.0 - _NORMAL.cdf((bar - slowdown) / sd)

    # chi density with own_df degrees of freedom, integrated over [0, top] by Simpson's rule
    log_norm = (1.0 - own_df / 2.0) * math.log(2.0) - math.lgamma(own_df / 2.0)
    top = math.sqrt(own_df) + 8.0
    step = top / _INTERVALS
    total = 0.0
    for i in range(_INTERVALS + 1):
        chi = i * step
        if chi == 0.0:
            continue  # the density is 0 there for own_df >= 2 (MIN_RUNS >= 3)
        density = math.exp(log_norm + (own_df - 1) * math.log(chi) - chi * chi / 2.0)
        weight = 1 if i == _INTERVALS else (4 if i % 2 else 2)
        total += weight * density * named(chi)
    return min(1.0, max(0.0, total * step / 3.0))


def runs_needed(slowdown: float, noise_cv: float, hosts: int, confidence: float = CONFIDENCE,
                power: float = POWER, min_slowdown: float = MIN_SLOWDOWN) -> int:
    """The fewest runs per host (at least ``MIN_RUNS``) with which ``slow-nodes`` names a
    host ``slowdown`` slower than the others with at least ``power``, at ``noise_cv``
    run-to-run noise over ``hosts`` hosts (:func:`detection_power`). ``ValueError`` (one
    line) for bad inputs, and where no number of runs up to ``MAX_RUNS_NEEDED`` reaches
    ``power``: a slowdown at or below ``min_slowdown`` is never named reliably."""
    _check(slowdown, noise_cv, hosts, confidence, min_slowdown)
    if not isinstance(power, int | float) or not 0 < power < 1:
        raise ValueError(f"power {power!r}: a fraction between 0 and 1, e.g. 0.95")
    if slowdown - min_slowdown < 1e-12:
        raise ValueError(f"a {_pct(slowdown)} slower host is never named reliably with a "
                         f"minimum slowdown of {_pct(min_slowdown)}: lower --min-slowdown")

    # a lower bound: the estimate alone must clear min_slowdown with ``power`` (no interval)
    z = max(0.0, _NORMAL.inv_cdf(power))
    floor = (z * (1.0 + slowdown) * noise_cv / (slowdown - min_slowdown)) ** 2 \
        * (1.0 + 1.0 / (hosts - 1))
    if floor > MAX_RUNS_NEEDED:
        raise ValueError(_beyond(slowdown, noise_cv, power, min_slowdown))

    def enough(runs: int) -> bool:
        return detection_power(slowdown, noise_cv, hosts, runs, confidence,
                               min_slowdown) >= power

    low, high = MIN_RUNS, MIN_RUNS
    while not enough(high):
        if high >= MAX_RUNS_NEEDED:
            raise ValueError(_beyond(slowdown, noise_cv, power, min_slowdown))
        low, high = high + 1, min(max(2 * high, math.ceil(floor)), MAX_RUNS_NEEDED)
    while low < high:  # the fewest runs in [low, high] that are enough (high is)
        middle = (low + high) // 2
        if enough(middle):
            high = middle
        else:
            low = middle + 1
    return high


def _beyond(slowdown: float, noise_cv: float, power: float, min_slowdown: float) -> str:
    return (f"a {_pct(slowdown)} slower host at {_pct(noise_cv)} run-to-run noise needs more "
            f"than {MAX_RUNS_NEEDED} runs per host for {_pct(power)} power (minimum slowdown "
            f"{_pct(min_slowdown)})")


def detect_line(slowdown: float, noise_cv: float, hosts: int, runs: int | None = None,
                confidence: float = CONFIDENCE, power: float = POWER,
                min_slowdown: float = MIN_SLOWDOWN) -> str:
    """One line for the CLI: the runs per host :func:`runs_needed` gives, and with ``runs``
    (the runs just made) the power those had, e.g. ``to see a 2% slower host with 95% power
    at 3% run-to-run noise over 32 hosts: --runs N (--runs 5 gave P%)``. Where no number of
    runs is enough, the line says why instead of a number; ``ValueError`` for bad inputs."""
    _check(slowdown, noise_cv, hosts, confidence, min_slowdown)
    if not isinstance(power, int | float) or not 0 < power < 1:
        raise ValueError(f"power {power!r}: a fraction between 0 and 1, e.g. 0.95")
    head = (f"to see a {_pct(slowdown)} slower host with {_pct(power)} power at "
            f"{_pct(noise_cv)} run-to-run noise over {hosts} hosts")
    try:  # the inputs are good: only a slowdown out of reach is refused
        needed = f"--runs {runs_needed(slowdown, noise_cv, hosts, confidence, power, min_slowdown)}"
    except ValueError:
        if slowdown - min_slowdown < 1e-12:
            return (f"{head}: never, {_pct(slowdown)} is not above --min-slowdown "
                    f"{_pct(min_slowdown)}")
        needed = f"more than {MAX_RUNS_NEEDED} runs per host"
    if runs is not None and runs >= MIN_RUNS:
        had = detection_power(slowdown, noise_cv, hosts, runs, confidence, min_slowdown)
        needed += f" (--runs {runs} gave {had:.0%})"
    return f"{head}: {needed}"


_SLOWDOWN = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*")


def parse_slowdown(text: str, option: str = "--detect") -> float:
    """``2%`` or ``0.02`` as the fraction 0.02; ``UserError`` (one line naming ``option``) for
    anything else, or a slowdown not above 0 and below 1000 %."""
    found = _SLOWDOWN.fullmatch(text)
    value = float(found.group(1)) / (100.0 if found.group(2) else 1.0) if found else math.nan
    if not 0 < value < 10:
        raise UserError(f"{option} {text}: a slowdown such as 2% or 0.02")
    return value


def _pct(fraction: float) -> str:
    """``2%``, ``2.5%``, ``0.25%``: a percentage with no trailing zeros."""
    text = f"{100 * fraction:.2f}".rstrip("0").rstrip(".")
    return f"{text}%"
