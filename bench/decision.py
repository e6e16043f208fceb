#!/usr/bin/env python3
"""Simulated keep/restore decisions: our sequential rule against two fixed protocols.

Each trial simulates benchmark runs of a lower-is-better step time (1 s nominal) with a known
true effect ``e`` of the candidate (``e > 0`` is faster: candidate level = ``1 - e``). A run's
level varies run to run with coefficient of variation ``cv`` (this is the noise that matters,
because the run is the independent unit); inside a run, 100 steps carry 0.5 % jitter and, at
stall rate ``s``, a fraction ``s`` of steps gains a stall of 50-100 ms. The run value is the
median step time. Arms share the drawn runs (common random numbers) so methods are compared
on the same data.

Methods:

* ``ours``: :class:`~exemplar_tune.orchestration.stats.SequentialTest`, its defaults (2..10
  runs per arm, keep when the 90 % interval lies beyond the 1 % minimum effect and the gain is
  clear of 0 at 90 % Bonferroni-split over the looks, early restore on 80 %, curtailment, tail
  credit); ``--min-runs``, ``--max-runs``, ``--confidence``, ``--stop-confidence`` and
  ``--min-effect`` override them. It draws further runs where it needs more than the fixed
  protocols (from its own seeded stream, so theirs are unchanged).
* ``welch``: fixed 5+5 runs, Welch t-test at alpha 0.05 (two-sided); keep when significant
  and in the good direction.
* ``keentune``: our reading of KeenTune's fixed protocol (``BASELINE_BENCH_ROUND=5``,
  ``TUNING_BENCH_ROUND=3``, ``RECHECK_BENCH_ROUND=4``): 5 baseline runs, 3 candidate runs,
  then 4 recheck runs of the candidate; keep when the candidate mean beats the baseline mean
  and the recheck mean beats it too. No threshold, no significance test; always 12 runs.

Correct decision: keep when ``e >= +2 %``, restore when ``e <= 0``;
either is accepted in between (+1 %). A separate "tail" scenario (``e = 0``, baseline stalls
2 %, candidate none) counts keep as correct; it is reported but is not part of the targets.

Targets (PASS/FAIL): false keeps <= 5 % at e = 0 (pooled over cv and stall rate);
>= 95 % correct at |e| >= 2 % with cv <= 1 % (pooled; the worst cell is printed too);
mean runs <= 60 % of the 12-run protocol (over all cells of the grid).

    python bench/decision.py                  # default trials, seed 1
    python bench/decision.py --trials 100 --seed 7
    python bench/decision.py --max-runs 4        # fewer runs, less power
    python bench/decision.py --min-effect 0.005  # a narrower band: more power at +2 %
    python bench/decision.py --power             # runs any such rule needs, no simulation

``--power`` prints, per effect and cv, the runs per arm a fixed-size test needs to keep a true
effect with 95 % power when it must show the effect beyond the minimum effect at one-sided
5 % (normal approximation, a lower bound for sequential designs, which pay for their looks):
``n = 2 (cv (z_0.95 + z_0.95) / (e - min_effect))^2``, at least 2 (a spread needs two runs);
"never" where the effect does not exceed the minimum effect.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exemplar_tune.orchestration.boundary import SPENDING_FUNCTIONS  # noqa: E402
from exemplar_tune.orchestration.stats import (  # noqa: E402
    CONFIDENCE,
    MAX_RUNS,
    MIN_EFFECT,
    MIN_RUNS,
    SPENDING,
    STOP_CONFIDENCE,
    TAIL_SHARE,
    SequentialTest,
    run_value,
    t_cdf,
)

EFFECTS = (-0.04, -0.02, -0.01, 0.0, 0.01, 0.02, 0.04)
CVS = (0.005, 0.01, 0.02, 0.03)
STALL_RATES = (0.0, 0.02)
STEPS, JITTER, PROTOCOL_RUNS = 100, 0.005, 12
KEEP_AT = 0.02  # effects this large must be kept (the targets' |e| >= 2 %)
METHODS = ("ours", "welch", "keentune")


@dataclass(frozen=True)
class Cell:
    """One simulated condition; ``tail_only`` removes the candidate's stalls instead."""

    effect: float
    cv: float
    stall: float
    tail_only: bool = False


