"""``exemplar-tune slow-nodes``: the statistics on given runs (fast), and end to end on a
simulated fleet whose one host is slowed by a fact (system)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
import yaml

from exemplar_tune.errors import UserError
from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from exemplar_tune.fleet.majority import Difference
from exemplar_tune.orchestration.benchmark import BenchmarkSpec
from exemplar_tune.orchestration.slow_nodes import (
    explain,
    judge,
    lost_groups,
    measure,
    measure_on_hosts,
    node_value,
    slow_groups,
    turned_slow,
    unanswered,
)
from exemplar_tune.reports.prometheus import slow_nodes_text
from exemplar_tune.sim.cluster import create_cluster
from tests.corpus import REALWORLD
from tests.test_cli import cli
from tests.test_monitoring import tool

NCCL_P5 = (REALWORLD / "nccl-tests"
           / "aws-samples-awsome-distributed-training-readme-p5-srun-label-allreduce.txt")


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


def test_a_host_that_turns_slow_mid_way_is_named_with_the_run_it_began():
    """node04's last four of eight runs are 5 % slower: over all runs it is not slower beyond
    the interval shared over 16 hosts, but it turned slow at run 5, and only it did."""
    values = fleet({}, hosts=16, runs=8, cv=0.005, seed=7)
    values["node04"] = [v * (1.05 if i >= 4 else 1.0) for i, v in enumerate(values["node04"])]
    verdicts = turned_slow(judge(values, 0.9), 0.9)
    turned = [v for v in verdicts if v.turned]
    assert [v.host for v in turned] == ["node04"]
    (found,) = turned
    assert found.turned.index == 4 and found.turned.low <= 4 <= found.turned.high
    assert found.turned.relative == pytest.approx(0.05, abs=0.01)
    assert found.turned_line() == (f"node04: {found.turned.relative:.1%} slower from run 5 of "
                                   "8 [run 5]")
    assert found.to_dict()["turned_slow"]["run"] == 5
    calm = turned_slow(judge(fleet({}, hosts=16, runs=8, seed=8), 0.9), 0.9)
    assert not any(v.turned for v in calm)
    drift = fleet({}, hosts=16, runs=8, seed=9)  # every host 5 % slower from run 5: the fleet's
    drift = {h: [v * (1.05 if i >= 4 else 1.0) for i, v in enumerate(r)] for h, r in drift.items()}
    assert not any(v.turned for v in turned_slow(judge(drift, 0.9), 0.9))


def test_a_host_that_turned_slow_is_the_same_verdict_in_every_channel():
    """Not slow over all its runs but slow from run 5: the table, JSON verdict, Prometheus and
    HTML all say so (a channel that said "within the fleet" would hide it)."""
    from argparse import Namespace

    from exemplar_tune.commands.slow_nodes import _document, render

    values = fleet({}, hosts=16, runs=8, cv=0.005, seed=7)
    values["node04"] = [v * (1.05 if i >= 4 else 1.0) for i, v in enumerate(values["node04"])]
    verdicts = turned_slow(judge(values, 0.9), 0.9)
    assert not next(v for v in verdicts if v.host == "node04").slow
    args = Namespace(inventory="hosts.yml", runs=8, confidence=0.9, min_slowdown=0.01)
    doc = _document(args, "node benchmark", [v.to_dict() for v in verdicts], 0.005)
    assert doc["verdicts"]["node04"]["class"] == "health"
    assert "from run 5" in doc["verdicts"]["node04"]["reason"]
    assert doc["verdicts"]["node03"]["class"] == "ok"
    assert "TURNED SLOW node04: " in render(doc, verdicts, "table")
    text = render(doc, verdicts, "prometheus")
    assert 'exemplar_tune_node_turned_slow{host="node04"} 1' in text
    assert 'exemplar_tune_node_turned_slow_run{host="node04"} 5' in text
    assert 'exemplar_tune_node_turned_slow{host="node03"} 0' in text
    assert ('exemplar_tune_host_verdict{host="node04",command="slow-nodes",class="health"'
            in text)
    checked = subprocess.run([tool("promtool"), "check", "metrics"], input=text, text=True,
                             capture_output=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    page = render(doc, verdicts, "html")
    assert "TURNED SLOW</span> node04" in page and "turned slow from run 5" in page


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


def test_slow_hosts_that_differ_alike_are_folded_into_one_hostlist():
    """Twelve hosts slowed by the same fact are one line, not twelve; a host slowed by
    another fact stays its own group."""
    slow = {f"node{i:02d}": 0.05 for i in range(3, 15)} | {"node40": 0.08}
    verdicts = judge(fleet(slow, hosts=48, cv=0.003), 0.9)
    powersave = tuple(f"node{i:02d}" for i in range(3, 15))
    found = [Difference("cpu.governor", "performance", ("node01",), (("powersave", powersave),)),
             Difference("fabric.ports_up", 4, ("node01",), ((3, ("node40",)),))]
    groups = slow_groups(explain(verdicts, found))
    assert [g.hosts for g in groups] == ["node40", "node[03-14]"]
    assert groups[1].differs == ("cpu.governor=powersave (majority performance)",)
    assert groups[1].line().startswith("node[03-14] (12 hosts): 4.")
    assert "each beyond its interval" in groups[1].line()
    assert groups[0].line().startswith("node40: 8.")


def test_the_prometheus_output_is_valid_and_names_the_slow_host_and_its_facts(tmp_path):
    verdicts = explain(judge(fleet({"node05": 0.06}), 0.9), [Difference(
        "cpu.governor", "performance", ("node01",), (("powersave", ("node05",)),))])
    text = slow_nodes_text({"hosts": [v.to_dict() for v in verdicts]}, now=1.5)
    assert 'exemplar_tune_node_slow{host="node05"} 1' in text
    assert 'exemplar_tune_node_slow{host="node01"} 0' in text
    assert 'exemplar_tune_node_differs{host="node05",fact="cpu.governor"} 1' in text
    assert text.count("exemplar_tune_node_differs{") == 1
    checked = subprocess.run([tool("promtool"), "check", "metrics"], input=text, text=True,
                             capture_output=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_node_run_is_read_from_what_it_printed():
    """A real nccl-tests run (aws-samples, 16 x H100 over EFA): the time of its largest row;
    Megatron lines: the median step time after the warm-up; anything else: the wall time."""
    nccl = NCCL_P5.read_text()
    value, what = node_value("command", {"output": nccl, "seconds": 9.0}, "n1")
    assert what == "nccl-tests time (us)" and value > 1000
    lines = "".join(f" iteration {i:8d}/      40 | elapsed time per iteration (ms): "
                    f"{100.0 + (i > 10) * 5:.1f} | lm loss: 2.0E+00 |\n" for i in range(1, 31))
    assert node_value("command", {"output": lines, "seconds": 9.0}, "n1") == (
        105.0, "median step time (ms)")
    assert node_value("command", {"output": "GEMM done: 812.4 TFLOPS\n", "seconds": 9.0},
                      "n1") == (9.0, "wall time (s)")
    assert node_value("cpu-loop", {"output": "", "seconds": 0.25}, "n1") == (0.25,
                                                                              "wall time (s)")
    row = next(line for line in nccl.splitlines() if "float     sum" in line)
    wrong = nccl.replace(row, row[:-1] + "5", 1)  # its in-place #wrong: corrupt data
    with pytest.raises(UserError, match="node benchmark on n1: wrong results"):
        node_value("command", {"output": wrong, "seconds": 9.0}, "n1")


STEPS = ("import os, sys\nhost = os.environ['EXEMPLAR_TUNE_HOSTS']\nif host == 'a2':\n"
         "    sys.exit('a2 lost its GPU')\nfor i in range(1, 21):\n    print(f' iteration {i}/20"
         " | elapsed time per iteration (ms): {100 + (host == \"a3\")}.0 |')\n")


def test_a_benchmark_that_fails_on_a_host_names_it_and_the_others_are_measured():
    """--bench: a host whose run fails is named with the run and why, and run no more."""
    spec = BenchmarkSpec("dense", (sys.executable, "-c", STEPS), "megatron", timeout=60)
    run = AnsibleRun(local_inventory(["a1", "a2", "a3"]))
    values, failed = measure(run, spec, ["a1", "a2", "a3"], 3, None, lambda _: None)
    assert failed == {"a2": "run 1 of 3: exit status 1: a2 lost its GPU"}
    assert values == {"a1": [100.0] * 3, "a3": [101.0] * 3}


def test_hosts_that_gave_no_result_are_named_and_folded_by_why():
    """A pass stopped at --timeout reports nothing of the hosts still running: they are the
    inventory's hosts that did not answer."""
    run = AnsibleRun(local_inventory([f"node{i:02d}" for i in range(1, 6)]), timeout=30)
    lost = unanswered(run, ["node03"], "canceled")
    assert sorted(lost) == ["node01", "node02", "node04", "node05"]
    assert set(lost.values()) == {"no result within --timeout 30 s (raise it for long "
                                  "benchmarks)"}
    assert unanswered(run, ["node03"], "failed")["node01"] == \
        "no result (ansible-runner status failed)"
    lost["node03"] = "command run 1 of 3 (/opt/node03/gemm): exit status 3"
    assert lost_groups(lost) == [
        {"hosts": "node[01-02,04-05]", "count": 4,
         "reason": "no result within --timeout 30 s (raise it for long benchmarks)"},
        {"hosts": "node03", "count": 1,
         "reason": "command run 1 of 3 (/opt/node03/gemm): exit status 3"}]
    # hosts whose reasons differ only in their own names: one group, the name as <host>
    lost["node01"] = "command run 1 of 3 (/opt/node01/gemm): exit status 3"
    assert lost_groups(lost)[-1] == {
        "hosts": "node[01,03]", "count": 2,
        "reason": "command run 1 of 3 (/opt/<host>/gemm): exit status 3"}


