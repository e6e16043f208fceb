#!/usr/bin/env python3
"""Detection power of the three slow-host finders on simulated fleets, at their default settings:
``slow-nodes`` (each host alone), ``slow-nodes --fabric`` (bisection over multi-node collectives)
and ``diagnose --ranks`` (per-rank step logs).

A *cell* is a method, a fleet size, a run-to-run noise (coefficient of variation, gaussian) and
a slowdown; each cell is ``--draws`` seeded draws (a draw's numbers depend only on the seed,
the cell and the draw's index: the same with any ``--jobs`` or ``--cells``). In a draw exactly
one host, chosen at random, is ``1 + slowdown`` times slower (none in the cells of slowdown 0,
which measure the false positives alone), and the tool's own code judges it:

* ``slow-nodes``: every host ``--runs`` values (the CLI's default), each ``1 + noise * z``
  times its level; :func:`~exemplar_tune.orchestration.slow_nodes.judge` with the CLI's
  default ``--confidence`` and ``--min-slowdown``. Its cells also carry the power that
  :func:`~exemplar_tune.orchestration.detect_power.detection_power` predicts, and a second
  table simulates it again at the runs
  :func:`~exemplar_tune.orchestration.detect_power.runs_needed` asks for (``--verify``);
* ``fabric``: :func:`~exemplar_tune.orchestration.slow_fabric.locate` with the same runs,
  confidence and minimum slowdown; its ``measure`` gives every group ``runs`` values, each
  ``(1 + slowdown) * (1 + noise * z)`` when the group holds the slow host (its bad link slows
  every collective it joins) and ``1 + noise * z`` otherwise (bus bandwidth inverted: the same
  level whatever the group's size). The rounds and multi-node runs of every search are kept,
  and the fleet of ``ROUNDS_FLEET`` hosts checks that a search takes at most
  ``log2(hosts) + 2`` rounds;
* ``ranks``: a job of ``--steps`` iterations whose per-rank timer logs the rank's own compute
  time before it waits for the others (``exemplar_tune.sim.bench``'s ``per_rank``: with
  synchronous collectives the step itself lasts as long as the slowest rank's, so only such
  a timer can tell a rank); every rank's iteration is ``STEP_MS * (1 + noise * z)`` ms,
  independent across ranks and iterations (a noise shared by all ranks at an iteration
  cancels in the rule, which compares each rank with the iteration's median), the slow rank's
  times the slowdown, written to 0.1 ms as a Megatron log prints it. The times go into
  :class:`~exemplar_tune.diagnose.slow_ranks.RankTimes` and
  :func:`~exemplar_tune.diagnose.slow_ranks.judge` (what ``diagnose --ranks`` calls once the
  logs are read), a rank named when it is slow again and again or turned slower mid-job
  (``slow`` and ``became_slow`` of its finding); the first ``--text-check`` draws of every
  cell of up to ``TEXT_CHECK_RANKS`` ranks are also written as one log file per rank and read by
  :func:`~exemplar_tune.diagnose.diagnose_job` (the whole ``diagnose --ranks`` path), and the
  two verdicts must agree.

The comparisons of ``slow-nodes`` and ``--fabric`` (``stats.compare``) take the sample variance
of a fleet's pooled runs with ``statistics.variance``, which sums exact fractions: that is most
of a 128-host draw's time. The bench puts a float variance (``math.fsum``) in its place, equal
to a rounding, and judges the first ``--exact-check`` draws of every such cell both ways: the
verdicts, rounds and runs must be the same (a goal line says so). ``--exact`` keeps the
standard library's variance in every draw.

Counted per cell: *detected*, the draws whose slow host was named; *healthy named*, the
healthy hosts named over all healthy hosts of all draws (the goal's false positives), and the
draws that named any healthy host; ``fabric``'s rounds and runs (mean, max); ``ranks``' draws
where the rule said the ranks were too noisy to tell. The goal, judged on every cell: slow
host named in at least 95 % of the draws at +3 %, and at most 1 % of healthy hosts named.

Progress goes to stderr, the markdown tables to stdout; ``--json FILE`` writes every cell.

    python bench/slow_power.py                       # every cell, 200 draws, seed 1, 2 jobs
    python bench/slow_power.py --cells 'slow-nodes/*' --draws 400
    python bench/slow_power.py --cells 'fabric/16/*,ranks/8/1%/*' --jobs 1 --json out.json
    python bench/slow_power.py --verify 8,32,128     # runs_needed checked on 128 hosts too
    python bench/slow_power.py --cells 'fabric/*/runs=*' --fabric-runs 10,20,40
    python bench/slow_power.py --cells 'ranks/*' --steps 2000   # more iterations per job
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import statistics
import sys
import tempfile
import time
import types
import zlib
from array import array
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exemplar_tune.commands.slow_nodes import add_parsers  # noqa: E402
from exemplar_tune.diagnose import diagnose_job  # noqa: E402
from exemplar_tune.diagnose.base import INFO  # noqa: E402
from exemplar_tune.diagnose.slow_ranks import (  # noqa: E402
    CHECK,
    RankTimes,
    judge as judge_ranks,
)
from exemplar_tune.diagnose.steplog import Samples  # noqa: E402
from exemplar_tune.orchestration import stats as stats_module  # noqa: E402
from exemplar_tune.orchestration.detect_power import (  # noqa: E402
    POWER,
    detection_power,
    runs_needed,
)
from exemplar_tune.orchestration.slow_fabric import locate  # noqa: E402
from exemplar_tune.orchestration.slow_nodes import judge  # noqa: E402

METHODS = ("slow-nodes", "fabric", "ranks")
FLEETS = (8, 32, 128)
NOISES = (0.01, 0.03)
SLOWDOWNS = (0.0, 0.01, 0.02, 0.03, 0.05)  # 0: no slow host, the false positives alone
ROUNDS_FLEET = 16  # --fabric: one bad link among this many, rounds <= log2 + 2
VERIFY_SLOWDOWNS = (0.02, 0.03)  # runs_needed simulated again at these slowdowns
GOAL_SLOWDOWN, GOAL_DETECTED, GOAL_HEALTHY = 0.03, 0.95, 0.01
STEPS = 200  # iterations of a ranks job
STEP_MS = 1000.0
TEXT_CHECK_RANKS = 32  # ranks cells read through diagnose --ranks' files up to this size


def cli_defaults() -> argparse.Namespace:
    """``slow-nodes``' defaults as its parser gives them (runs, confidence, min_slowdown)."""
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers())
    return parser.parse_args(["slow-nodes"])