def simulate_run(rng: random.Random, level: float, cv: float, stall: float) -> list[float]:
    """Step times of one run: run-level noise, step jitter, occasional stalls."""
    run_level = level * (1.0 + cv * rng.gauss(0.0, 1.0))
    return [run_level * (1.0 + JITTER * rng.gauss(0.0, 1.0))
            + (rng.uniform(0.05, 0.10) if rng.random() < stall else 0.0) for _ in range(STEPS)]


def runs_of(rng: random.Random, drawn: list[list[float]], level: float, cv: float,
            stall: float) -> Iterator[list[float]]:
    """The runs already drawn, then fresh ones from ``rng`` for as long as they are asked for."""
    yield from drawn
    while True:
        yield simulate_run(rng, level, cv, stall)


def ours(base: Iterator[list[float]], cand: Iterator[list[float]],
         rule: dict[str, float] | None = None) -> tuple[bool, int]:
    """Run the sequential rule in its A B B A order, deciding after every run as the loop
    does; return (kept, runs used). ``rule`` overrides :class:`SequentialTest` parameters."""
    test = SequentialTest(higher_is_better=False, **(rule or {}))
    arms = {"A": base, "B": cand}
    while True:
        arm = test.next_arm()
        steps = next(arms[arm])
        test.add(arm, "default", run_value(steps), steps=steps)
        decision = test.decide()
        if decision.action != "continue":
            return decision.action == "keep", test.runs("A") + test.runs("B")


def welch(base: list[float], cand: list[float]) -> bool:
    """Fixed 5+5 Welch t-test, alpha 0.05 two-sided, keep when faster and significant."""
    a, b = base[:5], cand[:5]
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(a) - statistics.fmean(b)  # > 0: candidate faster
    if va + vb == 0:
        return diff > 0
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    p = 2.0 * (1.0 - t_cdf(abs(diff) / math.sqrt(va + vb), df))
    return p < 0.05 and diff > 0


def keentune(base: list[float], cand: list[float]) -> bool:
    """5 baseline, 3 candidate, 4 recheck: keep when both candidate means beat the baseline."""
    ref = statistics.fmean(base[:5])
    return statistics.fmean(cand[:3]) < ref and statistics.fmean(cand[3:7]) < ref


def run_cell(cell: Cell, trials: int, seed: int,
             rule: dict[str, float] | None = None) -> dict[str, tuple[int, int]]:
    """Per method: (keeps, total runs) over ``trials`` seeded trials of one cell."""
    rng = random.Random(f"{seed}:{cell}")
    cand_stall = 0.0 if cell.tail_only else cell.stall
    result = {m: [0, 0] for m in METHODS}
    for trial in range(trials):
        base = [simulate_run(rng, 1.0, cell.cv, cell.stall) for _ in range(6)]
        cand = [simulate_run(rng, 1.0 - cell.effect, cell.cv, cand_stall) for _ in range(7)]
        more = random.Random(f"{seed}:{cell}:{trial}")  # runs beyond those drawn, ours only
        kept, runs = ours(runs_of(more, base, 1.0, cell.cv, cell.stall),
                          runs_of(more, cand, 1.0 - cell.effect, cell.cv, cand_stall), rule)
        base_v, cand_v = [run_value(r) for r in base], [run_value(r) for r in cand]
        for method, k, n in (("ours", kept, runs), ("welch", welch(base_v, cand_v), 10),
                             ("keentune", keentune(base_v, cand_v), PROTOCOL_RUNS)):
            result[method][0] += k
            result[method][1] += n
    return {m: (k, n) for m, (k, n) in result.items()}


def correct(cell: Cell, keeps: int, trials: int) -> float | None:
    """Fraction of correct decisions, ``None`` where either answer is accepted."""
    if cell.tail_only or cell.effect >= KEEP_AT - 1e-12:
        return keeps / trials
    if cell.effect <= 0:
        return 1.0 - keeps / trials
    return None


def grid() -> list[Cell]:
    """The effect x cv x stall grid plus the tail-only scenario per cv."""
    cells = [Cell(e, cv, s) for e in EFFECTS for cv in CVS for s in STALL_RATES]
    return cells + [Cell(0.0, cv, 0.02, tail_only=True) for cv in CVS]