@pytest.mark.system
def test_the_node_benchmark_runs_the_hosts_command_or_the_cpu_loop_and_refuses_a_mix(tmp_path):
    """Real Ansible, local hosts: a host without a command and without nccl-tests runs the
    timed loop; hosts that ran different kinds cannot be compared; a command that fails is
    one line naming the host and run."""
    sysroot = str(REALWORLD.parent / "sysroots" / "h100-x86")
    base = {"exemplar_sysroot": sysroot}
    run = AnsibleRun(local_inventory(["a1", "a2", "a3"], {h: base for h in ("a1", "a2", "a3")}),
                     timeout=300)
    done = measure_on_hosts(run, 3)
    assert not done.missing and sorted(done.values) == ["a1", "a2", "a3"]
    assert done.measured == "cpu-loop: wall time (s)"
    assert all(len(v) == 3 and all(0 < x < 60 for x in v) for v in done.values.values())
    assert set(done.facts["a1"]) >= {"cpu", "gpu"}
    echo = [sys.executable, "-c", "print('iteration 1/1 | elapsed time per iteration (ms): 5')"]
    mixed = AnsibleRun(local_inventory(["a1", "a2", "a3"], {
        "a1": base, "a2": base, "a3": {**base, "exemplar_node_bench_command": echo}}))
    with pytest.raises(UserError, match=r"different node benchmarks: command on a3; "
                                        r"cpu-loop on a\[1-2\]"):
        measure_on_hosts(mixed, 3)
    failing = AnsibleRun(local_inventory(["a1"], {"a1": {
        **base, "exemplar_node_bench_command": [sys.executable, "-c", "raise SystemExit(3)"]}}))
    lost = measure_on_hosts(failing, 3)
    assert lost.missing["a1"].startswith("command run 1 of 3 (")
    assert "exit status 3" in lost.missing["a1"]


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
              "json", "--detect", "2%")
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["slow"] == "node05" and doc["measured"].startswith("dense")
    assert doc["detect"].startswith("to see a 2% slower host with 95% power at ")
    assert " over 8 hosts: --runs " in doc["detect"] and "(--runs 3 gave " in doc["detect"]
    (slow,) = [h for h in doc["hosts"] if h["slow"]]
    assert slow["slowdown"] == pytest.approx(0.04, abs=0.015) and slow["interval"][0] > 0
    assert "cpu.cpuidle.deepest_state_disabled_anywhere=true (majority false)" in slow["differs"]
    text = cli("slow-nodes", "-i", inventory)  # the node benchmark, in one pass
    assert text.returncode == 1, text.stdout + text.stderr
    assert "node benchmark, command: median step time (ms) x 5 runs" in text.stdout
    assert "  SLOW node05: " in text.stdout and "within the fleet: node[01-04,06-08]" in text.stdout
    assert "cpu.cpuidle.deepest_state_disabled_anywhere=true (majority false)" in text.stdout
    page = tmp_path / "slow.html"
    html = cli("slow-nodes", "-i", inventory, "--format", "html", "--output", str(page))
    assert html.returncode == 1 and html.stdout == ""
    shown = page.read_text()
    assert "<h3><span class=\"fail\">SLOW</span> node05</h3>" in shown
    assert "deepest_state_disabled_anywhere=true" in shown