@dataclass(frozen=True)
class Cell:
    """One condition; ``runs`` None: the CLI's default runs."""

    method: str
    hosts: int
    noise: float
    slowdown: float
    runs: int | None = None

    @property
    def name(self) -> str:
        tail = f"/runs={self.runs}" if self.runs is not None else ""
        return f"{self.method}/{self.hosts}/{pct(self.noise)}/{pct(self.slowdown)}{tail}"


@dataclass
class Tally:
    """What the draws of one cell found."""

    draws: int = 0
    detected: int = 0
    healthy: int = 0  # healthy hosts judged, over all draws
    named: int = 0  # healthy hosts named slow, over all draws
    any_named: int = 0  # draws that named at least one healthy host
    cannot_tell: int = 0  # ranks: the rule said the ranks disagree too much
    rounds: list[int] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)
    text_checked: int = 0
    text_mismatch: list[str] = field(default_factory=list)
    exact_checked: int = 0
    exact_mismatch: list[str] = field(default_factory=list)
    seconds: float = 0.0


def pct(fraction: float) -> str:
    """``2%``, ``2.5%``: a percentage with no trailing zeros."""
    return f"{100 * fraction:.2f}".rstrip("0").rstrip(".") + "%"


def names(hosts: int) -> list[str]:
    return [f"node{i:03d}" for i in range(hosts)]


def draw_rng(seed: int, cell: Cell, draw: int) -> np.random.Generator:
    """The draw's own generator: seed, cell and index, nothing else."""
    key = zlib.crc32(f"{cell.method}/{cell.hosts}/{cell.noise}/{cell.slowdown}/{cell.runs}"
                     .encode())
    return np.random.default_rng([seed, key, draw])


def slow_nodes_draw(rng: np.random.Generator, cell: Cell, runs: int,
                    settings: argparse.Namespace) -> tuple[int | None, set[str]]:
    """One fleet judged by slow-nodes: the slow host's index (None: none) and the hosts named."""
    hosts = names(cell.hosts)
    values = 1.0 + cell.noise * rng.standard_normal((cell.hosts, runs))
    slow = int(rng.integers(cell.hosts)) if cell.slowdown > 0 else None
    if slow is not None:
        values[slow] *= 1.0 + cell.slowdown
    verdicts = judge({h: values[i].tolist() for i, h in enumerate(hosts)},
                     settings.confidence, settings.min_slowdown)
    return slow, {v.host for v in verdicts if v.slow}


