#!/usr/bin/env python3
"""Simulated sweeps: how often the sweep's rule picks the right value, and at what cost.

Each trial draws benchmark runs of a lower-is-better time for an incumbent (level 1.0) and
candidates with known levels, with run-to-run noise of coefficient of variation ``cv`` and a
slow linear drift (0.02 % per run, the same for every arm: it is what the rotating order is
for). Three methods see the same kind of data:

* ``ours``: :class:`~exemplar_tune.orchestration.selection.ArmSelection`, defaults (2..10 rounds,
  rotating balanced order, elimination, Holm over candidates with the group-sequential
  boundary over looks);
* ``grid5``: 5 runs of every arm in a fixed order, the best mean wins (no test);
* ``argmax1``: one run of every arm, the best wins (one observation per step, as a design
  space exploration that keeps the best of one observation does).

Correct: the truly best arm (the incumbent when no candidate is better). Targets: the best is
chosen in >= 95 % of the trials of every scenario where it leads the runner-up and the
incumbent by >= 2 % at CV <= 1 %; the incumbent is kept in >= 95 % of the trials where no
candidate is better.

    python bench/sweep.py                    # 500 trials per scenario, seed 1
    python bench/sweep.py --trials 200 --seed 3 --format json
    python bench/sweep.py --drift 0.001       # a drift of 0.1 % per run
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exemplar_tune.orchestration.selection import ArmSelection  # noqa: E402

DRIFT = 0.0002  # per run, every arm alike
METHODS = ("ours", "grid5", "argmax1")


@dataclass(frozen=True)
class Scenario:
    """An incumbent at 1.0 and candidates at ``levels`` (time: lower is better)."""

    name: str
    levels: tuple[float, ...]
    cv: float

    @property
    def best(self) -> int:
        """Index of the truly best arm (0: the incumbent) among ``(1.0, *levels)``."""
        arms = (1.0, *self.levels)
        return min(range(len(arms)), key=arms.__getitem__)

    @property
    def judged(self) -> bool:
        """Whether the targets apply: the best leads by >= 2 % at CV <= 1 %, or no
        candidate is better than the incumbent."""
        arms = sorted((1.0, *self.levels))
        if self.best == 0:
            return True
        return self.cv <= 0.01 and arms[1] - arms[0] >= 0.02 - 1e-12 and 1.0 - arms[0] >= 0.02


SCENARIOS = [
    Scenario(f"{name}, cv {cv:.1%}", levels, cv)
    for name, levels in (
        ("best 4 % ahead of the incumbent and 2 % of the runner-up", (0.98, 0.96, 0.99)),
        ("one candidate 2 % better", (0.98, 1.00, 1.01)),
        ("best 3 %, runner-up 1 %", (0.99, 0.97, 1.02)),
        ("no candidate better", (1.00, 1.01, 1.02)),
        ("no candidate better, two equal", (1.00, 1.00)),
        ("all worse", (1.02, 1.03, 1.05)),
        ("a 1 % gain only", (0.99, 1.01)),
    )
    for cv in (0.005, 0.01, 0.02)
]


class Runs:
    """Noisy runs of every arm, with a drift that follows the global run count."""

    def __init__(self, rng: random.Random, levels: tuple[float, ...], cv: float,
                 drift: float = DRIFT) -> None:
        self.rng, self.levels, self.cv, self.drift = rng, (1.0, *levels), cv, drift
        self.count = 0

    def run(self, arm: int) -> float:
        self.count += 1
        return (self.levels[arm] * (1.0 + self.drift * self.count)
                * (1.0 + self.cv * self.rng.gauss(0.0, 1.0)))


def ours(runs: Runs) -> int:
    names = [str(i) for i in range(len(runs.levels))]
    selection = ArmSelection(names[0], names[1:])
    while True:
        for arm in selection.order():
            selection.add(arm, runs.run(int(arm)))
        result = selection.decide()
        if result.outcome != "continue":
            return int(result.arm or 0)


def grid(runs: Runs, per_arm: int) -> int:
    means = [[0.0] * 0 for _ in runs.levels]
    for _ in range(per_arm):
        for arm in range(len(runs.levels)):
            means[arm].append(runs.run(arm))
    return min(range(len(means)), key=lambda a: statistics.fmean(means[a]))


PICKERS: dict[str, Callable[[Runs], int]] = {
    "ours": ours, "grid5": lambda r: grid(r, 5), "argmax1": lambda r: grid(r, 1)}


def simulate(scenario: Scenario, trials: int, seed: int,
             drift: float = DRIFT) -> dict[str, dict[str, float]]:
    """Per method: share of trials that picked the truly best arm, mean runs per trial."""
    out = {}
    for method, pick in PICKERS.items():
        rng = random.Random(f"{seed}:{scenario.name}:{method}")
        right, runs_used = 0, 0
        for _ in range(trials):
            runs = Runs(rng, scenario.levels, scenario.cv, drift)
            right += pick(runs) == scenario.best
            runs_used += runs.count
        out[method] = {"correct": right / trials, "runs": runs_used / trials}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=500, help="trials per scenario")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--drift", type=float, default=DRIFT,
                        help=f"drift per run, every arm alike (default {DRIFT})")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = [(s, simulate(s, args.trials, args.seed, args.drift)) for s in SCENARIOS]
    failed = [s.name for s, r in rows if s.judged and r["ours"]["correct"] < 0.95]
    if args.format == "json":
        print(json.dumps({"trials": args.trials, "seed": args.seed, "drift": args.drift,
                          "scenarios": [
            {"scenario": s.name, "arms": [1.0, *s.levels], "best": s.best, "judged": s.judged,
             **r} for s, r in rows], "targets_failed": failed,
            "seconds": round(time.perf_counter() - start, 1)}, indent=1))
        return 0
    print(f"{args.trials} trials per scenario, seed {args.seed}, drift {args.drift:.2%} per run; "
          "correct pick % / mean runs")
    print(f"{'scenario':62} " + " ".join(f"{m:>15}" for m in METHODS))
    for scenario, result in rows:
        mark = "*" if scenario.judged else " "
        print(f"{mark}{scenario.name:61} " + " ".join(
            f"{100 * result[m]['correct']:6.1f}% {result[m]['runs']:6.1f}" for m in METHODS))
    print("* judged by the targets: " + ("all met" if not failed else
                                         "missed in " + "; ".join(failed)))
    print(f"{time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