@pytest.mark.system
def test_slow_nodes_refuses_a_fleet_where_a_host_failed(tmp_path):
    """A host whose benchmark fails is not left out of the comparison silently: it is
    named, with why, and nothing is compared (exit 1)."""
    directory = tmp_path / "c"
    create_cluster(directory, "healthy", hosts=3)
    inventory = yaml.safe_load((directory / "inventory.yml").read_text())
    inventory["all"]["hosts"]["node02"]["exemplar_node_bench_command"] = ["false"]
    (directory / "broken.yml").write_text(yaml.safe_dump(inventory))
    out = cli("slow-nodes", "-i", str(directory / "broken.yml"), "--runs", "3")
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.splitlines() == [
        "slow-nodes: nothing compared: 1 of 3 host(s) failed or timed out while running the "
        "node benchmark (--limit leaves hosts out)",
        "  FAILED node02: command run 1 of 3 (false): exit status 1"]


@pytest.mark.system
def test_slow_nodes_names_the_hosts_whose_benchmark_timed_out_or_failed(tmp_path):
    """Every node benchmark still running when --timeout stops the pass: the hosts are
    named with why (not "0 hosts: too few"), in the table and in JSON; with --bench, a
    benchmark that fails everywhere names the hosts and the run."""
    directory = tmp_path / "c"
    create_cluster(directory, "healthy", hosts=3)
    inventory = yaml.safe_load((directory / "inventory.yml").read_text())
    for host in inventory["all"]["hosts"].values():
        host["exemplar_node_bench_command"] = ["sleep", "60"]
    (directory / "sleepy.yml").write_text(yaml.safe_dump(inventory))
    common = ["slow-nodes", "-i", str(directory / "sleepy.yml"), "--runs", "3", "--timeout", "4"]
    out = cli(*common)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.splitlines()[1:] == [
        "  FAILED node[01-03]: no result within --timeout 4 s (raise it for long benchmarks)"]
    assert "3 of 3 host(s) failed or timed out" in out.stdout
    out = cli(*common, "--format", "json")
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["lost"] == [{"hosts": "node[01-03]", "count": 3, "reason": "no result within "
                            "--timeout 4 s (raise it for long benchmarks)"}]
    assert doc["hosts"] == [] and doc["slow"] == ""
    bench = directory / "failing.yaml"
    bench.write_text(yaml.safe_dump({"shapes": [{"name": "gemm", "parser": "megatron",
                                                 "command": ["false"]}]}))
    out = cli("slow-nodes", "-i", str(directory / "inventory.yml"), "--bench", str(bench),
              "--runs", "3")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "  FAILED node[01-03]: run 1 of 3: exit status 1 (no output)" in out.stdout