def fabric_draw(rng: np.random.Generator, cell: Cell, runs: int,
                settings: argparse.Namespace) -> tuple[int | None, set[str], int, int]:
    """One search by slow-nodes --fabric: the slow host, the hosts found, rounds and runs."""
    hosts = names(cell.hosts)
    slow = int(rng.integers(cell.hosts)) if cell.slowdown > 0 else None
    bad = hosts[slow] if slow is not None else None

    def measure(groups: list[tuple[str, ...]]) -> dict[tuple[str, ...], list[float]]:
        level = {g: 1.0 + cell.slowdown if bad in g else 1.0 for g in groups}
        return {g: (level[g] * (1.0 + cell.noise * rng.standard_normal(runs))).tolist()
                for g in groups}

    search = locate(hosts, measure, repeat=runs, confidence=settings.confidence,
                    min_slowdown=settings.min_slowdown)
    return slow, set(search.suspects), search.rounds, search.runs


def rank_times(times: np.ndarray, labels: list[str]) -> RankTimes:
    """The columns ``diagnose --ranks`` builds from the ranks' logs (one line per iteration)."""
    out = RankTimes()
    steps = array("q", range(1, times.shape[1] + 1))
    for label, row in zip(labels, times, strict=True):
        out.add(label, Samples.columns(array("q", steps), array("d", row.tolist()),
                                       array("q", steps)))
    return out


def megatron_log(row: np.ndarray) -> str:
    """A rank's own log, one Megatron iteration line per step (``sim.bench``'s format)."""
    total = len(row)
    return "".join(
        f" [2026-11-29 10:00:00] iteration {i:8d}/{total:8d} | consumed samples: "
        f"{i * 1024:12d} | elapsed time per iteration (ms): {ms:.1f} | learning rate: "
        "1.000E-04 | global batch size:  1024 | lm loss: 2.345678E+00 | loss scale: 1.0 |\n"
        for i, ms in enumerate(row.tolist(), start=1))


def ranks_verdict(finding: Any) -> tuple[set[str], bool, list]:
    """(ranks named: slow again and again or turned slower mid-job, said too noisy, both
    lists) of a workload.slow-ranks finding."""
    values = finding.values if finding is not None else {}
    listed = [*values.get("slow", []), *values.get("became_slow", [])]
    noisy = finding is not None and finding.status == INFO
    return {s["rank"] for s in listed}, noisy, listed


def ranks_draw(rng: np.random.Generator, cell: Cell, steps: int,
               text_check: bool) -> tuple[int | None, set[str], bool, str | None]:
    """One job judged by diagnose --ranks' rule: the slow rank, the ranks named, whether the
    rule said too noisy, and a mismatch with the whole file path (None: agreed or unchecked)."""
    labels = [f"rank{i:03d}" for i in range(cell.hosts)]
    times = STEP_MS * (1.0 + cell.noise * rng.standard_normal((cell.hosts, steps)))
    slow = int(rng.integers(cell.hosts)) if cell.slowdown > 0 else None
    if slow is not None:
        times[slow] *= 1.0 + cell.slowdown
    times = np.round(times, 1)  # as the log prints it
    named, noisy, listed = ranks_verdict(judge_ranks("bench", rank_times(times, labels)))
    mismatch = None
    if text_check:
        with tempfile.TemporaryDirectory(prefix="slow-power-") as tmp:
            for label, row in zip(labels, times, strict=True):
                (Path(tmp) / f"{label}.log").write_text(megatron_log(row))
            report = diagnose_job([tmp])
        found = [f for f in report.findings if f.check_id == CHECK]
        whole = ranks_verdict(found[0] if found else None)
        if (whole[0], whole[1], whole[2]) != (named, noisy, listed):
            mismatch = f"arrays {sorted(named)} noisy={noisy}, files {sorted(whole[0])} " \
                       f"noisy={whole[1]}"
    return slow, named, noisy, mismatch


