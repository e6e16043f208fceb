"""``slow-nodes --fabric``: the host that is fine alone and slows every collective it joins.

The search (``orchestration.slow_fabric.locate``) is checked on seeded draws of a fleet where
a group's runs are slower when it holds a bad host, then end to end on a simulated cluster
whose one host has a degraded rail (``nic_degraded``: a port at half rate, error counters,
link downs in its kernel log) or a GPU with NVLinks down (``nvlink_degraded``); the simulated
collectives read those hosts' sysfs trees and captures with the facts readers.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from exemplar_tune.errors import UserError
from exemplar_tune.facts import facts_from_sysroot
from exemplar_tune.fleet.majority import differences, host_differences
from exemplar_tune.orchestration.slow_fabric import link_facts, locate, max_tests
from exemplar_tune.sim.cluster import create_cluster
from exemplar_tune.sim.hosts import DEGRADED_GPU, DEGRADED_LINKS
from exemplar_tune.sim.model import (
    collective_times,
    host_state,
    load_scenario,
    mean_step_time,
)
from tests.test_cli import cli

HOSTS = [f"n{i:02d}" for i in range(16)]


def draws(bad: set[str], seed: int, slowdown: float = 0.05, cv: float = 0.01,
          repeat: int = 5):
    """A measure: a group's runs ``slowdown`` slower when it holds a bad host, noise ``cv``."""
    rng = random.Random(seed)

    def measure(groups):
        return {g: [(1 + slowdown * bool(bad & set(g))) * (1 + rng.gauss(0, cv))
                    for _ in range(repeat)] for g in groups}
    return measure


def search(bad: set[str], seed: int, hosts: list[str] = HOSTS):
    return locate(hosts, draws(bad, seed), repeat=5, confidence=0.9, min_slowdown=0.01)


def test_one_bad_host_of_16_is_found_within_log2_plus_2_rounds():
    found = [search({HOSTS[seed % 16]}, seed) for seed in range(60)]
    assert sum(f.suspects == [HOSTS[seed % 16]] for seed, f in enumerate(found)) >= 57
    assert max(f.rounds for f in found) <= math.log2(16) + 2
    first = found[0]
    assert (first.method, first.rounds) == ("bisection", 4)  # 8/8, 4/4, 2/2, then beside good
    assert [len(t.group) for t in first.tests[:2]] == [8, 8]
    assert first.runs == 5 * (2 + 2 + 2 + 4)  # two groups a round, then 2 pairs + 2 controls


def test_a_healthy_fleet_names_nobody():
    assert sum(len(search(set(), seed).suspects) for seed in range(60)) == 0


def test_two_bad_hosts_one_in_each_half_are_found_through_pairs():
    found = [search({HOSTS[seed % 8], HOSTS[8 + seed % 8]}, seed) for seed in range(40)]
    right = [f for seed, f in enumerate(found)
             if set(f.suspects) == {HOSTS[seed % 8], HOSTS[8 + seed % 8]}]
    assert len(right) >= 36 and {f.method for f in right} == {"pairs"}


def test_an_odd_fleet_waits_one_host_for_the_pair_round():
    hosts = HOSTS[:9]
    found = search({hosts[-1]}, 3, hosts)  # the host left out of the halves is the bad one
    assert found.suspects == [hosts[-1]]
    assert all(len(t.group) == len(found.tests[0].group) for t in found.tests[:2])


def test_the_error_is_shared_over_the_most_tests_the_search_can_make():
    assert max_tests(16) == 4 + 16 and max_tests(9) == 4 + 9


@pytest.mark.parametrize(("hosts", "repeat", "message"), [
    (HOSTS[:3], 5, "--fabric: 3 hosts: at least 4 are needed"),
    (HOSTS, 2, "--runs 2: at least 3 runs per group are needed"),
])
def test_too_little_to_search_is_one_line(hosts, repeat, message):
    with pytest.raises(UserError, match=message):
        locate(hosts, draws(set(), 0), repeat=repeat, confidence=0.9, min_slowdown=0.01)


# -- the simulated cluster -----------------------------------------------------------------


@pytest.fixture(scope="module")
def degraded(tmp_path_factory) -> Path:
    """Four healthy H100 hosts but node02 (a rail at half rate) and node03 (NVLinks down)."""
    directory = tmp_path_factory.mktemp("fabric") / "c"
    create_cluster(directory, "healthy", hosts=4,
                   host_faults={"node02": ["nic_degraded"], "node03": ["nvlink_degraded"]})
    return directory


def _state(cluster: Path, host: str) -> dict:
    return host_state(str(cluster / "hosts" / host))


