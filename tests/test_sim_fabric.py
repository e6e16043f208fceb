"""The simulated fabric: its response to NCCL settings by message size, nccl-tests tables over
a size range, training that follows the same response, and the NCCL COLL log."""

from __future__ import annotations

import collections
import re
import subprocess

import pytest
import yaml

from exemplar_tune.diagnose import nccl_tests
from exemplar_tune.sim.bench import table_sizes
from exemplar_tune.sim.cluster import create_cluster
from exemplar_tune.sim.coll_log import coll_log_lines
from exemplar_tune.sim.fabric import (
    band_factor,
    effective_values,
    extra_cost,
    parse_size,
    time_factor,
)
from exemplar_tune.sim.model import (
    comm_calls,
    host_state,
    load_scenario,
    mean_step_time,
    shipped_scenarios,
)
from tests.test_cli import cli

QPS = "NCCL_IB_QPS_PER_CONNECTION"
CANDIDATES = ("1", "2", "4", "8")
# The INFO line of ncclEnqueueCheck (NVIDIA/nccl src/enqueue.cc) behind src/debug.cc's prefix:
#   "%s:%d:%d " hostname, pid, tid; "[%d] NCCL INFO " cudaDev; then
#   "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p "
#   "[nranks=%d] stream %p"
COLL_LINE = re.compile(
    r"^(?P<host>[^:\s]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO "
    r"(?P<op>\w+): opCount (?P<opcount>[0-9a-f]+) sendbuff (?:0x[0-9a-f]+|\(nil\)) "
    r"recvbuff (?:0x[0-9a-f]+|\(nil\)) count (?P<count>\d+) datatype (?P<datatype>\d+) "
    r"op (?P<redop>\d+) root (?P<root>\d+) comm 0x[0-9a-f]+ \[nranks=(?P<nranks>\d+)\] "
    r"stream 0x[0-9a-f]+$")
OPS = {"AllGather": "all_gather", "ReduceScatter": "reduce_scatter", "AllReduce": "all_reduce"}


def state(**nccl):
    """A host with nothing to fix but its NCCL settings."""
    return {"cmdqv_missing": False, "deep_cstates_blocked": False, "housekeeping_shared": False,
            "topo_missing_in_container": False, "nccl": nccl}


def best_for_training(scenario, workload):
    times = {v: mean_step_time(state(**{QPS: v}), scenario, workload) for v in CANDIDATES}
    return min(times, key=times.get), times


