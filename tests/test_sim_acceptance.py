"""End to end on the simulated cluster: the demo, tune on each scenario, reboots, canaries.

Real ansible-runner runs on simulated hosts (sysroot trees), the real benchmark parsers on the
simulated benchmark's output, the SQLite ledger. Seeds are fixed, so decisions are repeatable.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exemplar_tune.sim.cluster import create_cluster
from exemplar_tune.sim.model import host_state, load_scenario
from tests.helpers import EXEMPLAR_STATE, cli_env, tree_hash, tree_state
from tests.test_cli import cli
from tests.test_tune import other_fabric

pytestmark = pytest.mark.system  # slow: real Ansible/Slurm/SSH end to end



@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("EXEMPLAR_TUNE_STATE_DIR", str(tmp_path / "state"))


def tune(directory, *args):
    return cli("tune", "-i", str(directory / "inventory.yml"), "--profile",
               str(directory / "profile.yaml"), "--bench", str(directory / "bench.yaml"), *args)


def show(experiment="latest"):
    return json.loads(cli("show", experiment, "--format", "json").stdout)


def test_demo_closes_the_gap_and_leaves_nothing_outside_its_directory(tmp_path):
    home, temp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    temp.mkdir()
    env = dict(cli_env(), HOME=str(home), TMPDIR=str(temp))
    env.pop("EXEMPLAR_TUNE_STATE_DIR", None)
    env.pop("EXEMPLAR_TUNE_BYTECODE_CACHE", None)  # the demo must set its own
    user_cache = Path(pwd.getpwuid(os.geteuid()).pw_dir, ".cache", "exemplar-tune")
    before = tree_state(user_cache) if user_cache.exists() else None
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "demo", "--hosts", "2"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
                         check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for layer in ("vm", "cpu", "runtime"):
        assert f"| {layer} | kept | moe |" in out.stdout
    assert "Gate 95% of the reference: **not reached**." in out.stdout  # before the fabric
    assert "NCCL_IB_QPS_PER_CONNECTION=1 -> NCCL_IB_QPS_PER_CONNECTION=4" in out.stdout
    assert "Chosen: NCCL_IB_QPS_PER_CONNECTION=4; on the training shapes: keep." in out.stdout
    assert "\n  gate: PASSED\n(the cluster and its ledger are removed now; 'exemplar-tune " \
        "demo --keep DIR' keeps them" in out.stdout
    # no hint that cannot work once the directory is gone, no playbook task lines
    assert "details:" not in out.stdout and str(temp) not in out.stdout.split("== done")[1]
    assert "apply: " not in out.stderr and "claim: " not in out.stderr
    assert "vm: baseline run 1/3" in out.stderr  # the loop's own steps are still shown
    assert "== preflight" in out.stdout
    assert "FAIL  vm.cmdqv-params  2/2 hosts  node[01-02]" in out.stdout
    slow = out.stdout.split("== slow nodes: 8 hosts, node05 made slow by a fact")[1]
    assert "\n  SLOW node05: " in slow and "within the fleet: node[01-04,06-08]" in slow
    assert "cpu.cpuidle.deepest_state_disabled_anywhere=true (majority false)" in slow
    assert list(home.iterdir()) == [] and list(temp.iterdir()) == []
    assert (tree_state(user_cache) if user_cache.exists() else None) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "tmp"]


def test_the_hints_of_a_kept_demo_work_when_pasted(tmp_path):
    """Before, the demo printed 'details:' commands into a directory it then removed."""
    kept = tmp_path / "demo"
    out = cli("demo", "--hosts", "2", "--keep", str(kept), "--scenario", "healthy")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    hints = [line.removeprefix("details: ") for line in out.stdout.splitlines()
             if line.startswith("details: ")]
    assert len(hints) == 2  # the tune and the sweep
    for hint in hints:
        for command in hint.split("; "):
            argv = shlex.split(command)
            assert argv[0] == "exemplar-tune"
            pasted = cli(*argv[1:])
            assert pasted.returncode == 0, (command, pasted.stderr)
    assert (kept / "report.html").is_file() and (kept / "sweep.html").is_file()


def test_a_healthy_cluster_keeps_nothing_and_changes_nothing(tmp_path):
    create_cluster(tmp_path / "c", "healthy", hosts=2)
    hosts = sorted((tmp_path / "c/hosts").iterdir())

    def content() -> dict[str, str]:  # the hosts, without the claim's (empty) directory
        return {h.name: tree_hash(h, EXEMPLAR_STATE) for h in hosts}

    before = content()
    out = tune(tmp_path / "c")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = show()
    assert {layer["status"] for layer in doc["layers"]} == {"skipped"}
    assert doc["decisions"] == [] and doc["experiment"]["summary"]["passed"] is True
    assert content() == before
    assert [list((h / EXEMPLAR_STATE).iterdir()) for h in hosts] == [[], []]  # claims given back


def other_fabric_cluster(tmp_path, name):
    scenario = load_scenario("gb300-exemplar-gap")
    scenario.update(fabric_response=other_fabric(0.02), hosts=1)
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump(scenario))
    create_cluster(tmp_path / name, str(path), seed=5)
    return tmp_path / name


def test_qps_4_is_restored_off_cx8_and_the_same_seed_decides_the_same(tmp_path):
    comparisons = []
    for name in ("first", "second"):
        directory = other_fabric_cluster(tmp_path, name)
        conf = directory / "hosts/node01/etc/nccl.conf"
        before = conf.read_bytes()
        out = tune(directory, "--layer", "fabric")
        assert "fabric   RESTORE" in out.stdout, out.stdout + out.stderr
        assert conf.read_bytes() == before
        comparisons.append(show()["decisions"][0]["comparisons"])
    assert comparisons[0] == comparisons[1]


def test_a_boot_time_change_stops_without_reboots_and_resumes_with_them(tmp_path):
    create_cluster(tmp_path / "c", "gb300-exemplar-gap", hosts=1)
    host = tmp_path / "c/hosts/node01"
    out = tune(tmp_path / "c", "--layer", "vm")
    assert out.returncode == 1
    experiment = show()["experiment"]["id"]
    assert f"'exemplar-tune resume --run {experiment} --allow-reboot'" in out.stdout
    assert "disable_cmdqv" not in (host / "etc/default/grub").read_text()
    assert host_state(str(host))["cmdqv_missing"], "not booted yet"

    out = cli("resume", "--run", experiment, "--allow-reboot")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "vm       KEEP" in out.stdout and "vm: rebooting node01" in out.stderr
    assert not host_state(str(host))["cmdqv_missing"]
    samples = show(experiment)["samples"]
    assert [s["arm"] for s in samples if s["shape"] == "moe"][:3] == ["baseline"] * 3


def test_a_canary_is_measured_first_then_the_rest_follows(tmp_path):
    create_cluster(tmp_path / "c", "gb300-exemplar-gap", hosts=2)
    out = tune(tmp_path / "c", "--layer", "runtime", "--canary", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "runtime: measuring on canary node01" in out.stderr
    assert "kept on the canary; applying to 1 more host(s)" in out.stderr
    for host in ("node01", "node02"):
        carried = tmp_path / f"c/hosts/{host}/etc/enroot/environ.d"
        assert any("NCCL_TOPO_FILE" in p.read_text() for p in carried.iterdir()), host
    hosts = {h["host"] for h in show()["hosts"]}
    assert hosts == {"node01", "node02"}


def test_bad_canary_and_resume_arguments_are_one_line_errors(tmp_path):
    create_cluster(tmp_path / "c", "healthy", hosts=1)
    out = tune(tmp_path / "c", "--canary", "-1")
    assert out.returncode == 2 and "--canary -1" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    out = cli("resume")
    assert out.returncode == 2 and "no interrupted experiment to resume" in out.stderr
    out = cli("resume", "--run", "20200101T000000-0000")
    assert out.returncode == 2 and "20200101T000000-0000" in out.stderr
