"""The keep/restore decision rule (orchestration.stats) and its simulation benchmark."""

from __future__ import annotations

import importlib.util
import math
import random
import statistics
import sys
from pathlib import Path

import pytest

from exemplar_tune.orchestration.boundary import nominal_levels
from exemplar_tune.orchestration.stats import (
    BLOCK_RUNS,
    Comparison,
    SequentialTest,
    compare,
    decide_shapes,
    t_ppf,
    tail_drop,
    tail_stats,
)

REPO = Path(__file__).resolve().parent.parent

# Student t quantiles from standard tables (two-sided 95 % and 99 %).
T_TABLE = [
    (0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 3, 3.1824), (0.975, 5, 2.5706),
    (0.975, 10, 2.2281), (0.975, 30, 2.0423), (0.995, 1, 63.6567), (0.995, 4, 4.6041),
    (0.995, 20, 2.8453), (0.95, 7, 1.8946), (0.025, 10, -2.2281), (0.5, 3, 0.0),
    (0.975, math.inf, 1.9600),
]


@pytest.mark.parametrize(("p", "df", "want"), T_TABLE)
def test_t_ppf_matches_table(p: float, df: float, want: float) -> None:
    have = t_ppf(p, df)
    assert have == pytest.approx(want, abs=1e-4)


def test_t_ppf_fractional_df_lies_between_neighbours() -> None:
    assert t_ppf(0.975, 4) > t_ppf(0.975, 4.5) > t_ppf(0.975, 5)


@pytest.mark.parametrize(("p", "df"), [(0.0, 3), (1.0, 3), (0.9, 0), (0.9, math.nan)])
def test_t_ppf_rejects_bad_arguments(p: float, df: float) -> None:
    with pytest.raises(ValueError, match="t quantile"):
        t_ppf(p, df)


BAND = 0.01  # a practical-significance floor, for the tests of rule 4's band
BASE = [100.0, 100.5, 99.5, 100.2, 99.8]


def test_compare_clear_improvement_lower_is_better_keeps() -> None:
    have = compare(BASE, [90.0, 90.4, 89.6, 90.1, 89.9], higher_is_better=False)
    assert have.verdict == "better" and have.action == "keep"
    assert have.rel_change == pytest.approx(0.10)
    assert have.ci_low > 0.01 and (have.n_baseline, have.n_candidate) == (5, 5)


def test_compare_clear_regression_restores() -> None:
    have = compare(BASE, [110.0, 110.4, 109.6, 110.1, 109.9], higher_is_better=False)
    assert have.verdict == "worse" and have.action == "restore"
    assert have.ci_high < -0.01


def test_compare_direction_flips_for_higher_is_better() -> None:
    cand = [110.0, 110.4, 109.6, 110.1, 109.9]
    assert compare(BASE, cand, higher_is_better=True).verdict == "better"
    assert compare(BASE, cand, higher_is_better=False).verdict == "worse"


def test_compare_noise_is_equivalent_when_tight() -> None:
    have = compare(BASE, [100.1, 99.9, 100.3, 99.7, 100.0], higher_is_better=False,
                   min_effect=BAND)
    assert have.verdict == "equivalent" and have.action == "restore"
    assert -0.01 < have.ci_low <= have.rel_change <= have.ci_high < 0.01


def test_compare_noise_is_inconclusive_when_wide() -> None:
    have = compare([100.0, 104.0, 96.0], [101.0, 97.0, 105.0], higher_is_better=False)
    assert have.verdict == "inconclusive" and have.action == "continue"