def float_variance(data: Any, xbar: float | None = None) -> float:
    """The sample variance in floats (``math.fsum``, two passes), where
    ``statistics.variance`` sums exact fractions: the same to a rounding, and much faster
    on a fleet's pooled runs. ``xbar`` is ignored (``stats`` never passes it)."""
    values = list(data)
    if len(values) < 2:
        raise statistics.StatisticsError("variance requires at least two data points")
    mean = math.fsum(values) / len(values)
    return math.fsum((x - mean) * (x - mean) for x in values) / (len(values) - 1)


FLOAT_STATISTICS = types.SimpleNamespace(**{**vars(statistics), "variance": float_variance})


@contextmanager
def arithmetic(exact: bool) -> Iterator[None]:
    """``stats.compare`` (the judge's and the search's comparisons) with the standard
    library's exact sample variance, or with :func:`float_variance` in its place."""
    if exact:
        yield
        return
    saved = stats_module.statistics
    stats_module.statistics = FLOAT_STATISTICS  # type: ignore[assignment]
    try:
        yield
    finally:
        stats_module.statistics = saved


def judged(cell: Cell, seed: int, index: int, runs: int, settings: argparse.Namespace,
           exact: bool) -> tuple[int | None, set[str], int, int]:
    """One slow-nodes or --fabric draw: the slow host, the hosts named, rounds and runs."""
    rng = draw_rng(seed, cell, index)
    with arithmetic(exact):
        if cell.method == "slow-nodes":
            return (*slow_nodes_draw(rng, cell, runs, settings), 0, 0)
        return fabric_draw(rng, cell, runs, settings)


def run_cell(cell: Cell, draws: int, seed: int, steps: int, text_checks: int,
             exact_checks: int = 0, exact: bool = False) -> Tally:
    """Every draw of one cell; slow-nodes and --fabric draws in float arithmetic unless
    ``exact``, the first ``exact_checks`` of them also exactly (the exact one counts; a
    difference is recorded)."""
    settings = cli_defaults()
    runs = cell.runs if cell.runs is not None else settings.runs
    hosts = names(cell.hosts)
    tally = Tally()
    start = time.perf_counter()
    for index in range(draws):
        if cell.method in ("slow-nodes", "fabric"):
            check = not exact and index < exact_checks
            slow, named, rounds, multi = judged(cell, seed, index, runs, settings,
                                                exact or check)
            if check:
                tally.exact_checked += 1
                fast = judged(cell, seed, index, runs, settings, False)
                if fast != (slow, named, rounds, multi):
                    tally.exact_mismatch.append(f"draw {index}: exact {sorted(named)}, "
                                                f"float {sorted(fast[1])}")
            if cell.method == "fabric":
                tally.rounds.append(rounds)
                tally.runs.append(multi)
        else:
            rng = draw_rng(seed, cell, index)
            check = index < text_checks and cell.hosts <= TEXT_CHECK_RANKS
            slow, ranks, noisy, mismatch = ranks_draw(rng, cell, steps, check)
            named = {hosts[int(r[4:])] for r in ranks}
            tally.cannot_tell += noisy
            tally.text_checked += check
            if mismatch:
                tally.text_mismatch.append(f"draw {index}: {mismatch}")
        bad = hosts[slow] if slow is not None else None
        tally.draws += 1
        tally.detected += bad in named
        wrong = len(named - {bad})
        tally.named += wrong
        tally.any_named += wrong > 0
        tally.healthy += cell.hosts - (bad is not None)
    tally.seconds = time.perf_counter() - start
    return tally


def grid(verify: tuple[int, ...], fabric_runs: tuple[int, ...] = ()) -> list[Cell]:
    """Every method x fleet x noise x slowdown, the --fabric rounds fleet, slow-nodes at
    the runs runs_needed asks for on the ``verify`` fleets, and --fabric at each of
    ``fabric_runs`` runs per group (no slow host, and one at the goal's slowdown)."""
    settings = cli_defaults()
    cells = [Cell(m, h, n, s) for m in METHODS for h in FLEETS for n in NOISES
             for s in SLOWDOWNS]
    cells += [Cell("fabric", ROUNDS_FLEET, n, s) for n in NOISES for s in SLOWDOWNS]
    cells += [Cell("fabric", h, n, s, runs) for runs in fabric_runs for h in FLEETS
              for n in NOISES for s in (0.0, GOAL_SLOWDOWN) if runs != settings.runs]
    for hosts in verify:
        for noise in NOISES:
            for slowdown in VERIFY_SLOWDOWNS:
                runs = runs_needed(slowdown, noise, hosts, settings.confidence, POWER,
                                   settings.min_slowdown)
                if runs != settings.runs:
                    cells.append(Cell("slow-nodes", hosts, noise, slowdown, runs))
    return cells