@pytest.fixture(scope="module")
def gb300(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fabric") / "gb300"
    create_cluster(directory, "gb300-exemplar-gap", hosts=1, seed=3)
    return directory


@pytest.fixture(scope="module")
def fewer(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fabric") / "fewer"
    create_cluster(directory, "h100-fewer-qps", hosts=2, seed=3)
    return directory


def test_sizes_read_like_nccl_tests_flags():
    assert [parse_size(t) for t in ("0", "1048576", "64K", "1M", "16G", "2m")] == \
        [0, 2**20, 2**16, 2**20, 16 * 2**30, 2 * 2**20]
    with pytest.raises(ValueError, match="'64Q' is not a size"):
        parse_size("64Q")


def test_the_response_applies_by_size_band():
    response = {QPS: {"unset": 1, "factors": {1: {0: 1.0, "64M": 1.4}, 4: {"64M": 1.0}},
                      "cost": {"collective_us": 2.0, "compute": 0.001}}}
    qps1 = effective_values(response, {})
    qps4 = effective_values(response, {QPS: "4"})
    assert qps1 == {QPS: "1"} and qps4 == {QPS: "4"}
    assert time_factor(response, qps1, 2**20) == 1.0  # helps above 64M, nothing at 1M
    assert time_factor(response, qps4, 2**20) == 1.0
    assert time_factor(response, qps1, 64 * 2**20) == 1.4
    assert time_factor(response, qps1, 16 * 2**30) == 1.4
    assert time_factor(response, qps4, 16 * 2**30) == 1.0
    assert band_factor({"1M": 0.5}, 1000) == 1.0  # below every band
    unlisted = effective_values(response, {QPS: "16"})
    assert unlisted == qps1 and extra_cost(response, unlisted) == (0.0, 0.0)
    assert extra_cost(response, qps4) == pytest.approx((6.0, 0.003))  # 3 QPs beyond the first


def test_the_best_value_at_the_workloads_sizes_differs_between_scenarios():
    gap = load_scenario("gb300-exemplar-gap")
    fewer = load_scenario("h100-fewer-qps")
    incumbent = load_scenario("h100-qps-incumbent")
    for workload in ("dense", "moe"):
        assert best_for_training(gap, workload)[0] == "4"
        assert best_for_training(fewer, workload)[0] == "2"
        best, times = best_for_training(incumbent, workload)
        assert best == "4"
        others = [times[v] / times["4"] - 1 for v in ("2", "8")]
        assert all(0 <= d < incumbent["noise_cv"] / 2 for d in others), others
    # fewer-qps: 4 helps at the top of a default nccl-tests table, not at the training sizes
    response = fewer["fabric_response"]
    qps = {v: effective_values(response, {QPS: v}) for v in ("2", "4")}
    assert time_factor(response, qps["4"], 16 * 2**30) < time_factor(response, qps["2"],
                                                                     16 * 2**30)
    assert all(time_factor(response, qps["4"], size) > time_factor(response, qps["2"], size)
               for _, size, _ in comm_calls(fewer["workloads"]["dense"]))


def test_the_unset_defaults_are_ncclss():
    for name in shipped_scenarios():
        response = load_scenario(name)["fabric_response"]
        if QPS in response:
            assert response[QPS]["unset"] == 1
        for choice in ("NCCL_ALGO", "NCCL_PROTO"):  # NCCL picks per call when unset
            if choice in response:
                assert response[choice]["unset"] == "auto"
                assert "auto" not in response[choice]["factors"]  # NCCL's pick is factor 1
        if "NCCL_IB_SPLIT_DATA_ON_QPS" in response:
            assert response["NCCL_IB_SPLIT_DATA_ON_QPS"]["unset"] == 0  # since NCCL 2.20


def test_table_sizes_follow_b_e_f_and_whole_elements_per_rank():
    assert table_sizes(2**20, 16 * 2**30, 2, 16) == [2**20 * 2**i for i in range(15)]
    assert table_sizes(2**16, 2**28, 4, 16) == [2**16 * 4**i for i in range(7)]
    assert table_sizes(1000, 1000, 2, 16) == [960]  # 15 floats per rank
    assert table_sizes(1, 8, 2, 16) == [64] * 4
    with pytest.raises(ValueError, match="-f 1"):
        table_sizes(1, 8, 1, 16)


@pytest.mark.parametrize(("workload", "collective"), [("nccl-allgather", "all_gather"),
                                                      ("nccl-reducescatter", "reduce_scatter")])
def test_the_table_round_trips_through_the_nccl_tests_parser(fewer, workload, collective):
    out = cli("sim", "bench", str(fewer), "--workload", workload, "-b", "64K", "-e", "256M",
              "-f", "4")
    assert out.returncode == 0, out.stderr
    assert "minBytes 65536 maxBytes 268435456 step: 4(factor)" in out.stdout
    (test,) = nccl_tests.parse_tests(out.stdout)
    assert test["collective"] == collective and test["out_of_bounds"] == 0
    assert [r["size"] for r in test["rows"]] == [2**16 * 4**i for i in range(7)]
    ranks = 16
    for row in test["rows"]:
        group = row["out_of_place"]
        assert row["count"] == row["size"] // 4 // ranks
        algbw = row["size"] / group["time_us"] / 1000  # GB/s, as nccl-tests computes it
        assert group["algbw"] == pytest.approx(algbw, abs=0.006)
        assert group["busbw"] == pytest.approx(algbw * (ranks - 1) / ranks, abs=0.006)
    average = sum(r["busbw"] for r in test["rows"]) / len(test["rows"])
    assert test["avg_busbw"] == pytest.approx(average, abs=0.01)


def test_bad_table_ranges_are_one_line_errors(fewer):
    for args, message in ((["-f", "1"], "-f 1: the step factor"),
                          (["-b", "1G", "-e", "1M"], "need 0 < minbytes <= maxbytes"),
                          (["-b", "lots"], "'lots' is not a size")):
        out = cli("sim", "bench", str(fewer), "--workload", "nccl-allgather", *args)
        assert out.returncode == 2 and message in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def _set_qps(host, value):
    conf = host / "etc/nccl.conf"
    conf.write_text(re.sub(r"^NCCL_IB_QPS_PER_CONNECTION=.*$",
                           f"NCCL_IB_QPS_PER_CONNECTION={value}", conf.read_text(), flags=re.M))


def _row_ms(directory, size):
    out = cli("sim", "bench", str(directory), "--workload", "nccl-allgather", "-b", str(size),
              "-e", str(size))
    assert out.returncode == 0, out.stderr
    return nccl_tests.parse_tests(out.stdout)[0]["rows"][0]["out_of_place"]["time_us"] / 1000


def test_changing_the_hosts_nccl_conf_changes_tables_and_training(gb300, tmp_path):
    directory = tmp_path / "c"
    subprocess.run(["cp", "-a", str(gb300), str(directory)], check=True)
    host = directory / "hosts/node01"
    scenario = load_scenario(directory / "scenario.yaml")
    topology = 1 + scenario["effects"]["topo_missing_in_container"]
    assert host_state(str(host))["nccl"][QPS] == "1"
    assert _row_ms(directory, "16G") == pytest.approx(375 * topology, rel=0.03)
    slow = {w: mean_step_time(host_state(str(host)), scenario, w) for w in ("dense", "moe")}
    _set_qps(host, 4)
    assert host_state(str(host))["nccl"][QPS] == "4"
    assert _row_ms(directory, "16G") == pytest.approx(262 * topology, rel=0.03)
    fast = {w: mean_step_time(host_state(str(host)), scenario, w) for w in ("dense", "moe")}
    # the communication share (10 % dense, 20 % moe) runs ~1.43x slower with 1 QP
    assert slow["dense"] / fast["dense"] == pytest.approx(1.04, abs=0.005)
    assert slow["moe"] / fast["moe"] > slow["dense"] / fast["dense"] > 1.03


def test_training_follows_the_setting_through_the_benchmark(fewer, tmp_path):
    directory = tmp_path / "c"
    subprocess.run(["cp", "-a", str(fewer), str(directory)], check=True)
    medians = {}
    for value in ("4", "2"):
        for node in ("node01", "node02"):
            _set_qps(directory / "hosts" / node, value)
        runs = []
        for _ in range(3):
            out = cli("sim", "bench", str(directory), "--workload", "moe", "--steps", "20")
            runs += [float(v) for v in re.findall(r"per iteration \(ms\): ([\d.]+)", out.stdout)]
        medians[value] = sorted(runs)[len(runs) // 2]
    assert medians["2"] < medians["4"] * 0.995  # fewer QPs win at the training sizes


def test_the_coll_log_has_ncclss_line_format_and_the_workloads_sizes(fewer):
    out = cli("sim", "coll-log", str(fewer), "--workload", "dense", "--steps", "2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    scenario = load_scenario(fewer / "scenario.yaml")
    calls = comm_calls(scenario["workloads"]["dense"])
    nranks = 16
    assert len(lines) == 2 * nranks * sum(n for _, _, n in calls)
    sizes = collections.Counter()
    prefixes = set()
    for line in lines:
        match = COLL_LINE.match(line)
        assert match, line
        assert match["datatype"] == "9" and match["redop"] == "0" and match["root"] == "0"
        assert int(match["nranks"]) == nranks
        op, count = OPS[match["op"]], int(match["count"])
        size = count * 2 * (1 if op == "all_reduce" else nranks)
        sizes[(op, size)] += 1
        prefixes.add((match["host"], match["pid"], match["dev"]))
    assert sizes == {(op, size): 2 * nranks * n for op, size, n in calls}
    assert {host for host, _, _ in prefixes} == {"node01", "node02"} and len(prefixes) == nranks
    histogram = collections.Counter(size for (_, size), n in sizes.items() for _ in range(n))
    assert histogram.most_common(1)[0][0] == 64 * 2**20 and len(histogram) > 1
    assert lines[0].startswith("node01:") and " opCount 0 " in lines[0]
    assert f" opCount {len(lines) // nranks - 1:x} " in lines[-1]


def test_the_coll_log_is_for_training_workloads(fewer):
    scenario = load_scenario("h100-fewer-qps")
    with pytest.raises(ValueError, match="training job's"):
        list(coll_log_lines(scenario, ["node01"], "nccl-allgather", 1))
    out = cli("sim", "coll-log", str(fewer), "--workload", "nccl-allgather")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s.pop("fabric_response"), "missing fabric_response"),
    (lambda s: s["fabric_response"][QPS].pop("unset"), f"fabric_response.{QPS}: missing unset"),
    (lambda s: s["fabric_response"][QPS]["factors"][4].update({"64Q": 1.0}),
     f"fabric_response.{QPS}.factors.4.64Q: '64Q' is not a size"),
    (lambda s: s["fabric_response"][QPS]["factors"][1].update({"32M": -1}),
     f"fabric_response.{QPS}.factors.1.32M: factor -1 is not a positive number"),
    (lambda s: s["fabric_response"][QPS].update(bands={}),
     f"fabric_response.{QPS}.bands: unknown key"),
    (lambda s: s["fabric_response"][QPS]["cost"].update(collective_us="x"),
     f"fabric_response.{QPS}.cost.collective_us: 'x' is not a number"),
    (lambda s: s["fabric_response"].update(IB_QPS={}), "fabric_response.IB_QPS: not an NCCL"),
    (lambda s: s["workloads"]["dense"].pop("comm_sizes"), "workloads.dense: missing comm_sizes"),
    (lambda s: s["workloads"]["moe"]["comm_sizes"].update(alltoall={"1M": 1}),
     "workloads.moe.comm_sizes: alltoall: not a collective"),
    (lambda s: s["workloads"]["moe"]["comm_sizes"]["all_gather"].update({"1M": 0}),
     "workloads.moe.comm_sizes: all_gather.1M: calls per step 0"),
])
def test_scenario_validation_errors_are_one_line_and_name_the_key(tmp_path, change, message):
    scenario = load_scenario("gb300-exemplar-gap")
    change(scenario)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(scenario))
    with pytest.raises(ValueError) as raised:
        load_scenario(path)
    assert str(raised.value).startswith(f"scenario {path}: {message}"), raised.value
    assert "\n" not in str(raised.value)
    out = cli("sim", "create", str(tmp_path / "c"), "--scenario", str(path))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("name", ["h100-fewer-qps", "h100-qps-incumbent"])
def test_the_new_scenarios_create_clusters(tmp_path, name):
    out = cli("sim", "create", str(tmp_path / "c"), "--scenario", name)
    assert out.returncode == 0, out.stderr
    assert f"scenario {name}, 2 host(s)" in out.stdout
    state_ = host_state(str(tmp_path / "c/hosts/node01"))
    assert state_["nccl"][QPS] == "4"  # the incumbent the sweep measures against
