"""Fail-slow in time: a rank or a host that turns slow mid-job is named with the iteration or
run it began at, an interval for it and how much slower it became, not averaged away
(:mod:`exemplar_tune.diagnose.change_point`, ``workload.slow-ranks``).

The detector is checked on simulated series with fixed seeds (how often a stationary series
shows a change, how often a shift is found and its interval covers it, its cost); the
slow-ranks finding on the simulated cluster's own per-rank Megatron logs (``sim bench
--per-rank`` output, runs of a healthy and of a faulted cluster joined at a known iteration)
and on the one real multi-rank capture of the corpus; the host's runs on the simulated node
benchmark."""

from __future__ import annotations

import gc
import math
import re
import statistics
import time
from pathlib import Path

import numpy as np
import pytest

from exemplar_tune.diagnose import diagnose_job, diagnose_text, slow_ranks
from exemplar_tune.diagnose.change_point import (
    ALPHA,
    LEVEL,
    bridge_tail,
    change_point,
    change_points,
    run_change,
)
from exemplar_tune.diagnose.normalize import normalize
from exemplar_tune.diagnose.steptime import StepReader
from exemplar_tune.orchestration.benchmark import BenchmarkSpec, value_of
from exemplar_tune.sim.bench import bench_lines
from exemplar_tune.sim.cluster import create_cluster
from exemplar_tune.sim.model import load_scenario
from tests.corpus import REALWORLD

TITAN_H200 = REALWORLD / "steptime" / "orangingq-torchtitan-h200-4gpu-llama8b-1f1b-rank-prefix.log"
ITERATION = re.compile(r"iteration +(\d+)/")
STEP_TIME = BenchmarkSpec("node", (), "steptime")
HOSTS = [f"node{i:02d}" for i in range(1, 9)]


# -- the detector on simulated series ------------------------------------------------------

def _ar1(rng: np.random.Generator, reps: int, n: int, rho: float) -> np.ndarray:
    """``reps`` stationary AR(1) series of length ``n`` (unit innovations), started in their
    stationary distribution."""
    noise = rng.normal(0.0, 1.0, (reps, n))
    out = np.empty((reps, n))
    out[:, 0] = noise[:, 0] / math.sqrt(1.0 - rho * rho)
    for i in range(1, n):
        out[:, i] = rho * out[:, i - 1] + noise[:, i]
    return out


STATIONARY = {
    "normal": lambda rng, reps, n: rng.normal(0.0, 1.0, (reps, n)),
    "heavy-tailed (t, 3 d.f.)": lambda rng, reps, n: rng.standard_t(3, (reps, n)),
    "2% stalls 50 sd long": lambda rng, reps, n: rng.normal(0.0, 1.0, (reps, n))
    + 50.0 * (rng.random((reps, n)) < 0.02),
    "AR(1) rho 0.5": lambda rng, reps, n: _ar1(rng, reps, n, 0.5),
}


@pytest.mark.parametrize("kind", list(STATIONARY))
@pytest.mark.parametrize("n", [20, 200, 2000])
def test_a_stationary_series_shows_a_change_at_most_about_alpha_of_the_time(kind, n):
    """1000 stationary series per case (seed 2026): the share where a change is reported stays
    within ``ALPHA`` (1 %) plus three binomial standard errors (the 1000 draws' own noise)."""
    rng = np.random.default_rng(2026)
    series = STATIONARY[kind](rng, 1000, n)
    found = sum(change_point(row, min_size=5) is not None for row in series)
    bound = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / len(series))
    assert found / len(series) <= bound, f"{kind}, n={n}: {found} of {len(series)}"