@pytest.mark.parametrize(("baseline", "candidate", "message"), [
    ([], [1.0, 2.0], "baseline: need at least 2 runs"),
    ([1.0, 2.0], [3.0], "candidate: need at least 2 runs"),
    ([0.0, 0.0], [1.0, 1.0], "baseline mean must be positive"),
    ([-1.0, -2.0], [1.0, 1.0], "baseline mean must be positive"),
    ([1.0, math.nan], [1.0, 1.0], "baseline: values must be finite"),
    ([1.0, 1.0], [math.inf, 1.0], "candidate: values must be finite"),
])
def test_compare_rejects_bad_input(baseline: list[float], candidate: list[float],
                                   message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compare(baseline, candidate, higher_is_better=False)


def feed(test: SequentialTest, base: list[float], cand: list[float]) -> tuple[str, int]:
    """Add A/B pairs in next_arm() order until a decision; return (action, pairs used)."""
    values = {"A": iter(base), "B": iter(cand)}
    while True:
        arm = test.next_arm()
        test.add(arm, "s", next(values[arm]))
        decision = test.decide()
        if decision.action != "continue":
            return decision.action, test.runs("B")


def test_sequential_first_looks_after_one_abba_block() -> None:
    test = SequentialTest(higher_is_better=False)
    order, actions = [], []
    for _ in range(4):
        order.append(test.next_arm())
        test.add(order[-1], "s", 1.0 if order[-1] == "A" else 0.9)
        actions.append(test.decide().action)
    assert order == ["A", "B", "B", "A"]
    assert actions == ["continue", "continue", "continue", "keep"]


def test_blocks_measure_at_least_block_runs_of_baseline() -> None:
    for min_runs, baseline in ((2, BLOCK_RUNS), (4, 4)):
        test = SequentialTest(higher_is_better=False, interleave=False, min_runs=min_runs,
                              max_runs=5)
        order = []
        while test.decide().action == "continue":
            order.append(test.next_arm())
            test.add(order[-1], "s", 1.0 + 0.01 * len(order) if order[-1] == "A" else 1.0)
        assert order[:baseline] == ["A"] * baseline and set(order[baseline:]) == {"B"}
        assert min_runs <= test.runs("B") <= 5


def test_sequential_stops_early_on_big_effect() -> None:
    """-20 %: kept at the second look; the first (2 pairs, nominal 0.001 %) is strict."""
    test = SequentialTest(higher_is_better=False)
    action, pairs = feed(test, [1.00, 1.01, 0.99] * 2, [0.80, 0.81, 0.79] * 2)
    assert (action, pairs) == ("keep", 3)


def test_a_keep_waits_until_the_gain_is_clear_of_zero() -> None:
    """+4.5 % +- 0.7 %: its 90 % interval clears 0 from the first look, but the boundary is
    strict at 2 and 3 pairs; kept at the fourth look."""
    test = SequentialTest(higher_is_better=False)
    action, pairs = feed(test, [0.993, 1.007] * 5, [0.948, 0.962] * 5)
    assert (action, pairs) == ("keep", 4)
    early = SequentialTest(higher_is_better=False)
    for arm, value in (("A", 0.993), ("B", 0.948), ("B", 0.962), ("A", 1.007)):
        early.add(arm, "s", value)
    first_look = early.decide()
    assert first_look.action == "continue" and first_look.comparisons[0].ci_low > 0
    assert (f"not yet clear of 0 at this look's boundary (one-sided "
            f"{early.look_alpha(2):.2g})") in first_look.reason


def test_sequential_restores_at_max_runs_when_inconclusive() -> None:
    test = SequentialTest(higher_is_better=False, max_runs=6, min_effect=BAND)
    base = [1.000, 1.020, 0.980, 1.015, 0.985, 1.000]
    cand = [0.983, 0.996, 0.962, 0.994, 0.969, 0.977]  # about +2 %, never clear of +1 %
    action, pairs = feed(test, base, cand)
    assert (action, pairs) == ("restore", 6)
    assert "inconclusive after 6+6 runs" in test.decide().reason


def test_sequential_restores_early_when_a_keep_is_out_of_reach() -> None:
    """+1 % with 0.4 % noise cannot be shown beyond +1 % by max_runs: no need to run them all."""
    base = [1.000, 1.005, 0.995, 1.004, 0.996, 1.000, 1.003, 0.997, 1.002, 0.998]
    test = SequentialTest(higher_is_better=False, min_effect=BAND)
    action, pairs = feed(test, base, [b - 0.010 for b in base])
    assert action == "restore" and pairs < test.max_runs == len(base)
    assert "a keep is out of reach" in test.decide().reason
    # three times that gain is kept
    assert feed(SequentialTest(higher_is_better=False, min_effect=BAND), base,
                [b - 0.030 for b in base])[0] == "keep"


def test_a_gain_that_can_never_clear_zero_is_curtailed() -> None:
    """+1 % with 8 % run-to-run spread: even a standard error better, the gain could not
    clear the last look's boundary by max_runs; at 2 pairs a standard error is still too
    wide to say so, at 4 it is not (10 runs shrink it by sqrt(4/10) only)."""
    test = SequentialTest(higher_is_better=False)
    action, pairs = feed(test, [0.92, 1.08] * 5, [0.91, 1.07] * 5)
    assert (action, pairs) == ("restore", 4)
    assert "a keep is out of reach" in test.decide().reason


def test_blocks_curtail_against_the_fixed_baseline_block() -> None:
    """In blocks the baseline does not grow: its spread alone puts +1 % out of reach."""
    test = SequentialTest(higher_is_better=False, interleave=False, min_effect=BAND)
    for value in (1.00, 1.01, 0.99):
        test.add("A", "s", value)
    for value in (0.99, 0.99):
        test.add("B", "s", value)
    decision = test.decide()
    assert decision.action == "restore" and "a keep is out of reach" in decision.reason
    assert test.arm_limit("A") == BLOCK_RUNS and test.arm_limit("B") == test.max_runs


def test_sequential_looks_follow_the_spending_boundary() -> None:
    """The keep error is spent by the boundary over the looks min_runs..max_runs: strict
    early, close to the fixed-sample level last, more than Bonferroni's even split there."""
    test = SequentialTest(higher_is_better=True, confidence=0.95, min_runs=3, max_runs=6)
    levels = nominal_levels(0.025, [3 / 6, 4 / 6, 5 / 6, 1.0])
    assert [test.look_alpha(look) for look in range(3, 7)] == pytest.approx(levels)
    assert test.look_confidence(3) == pytest.approx(1 - 2 * levels[0])
    assert levels[0] < 0.025 / 4 < levels[-1] < 0.025
    pocock = SequentialTest(higher_is_better=True, confidence=0.95, min_runs=3, max_runs=6,
                            spending="pocock")
    assert pocock.look_alpha(3) > test.look_alpha(3)
    assert test.look_alpha(6, share=0.2) < test.look_alpha(6)
    with pytest.raises(ValueError, match="spending function 'linear'"):
        SequentialTest(higher_is_better=True, spending="linear")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"min_runs": 1}, "min_runs"), ({"min_runs": 5, "max_runs": 4}, "min_runs"),
    ({"stop_confidence": 1.0}, "confidences"),
])
def test_sequential_rejects_bad_parameters(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SequentialTest(higher_is_better=True, **kwargs)


def test_sequential_rejects_bad_arm_and_nan() -> None:
    test = SequentialTest(higher_is_better=True)
    with pytest.raises(ValueError, match="arm must be"):
        test.add("C", "s", 1.0)
    with pytest.raises(ValueError, match="finite"):
        test.add("A", "s", math.nan)


def comparison(shape: str, low: float, high: float, verdict: str) -> Comparison:
    return Comparison(shape, (low + high) / 2, low, high, 3, 3, verdict)  # type: ignore[arg-type]


def test_shapes_better_plus_inconclusive_keeps() -> None:
    action, reason = decide_shapes([comparison("big", 0.02, 0.06, "better"),
                                    comparison("small", -0.03, 0.05, "inconclusive")])
    assert action == "keep" and "big" in reason


def test_shapes_better_plus_worse_restores() -> None:
    action, reason = decide_shapes([comparison("big", 0.02, 0.06, "better"),
                                    comparison("small", -0.06, -0.02, "worse")])
    assert action == "restore" and reason.startswith("worse") and "small" in reason


def test_shapes_all_no_benefit_restores_and_inconclusive_continues() -> None:
    assert decide_shapes([comparison("a", -0.005, 0.005, "equivalent"),
                          comparison("b", -0.03, 0.002, "no_benefit")])[0] == "restore"
    assert decide_shapes([comparison("a", -0.005, 0.005, "equivalent"),
                          comparison("b", -0.03, 0.05, "inconclusive")])[0] == "continue"
    with pytest.raises(ValueError, match="at least one"):
        decide_shapes([])


def test_sequential_multi_shape_needs_every_shape() -> None:
    test = SequentialTest(higher_is_better=True)
    for base, cand in [(100.0, 120.0), (101.0, 121.0), (99.0, 119.0)]:
        test.add("A", "big", base)
        test.add("B", "big", cand)
    assert test.runs("A") == 3
    test.add("A", "small", 10.0)
    assert test.runs("A") == 1 and test.shapes() == ["big", "small"]


def steps(stalls: int, n: int = 100, base: float = 1.0) -> list[float]:
    """Deterministic step times: +-2 ms jitter, ``stalls`` steps of +80 ms."""
    out = [base + 0.002 * ((i % 5) - 2) for i in range(n)]
    for i in range(stalls):
        out[i * (n // max(stalls, 1))] += 0.080
    return out


def test_tail_stats_counts_stalls() -> None:
    have = tail_stats(steps(4))
    assert have["p50"] == pytest.approx(1.0)
    assert have["tail_fraction"] == pytest.approx(0.04)
    assert have["stall_ms_mean"] == pytest.approx(80.0, abs=5.0)
    assert have["p99"] > 1.05
    assert tail_stats(steps(0))["tail_fraction"] == 0.0
    assert tail_stats(steps(0))["stall_ms_mean"] == 0.0


@pytest.mark.parametrize("bad", [[], [1.0, math.nan]])
def test_tail_stats_rejects_bad_input(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="step times"):
        tail_stats(bad)


def test_tail_drop_needs_a_significant_halving() -> None:
    assert tail_drop([(4, 100)] * 4, [(0, 100)] * 4, 0.9875)[0] is True
    assert tail_drop([(4, 100)] * 4, [(3, 100)] * 4, 0.9875)[0] is False
    assert tail_drop([(0, 100)] * 4, [(0, 100)] * 4, 0.9875)[0] is False


def tail_pairs(stalls: int, pairs: int = 10) -> list[str]:
    """Feed pairs of runs with ``stalls`` per 100 steps (A) and none (B), medians equal,
    until a decision; the actions after each pair."""
    test, actions = SequentialTest(higher_is_better=False), []
    for index in range(pairs):
        j = [0.0, 0.004, -0.004, 0.002][index % 4]
        a, b = [s + j for s in steps(stalls)], [s + j for s in steps(0)]
        for arm, run in (("A", a), ("B", b)):
            test.add(arm, "s", sorted(run)[50], steps=run)
        actions.append(test.decide().action)
        if actions[-1] != "continue":
            assert "credited for the tail" in test.decide().comparisons[0].note
            break
    return actions


def test_tail_credit_keeps_a_layer_that_removes_stalls() -> None:
    """5 stalls per 100 steps removed: credited at the fourth look."""
    assert tail_pairs(5) == ["continue"] * 3 + ["keep"]


def test_a_promising_tail_drop_is_measured_on_instead_of_restored() -> None:
    """2 stalls per 100 steps removed, medians equal: the drop is suggestive only for five
    looks (the medians alone would restore as equivalent), then credited."""
    assert tail_pairs(2) == ["continue"] * 5 + ["keep"]


def test_no_waiting_for_a_tail_when_the_median_is_worse() -> None:
    """Stalls removed but the median clearly 5 % slower: restored at the first look."""
    test = SequentialTest(higher_is_better=False)
    for j in [0.0, 0.004]:
        a, b = [s + j for s in steps(4)], [s * 1.05 + j for s in steps(0)]
        for arm, run in (("A", a), ("B", b)):
            test.add(arm, "s", sorted(run)[50], steps=run)
    decision = test.decide()
    assert decision.action == "restore" and decision.reason.startswith("worse")


def test_tail_credit_refused_when_median_worse() -> None:
    test = SequentialTest(higher_is_better=False)
    for j in [0.0, 0.004, -0.004]:
        a, b = [s + j for s in steps(5)], [s * 1.05 + j for s in steps(0)]
        test.add("A", "s", sorted(a)[50], steps=a)
        test.add("B", "s", sorted(b)[50], steps=b)
    assert test.decide().action == "restore"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_decision", REPO / "bench" / "decision.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_bench_false_keep_rate_at_zero_effect_is_low() -> None:
    bench = load_bench()
    cells = [bench.Cell(0.0, cv, 0.0) for cv in (0.005, 0.02)]
    results = bench.simulate(40, seed=3, workers=1, cells=cells)
    keeps = sum(results[c]["ours"][0] for c in cells)
    assert keeps / (40 * len(cells)) < 0.10
    again = bench.simulate(40, seed=3, workers=1, cells=cells)
    assert again == results


def test_obrien_fleming_boundary_matches_published_values() -> None:
    """Lan-DeMets O'Brien-Fleming-type spending, 5 equally spaced looks, one-sided 2.5 %:
    z = 4.877, 3.357, 2.680, 2.290, 2.031 (Jennison and Turnbull 2000, table 7.6)."""
    normal = statistics.NormalDist()
    levels = nominal_levels(0.025, [0.2, 0.4, 0.6, 0.8, 1.0])
    assert [round(normal.inv_cdf(1 - p), 3) for p in levels] == [4.877, 3.357, 2.680, 2.290,
                                                                  2.031]
    pocock = nominal_levels(0.025, [0.2, 0.4, 0.6, 0.8, 1.0], "pocock")
    assert [round(normal.inv_cdf(1 - p), 2) for p in pocock] == [2.44, 2.43, 2.41, 2.40, 2.39]


def test_boundary_spends_exactly_alpha_under_no_effect() -> None:
    """Simulated Brownian motion at the looks: the share crossing any boundary is alpha."""
    fractions = [n / 10 for n in range(2, 11)]
    levels = nominal_levels(0.05, fractions)
    bounds = [statistics.NormalDist().inv_cdf(1 - p) for p in levels]
    rng, crossed, trials = random.Random(5), 0, 20000
    for _ in range(trials):
        total, previous = 0.0, 0.0
        for fraction, bound in zip(fractions, bounds, strict=True):
            total += rng.gauss(0.0, math.sqrt(fraction - previous))
            previous = fraction
            if total / math.sqrt(fraction) >= bound:
                crossed += 1
                break
    assert crossed / trials == pytest.approx(0.05, abs=0.005)


@pytest.mark.parametrize(("alpha", "fractions", "message"), [
    (0.6, [1.0], "alpha"), (0.05, [0.5, 0.5], "increase"), (0.05, [], "increase"),
    (0.05, [0.5, 1.5], "fraction"),
])
def test_boundary_rejects_bad_parameters(alpha: float, fractions: list[float],
                                         message: str) -> None:
    with pytest.raises(ValueError, match=message):
        nominal_levels(alpha, fractions)
