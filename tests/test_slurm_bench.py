"""Benchmark shapes in Slurm form, run for real on the test cluster (tests/slurmcluster.py):
through ``run_benchmark`` (what the loop calls) and through the measured loop itself.

Each rank prints a sample and where it ran; the assertions check the parsed value, each
rank's node and inventory host, and, for jobs that fail, are cancelled, time out or are held
after a failed prolog, that the run is "no measurement" with Slurm's reason and that nothing
of the job is left running.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from exemplar_tune.fleet.ansible_run import AnsibleRun
from exemplar_tune.orchestration.benchmark import (
    BenchmarkFailed,
    BenchmarkFileError,
    load_benchmarks,
    run_benchmark,
)
from tests.helpers import tree_hash

pytestmark = pytest.mark.system  # slow: real Ansible/Slurm/SSH end to end

RANK = ["/bin/sh", "-c", 'echo "step_time=$((100 + SLURM_PROCID))"; '
        'echo "rank $SLURM_PROCID ran on $SLURMD_NODENAME" >&2']


@pytest.fixture(autouse=True)
def slurm_env(slurm_cluster, monkeypatch):
    """Every Slurm client the code under test runs talks to the test cluster."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    return slurm_cluster


def shape(name="b", command=None, timeout=60, **slurm):
    return {"name": name, "command": command or RANK, "parser": "regex",
            "pattern": r"step_time=([0-9]+)", "higher_is_better": False, "timeout": timeout,
            "slurm": {"partition": "debug", **slurm}}


def spec_of(tmp_path, *shapes):
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump({"shapes": list(shapes)}))
    return load_benchmarks(path)


def inventory_file(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu": {"hosts": {
        "gpu01": {"exemplar_slurm_node": "node1"}, "node2": None}}}}}))
    return AnsibleRun(str(path))


def rank_lines(log: Path) -> dict[int, str]:
    """``{rank: node it says it ran on}`` from the saved log."""
    found = {}
    for line in log.read_text().splitlines():
        if line.startswith("[stderr] rank "):
            words = line.split()
            found[int(words[2])] = words[-1]
    return found


# --- measurements ---------------------------------------------------------------------------