@pytest.mark.parametrize(("shift", "detected"), [(0.5, 0.9), (1.0, 0.99)])
def test_a_shift_is_found_and_its_interval_covers_where_it_happened(shift, detected):
    """400 values, the level up by ``shift`` standard deviations from index 240 (seed 7):
    found in most series, and the interval (at ``LEVEL``, 90 %) holds 240 about as often as
    it says."""
    rng = np.random.default_rng(7)
    series = rng.normal(0.0, 1.0, (300, 400))
    series[:, 240:] += shift
    found = [change_point(row, min_size=5) for row in series]
    hits = [c for c in found if c is not None]
    assert len(hits) >= detected * len(series)
    covered = sum(c.low <= 240 <= c.high for c in hits) / len(hits)
    assert covered >= LEVEL - 0.05, covered
    assert statistics.median(abs(c.index - 240) for c in hits) <= 10
    assert all(c.after - c.before == pytest.approx(shift, abs=0.6) for c in hits)


def test_binary_segmentation_finds_where_a_slow_spell_begins_and_ends():
    rng = np.random.default_rng(11)
    values = rng.normal(0.0, 1.0, 1000)
    values[300:500] += 2.0
    first, second = change_points(values, min_size=5)
    assert first.low <= 300 <= first.high and first.after - first.before > 1.5
    assert second.low <= 500 <= second.high and second.before - second.after > 1.5
    assert second.length == 500 and first.length == 200


def test_a_change_too_small_to_matter_is_not_reported():
    """A shift of 0.3 % on a noise of 0.1 %: certain, but under a 2 % threshold."""
    rng = np.random.default_rng(3)
    values = rng.normal(0.0, 0.001, 2000)
    values[1200:] += 0.003
    assert change_point(values, min_size=5) is not None
    assert change_points(values, min_size=5, min_shift=0.02) == []


def test_the_bridge_tail_is_kolmogorovs_distribution():
    assert bridge_tail(0.0) == 1.0
    assert bridge_tail(1.3581) == pytest.approx(0.05, abs=2e-4)  # the tabled 5 % point
    assert bridge_tail(1.6276) == pytest.approx(0.01, abs=1e-4)