def simulate(trials: int, seed: int, workers: int = 2, cells: list[Cell] | None = None,
             rule: dict[str, float] | None = None) -> dict[Cell, dict[str, tuple[int, int]]]:
    """Run every cell (in ``workers`` processes when > 1); deterministic for a seed."""
    cells = grid() if cells is None else cells
    if workers <= 1:
        return {c: run_cell(c, trials, seed, rule) for c in cells}
    with ProcessPoolExecutor(workers) as pool:
        futures = [pool.submit(run_cell, c, trials, seed, rule) for c in cells]
        return {c: f.result() for c, f in zip(cells, futures, strict=True)}


def runs_for_power(effect: float, cv: float, min_effect: float, power: float = 0.95,
                   alpha: float = 0.05) -> float:
    """Runs per arm a fixed-size one-sided test at ``alpha`` needs to show ``effect`` beyond
    ``min_effect`` with ``power`` (normal approximation); ``inf`` when ``effect <= min_effect``."""
    if effect <= min_effect:
        return math.inf
    z = statistics.NormalDist().inv_cdf
    return 2.0 * (cv * (z(1 - alpha) + z(power)) / (effect - min_effect)) ** 2


def power_table(min_effect: float) -> list[str]:
    """:func:`runs_for_power` for the kept effects of the grid against its cvs."""
    lines = [f"runs per arm for 95 % power, interval beyond +{min_effect:.1%} at one-sided 5 %:",
             f"{'effect':>7} " + " ".join(f"{f'cv {cv:.1%}':>9}" for cv in CVS)]
    for effect in (e for e in EFFECTS if e >= KEEP_AT - 1e-12):
        needs = (runs_for_power(effect, cv, min_effect) for cv in CVS)
        lines.append(f"{effect:+7.0%} " + " ".join(
            f"{'never' if math.isinf(n) else max(2, math.ceil(n)):>9}" for n in needs))
    return lines


def _pct(x: float | None) -> str:
    return "   -  " if x is None else f"{100 * x:5.1f}%"


def table(results: dict[Cell, dict[str, tuple[int, int]]], trials: int) -> list[str]:
    """Rows per (effect, cv), stall rates pooled: keep %, correct %, mean runs per method."""
    head = f"{'effect':>7} {'cv':>5} | " + " | ".join(
        f"{m:^24}" for m in METHODS)
    lines = [head, f"{'':>13} | " + " | ".join(
        f"{'keep':>6} {'correct':>7} {'runs':>5}   " for _ in METHODS), "-" * len(head)]
    keys = sorted({(c.tail_only, c.effect, c.cv) for c in results})
    for tail_only, effect, cv in keys:
        cells = [c for c in results if (c.tail_only, c.effect, c.cv) == (tail_only, effect, cv)]
        label = "tail" if tail_only else f"{effect:+.0%}"
        parts = []
        for m in METHODS:
            keeps = sum(results[c][m][0] for c in cells)
            runs = sum(results[c][m][1] for c in cells)
            n = trials * len(cells)
            ok = correct(cells[0], keeps, n)
            parts.append(f"{_pct(keeps / n)} {_pct(ok):>7} {runs / n:5.2f}   ")
        lines.append(f"{label:>7} {cv:5.1%} | " + " | ".join(parts))
    return lines


def cell_rates(results: dict[Cell, dict[str, tuple[int, int]]], trials: int,
               method: str = "ours") -> list[dict[str, float | bool | None]]:
    """Every cell of one method: effect, cv, stall rate, keep share, correct share (None where
    either answer is accepted) and mean runs per trial."""
    rows = []
    for cell in sorted(results, key=lambda c: (c.tail_only, c.effect, c.cv, c.stall)):
        keeps, runs = results[cell][method]
        rows.append({"effect": cell.effect, "cv": cell.cv, "stall": cell.stall,
                     "tail_only": cell.tail_only, "keep": keeps / trials,
                     "correct": correct(cell, keeps, trials), "runs": runs / trials})
    return rows