def test_srun_ranks_are_parsed_and_mapped_to_inventory_hosts(tmp_path):
    [spec] = spec_of(tmp_path, shape(mode="srun", nodelist="inventory", ntasks_per_node=2))
    m = run_benchmark(spec, log_dir=tmp_path / "logs", inventory=inventory_file(tmp_path))
    assert m.samples == [100.0, 101.0, 102.0, 103.0]
    assert m.value == 101.5
    assert m.nodes == {"node1": "gpu01", "node2": "node2"}
    # the placement we report is where each rank really ran (it printed its SLURMD_NODENAME)
    assert rank_lines(m.log_path) == {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
    log = m.log_path.read_text()
    assert "==> rank 0 on node1 (host gpu01) <==" in log
    assert "COMPLETED on node1,node2" in log.splitlines()[0]


def test_sbatch_job_output_per_job_then_removed(tmp_path):
    out_dir = tmp_path / "shared"
    out_dir.mkdir()
    [spec] = spec_of(tmp_path, shape(mode="sbatch", nodelist=["node3", "node4"],
                                     output_dir=str(out_dir)))
    m = run_benchmark(spec, log_dir=tmp_path / "logs")
    assert m.samples == [100.0, 101.0]
    assert m.nodes == {"node3": None, "node4": None}
    assert rank_lines(m.log_path) == {0: "node3", 1: "node4"}
    assert list(out_dir.iterdir()) == []  # script and output files were private to the run


def test_words_reach_the_ranks_literally(tmp_path):
    """The batch script quotes every word: no expansion, no command substitution, no glob."""
    marker = tmp_path / "pwned"
    words = ["a b", f"$(touch {marker})", "*", "'quoted'", "x;y"]
    command = ["/bin/sh", "-c", 'for w in "$@"; do echo "step_time=1 [$w]"; done', "sh", *words]
    [spec] = spec_of(tmp_path, shape(mode="sbatch", command=command))
    m = run_benchmark(spec, log_dir=tmp_path / "logs")
    assert m.samples == [1.0] * len(words)
    assert [f"step_time=1 [{w}]" for w in words] == [
        line for line in m.log_path.read_text().splitlines() if line.startswith("step_time")]
    assert not marker.exists()


def test_only_exported_variables_reach_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("EXEMPLAR_SECRET", "leak")
    command = ["/bin/sh", "-c", 'echo "step_time=1 secret=[${EXEMPLAR_SECRET-}] '
               'debug=[${NCCL_DEBUG-}]"']
    item = shape(mode="srun", command=command, export=["PATH"])
    item["env"] = {"NCCL_DEBUG": "WARN"}
    [spec] = spec_of(tmp_path, item)
    m = run_benchmark(spec, log_dir=tmp_path / "logs")
    assert "step_time=1 secret=[] debug=[WARN]" in m.log_path.read_text()


# --- no measurement -------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["srun", "sbatch"])
def test_failed_job_gives_no_measurement_with_slurms_reason(tmp_path, mode):
    command = ["/bin/sh", "-c", 'echo step_time=5; [ "$SLURM_PROCID" = 1 ] && exit 3; true']
    [spec] = spec_of(tmp_path, shape(mode=mode, command=command, nodes=2))
    with pytest.raises(BenchmarkFailed) as failed:
        run_benchmark(spec, log_dir=tmp_path / "logs")
    reason = failed.value.reason
    assert reason.startswith("slurm job ") and " failed: exit code 3" in reason, reason
    assert "node2: task 1: Exited with exit code 3" in reason
    assert failed.value.log_path.read_text().startswith("# slurm job ")


@pytest.mark.parametrize("mode", ["srun", "sbatch"])
def test_timeout_cancels_the_job(tmp_path, slurm_env, mode):
    [spec] = spec_of(tmp_path, shape(mode=mode, command=["/bin/sleep", "300"], timeout=3))
    started = time.monotonic()
    with pytest.raises(BenchmarkFailed) as failed:
        run_benchmark(spec)
    assert time.monotonic() - started < 30
    assert failed.value.reason.startswith("timed out after 3 s (slurm job "), failed.value.reason
    assert failed.value.reason.endswith(" cancelled)")
    assert slurm_env.wait_for(lambda: not _running("sleep", slurm_env), 15), "job left running"
    job = failed.value.reason.split("slurm job ")[1].split()[0]
    assert _state(slurm_env, job).startswith("CANCELLED")


def test_job_cancelled_by_someone_else(tmp_path, slurm_env):
    [spec] = spec_of(tmp_path, shape(name="victim", mode="srun", command=["/bin/sleep", "300"]))

    def cancel_when_running():
        def running():
            out = slurm_env.run(["squeue", "-h", "-t", "R", "-o", "%j"]).stdout
            return any(name.startswith("exemplar-victim-") for name in out.split())
        if slurm_env.wait_for(running, 20):
            slurm_env.run(["scancel", "--name", next(
                n for n in slurm_env.run(["squeue", "-h", "-o", "%j"]).stdout.split()
                if n.startswith("exemplar-victim-"))])

    helper = threading.Thread(target=cancel_when_running)
    helper.start()
    with pytest.raises(BenchmarkFailed) as failed:
        run_benchmark(spec)
    helper.join()
    assert failed.value.reason.endswith("was cancelled"), failed.value.reason


def test_job_held_after_a_failed_prolog_is_given_up_at_once(tmp_path, slurm_env):
    prolog = tmp_path / "prolog.sh"
    prolog.write_text('#!/bin/sh\n[ "$SLURMD_NODENAME" = node2 ] && exit 1\nexit 0\n')
    prolog.chmod(0o755)
    [spec] = spec_of(tmp_path, shape(mode="sbatch", nodelist=["node2"], timeout=60))
    slurm_env.reconfigure(f"Prolog={prolog}")
    try:
        started = time.monotonic()
        with pytest.raises(BenchmarkFailed) as failed:
            run_benchmark(spec)
        assert time.monotonic() - started < 30
    finally:
        slurm_env.reconfigure("")
        slurm_env.resume_all()
    assert "was held (launch failed requeued held): a prolog failed" in failed.value.reason, \
        failed.value.reason


def test_job_waiting_for_a_drained_node_is_given_up_at_once(tmp_path, slurm_env):
    [spec] = spec_of(tmp_path, shape(mode="srun", nodelist=["node3"], timeout=60))
    slurm_env.scontrol("update", "NodeName=node3", "State=DRAIN", "Reason=maintenance")
    try:
        started = time.monotonic()
        with pytest.raises(BenchmarkFailed) as failed:
            run_benchmark(spec)
        assert time.monotonic() - started < 30
    finally:
        slurm_env.resume_all()
    assert "cannot start (ReqNodeNotAvail, UnavailableNodes:node3)" in failed.value.reason, \
        failed.value.reason


def test_inventory_nodelist_without_inventory(tmp_path):
    [spec] = spec_of(tmp_path, shape(mode="srun", nodelist="inventory"))
    with pytest.raises(BenchmarkFailed, match="nodelist: inventory needs the inventory's hosts"):
        run_benchmark(spec)


def test_missing_output_dir(tmp_path):
    [spec] = spec_of(tmp_path, shape(mode="sbatch", output_dir="nope"))
    with pytest.raises(BenchmarkFailed) as failed:
        run_benchmark(spec)
    assert failed.value.reason == f"slurm.output_dir {tmp_path}/nope: No such file or directory"


def test_submission_refused_by_slurm(tmp_path):
    item = shape(mode="sbatch")
    item["slurm"]["partition"] = "nosuch"
    [spec] = spec_of(tmp_path, item)
    with pytest.raises(BenchmarkFailed) as failed:
        run_benchmark(spec)
    assert failed.value.reason == ("sbatch exit status 1: sbatch: error: Batch job submission "
                                   "failed: Invalid partition name specified")


def _running(name, cluster):
    return [pid for pid, comm in cluster.leftovers() if comm == name]


def _state(cluster, job):
    return cluster.run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"]).stdout.strip()


# --- through the measured loop --------------------------------------------------------------

@pytest.fixture
def loop_setup(tmp_path, monkeypatch):
    """A one-host simulated cluster whose fabric layer has something to change."""
    from exemplar_tune.sim.cluster import create_cluster
    from exemplar_tune.sim.model import load_scenario

    monkeypatch.setenv("EXEMPLAR_TUNE_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "profile.yaml").write_text(yaml.safe_dump(
        {"name": "swept", "fabric": {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4"}}}))
    scenario = load_scenario("healthy")
    scenario.update(hosts=1, faults=["nccl_qps_1"])
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    create_cluster(tmp_path / "cluster", str(tmp_path / "scenario.yaml"))
    return tmp_path, tmp_path / "cluster" / "hosts" / "node01"


def _measured(tmp_path, host, command):
    """``exemplar-tune apply --layer fabric --bench`` with one Slurm shape running ``command``."""
    from tests.test_cli import cli

    bench = tmp_path / "bench.yaml"
    bench.write_text(yaml.safe_dump({"shapes": [{
        "name": "dense", "command": command, "parser": "megatron", "warmup": 5,
        "slurm": {"mode": "srun", "partition": "debug", "nodes": 1}}]}))
    return cli("apply", "--layer", "fabric", "--sysroot", str(host), "--profile",
               str(tmp_path / "profile.yaml"), "--bench", str(bench), "--max-runs", "4")


def test_loop_restores_when_the_job_gives_no_measurement(loop_setup):
    """The loop's own runner, a Slurm job that fails: the layer is restored, the reason kept."""
    tmp_path, host = loop_setup
    pristine = tree_hash(host / "etc")
    out = _measured(tmp_path, host, ["/bin/sh", "-c", "echo boom >&2; exit 3"])
    reason = "failed: exit code 3: srun: error: node1: task 0: Exited with exit code 3"
    assert out.returncode == 1, out.stdout + out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.strip().startswith("fabric"))
    assert "FAILED   no measurement: benchmark dense: " in line and reason in line, line
    assert tree_hash(host / "etc") == pristine


# --- bad benchmark files (no cluster needed, but cheap here) -------------------------------

@pytest.mark.parametrize("slurm, command, message", [
    ({"mode": "mpirun", "partition": "p"}, RANK,
     "shape 'b': slurm.mode: 'mpirun' is not one of ['srun', 'sbatch']"),
    ({"mode": "srun"}, RANK, "shape 'b': slurm.partition: missing (required)"),
    ({"mode": "srun", "partition": "p", "qos": "x"}, RANK,
     "shape 'b': slurm.qos: unknown key (allowed: mode, partition"),
    ({"mode": "srun", "partition": "p", "nodes": 0}, RANK,
     "shape 'b': slurm.nodes: 0 is less than the minimum of 1"),
    ({"mode": "srun", "partition": "p", "export": ["NCCL DEBUG"]}, RANK,
     "shape 'b': slurm.export.0: 'NCCL DEBUG' does not match"),
    ({"mode": "srun", "partition": "p", "time_limit": "1h"}, RANK,
     "shape 'b': slurm.time_limit: '1h' does not match"),
    ({"mode": "srun", "partition": "p", "options": ["rm -rf /"]}, RANK,
     "shape 'b': slurm.options.0: 'rm -rf /' does not match"),
    ({"mode": "sbatch", "partition": "p"}, "srun -N2 all_gather_perf",
     "shape 'b': command: with slurm:, give the program each rank runs, not srun"),
])
def test_bad_slurm_forms_are_refused_with_the_key(tmp_path, slurm, command, message):
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump({"shapes": [{
        "name": "b", "command": command, "parser": "steptime", "slurm": slurm}]}))
    with pytest.raises(BenchmarkFileError) as error:
        load_benchmarks(path)
    assert str(error.value).startswith(f"benchmark file {path}: {message}"), str(error.value)
    assert "\n" not in str(error.value)


def test_bad_slurm_form_on_the_command_line(tmp_path):
    from tests.test_cli import cli

    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump({"shapes": [{
        "name": "b", "command": "x", "parser": "steptime", "slurm": {"mode": "srun"}}]}))
    out = cli("tune", "--bench", str(path), "--dry-run", "--quiet")  # stderr: the error only
    assert out.returncode == 2
    assert out.stderr == (f"exemplar-tune: error: benchmark file {path}: shape 'b': "
                          "slurm.partition: missing (required)\n")



def test_rollback_cancels_the_job_of_a_killed_controller(loop_setup, slurm_env):
    """SIGKILL of the controller while its sbatch job runs: its launcher ends with it, the
    job (sbatch --wait does not take it along) is cancelled by rollback, from the ledger."""
    import subprocess
    import sys

    from tests.helpers import cli_env
    from tests.test_cli import cli

    tmp_path, host = loop_setup
    bench = tmp_path / "bench.yaml"
    bench.write_text(yaml.safe_dump({"shapes": [{
        "name": "dense", "command": ["/bin/sleep", "300"], "parser": "steptime",
        "slurm": {"mode": "sbatch", "partition": "debug", "nodes": 1}}]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "exemplar_tune.cli", "apply", "--layer", "fabric", "--sysroot",
         str(host), "--profile", str(tmp_path / "profile.yaml"), "--bench", str(bench)],
        env=dict(cli_env(), EXEMPLAR_TUNE_STATE_DIR=str(tmp_path / "state"),
                 SLURM_CONF=str(slurm_env.conf)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def job_running():
        out = slurm_env.run(["squeue", "-h", "-t", "R", "-o", "%i %j"]).stdout.split()
        return out[0] if len(out) == 2 and out[1].startswith("exemplar-dense-") else None

    assert slurm_env.wait_for(job_running, 60), "the job never ran"
    job = job_running()
    launchers = [p for p in psutil.Process(proc.pid).children(recursive=True)
                 if "sbatch" in " ".join(p.cmdline())]
    assert launchers, "no sbatch under the controller"
    proc.kill()
    proc.wait()
    assert slurm_env.wait_for(lambda: not any(p.is_running() and p.status() != "zombie"
                                              for p in launchers), 15), "sbatch outlived it"
    assert _state(slurm_env, job) == "RUNNING"  # the controller's death alone leaves it
    out = cli("rollback", "--run", "latest")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"cancelled Slurm job(s) {job} of experiment" in out.stderr
    assert slurm_env.wait_for(lambda: _state(slurm_env, job).startswith("CANCELLED"), 30)