def cost(cell: Cell) -> float:
    """A rough relative cost, to start the dearest cells first."""
    runs = cell.runs or 5
    if cell.method == "slow-nodes":
        return cell.hosts * cell.hosts * runs * 2
    if cell.method == "fabric":
        return cell.hosts * 8 * runs
    return cell.hosts * 400 * (20 if cell.hosts <= TEXT_CHECK_RANKS else 1)


def simulate(cells: list[Cell], draws: int, seed: int, steps: int, text_checks: int,
             jobs: int, exact_checks: int = 0, exact: bool = False) -> dict[Cell, Tally]:
    """Every cell, the dearest first, in ``jobs`` processes; progress on stderr."""
    ordered = sorted(cells, key=cost, reverse=True)
    out: dict[Cell, Tally] = {}
    start = time.perf_counter()

    def done(cell: Cell, tally: Tally) -> None:
        out[cell] = tally
        print(f"[{time.perf_counter() - start:6.1f} s] {len(out)}/{len(cells)} {cell.name}: "
              f"{tally.seconds:.1f} s", file=sys.stderr, flush=True)

    if jobs <= 1:
        for cell in ordered:
            done(cell, run_cell(cell, draws, seed, steps, text_checks, exact_checks, exact))
        return out
    with ProcessPoolExecutor(jobs) as pool:
        futures = {pool.submit(run_cell, c, draws, seed, steps, text_checks, exact_checks,
                               exact): c for c in ordered}
        for future in as_completed(futures):
            done(futures[future], future.result())
    return out


# ---------------------------------------------------------------- tables


def share(part: int, whole: int) -> str:
    return "-" if whole == 0 else f"{100 * part / whole:.1f}%"


def detection_table(results: dict[Cell, Tally], settings: argparse.Namespace) -> list[str]:
    """Per method, fleet and noise: detection at each slowdown (slow-nodes: the predicted
    power in brackets), healthy hosts named (worst cell) and the cell with no slow host."""
    rows = sorted({(c.method, c.hosts, c.noise) for c in results if c.runs is None},
                  key=lambda k: (METHODS.index(k[0]), k[1], k[2]))
    slowdowns = [s for s in SLOWDOWNS if s > 0]
    lines = ["| method | hosts | noise | " + " | ".join(f"named at +{pct(s)}" for s in slowdowns)
             + " | healthy named (worst cell) | no slow host: healthy named | no slow host: "
             "draws naming any |",
             "|---|---:|---:|" + "---:|" * len(slowdowns) + "---:|---:|---:|"]
    for method, hosts, noise in rows:
        cells = {c.slowdown: c for c in results
                 if (c.method, c.hosts, c.noise) == (method, hosts, noise) and c.runs is None}
        shown = []
        for s in slowdowns:
            if s not in cells:
                shown.append("")
                continue
            t = results[cells[s]]
            text = share(t.detected, t.draws)
            if method == "slow-nodes":
                text += f" ({100 * detection_power(s, noise, hosts, settings.runs, settings.confidence, settings.min_slowdown):.0f}%)"  # noqa: E501
            if method == "ranks" and t.cannot_tell:
                text += f" [{share(t.cannot_tell, t.draws)} too noisy]"
            shown.append(text)
        worst = max((results[c] for c in cells.values()),
                    key=lambda t: t.named / t.healthy if t.healthy else 0)
        none = results.get(cells.get(0.0)) if 0.0 in cells else None
        lines.append(f"| {method} | {hosts} | {pct(noise)} | " + " | ".join(shown)
                     + f" | {share(worst.named, worst.healthy)} | "
                     + (f"{share(none.named, none.healthy)} | "
                        f"{share(none.any_named, none.draws)} |" if none else "- | - |"))
    return lines