def test_a_degraded_rail_slows_collectives_across_hosts_not_the_host_alone(degraded):
    scenario = load_scenario("healthy")
    good, bad = _state(degraded, "node01"), _state(degraded, "node02")
    assert (good["rail_rate_ratio"], bad["rail_rate_ratio"]) == (1.0, 0.5)
    alone = [mean_step_time(s, scenario, "dense", nodes=1) for s in (good, bad)]
    assert alone[0] == alone[1]  # its node benchmark sees nothing
    size = [16 * 2**30]
    across = [collective_times(s, scenario, "nccl-allgather", "h", 0, size, nodes=2)[0]
              for s in (good, bad)]
    assert across[1] / across[0] == pytest.approx(2.0, rel=0.01)  # the slow rail paces it


def test_a_gpu_with_nvlinks_down_slows_its_collectives_inside_the_host_too(degraded):
    scenario = load_scenario("healthy")
    good, bad = _state(degraded, "node01"), _state(degraded, "node03")
    assert bad["nvlink_ratio"] == pytest.approx((18 - DEGRADED_LINKS) / 18)
    alone = [mean_step_time(s, scenario, "dense", nodes=1) for s in (good, bad)]
    assert alone[1] > alone[0]
    gpu = facts_from_sysroot(str(degraded / "hosts/node03"), ["gpu"])["gpu"]
    (down,) = [g for g in gpu["nvlink"] if g["inactive"]]
    assert down["index"] == DEGRADED_GPU and len(down["inactive"]) == DEGRADED_LINKS


def test_the_link_facts_name_what_differs_on_the_degraded_hosts(degraded):
    facts = {h: link_facts(facts_from_sysroot(str(degraded / "hosts" / h), ["fabric", "gpu"]))
             for h in ("node01", "node02", "node03", "node04")}
    found = differences(facts)
    rail = host_differences("node02", found)
    assert "link.ports.mlx5_1/1=ACTIVE/LinkUp 100.0 Gb/s Ethernet (majority ACTIVE/LinkUp " \
           "200.0 Gb/s Ethernet)" in rail
    assert any(d.startswith("link.port_errors=mlx5_1/1: symbol_error 2113") for d in rail)
    assert any(d.startswith("link.link_downs=") and d.endswith(": 3 (majority none)")
               for d in rail)
    assert host_differences("node03", found) == [
        f"link.nvlinks_down=GPU {DEGRADED_GPU}: {DEGRADED_LINKS} (majority none)"]
    assert host_differences("node01", found) == []


@pytest.mark.system
def test_slow_nodes_fabric_finds_the_host_with_the_degraded_rail(tmp_path):
    """Eight simulated hosts, node06 with a rail at half rate: the node benchmark finds no
    slow host, --fabric names node06 within log2(8) + 2 rounds with its link facts."""
    directory = tmp_path / "c"
    create_cluster(directory, "healthy", hosts=8, host_faults={"node06": ["nic_degraded"]})
    inventory, nccl = str(directory / "inventory.yml"), str(directory / "nccl.yaml")
    alone = cli("slow-nodes", "-i", inventory, "--runs", "3", "--format", "json")
    assert alone.returncode in (0, 1), alone.stdout + alone.stderr
    (node06,) = [h for h in json.loads(alone.stdout)["hosts"] if h["host"] == "node06"]
    assert not node06["slow"]  # alone, the host with the bad rail is as fast as the others
    out = cli("slow-nodes", "-i", inventory, "--fabric", "--bench", nccl, "--shape",
              "nccl-allgather", "--runs", "3", "--format", "json")
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["slow"] == "node06" and doc["rounds"] <= math.log2(8) + 2
    # 4/4, 2/2, then two pairs beside good hosts and two control pairs: 8 groups, 3 runs each
    assert (doc["runs_per_group"], doc["runs"], doc["method"]) == (3, 24, "bisection")
    (found,) = doc["suspects"]
    assert found["interval"][0] > 0.5  # a pair with it takes about twice as long
    assert any("mlx5_1/1=ACTIVE/LinkUp 100.0 Gb/s" in d for d in found["differs"])
    text = cli("slow-nodes", "-i", inventory, "--fabric", "--bench", nccl, "--shape",
               "nccl-allgather", "--runs", "3")
    assert text.returncode == 1 and "  SLOW node06: a pair with it is" in text.stdout
    assert text.stdout.startswith("slow-nodes --fabric: 8 hosts, nccl-allgather (")


@pytest.mark.system
def test_slow_nodes_fabric_bad_input_is_one_line(tmp_path):
    directory = tmp_path / "c"
    create_cluster(directory, "healthy", hosts=4)
    inventory, bench = str(directory / "inventory.yml"), str(directory / "bench.yaml")
    nccl = str(directory / "nccl.yaml")
    for args, message in (
            (["--fabric"], "--fabric runs a multi-node collective: give its shape with --bench"),
            (["--fabric", "--bench", bench], "--fabric: shape dense must be nccl-tests with "
                                             "metric busbw"),
            (["--fabric", "--bench", nccl, "--format", "prometheus"],
             "--fabric writes table or json, not prometheus")):
        out = cli("slow-nodes", "-i", inventory, *args)
        assert out.returncode == 2, out.stdout + out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], out.stderr