def targets(results: dict[Cell, dict[str, tuple[int, int]]], trials: int,
            method: str = "ours") -> list[tuple[str, bool, str]]:
    """The three targets for one method, judged per cell: (name, passed, measured)."""
    rows = [r for r in cell_rates(results, trials, method) if not r["tail_only"]]
    zero = [r for r in rows if r["effect"] == 0.0]
    worst_false = max(zero, key=lambda r: r["keep"])
    strong = [r for r in rows if abs(r["effect"]) >= KEEP_AT - 1e-12 and r["cv"] <= 0.01]
    worst = min(strong, key=lambda r: r["correct"])
    runs = statistics.fmean(r["runs"] for r in rows)
    pooled_false = statistics.fmean(r["keep"] for r in zero)
    pooled_ok = statistics.fmean(r["correct"] for r in strong)
    return [("false keeps <= 5% in every cell at 0 effect", worst_false["keep"] <= 0.05,
             f"worst {worst_false['keep']:.1%} (cv {worst_false['cv']:.1%}, stall "
             f"{worst_false['stall']:.0%}), pooled {pooled_false:.1%}"),
            (">= 95% correct in every cell at |e| >= 2%, cv <= 1%", worst["correct"] >= 0.95,
             f"worst {worst['correct']:.1%} (e {worst['effect']:+.0%}, cv {worst['cv']:.1%}, "
             f"stall {worst['stall']:.0%}), pooled {pooled_ok:.1%}"),
            (f"mean runs <= {0.6 * PROTOCOL_RUNS:.1f} (60% of 12)",
             runs <= 0.6 * PROTOCOL_RUNS, f"{runs:.2f}")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=250, help="trials per cell")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--min-runs", type=int, default=MIN_RUNS, choices=range(2, 21),
                        metavar="2..20", help="our rule's runs per arm at the first look")
    parser.add_argument("--max-runs", type=int, default=MAX_RUNS, choices=range(2, 21),
                        metavar="2..20", help="our rule's max runs per arm")
    parser.add_argument("--confidence", type=float, default=CONFIDENCE,
                        help="our rule's interval for a keep (the CLI's --confidence)")
    parser.add_argument("--stop-confidence", type=float, default=STOP_CONFIDENCE,
                        help="our rule's confidence for an early restore")
    parser.add_argument("--min-effect", type=float, default=MIN_EFFECT,
                        help=f"our rule's minimum effect (the CLI's --min-effect, default "
                             f"{MIN_EFFECT})")
    parser.add_argument("--spending", choices=SPENDING_FUNCTIONS, default=SPENDING,
                        help=f"our rule's alpha-spending function (default {SPENDING})")
    parser.add_argument("--tail-share", type=float, default=TAIL_SHARE,
                        help=f"our rule's tail-test share of the keep error (default {TAIL_SHARE})")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="json: every cell of every method plus the targets")
    parser.add_argument("--power", action="store_true",
                        help="print the runs per arm any rule of this kind needs; no simulation")
    args = parser.parse_args(argv)
    if args.power:
        print("\n".join(power_table(args.min_effect)))
        return 0
    if not 0 < args.confidence < 1 or not 0 < args.stop_confidence < 1:
        parser.error("--confidence and --stop-confidence are fractions between 0 and 1")
    if args.min_runs > args.max_runs:
        parser.error(f"--min-runs {args.min_runs} is above --max-runs {args.max_runs}")
    rule = {"min_runs": args.min_runs, "max_runs": args.max_runs,
            "stop_confidence": args.stop_confidence, "min_effect": args.min_effect,
            "confidence": args.confidence, "spending": args.spending, "tail_share": args.tail_share}
    start = time.perf_counter()
    results = simulate(args.trials, args.seed, args.workers, rule=rule)
    if args.format == "json":
        print(json.dumps({"trials": args.trials, "seed": args.seed, "rule": rule,
                          "seconds": round(time.perf_counter() - start, 1),
                          "methods": {m: {"cells": cell_rates(results, args.trials, m),
                                          "targets": [{"target": n, "passed": ok,
                                                       "measured": v} for n, ok, v in
                                                      targets(results, args.trials, m)]}
                                      for m in METHODS}}, indent=1))
        return 0
    print(f"{args.trials} trials per cell, seed {args.seed}, stall rates {STALL_RATES} pooled, "
          f"ours: {rule}")
    print("\n".join(table(results, args.trials)))
    for method in METHODS:
        print(f"\n{method}:")
        for name, ok, measured in targets(results, args.trials, method):
            print(f"  {'PASS' if ok else 'FAIL'}  {name}: {measured}")
    print(f"\n{time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