def fabric_table(results: dict[Cell, Tally]) -> list[str]:
    """--fabric's cost: rounds and multi-node runs, mean / max, per fleet, noise, slowdown."""
    fab = {c: t for c, t in results.items() if c.method == "fabric" and c.runs is None}
    if not fab:
        return []
    lines = ["| hosts | noise | " + " | ".join(
        "no slow host" if s == 0 else f"+{pct(s)}" for s in SLOWDOWNS) + " |",
             "|---:|---:|" + "---:|" * len(SLOWDOWNS)]
    for hosts, noise in sorted({(c.hosts, c.noise) for c in fab}):
        shown = []
        for s in SLOWDOWNS:
            t = fab.get(Cell("fabric", hosts, noise, s))
            shown.append("" if t is None else
                         f"{statistics.fmean(t.rounds):.1f} / {max(t.rounds)} rounds, "
                         f"{statistics.fmean(t.runs):.0f} / {max(t.runs)} runs")
        lines.append(f"| {hosts} | {pct(noise)} | " + " | ".join(shown) + " |")
    return lines


def runs_table(settings: argparse.Namespace) -> list[str]:
    """runs_needed for every fleet, noise and slowdown (analytic, 95 % power)."""
    slowdowns = [s for s in SLOWDOWNS if s > 0]
    lines = ["| hosts | noise | " + " | ".join(f"+{pct(s)}" for s in slowdowns) + " |",
             "|---:|---:|" + "---:|" * len(slowdowns)]
    for hosts in FLEETS:
        for noise in NOISES:
            shown = []
            for s in slowdowns:
                try:
                    shown.append(str(runs_needed(s, noise, hosts, settings.confidence, POWER,
                                                 settings.min_slowdown)))
                except ValueError:
                    shown.append("never")
            lines.append(f"| {hosts} | {pct(noise)} | " + " | ".join(shown) + " |")
    return lines