@pytest.mark.system
def test_slow_nodes_bad_input_is_one_line(tmp_path):
    directory = tmp_path / "c"
    create_cluster(directory, "healthy", hosts=3)
    inventory, bench = str(directory / "inventory.yml"), str(directory / "bench.yaml")
    for args, message in (
            (["--bench", bench], "slow-nodes compares hosts with each other: give an inventory"),
            (["-i", inventory, "--bench", bench, "--runs", "2"], "at least 3 runs per host"),
            (["-i", inventory, "--bench", bench, "--shape", "gemm"], "--shape gemm: "),
            (["-i", inventory, "--shape", "gemm"], "--shape names a shape of a --bench file"),
            (["-i", inventory, "--bench", bench, "--min-slowdown", "2"], "a fraction"),
            (["-i", inventory, "--bench", bench, "--confidence", "1.5"],
             "--confidence 1.5: a fraction between 0 and 1"),
            (["-i", inventory, "--detect", "2x"], "--detect 2x: a slowdown such as 2% or 0.02"),
            (["-i", inventory, "--fabric", "--detect", "2%"],
             "--detect sizes slow-nodes' runs per host")):
        out = cli("slow-nodes", *args)
        assert out.returncode == 2, out.stdout + out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], out.stderr


@pytest.mark.system
def test_the_try_it_recipe_of_the_help_finds_the_slow_host(tmp_path):
    """The first "Try it" recipe of ``slow-nodes --help``, run as printed (its directory
    moved under this test's): it names node05 slow and the fact that slows it."""
    import shlex

    recipe = cli("slow-nodes", "--help").stdout.split("Try it:", 1)[1]
    recipe = recipe.replace("\\\n", " ").replace("/tmp/c", str(tmp_path / "c"))
    create, run = [shlex.split(line.split("(README", 1)[0])
                   for line in recipe.splitlines()[:2]]
    assert create[:3] == ["exemplar-tune", "sim", "create"], create
    assert cli(*create[1:]).returncode == 0
    out = cli(*run[1:])
    assert out.returncode == 1, out.stdout + out.stderr
    assert "SLOW node05:" in out.stdout and "deepest_state_disabled" in out.stdout
