"""``exemplar-tune slow-nodes``: the statistics on given runs (fast), and end to end on a
simulated fleet whose one host is slowed by a fact (system)."""

from __future__ import annotations

import json
import random

import pytest

from exemplar_tune.errors import UserError
from exemplar_tune.fleet.majority import Difference
from exemplar_tune.orchestration.slow_nodes import explain, judge
from exemplar_tune.sim.cluster import create_cluster
from tests.test_cli import cli


def fleet(slow: dict[str, float], hosts: int = 8, runs: int = 5, cv: float = 0.005,
          seed: int = 1) -> dict[str, list[float]]:
    rng = random.Random(seed)
    names = [f"node{i:02d}" for i in range(1, hosts + 1)]
    return {h: [(1.0 + slow.get(h, 0.0)) * (1 + rng.gauss(0, cv)) for _ in range(runs)]
            for h in names}


def test_a_host_slower_than_the_fleet_beyond_its_noise_is_named_with_its_interval():
    verdicts = judge(fleet({"node05": 0.06}), 0.9)
    first = verdicts[0]
    assert first.host == "node05" and first.slow
    assert first.low > 0.03 and first.slowdown == pytest.approx(0.06, abs=0.01)
    assert first.line().startswith("node05: 6.")
    assert [v.host for v in verdicts if v.slow] == ["node05"]


def test_noise_alone_names_no_host_and_small_slowdowns_are_not_worth_naming():
    assert not any(v.slow for v in judge(fleet({}, hosts=32), 0.9))
    small = judge(fleet({"node03": 0.006}, cv=0.0005), 0.9, min_slowdown=0.01)
    assert small[0].host == "node03" and small[0].low > 0 and not small[0].slow


def test_the_error_is_shared_over_the_hosts():
    """The same host and runs: alone among 3 hosts it is slow, among 200 its wider interval
    (each at 1 - 0.1/200) is not."""
    few = fleet({"node01": 0.02}, hosts=3, runs=3, cv=0.008, seed=4)
    many = fleet({}, hosts=200, runs=3, cv=0.008, seed=4)
    many["node01"] = few["node01"]
    assert next(v for v in judge(few, 0.9) if v.host == "node01").slow
    assert not next(v for v in judge(many, 0.9) if v.host == "node01").slow


@pytest.mark.parametrize(("values", "message"), [
    ({"a1": [1.0] * 5, "a2": [1.0] * 5}, "2 hosts: too few to tell a slow one"),
    ({"a1": [1.0] * 2, "a2": [1.0] * 2, "a3": [1.0] * 2}, "at least 3 runs per host"),
])
def test_the_data_cannot_tell(values, message):
    with pytest.raises(UserError, match=message):
        judge(values, 0.9)


def test_a_slow_host_is_explained_by_where_it_differs_from_the_majority():
    verdicts = judge(fleet({"node05": 0.06}), 0.9)
    found = [Difference("cpu.governor", "performance", ("node01",), (("powersave", ("node05",)),))]
    explained = explain(verdicts, found)
    assert explained[0].differs == ("cpu.governor=powersave (majority performance)",)
    assert all(v.differs == () for v in explained[1:])


@pytest.mark.system
def test_slow_nodes_finds_and_explains_a_host_whose_idle_state_is_disabled(tmp_path):
    """Eight simulated hosts; node05's deepest idle state disabled makes it about 4 % slower:
    slow-nodes names it with its interval and the facts where it differs, and nothing else."""
    directory = tmp_path / "c"
    create_cluster(directory, "h100-qps-incumbent", hosts=8)
    inventory, bench = str(directory / "inventory.yml"), str(directory / "bench.yaml")
    healthy = cli("slow-nodes", "-i", inventory, "--bench", bench, "--runs", "3")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "0 slow; within the fleet: node[01-08]" in healthy.stdout
    faulty = tmp_path / "f"  # the same fleet, node05 built with the idle state disabled
    made = cli("sim", "create", str(faulty), "--scenario", "h100-qps-incumbent", "--hosts", "8",
               "--fault", "node05=deep_cstate_disabled")
    assert made.returncode == 0 and "node05 also: deep_cstate_disabled" in made.stdout
    inventory, bench = str(faulty / "inventory.yml"), str(faulty / "bench.yaml")
    out = cli("slow-nodes", "-i", inventory, "--bench", bench, "--runs", "3", "--format",
              "json")
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["slow"] == "node05" and doc["shape"] == "dense"
    (slow,) = [h for h in doc["hosts"] if h["slow"]]
    assert slow["slowdown"] == pytest.approx(0.04, abs=0.015) and slow["interval"][0] > 0
    assert "cpu.cpuidle.deepest_state_disabled_anywhere=true (majority false)" in slow["differs"]
    text = cli("slow-nodes", "-i", inventory, "--bench", bench, "--runs", "3")
    assert text.returncode == 1
    assert "  SLOW node05: " in text.stdout and "within the fleet: node[01-04,06-08]" in text.stdout


@pytest.mark.system
def test_slow_nodes_bad_input_is_one_line(tmp_path):
    directory = tmp_path / "c"
    create_cluster(directory, "healthy", hosts=3)
    inventory, bench = str(directory / "inventory.yml"), str(directory / "bench.yaml")
    for args, message in (
            (["--bench", bench], "slow-nodes compares hosts with each other: give an inventory"),
            (["-i", inventory, "--bench", bench, "--runs", "2"], "at least 3 runs per host"),
            (["-i", inventory, "--bench", bench, "--shape", "gemm"], "--shape gemm: "),
            (["-i", inventory, "--bench", bench, "--min-slowdown", "2"], "a fraction"),
            (["-i", inventory, "--bench", bench, "--confidence", "1.5"],
             "--confidence 1.5: a fraction between 0 and 1")):
        out = cli("slow-nodes", *args)
        assert out.returncode == 2, out.stdout + out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], out.stderr
