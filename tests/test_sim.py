"""The simulated cluster: host trees, boot, benchmark formats, and ``sim`` on the command line.

The end-to-end acceptance runs (demo, tune on every scenario) are in ``test_sim_acceptance.py``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tarfile

import pytest
import yaml

from exemplar_tune.diagnose import nccl_tests
from exemplar_tune.orchestration.benchmark import load_benchmarks, run_benchmark
from exemplar_tune.sim.cluster import create_cluster
from exemplar_tune.sim.hosts import BASES, TREES
from exemplar_tune.sim.model import host_state, load_scenario
from tests.conftest import SYSROOTS
from tests.helpers import EXEMPLAR_STATE, cli_env, tree_hash
from tests.test_cli import cli


@pytest.fixture(scope="module")
def gb300(tmp_path_factory):
    """A two-host gb300-exemplar-gap cluster, shared by the read-only tests of this module."""
    directory = tmp_path_factory.mktemp("sim") / "gb300"
    create_cluster(directory, "gb300-exemplar-gap", hosts=2, seed=7)
    return directory


@pytest.mark.parametrize("name", sorted(BASES.values()))
def test_shipped_trees_are_the_fixture_trees(name, tmp_path):
    with tarfile.open(TREES / f"{name}.tar.gz") as tar:
        tar.extractall(tmp_path / name, filter="tar")
    fixture = tmp_path / "fixture"
    subprocess.run(["cp", "-a", str(SYSROOTS / name), str(fixture)], check=True)
    (fixture / "README.md").unlink()
    assert tree_hash(tmp_path / name) == tree_hash(fixture)


def test_create_writes_the_faults_the_preflight_finds(gb300):
    info = yaml.safe_load((gb300 / "cluster.yaml").read_text())
    assert info["hosts"] == ["node01", "node02"] and info["seed"] == 7
    out = cli("preflight", "-i", str(gb300 / "inventory.yml"), "--profile",
              str(gb300 / "profile.yaml"), "--format", "json")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    found = {(g["id"], g["status"]) for g in doc["groups"] if g["count"] == 2}
    assert {("vm.cmdqv-params", "fail"), ("cpu.deep-cstates-disabled", "fail"),
            ("cpu.housekeeping-overlap", "warn"), ("runtime.topo-in-container", "fail"),
            ("fabric.nccl-settings", "warn")} <= found
    assert not any(g["layer"] == "gpu" for g in doc["groups"])


def test_a_healthy_cluster_passes_the_preflight(tmp_path):
    create_cluster(tmp_path / "c", "healthy", hosts=2)
    out = cli("preflight", "-i", "inventory.yml", "--profile", "profile.yaml", "--format",
              "json", cwd=tmp_path / "c")  # a relative inventory path is a path, not a host
    doc = json.loads(out.stdout)
    assert sorted(doc["hosts"]) == ["node01", "node02"] and doc["unreachable"] == {}
    assert [g["id"] for g in doc["groups"] if g["status"] == "fail"] == []
    assert out.returncode == 0, out.stdout


def test_boot_follows_the_kernel_command_line(gb300, tmp_path):
    host = tmp_path / "node"
    subprocess.run(["cp", "-a", str(gb300 / "hosts/node01"), str(host)], check=True)
    assert host_state(str(host))["cmdqv_missing"]
    grub = host / "etc/default/grub"
    grub.write_text(grub.read_text().replace(" arm_smmu_v3.disable_cmdqv=1", ""))
    assert host_state(str(host))["cmdqv_missing"], "a grub edit alone changes nothing"
    _sim_boot(host)
    assert "disable_cmdqv" in (host / "proc/cmdline").read_text(), \
        "the next boot reads grub.cfg: the defaults file alone (no update-grub) changes nothing"
    assert "generated" in _sim_boot(host, "--mkconfig")
    assert "booted" in _sim_boot(host)
    assert "disable_cmdqv" not in (host / "proc/cmdline").read_text()
    assert not host_state(str(host))["cmdqv_missing"]
    facts = json.loads(cli("facts", "--sysroot", str(host), "--layer", "vm", "--format",
                           "json").stdout)
    assert facts["vm"]["cmdqv"]["state"] == "active"
    assert (host / ".exemplar/sim/boots").read_text() == "3\n"  # create booted it once


def _sim_boot(host, *options):
    return subprocess.run([sys.executable, "-m", "exemplar_tune.sim.boot", *options, str(host)],
                          capture_output=True, text=True, env=cli_env(), check=True).stdout


def _copy_cluster(gb300, tmp_path):
    """A private copy of the shared cluster, its inventory pointing at the copy."""
    directory = tmp_path / "cluster"
    subprocess.run(["cp", "-a", str(gb300), str(directory)], check=True)
    inventory = directory / "inventory.yml"
    inventory.write_text(inventory.read_text().replace(str(gb300), str(directory)))
    return directory


def test_kernel_arguments_reach_the_next_boot_through_the_rebuild_and_leave_with_restore(
        gb300, tmp_path):
    """apply regenerates grub.cfg (journaled), restore regenerates it again from the restored
    defaults: the boot after each follows."""
    cluster = _copy_cluster(gb300, tmp_path)
    host = cluster / "hosts/node01"
    grub_cfg = (host / "boot/grub/grub.cfg").read_text()
    ledger = str(tmp_path / "ledger.db")
    out = cli("apply", "--layer", "vm", "-i", str(cluster / "inventory.yml"), "--profile",
              str(cluster / "profile.yaml"), "--ledger", ledger, "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "disable_cmdqv" not in (host / "boot/grub/grub.cfg").read_text()
    _sim_boot(host)
    assert not host_state(str(host))["cmdqv_missing"]
    out = cli("restore", "--run", "latest", "--ledger", ledger)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (host / "boot/grub/grub.cfg").read_text() == grub_cfg
    _sim_boot(host)
    assert host_state(str(host))["cmdqv_missing"]


def _reboot_command(out):
    """The command of a restore's ``REBOOT REQUIRED on HOSTS to take effect: COMMAND``
    line, and the hosts it names."""
    (line,) = [line for line in out.stdout.splitlines() if line.startswith("REBOOT REQUIRED")]
    hosts, _, command = line.removeprefix("REBOOT REQUIRED on ").partition(" to take effect: ")
    return hosts, command


def test_restore_of_kernel_arguments_says_which_hosts_to_reboot_with_a_command_that_does(
        gb300, tmp_path):
    """Kernel arguments put back take effect at the next boot: restore names the hosts and
    the command that reboots them (run as printed, they boot with the old arguments again),
    in text and JSON; show tells the layer restored, with what apply changed; a restore
    that puts nothing back asks for no reboot."""
    cluster = _copy_cluster(gb300, tmp_path)
    hosts = [cluster / "hosts/node01", cluster / "hosts/node02"]
    ledger = str(tmp_path / "ledger.db")
    apply = ["apply", "--layer", "vm", "-i", str(cluster / "inventory.yml"), "--profile",
             str(cluster / "profile.yaml"), "--ledger", ledger, "--format", "json"]
    experiment = json.loads(cli(*apply).stdout)["experiment"]
    for host in hosts:
        _sim_boot(host)
        assert not host_state(str(host))["cmdqv_missing"]
    out = cli("restore", "--run", experiment, "--ledger", ledger)
    assert out.returncode == 0, out.stdout + out.stderr
    names, command = _reboot_command(out)
    assert names == "node[01-02]" and command.endswith(
        f"-i {cluster / 'inventory.yml'} exemplar.tune.reboot --limit node01,node02")
    assert not host_state(str(hosts[0]))["cmdqv_missing"], "restored, not booted yet"
    booted = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                            env=cli_env(), cwd=tmp_path, check=False, timeout=300)
    assert booted.returncode == 0, booted.stdout + booted.stderr
    assert all(host_state(str(host))["cmdqv_missing"] for host in hosts)
    shown = cli("show", experiment, "--ledger", ledger).stdout
    assert "  vm       restored\n" in shown, shown
    assert "    node[01-02] (2/2): changed cmdqv_params; REBOOT REQUIRED to take effect\n" \
        in shown and "        /etc/default/grub:\n" in shown
    assert "arm_smmu_v3.disable_cmdqv=1" in shown and "    restored on node[01-02] (" in shown
    again = cli("rollback", "--run", experiment, "--ledger", ledger, "--format", "json")
    assert again.returncode == 0, again.stdout + again.stderr
    doc = json.loads(again.stdout)
    assert doc["reboot_required"] == [] and doc["reboot_command"] is None


def test_a_restore_needs_a_reboot_where_it_put_back_a_boot_time_change():
    """Where the restore put entries back of a layer the ledger saw change a boot-time knob
    on that host (as reported, or registered with reboot), or the module says so (BIOS)."""
    from exemplar_tune.commands.change import reboot_hosts

    knob = {"layer": "vm", "knob": "cmdqv_params", "changes": [], "reboot_required": False}
    doc = {"hosts": [{"layer": "vm", "host": h, "changed": [knob]} for h in ("n1", "n2", "n3")]
           + [{"layer": "cpu", "host": "n4", "changed": [{"layer": "cpu", "knob":
                                                          "numa_balancing"}]}]}
    answered = {"n1": ([1, 2], False), "n2": ([], False), "n3": ([3], False), "n4": ([1], True),
                "n5": ([1], False)}
    hosts = {h: {"restored": r, "reboot_required": flag} for h, (r, flag) in answered.items()}
    assert reboot_hosts(doc, {"vm": {"hosts": hosts}}) == ["n1", "n3", "n4"]


def test_the_undo_hint_of_apply_names_the_hosts_that_changed_and_runs_as_printed(
        gb300, tmp_path):
    """One host unreachable: the hint restores the hosts that changed (the unreachable one
    would fail it), from the ledger apply wrote; run as printed, it puts them back."""
    cluster = _copy_cluster(gb300, tmp_path)
    inventory = yaml.safe_load((cluster / "inventory.yml").read_text())
    inventory["all"]["hosts"]["gone1"] = {
        "ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1,
        "ansible_ssh_common_args": "-o ConnectTimeout=3"}
    (cluster / "mixed.yml").write_text(yaml.safe_dump(inventory))
    before = {h: tree_hash(cluster / "hosts" / h, EXEMPLAR_STATE) for h in ("node01", "node02")}
    ledger = tmp_path / "ledger.db"
    out = cli("apply", "--layer", "cpu", "-i", str(cluster / "mixed.yml"), "--profile",
              str(cluster / "profile.yaml"), "--ledger", str(ledger))
    assert out.returncode == 1, out.stdout + out.stderr
    experiment = out.stdout.split("experiment ", 1)[1].split()[0]
    assert "node[01-02] (2/2): changed " in out.stdout and "gone1: UNREACHABLE" in out.stdout
    hint = f"exemplar-tune restore --run {experiment} --ledger {ledger} --limit 'node[01-02]'"
    assert out.stdout.splitlines()[-1] == f"undo with: {hint}"
    undo = subprocess.run(["bash", "-c", hint], capture_output=True, text=True, env=cli_env(),
                          cwd=tmp_path, check=False, timeout=300)
    assert undo.returncode == 0, undo.stdout + undo.stderr
    assert {h: tree_hash(cluster / "hosts" / h, EXEMPLAR_STATE) for h in before} == before
    shown = cli("show", experiment, "--ledger", str(ledger)).stdout.splitlines()
    assert shown[1:3] == ["  cpu      restored", "    node[01-02] (2/3): changed deep_cstates, "
                          "housekeeping, numa_balancing"]
    assert "        /proc/sys/kernel/numa_balancing: '1' -> '0'" in shown
    assert shown[-2].startswith("    gone1: UNREACHABLE: ")
    assert shown[-1].startswith("    restored on node[01-02] (")


def test_after_applying_the_cpu_layer_preflight_agrees_with_audit(gb300, tmp_path):
    cluster = _copy_cluster(gb300, tmp_path)
    common = ["-i", str(cluster / "inventory.yml"), "--profile", str(cluster / "profile.yaml")]
    out = cli("apply", "--layer", "cpu", *common, "--ledger", str(tmp_path / "l.db"))
    assert out.returncode == 0, out.stdout + out.stderr
    audit = cli("audit", "--layer", "cpu", *common, "--format", "json")
    assert json.loads(audit.stdout)["drift"] == [] and audit.returncode == 0
    doc = json.loads(cli("preflight", *common, "--layer", "cpu", "--format", "json").stdout)
    bad = {(g["id"], g["status"]) for g in doc["groups"] if g["status"] in ("fail", "warn")}
    assert ("cpu.housekeeping-overlap", "warn") not in bad
    assert not any(check.startswith(("cpu.deep-cstates", "cpu.housekeeping")) for check, _ in bad)


def test_training_output_is_megatron_and_follows_the_state(gb300, tmp_path):
    spec = load_benchmarks(gb300 / "bench.yaml")[1]
    assert spec.name == "moe"
    values = [run_benchmark(spec).value for _ in range(3)]
    reference = load_scenario("gb300-exemplar-gap")["workloads"]["moe"]["step_time_s"] * 1000
    assert statistics.fmean(values) > reference * 1.15  # the faults cost well over 15 %
    assert len(set(values)) == 3  # runs get independent noise


def test_collectives_print_an_nccl_tests_table(gb300):
    scenario = load_scenario("gb300-exemplar-gap")
    for workload, collective in (("nccl-allgather", "all_gather"),
                                 ("nccl-reducescatter", "reduce_scatter")):
        out = cli("sim", "bench", str(gb300), "--workload", workload)
        assert out.returncode == 0, out.stderr
        test = nccl_tests.parse_tests(out.stdout)[-1]
        assert test["collective"] == collective
        row = {r["size"]: r for r in test["rows"]}[16 * 2**30]["out_of_place"]
        qps1 = {"all_gather": 375, "reduce_scatter": 389}[collective]  # the published CX-8 case
        expected = qps1 * (1 + scenario["effects"]["topo_missing_in_container"])
        assert row["time_us"] / 1000 == pytest.approx(expected, rel=0.05)
        assert row["busbw"] < row["algbw"]


def test_the_same_seed_gives_the_same_numbers(tmp_path):
    outputs = []
    for name in ("a", "b"):
        create_cluster(tmp_path / name, "healthy", hosts=1, seed=3)
        outputs.append([cli("sim", "bench", str(tmp_path / name), "--workload", "dense").stdout
                        for _ in range(2)])
    assert outputs[0] == outputs[1]
    assert outputs[0][0] != outputs[0][1]


@pytest.mark.parametrize(("args", "message"), [
    (["--scenario", "nope"], "scenario nope: no such file or shipped scenario"),
    (["--hosts", "0"], "--hosts 0: between 1 and 4096"),
    (["--scenario", "{bad}"], "scenario {bad}: missing name, base"),
])
def test_bad_create_arguments_are_one_line_errors(tmp_path, args, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts: 2\n")
    args = [str(bad) if a == "{bad}" else a for a in args]
    message = message.replace("{bad}", str(bad))
    out = cli("sim", "create", str(tmp_path / "c"), *args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"exemplar-tune: error: {message}")
    assert not (tmp_path / "c").exists()


def test_create_refuses_a_directory_with_files_and_leaves_it_alone(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c/keep.txt").write_text("mine\n")
    out = cli("sim", "create", str(tmp_path / "c"))
    assert out.returncode == 2 and "exists and is not an empty directory" in out.stderr
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["keep.txt"]


def test_bench_rejects_unknown_workloads_hosts_and_directories(gb300, tmp_path):
    out = cli("sim", "bench", str(gb300), "--workload", "resnet")
    assert out.returncode == 2 and "workload 'resnet'" in out.stderr
    out = cli("sim", "bench", str(gb300), "--workload", "dense", "--hosts", "node09")
    assert out.returncode == 2 and "host 'node09' is not in" in out.stderr
    out = cli("sim", "bench", str(tmp_path), "--workload", "dense")
    assert out.returncode == 2 and "not a simulated cluster" in out.stderr