def test_the_detector_costs_about_n_log_n():
    """A series 64x longer takes well under 64^2 times as long (the best of 3 runs each; a
    quadratic detector would grow 4096x): 2^20 values against 2^14."""
    rng = np.random.default_rng(5)

    def best(n: int) -> float:
        values = rng.normal(0.0, 1.0, n)
        values[n // 2:] += 0.5
        gc.disable()
        try:
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                change_points(values, min_size=5)
                runs.append(time.perf_counter() - start)
        finally:
            gc.enable()
        return min(runs)

    small, large = max(best(1 << 14), 1e-3), best(1 << 20)
    assert large / small < 400, (small, large)


def test_bad_series_are_refused_in_one_line():
    for values, message in (([1.0, float("nan"), 2.0], "not a finite number"),
                            ([[1.0, 2.0]], "one series of numbers")):
        with pytest.raises(ValueError, match=message) as caught:
            change_points(values)
        assert "\n" not in str(caught.value)


# -- slow ranks: the simulated cluster's per-rank logs ---------------------------------------

@pytest.fixture(scope="module")
def clusters(tmp_path_factory) -> dict[str, Path]:
    """Eight simulated hosts, healthy, and the same eight with node05's deepest idle state
    disabled (about 4 % slower; the same seed, so the other hosts match)."""
    root = tmp_path_factory.mktemp("clusters")
    create_cluster(root / "healthy", "h100-qps-incumbent", hosts=8)
    create_cluster(root / "faulted", "h100-qps-incumbent", hosts=8,
                   host_faults={"node05": ["deep_cstate_disabled"]})
    return {"healthy": root / "healthy", "faulted": root / "faulted"}


def at_run(directory: Path, run: int) -> None:
    """The cluster's next benchmark run is number ``run`` (its noise is drawn from the run's
    number: the healthy and the faulted cluster's run ``N`` differ only by the fault)."""
    (directory / "state").mkdir(exist_ok=True)
    (directory / "state" / "bench-runs").write_text(f"{run}\n")


def per_rank_run(directory: Path, steps: int, run: int = 1) -> list[str]:
    """Run ``run`` of ``sim bench --workload dense --per-rank``: every host's Megatron line
    per iteration, prefixed with its name."""
    scenario = load_scenario(directory / "scenario.yaml")
    at_run(directory, run)
    return list(bench_lines(directory, scenario, HOSTS, "dense", steps, per_rank=True))


def spliced(runs: list[tuple[list[str], int]]) -> str:
    """Runs joined by iteration: each ``(lines, first)`` gives the iterations from ``first``
    up to the next run's ``first``. The iterations stay numbered as one job's."""
    out = []
    for index, (lines, first) in enumerate(runs):
        end = runs[index + 1][1] if index + 1 < len(runs) else math.inf
        out += [line for line in lines if first <= int(ITERATION.search(line)[1]) < end]
    return "\n".join(out) + "\n"


def slow_finding(report):
    (found,) = [f for f in report.findings if f.check_id == "workload.slow-ranks"]
    return found


def test_a_host_that_turns_slow_mid_job_is_named_with_the_iteration(clusters):
    """Iterations 1-599 from run 1 of the healthy cluster, 600-1000 from run 1 of the faulted
    one: node05 turns about 4 % slower at iteration 600, too late to be behind in half of its
    iterations. It is named with an interval holding 600 and how much slower; the evidence is
    its own lines either side; no other host is named."""
    text = spliced([(per_rank_run(clusters["healthy"], 1000), 1),
                    (per_rank_run(clusters["faulted"], 1000), 600)])
    found = slow_finding(diagnose_text(text, "ranks.log"))
    assert found.status == "warn", found.message
    assert found.values["slow"] == []
    (became,) = found.values["became_slow"]
    assert became["rank"] == "node05"
    low, high = became["interval"]
    assert low <= 600 <= high and high - low <= 10
    assert abs(became["iteration"] - 600) <= 2
    assert became["after"] - became["before"] == pytest.approx(0.04, abs=0.015)
    assert became["until"] is None and became["p_value"] < 1e-6
    assert len(found.message.splitlines()) == 1
    assert re.search(r"node05 \d\.\d% slower from iteration \d+ \[\d+, \d+\]", found.message)
    (cited,) = found.evidence
    lines = text.splitlines()
    numbers = [int(n) for n in re.findall(r"\d+", cited.split(":", 1)[1].split(" [")[0])]
    assert cited.endswith("[node05]") and len(numbers) == 2
    at = [ITERATION.search(lines[n - 1])[1] for n in numbers]
    assert all(lines[n - 1].startswith("node05:") for n in numbers)
    assert int(at[1]) == became["iteration"] and int(at[0]) == became["iteration"] - 1


@pytest.mark.parametrize("run", [1, 2, 3, 4, 5])
def test_a_healthy_clusters_logs_name_no_change(clusters, run):
    """Five runs of the healthy cluster, 1000 iterations each: nothing named."""
    text = "\n".join(per_rank_run(clusters["healthy"], 1000, run)) + "\n"
    found = slow_finding(diagnose_text(text, "ranks.log"))
    assert found.status == "pass", found.message
    assert found.values["became_slow"] == [] and found.values["slow"] == []


def test_a_host_slow_throughout_keeps_the_whole_job_finding(clusters):
    text = "\n".join(per_rank_run(clusters["faulted"], 1000)) + "\n"
    found = slow_finding(diagnose_text(text, "ranks.log"))
    assert found.status == "warn"
    (slow,) = found.values["slow"]
    assert slow["rank"] == "node05" and slow["since"] is None
    assert slow["behind"] >= 900 and found.values["became_slow"] == []
    assert found.message.startswith("1 of 8 ranks slower than the median rank, again and again: "
                                    "node05 +")


def test_a_host_slow_for_most_of_the_job_is_told_since_when(clusters):
    """node05 turns slow at iteration 300 of 1000: behind in most iterations, so slow by the
    whole-job rule, and the finding says since when."""
    text = spliced([(per_rank_run(clusters["healthy"], 1000), 1),
                    (per_rank_run(clusters["faulted"], 1000), 300)])
    found = slow_finding(diagnose_text(text, "ranks.log"))
    (slow,) = found.values["slow"]
    assert slow["rank"] == "node05" and found.values["became_slow"] == []
    low, high = slow["since"]["interval"]
    assert low <= 300 <= high
    assert f"(from iteration {slow['since']['iteration']} [{low}, {high}])" in found.message


def test_a_slow_spell_is_named_with_where_it_ended(clusters):
    """node05 slow from iteration 300 to 599, healthy again from 600."""
    text = spliced([(per_rank_run(clusters["healthy"], 1000), 1),
                    (per_rank_run(clusters["faulted"], 1000), 300),
                    (per_rank_run(clusters["healthy"], 1000), 600)])
    found = slow_finding(diagnose_text(text, "ranks.log"))
    (became,) = found.values["became_slow"]
    assert became["rank"] == "node05"
    assert became["interval"][0] <= 300 <= became["interval"][1]
    assert abs(became["until"] - 600) <= 3
    assert f"until {became['until']}" in found.message


def test_one_file_per_host_cites_the_hosts_own_lines(clusters, tmp_path):
    """The joined run written one file per host, as Slurm ``--output=%N`` keeps them: node05
    is named, and its evidence is its own file's lines at the change."""
    text = spliced([(per_rank_run(clusters["healthy"], 1000), 1),
                    (per_rank_run(clusters["faulted"], 1000), 600)])
    logs = tmp_path / "logs"
    logs.mkdir()
    for host in HOSTS:
        (logs / f"{host}.out").write_text("".join(
            line.split(": ", 1)[1] + "\n" for line in text.splitlines()
            if line.startswith(f"{host}: ")))
    found = slow_finding(diagnose_job([str(logs)]))
    (became,) = found.values["became_slow"]
    assert became["rank"] == "node05"
    (cited,) = found.evidence
    name, numbers = cited.split(":", 1)
    assert name == "node05"  # one line per iteration: line N is iteration N
    assert [int(n) for n in re.split(r"[,-]", numbers)] == [became["iteration"] - 1,
                                                            became["iteration"]]


# -- slow ranks: the real multi-rank capture ------------------------------------------------

def rank_times(path: Path) -> slow_ranks.RankTimes:
    """Every rank's step times of a log, as diagnose reads them."""
    text = normalize(path.read_text())
    reader = StepReader(path.name, {})
    raw = text.raw.split("\n")
    for index, line in enumerate(text.split("\n")):
        reader.feed(index + 1, line, text.sources[index], raw[index])
    return reader.ranks.times()


def test_the_real_four_rank_capture_shows_no_rank_changing():
    """torchtitan on 4 x H200 (orangingq/torchtitan), 20 logged steps per rank: the job's
    step time falls by about 4 % from step 220 (the step-time level shift), on every rank
    alike. No rank's excess over the ranks' median changes (every p-value far above any
    threshold), so no rank is named as turning slow: the job-wide change is not put on a rank.
    No public multi-rank log with a rank turning slow mid-job was found; this capture shows
    the other half, no false change on real data."""
    times = rank_times(TITAN_H200)
    _, steps, _, table = slow_ranks.compare_ranks(times)
    assert len(times) == 4 and steps == 20
    for name, iterations, excess, _ in slow_ranks.excesses(times, table):
        assert len(iterations) == 20
        assert change_points(excess, min_size=slow_ranks.MIN_STEPS) == [], name
        assert change_point(excess, min_size=slow_ranks.MIN_STEPS, alpha=1.0).p_value > 0.5
    found = slow_finding(diagnose_text(TITAN_H200.read_text(), TITAN_H200.name))
    assert found.status == "pass" and found.values["became_slow"] == []


# -- a host's successive runs (slow-nodes) ----------------------------------------------------

def node_runs(directory: Path, runs: range) -> dict[str, list[float]]:
    """Runs ``runs`` of the simulated node benchmark on each host alone (``sim bench --workload
    dense --hosts HOST``), each read as slow-nodes reads it: the median step time (ms)."""
    scenario = load_scenario(directory / "scenario.yaml")
    out: dict[str, list[float]] = {host: [] for host in HOSTS}
    for run in runs:
        for host in HOSTS:
            at_run(directory, run)
            text = "\n".join(bench_lines(directory, scenario, [host], "dense", 40)) + "\n"
            out[host].append(value_of(STEP_TIME, text))
    return out


def fleet_noise(values: dict[str, list[float]]) -> float:
    """The run-to-run coefficient of variation, the median over the hosts (as slow-nodes
    computes it)."""
    return statistics.median(statistics.stdev(v) / statistics.fmean(v) for v in values.values())


def test_a_host_that_turns_slow_between_runs_is_named_with_the_run(clusters):
    """Eight runs per host, runs 1-4 on the healthy cluster and runs 5-8 on the faulted one,
    where only node05 differs (about 4 % slower): with the fleet's noise node05's change is at
    run index 4, the other hosts show none. Without the noise eight runs are too few for ranks
    to tell, and nothing is said."""
    before = node_runs(clusters["healthy"], range(1, 5))
    after = node_runs(clusters["faulted"], range(5, 9))
    values = {host: before[host] + after[host] for host in HOSTS}
    noise = fleet_noise(values)
    found = run_change(values["node05"], noise=noise)
    assert found is not None and found.low <= 4 <= found.high
    assert found.relative == pytest.approx(0.04, abs=0.015) and found.length == 4
    assert all(run_change(values[h], noise=noise) is None for h in HOSTS if h != "node05")
    assert run_change(values["node05"]) is None


def test_a_change_the_whole_fleet_shares_is_not_the_hosts():
    """Every host 5 % slower from run 4 (a shared filesystem, the room's cooling): against the
    fleet's median per run, no host turned slow; alone, each did."""
    host = [100.1, 99.8, 100.2, 99.9, 105.0, 105.3, 104.8, 105.1]
    fleet = [100.0, 100.0, 100.1, 99.9, 105.1, 105.0, 105.0, 104.9]
    assert run_change(host, noise=0.003).index == 4
    assert run_change(host, noise=0.003, reference=fleet) is None


@pytest.mark.parametrize(("runs", "why"), [
    ([100.0, 100.2, 99.9, 100.1, 104.0], "one slow run at the end is a stall, not a change"),
    ([104.0, 104.2, 99.9, 100.1, 100.0], "faster is not slower"),
    ([100.0, 100.2, 99.9, 100.1, 100.5], "within the noise"),
])
def test_what_is_not_a_host_turning_slow(runs, why):
    assert run_change(runs, noise=0.004) is None, why


def test_stationary_runs_rarely_show_a_change():
    """10,000 hosts' 5 runs each at a run-to-run CV of 0.6 %, the noise known (seed 9): a
    change is reported for at most ``ALPHA`` of them."""
    rng = np.random.default_rng(9)
    runs = 100.0 * (1.0 + rng.normal(0.0, 0.006, (10_000, 5)))
    found = sum(run_change(row, noise=0.006) is not None for row in runs)
    assert found / len(runs) <= ALPHA


def test_bad_runs_are_refused_in_one_line():
    for kwargs, message in (({"values": [1.0, -2.0, 3.0, 4.0]}, "not positive"),
                            ({"values": [1.0, 2.0, 3.0, 4.0], "reference": [1.0, 2.0]},
                             "reference holds 2 runs, the host 4")):
        with pytest.raises(ValueError, match=message) as caught:
            run_change(**kwargs)
        assert "\n" not in str(caught.value)