def verify_table(results: dict[Cell, Tally], settings: argparse.Namespace) -> list[str]:
    """slow-nodes simulated at the runs runs_needed asks for."""
    cells = sorted((c for c in results if c.runs is not None and c.method == "slow-nodes"),
                   key=lambda c: (c.hosts, c.noise, c.slowdown))
    if not cells:
        return []
    lines = ["| hosts | noise | slowdown | --runs | predicted | named | healthy named |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cells:
        t = results[c]
        predicted = detection_power(c.slowdown, c.noise, c.hosts, c.runs, settings.confidence,
                                    settings.min_slowdown)
        lines.append(f"| {c.hosts} | {pct(c.noise)} | +{pct(c.slowdown)} | {c.runs} | "
                     f"{100 * predicted:.1f}% | {share(t.detected, t.draws)} | "
                     f"{share(t.named, t.healthy)} |")
    return lines


def fabric_runs_table(results: dict[Cell, Tally], settings: argparse.Namespace) -> list[str]:
    """--fabric at more runs per group: the bad host named at the goal's slowdown, healthy
    hosts named, rounds and runs, beside the default runs."""
    more = sorted({c.runs for c in results if c.method == "fabric" and c.runs is not None})
    if not more:
        return []
    lines = ["| hosts | noise | --runs | named at "
             f"+{pct(GOAL_SLOWDOWN)} | healthy named | no slow host: healthy named | rounds "
             "mean / max | multi-node runs mean / max |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for hosts in sorted({c.hosts for c in results if c.method == "fabric" and c.runs}):
        for noise in NOISES:
            for runs in [None, *more]:
                hit = results.get(Cell("fabric", hosts, noise, GOAL_SLOWDOWN, runs))
                none = results.get(Cell("fabric", hosts, noise, 0.0, runs))
                if hit is None:
                    continue
                lines.append(
                    f"| {hosts} | {pct(noise)} | {runs or settings.runs} | "
                    f"{share(hit.detected, hit.draws)} | {share(hit.named, hit.healthy)} | "
                    + (f"{share(none.named, none.healthy)}" if none else "-")
                    + f" | {statistics.fmean(hit.rounds):.1f} / {max(hit.rounds)} | "
                    f"{statistics.fmean(hit.runs):.0f} / {max(hit.runs)} |")
    return lines


def goals(results: dict[Cell, Tally]) -> list[tuple[str, bool | None, str]]:
    """The goal per method on the default-settings cells, and --fabric's rounds bound."""
    out: list[tuple[str, bool | None, str]] = []
    base = {c: t for c, t in results.items() if c.runs is None}
    for method in METHODS:
        at = [(c, t) for c, t in base.items() if c.method == method
              and abs(c.slowdown - GOAL_SLOWDOWN) < 1e-9 and c.hosts in FLEETS]
        if at:
            worst_c, worst_t = min(at, key=lambda ct: ct[1].detected / ct[1].draws)
            miss = [c for c, t in at if t.detected < GOAL_DETECTED * t.draws]
            out.append((f"{method}: slow host named in >= {GOAL_DETECTED:.0%} of draws at "
                        f"+{pct(GOAL_SLOWDOWN)}", not miss,
                        f"{len(at) - len(miss)} of {len(at)} cells; worst "
                        f"{share(worst_t.detected, worst_t.draws)} ({worst_c.hosts} hosts, "
                        f"noise {pct(worst_c.noise)})"))
        mine = [(c, t) for c, t in base.items() if c.method == method]
        if mine:
            worst_c, worst_t = max(mine, key=lambda ct: ct[1].named / ct[1].healthy)
            over = [c for c, t in mine if t.named > GOAL_HEALTHY * t.healthy]
            out.append((f"{method}: at most {GOAL_HEALTHY:.0%} of healthy hosts named",
                        not over, f"{len(mine) - len(over)} of {len(mine)} cells; worst "
                        f"{share(worst_t.named, worst_t.healthy)} ({worst_c.name})"))
    rounds = [(c, t) for c, t in base.items()
              if c.method == "fabric" and c.hosts == ROUNDS_FLEET and c.slowdown > 0]
    if rounds:
        bound = math.log2(ROUNDS_FLEET) + 2
        most = max(max(t.rounds) for _, t in rounds)
        out.append((f"fabric: one bad link among {ROUNDS_FLEET} hosts found in <= "
                    f"log2({ROUNDS_FLEET}) + 2 = {bound:.0f} rounds", most <= bound,
                    f"most {most} rounds over {sum(t.draws for _, t in rounds)} searches"))
    exact = sum(t.exact_checked for t in results.values())
    if exact:
        bad = [f"{c.name} {m}" for c, t in results.items() for m in t.exact_mismatch]
        out.append(("slow-nodes, --fabric: float and exact variance give the same verdicts",
                    not bad, f"{exact} draws judged both ways, {len(bad)} differ"
                    + (f": {bad[0]}" if bad else "")))
    checked = sum(t.text_checked for c, t in base.items() if c.method == "ranks")
    if checked:
        bad = [m for c, t in base.items() for m in t.text_mismatch]
        out.append(("ranks: the arrays and the whole diagnose --ranks path agree", not bad,
                    f"{checked} draws read from files, {len(bad)} disagree"
                    + (f": {bad[0]}" if bad else "")))
    return out


def document(results: dict[Cell, Tally], args: argparse.Namespace, seconds: float,
             settings: argparse.Namespace) -> dict[str, Any]:
    """Every cell and the goals, for ``--json``."""
    cells = []
    for cell in sorted(results, key=lambda c: (METHODS.index(c.method), c.hosts, c.noise,
                                               c.slowdown, c.runs or 0)):
        t = results[cell]
        row: dict[str, Any] = {**asdict(cell), "name": cell.name,
                               "runs": cell.runs or settings.runs, "draws": t.draws,
                               "detected": t.detected, "healthy": t.healthy, "named": t.named,
                               "any_named": t.any_named, "seconds": round(t.seconds, 2)}
        if cell.method != "ranks":
            row.update(exact_checked=t.exact_checked, exact_mismatch=t.exact_mismatch)
        if cell.method == "slow-nodes" and cell.slowdown > 0:
            row["predicted"] = round(detection_power(
                cell.slowdown, cell.noise, cell.hosts, cell.runs or settings.runs,
                settings.confidence, settings.min_slowdown), 4)
        if cell.method == "fabric":
            row.update(rounds_mean=statistics.fmean(t.rounds), rounds_max=max(t.rounds),
                       runs_mean=statistics.fmean(t.runs), runs_max=max(t.runs))
        if cell.method == "ranks":
            row.update(steps=args.steps, cannot_tell=t.cannot_tell,
                       text_checked=t.text_checked, text_mismatch=t.text_mismatch)
        cells.append(row)
    return {"draws": args.draws, "seed": args.seed, "jobs": args.jobs, "exact": args.exact,
            "seconds": round(seconds, 1),
            "settings": {"runs": settings.runs, "confidence": settings.confidence,
                         "min_slowdown": settings.min_slowdown, "power": POWER},
            "cells": cells, "goals": [{"goal": g, "passed": ok, "measured": m}
                                      for g, ok, m in goals(results)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=200, help="draws per cell (default 200)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--cells", default="*", metavar="GLOB[,GLOB...]",
                        help="only the cells whose name matches, e.g. 'slow-nodes/*', "
                        "'fabric/16/*', '*/8/1%%/3%%' (METHOD/HOSTS/NOISE/SLOWDOWN[/runs=N])")
    parser.add_argument("--steps", type=int, default=STEPS,
                        help=f"iterations of a ranks job (default {STEPS})")
    parser.add_argument("--text-check", type=int, default=1, metavar="N",
                        help="ranks: the first N draws of each cell of at most "
                        f"{TEXT_CHECK_RANKS} ranks also read from files by diagnose --ranks "
                        "(default 1; 0: none)")
    parser.add_argument("--exact", action="store_true",
                        help="slow-nodes and --fabric with the standard library's exact sample "
                        "variance in every draw (the tool as it runs; many times slower on "
                        "large fleets)")
    parser.add_argument("--exact-check", type=int, default=5, metavar="N",
                        help="without --exact: the first N draws of each slow-nodes and "
                        "--fabric cell judged both ways, the verdicts compared (default 5)")
    parser.add_argument("--verify", default="8,32", metavar="HOSTS[,HOSTS...]",
                        help="fleets on which slow-nodes is simulated again at the runs "
                        "runs_needed asks for (default 8,32; '' for none)")
    parser.add_argument("--fabric-runs", default="", metavar="N[,N...]",
                        help="also --fabric at these runs per group, every fleet and noise, "
                        f"no slow host and +{pct(GOAL_SLOWDOWN)} (default none)".replace("%", "%%"))
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every cell there")
    args = parser.parse_args(argv)
    if min(args.draws, args.jobs) < 1 or args.steps < 5 or min(args.text_check,
                                                                 args.exact_check) < 0:
        parser.error("--draws and --jobs at least 1, --steps at least 5, --text-check and "
                     "--exact-check at least 0")
    try:
        verify = tuple(int(h) for h in args.verify.split(",") if h.strip())
        fabric_runs = tuple(int(n) for n in args.fabric_runs.split(",") if n.strip())
    except ValueError:
        parser.error(f"--verify {args.verify}, --fabric-runs {args.fabric_runs}: whole "
                     "numbers such as 8,32")
    settings = cli_defaults()
    patterns = [p.strip() for p in args.cells.split(",") if p.strip()]
    cells = [c for c in grid(verify, fabric_runs)
             if any(fnmatch.fnmatchcase(c.name, p) for p in patterns)]
    if not cells:
        parser.error(f"--cells {args.cells}: no cell matches (names like slow-nodes/8/1%/3%)")
    start = time.perf_counter()
    results = simulate(cells, args.draws, args.seed, args.steps, args.text_check, args.jobs,
                       args.exact_check, args.exact)
    seconds = time.perf_counter() - start
    print(f"{args.draws} draws per cell, seed {args.seed}; defaults of slow-nodes: --runs "
          f"{settings.runs}, --confidence {settings.confidence}, --min-slowdown "
          f"{pct(settings.min_slowdown)}; ranks: {args.steps} iterations; sample variance: "
          f"{'exact' if args.exact else 'float'}\n")
    print("Slow host named (share of draws; slow-nodes: the power detect_power predicts in "
          "brackets), healthy hosts named (share of all healthy hosts judged):\n")
    print("\n".join(detection_table(results, settings)))
    fabric = fabric_table(results)
    if fabric:
        print("\nslow-nodes --fabric: rounds and multi-node runs per search, mean / max:\n")
        print("\n".join(fabric))
    print(f"\nslow-nodes: runs per host for {POWER:.0%} power (detect_power.runs_needed):\n")
    print("\n".join(runs_table(settings)))
    verified = verify_table(results, settings)
    if verified:
        print("\nslow-nodes simulated at those runs:\n")
        print("\n".join(verified))
    more = fabric_runs_table(results, settings)
    if more:
        print("\nslow-nodes --fabric at more runs per group:\n")
        print("\n".join(more))
    print("\nGoals:\n")
    for name, ok, measured in goals(results):
        print(f"- {'PASS' if ok else 'FAIL'} {name}: {measured}")
    print(f"\n{seconds:.0f} s with --jobs {args.jobs}")
    if args.json:
        args.json.write_text(json.dumps(document(results, args, seconds, settings), indent=1)
                             + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
