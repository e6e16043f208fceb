"""The prolog gate on a real Slurm: installed by the ``slurm_prolog`` role (real ansible-runner)
into the test cluster's configuration, read by slurmd, run before each job.

The cluster's directory is the role's sysroot (its ``slurm.conf`` is ``/etc/slurm.conf``
there); the gate reads each fake node's host tree with ``--sysroot NODES/%n``
(:func:`tests.slurmcluster.node_sysroots`: node1/node3 healthy, node2 with C6 disabled,
node4 the ``h100-x86`` fixture). A test that breaks a tree (an Xid 79, an empty tree) puts it
back before the next.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from tests.helpers import cli_env
from tests.slurmcluster import break_gpu, heal, node_sysroots

pytestmark = pytest.mark.system  # slow: real Ansible/Slurm/SSH end to end

PLAYBOOK = """- name: Slurm prolog gate
  hosts: all
  gather_facts: false
  tasks:
    - name: The role, or its restore
      ansible.builtin.include_role:
        name: exemplar.tune.slurm_prolog
        tasks_from: "{{ task_file }}"
"""
EXECUTABLE = str(Path(sys.executable).with_name("exemplar-tune"))


def run_role(cluster, tmp_path, task_file="main", **extra):
    playbook = tmp_path / "gate.yml"
    playbook.write_text(PLAYBOOK)
    extravars = {"task_file": task_file, "exemplar_sysroot": str(cluster.dir),
                 "exemplar_run_id": "gate1", "slurm_prolog_conf": "/etc/slurm.conf",
                 "slurm_prolog_dir": "/etc/prolog.d",
                 "slurm_prolog_glob": f"{cluster.dir}/etc/prolog.d/*",
                 "slurm_prolog_executable": EXECUTABLE, "slurm_prolog_profile": "h100-x86",
                 **extra}
    outcome = AnsibleRun(local_inventory(), timeout=300).playbook(playbook, extravars)
    return outcome.hosts["localhost"]


def show_config(cluster, key):
    for line in cluster.scontrol("show", "config").splitlines():
        name, _, value = line.partition("=")
        if name.strip() == key:
            return value.strip()
    return None


@pytest.fixture(scope="module")
def gate(slurm_cluster, tmp_path_factory):
    """The gate installed by the role (reading each node's tree under NODES/%n) and read by
    the daemons; put back afterwards."""
    work = tmp_path_factory.mktemp("gate")
    nodes = node_sysroots(work / "nodes")
    slurm_cluster.gate_nodes = nodes  # the trees the gate reads, for running it by hand
    host = run_role(slurm_cluster, work, slurm_prolog_args=["--sysroot", f"{nodes}/%n"])
    assert host.status == "ok", host.message
    slurm_cluster.scontrol("reconfigure")
    try:
        yield slurm_cluster
    finally:
        run_role(slurm_cluster, work, task_file="restore")
        slurm_cluster.scontrol("reconfigure")


@pytest.fixture
def cluster(gate):
    """The gated cluster, every node back in service after the test."""
    yield gate
    gate.resume_all()


def srun(cluster, *args):
    return cluster.run(["srun", *args], check=False, timeout=120)


def test_role_wires_the_gate_into_slurm(cluster):
    assert show_config(cluster, "Prolog") == f"{cluster.dir}/etc/prolog.d/*"
    assert show_config(cluster, "PrologFlags") == "Alloc"
    assert cluster.conf.read_text().endswith("\ninclude exemplar-tune-prolog.conf\n")


def test_healthy_node_runs_the_job(cluster):
    done = srun(cluster, "-w", "node1", "/bin/echo", "ran")
    assert (done.returncode, done.stdout) == (0, "ran\n"), done.stderr
    assert cluster.node_state("node1")[0] in ("idle", "mixed", "completing")


def test_a_failing_tuning_preference_is_logged_and_never_drains(cluster):
    """node2 has C6 disabled on one CPU: a failing check, but a tuning preference. The job
    runs; the gate, run as slurmd runs it, prints the failure and exits 0 (slurmd logs a
    prolog's output only when it fails)."""
    done = srun(cluster, "-w", "node2", "/bin/echo", "ran")
    assert (done.returncode, done.stdout) == (0, "ran\n"), done.stderr
    assert cluster.node_state("node2")[0] in ("idle", "mixed", "completing")
    env = {"SLURMD_NODENAME": "node2", "SLURM_JOB_ID": "98", "SLURM_CONF": str(cluster.conf)}
    gate = subprocess.run([EXECUTABLE, "preflight", "--slurm-prolog", "--profile", "h100-x86",
                           "--sysroot", f"{cluster.gate_nodes}/%n"], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    fail, verdict, passed = gate.stdout.splitlines()
    assert fail == ("exemplar-tune prolog node2 job 98: FAIL cpu.deep-cstates-disabled: C6 "
                    "(290 us) disabled on CPUs 2 (default_status=enabled) (tuning, not draining)")
    # the verdict names its first action, with the command that reaches this node's tree
    assert verdict.startswith("exemplar-tune prolog node2 job 98: verdict: ")
    assert "; first action: " in verdict and f"--sysroot {cluster.gate_nodes}/node2" in verdict
    assert passed.startswith("exemplar-tune prolog node2 job 98: pass (")
    assert cluster.node_state("node2")[0] in ("idle", "mixed", "completing")


def test_a_failing_health_check_drains_the_node_with_its_id(cluster):
    done = srun(cluster, "-w", "node4", "/bin/echo", "ran")
    assert done.returncode != 0 and "ran" not in done.stdout
    assert cluster.wait_for(lambda: cluster.node_state("node4")[0] == "drained", 10)
    assert cluster.node_state("node4")[1] == "exemplar:health:gpu.remapped-rows"
    log = (cluster.dir / "log" / "slurmd-node4.log").read_text()
    assert "FAIL gpu.remapped-rows: 00000000:C2:00.0: row remap pending" in log
    assert "FAIL gpu.persistence-mode: " in log and "(tuning, not draining)" in log
    assert "verdict: health: gpu.remapped-rows: 00000000:C2:00.0: row remap pending" in log
    assert "; first action: " in log and "pending -> drain and reset the GPU" in log
    assert "drained, Reason=exemplar:health:gpu.remapped-rows" in log


def test_a_gpu_fallen_off_the_bus_drains_the_node(cluster):
    """node3's kernel log gets an Xid 79: gpu.xids fails (REBOOT) and drains it."""
    tree = break_gpu(cluster.gate_nodes / "node3")
    try:
        done = srun(cluster, "-w", "node3", "/bin/echo", "ran")
        assert done.returncode != 0 and "ran" not in done.stdout
        assert cluster.wait_for(lambda: cluster.node_state("node3")[0] == "drained", 10)
        assert cluster.node_state("node3")[1] == "exemplar:health:gpu.xids"
        log = (cluster.dir / "log" / "slurmd-node3.log").read_text()
        assert "FAIL gpu.xids: 00000000:A4:00.0 Xid 79 (GPU has fallen off the bus)" in log
        assert "; first action: " in log and "REBOOT on 00000000:A4:00.0" in log
    finally:
        heal(tree)


def test_an_unreadable_node_fails_closed(cluster):
    """node1's tree is empty: its verdict is unknown, the gate drains it (exit 2)."""
    tree = cluster.gate_nodes / "node1"
    tree.rename(tree.with_name("node1.away"))
    tree.mkdir()
    try:
        done = srun(cluster, "-w", "node1", "/bin/echo", "ran")
        assert done.returncode != 0 and "ran" not in done.stdout
        assert cluster.wait_for(lambda: cluster.node_state("node1")[0] == "drained", 10)
        assert cluster.node_state("node1")[1] == "exemplar:unknown:not-a-readable-host"
        log = (cluster.dir / "log" / "slurmd-node1.log").read_text()
        assert "verdict: unknown: not a readable host: /proc/cpuinfo: not present" in log
        assert "prolog failed: rc:2 " in log
    finally:
        tree.rmdir()
        tree.with_name("node1.away").rename(tree)


def test_one_bad_node_stops_a_two_node_job_before_any_task(cluster, tmp_path):
    marker = tmp_path / "ran"
    done = srun(cluster, "-N2", "-w", "node3,node4", "/bin/sh", "-c",
                f"touch {marker}-$SLURMD_NODENAME")
    assert done.returncode != 0
    assert cluster.wait_for(lambda: cluster.node_state("node4")[0] == "drained", 10)
    assert cluster.node_state("node4")[1] == "exemplar:health:gpu.remapped-rows"
    # node3 passed its checks: it is not drained, and it is back in service once the
    # aborted job has finished completing there.
    assert cluster.wait_for(lambda: cluster.node_state("node3")[0] == "idle", 10), \
        cluster.node_state("node3")
    assert list(tmp_path.iterdir()) == []  # PrologFlags=Alloc: no task started anywhere


def test_a_broken_gate_fails_closed(cluster):
    """Run as slurmd would (its variables, no PATH): an unusable profile drains the node."""
    env = {"SLURMD_NODENAME": "node3", "SLURM_JOB_ID": "99", "SLURM_CONF": str(cluster.conf)}
    done = subprocess.run([EXECUTABLE, "preflight", "--slurm-prolog", "--profile", "nosuch"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stdout.startswith("exemplar-tune prolog node3 job 99: error: profile 'nosuch'")
    assert cluster.node_state("node3") == ("drained", "exemplar:prolog-error")


def test_reserve_mode_reserves_the_node_and_no_job_lands_there(cluster, tmp_path):
    """--slurm-action reserve: node4 gets the maintenance reservation exemplar-node4 instead
    of a drain, the job that met the gate is cancelled (interactive) and the prolog exits 0
    (a failed prolog would drain the node); no later job lands on node4, root's included."""
    host = run_role(cluster, tmp_path, slurm_prolog_args=[
        "--sysroot", f"{cluster.gate_nodes}/%n", "--slurm-action", "reserve"])
    assert host.status == "ok", host.message
    cluster.scontrol("reconfigure")
    try:
        done = srun(cluster, "-w", "node4", "/bin/echo", "ran")
        assert done.returncode != 0 and "ran" not in done.stdout
        shown = cluster.scontrol("show", "reservation", "exemplar-node4", "--oneliner")
        assert "Nodes=node4 " in shown and "Flags=MAINT,IGNORE_JOBS" in shown
        assert "Users=root " in shown
        # reserved, not drained (once the cancelled job has finished completing)
        assert cluster.wait_for(lambda: cluster.node_state("node4")[0] == "maint", 10), \
            cluster.node_state("node4")
        again = srun(cluster, "-w", "node4", "--immediate=5", "/bin/echo", "ran")
        assert again.returncode != 0 and "ran" not in again.stdout
        assert "Required node not available (down, drained or reserved)" in again.stderr
        anywhere = [srun(cluster, "-N1", "/bin/sh", "-c", "echo $SLURMD_NODENAME")
                    for _ in range(4)]
        assert {d.stdout.strip() for d in anywhere} <= {"node1", "node2", "node3"}
        # the gate a second time, by hand: the reservation is there already (idempotent)
        env = {"SLURMD_NODENAME": "node4", "SLURM_JOB_ID": "97", "SLURM_CONF": str(cluster.conf)}
        by_hand = subprocess.run(
            [EXECUTABLE, "preflight", "--slurm-prolog", "--profile", "h100-x86", "--sysroot",
             f"{cluster.gate_nodes}/%n", "--slurm-action", "reserve"],
            capture_output=True, text=True, env=env, timeout=120, check=False)
        assert "already reserved, ReservationName=exemplar-node4" in by_hand.stdout
        # job 97 does not exist: neither requeued nor cancelled, the gate fails closed
        assert "job 97 could be neither requeued nor cancelled: draining" in by_hand.stdout
        assert by_hand.returncode == 1
    finally:
        cluster.run(["scontrol", "delete", "ReservationName=exemplar-node4"], check=False)
        run_role(cluster, tmp_path, slurm_prolog_args=["--sysroot", f"{cluster.gate_nodes}/%n"])
        cluster.scontrol("reconfigure")


def test_prolog_mode_refuses_fleet_options():
    done = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "preflight",
                           "--slurm-prolog", "-i", "hosts.yml"], capture_output=True, text=True,
                          env={k: v for k, v in cli_env().items() if k != "SLURMD_NODENAME"},
                          timeout=120, check=False)
    assert done.returncode == 2
    assert "error: --slurm-prolog checks this node only: -i is not allowed" in done.stdout


def test_gate_time_on_a_healthy_node(cluster):
    """The gate runs at every allocation: it must stay well inside MessageTimeout (10 s)."""
    started = time.monotonic()
    done = srun(cluster, "-w", "node1", "/bin/true")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 10


def test_role_restores_slurm_conf_byte_for_byte(gate, tmp_path):
    """Restore puts slurm.conf back byte for byte and removes the gate's files; Slurm then
    runs no prolog (the module's teardown restores again: nothing left to do)."""
    installed = gate.conf.read_bytes()
    run_role(gate, tmp_path, task_file="restore")
    assert installed == gate.conf.read_bytes() + b"include exemplar-tune-prolog.conf\n"
    assert not (gate.dir / "etc" / "exemplar-tune-prolog.conf").exists()
    assert not (gate.dir / "etc" / "prolog.d" / "50-exemplar-tune").exists()
    gate.scontrol("reconfigure")
    assert show_config(gate, "Prolog") in (None, "(null)")
    done = srun(gate, "-w", "node2", "/bin/true")
    assert done.returncode == 0, done.stderr  # node2 would fail the gate
