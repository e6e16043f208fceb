"""``exemplar-tune preflight --slurm-health-check``: slurm.conf's HealthCheckProgram.

On a real Slurm (marked ``system``): slurmd runs it every few seconds through a wrapper (a
HealthCheckProgram gets no ``SLURM_CONF`` and no ``PATH``), reading each fake node's tree with
``--sysroot NODES/%n`` (:func:`tests.slurmcluster.node_sysroots`); it drains a node whose GPU
fell off the bus and resumes it once the tree is healed, and leaves alone a node somebody else
drained. Run by hand as slurmd runs it, its wall time is measured (Slurm kills it at 60 s).
In-process: its deadline.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exemplar_tune.slurm import gate
from exemplar_tune.slurm.healthcheck import HEALTH_LAYERS, READ_DEADLINE_S, TOTAL_DEADLINE_S
from exemplar_tune.slurm.nodecheck import BoundedSysroot, read_node
from tests.slurmcluster import break_gpu, heal

EXECUTABLE = str(Path(sys.executable).with_name("exemplar-tune"))
PROFILE = ["--profile", "h100-x86"]
SLURM_KILLS_AT_S = 60


def health_check(cluster, node, *extra, sysroot=True):
    """The health check on ``node`` as slurmd runs it (its one variable; SLURM_CONF as the
    wrapper sets it; no PATH): (result, wall seconds)."""
    env = {"SLURMD_NODENAME": node, "SLURM_CONF": str(cluster.conf)}
    where = ["--sysroot", f"{cluster.trees}/%n"] if sysroot else []
    started = time.monotonic()
    done = subprocess.run([EXECUTABLE, "preflight", "--slurm-health-check", *PROFILE, *where,
                           *extra], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    return done, time.monotonic() - started


@pytest.fixture
def cluster(gated_cluster):
    """The cluster with fresh trees (conftest's ``gated_cluster``)."""
    return gated_cluster


@pytest.fixture
def by_slurmd(cluster, tmp_path):
    """HealthCheckProgram (every 2 s, in every node state) is a wrapper that logs each run to
    ``cluster.hc_log/<node>.log``; taken out of slurm.conf afterwards."""
    logs = tmp_path / "hc-logs"
    logs.mkdir()
    wrapper = tmp_path / "healthcheck.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"SLURM_CONF={cluster.conf}; export SLURM_CONF\n"
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin; export PATH\n"
        f"exec {EXECUTABLE} preflight --slurm-health-check --profile h100-x86 "
        f"--sysroot '{cluster.trees}/%n' >>{logs}/$SLURMD_NODENAME.log 2>&1\n")
    wrapper.chmod(0o755)
    cluster.hc_log = logs
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval=2\n"
                        "HealthCheckNodeState=ANY")
    try:
        yield cluster
    finally:
        cluster.reconfigure("")


@pytest.mark.system
def test_slurmd_runs_it_drains_then_resumes(by_slurmd):
    cluster = by_slurmd
    cluster.scontrol("update", "NodeName=node1", "State=DRAIN", "Reason=bad fan")
    break_gpu(cluster.trees / "node3")
    assert cluster.wait_for(lambda: cluster.node_state("node3")[0] == "drained", 40), \
        cluster.node_state("node3")
    assert cluster.node_state("node3")[1] == "exemplar:health:gpu.xids"
    log = (cluster.hc_log / "node3.log").read_text()
    assert "exemplar-tune health-check node3: FAIL gpu.xids: 00000000:A4:00.0 Xid 79" in log
    assert "exemplar-tune health-check node3: drained, Reason=exemplar:health:gpu.xids" in log

    heal(cluster.trees / "node3")
    assert cluster.wait_for(lambda: cluster.node_state("node3")[0] == "idle", 40), \
        cluster.node_state("node3")
    log = (cluster.hc_log / "node3.log").read_text()
    assert "node3: resumed, was Reason=exemplar:health:gpu.xids" in log
    # every run on node1 left the other drain alone; node2 (tuning only) never left service
    assert "node1: left alone: drained by someone else: bad fan" in \
        (cluster.hc_log / "node1.log").read_text()
    assert cluster.node_state("node1") == ("drained", "bad fan")
    assert "drained" not in (cluster.hc_log / "node2.log").read_text()


@pytest.mark.system
def test_wall_time_well_inside_slurms_60_s(cluster):
    """As slurmd runs it, on a simulated host tree and on this machine (live: reads /sys,
    /proc and runs the commands that exist here; no GPU, so gpu.count fails and drains)."""
    times = {}
    for label, node, live in (("tree, unfit node", "node4", False),
                              ("tree, healthy node", "node1", False),
                              ("live, this machine", "node2", True)):
        done, seconds = health_check(cluster, node, sysroot=not live)
        times[label] = seconds
        assert seconds < SLURM_KILLS_AT_S, done.stdout
        assert done.stdout.splitlines()[-1].startswith(f"exemplar-tune health-check {node}: "
                                                       "done in ")
    print("health-check wall time: " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items()))
    assert cluster.node_state("node4") == ("drained", "exemplar:health:gpu.remapped-rows")
    assert cluster.node_state("node2")[1] == "exemplar:health:gpu.count"


@pytest.mark.system
def test_reserve_mode_then_put_back(cluster):
    done, _ = health_check(cluster, "node4", "--slurm-action", "reserve")
    assert done.returncode == 1, done.stdout
    assert "reserved, ReservationName=exemplar-node4 (exemplar:health:gpu.remapped-rows)" \
        in done.stdout
    assert cluster.wait_for(lambda: cluster.node_state("node4")[0] == "maint", 10)
    again, _ = health_check(cluster, "node4", "--slurm-action", "reserve")
    assert "already reserved, ReservationName=exemplar-node4" in again.stdout
    heal(cluster.trees / "node4")
    back, _ = health_check(cluster, "node4", "--slurm-action", "reserve")
    assert back.returncode == 0, back.stdout
    assert "node4: deleted ReservationName=exemplar-node4" in back.stdout
    assert "exemplar-node4" not in cluster.scontrol("show", "reservation")


@pytest.mark.system
def test_an_unreadable_node_is_drained_as_unknown(cluster):
    tree = cluster.trees / "node2"
    tree.rename(tree.with_name("node2.away"))
    tree.mkdir()
    done, _ = health_check(cluster, "node2")
    assert done.returncode == 2, done.stdout
    assert cluster.node_state("node2") == ("drained", "exemplar:unknown:not-a-readable-host")


@pytest.mark.system
def test_a_bad_profile_fails_closed(cluster):
    done, _ = health_check(cluster, "node1", "--profile", "nosuch")
    assert done.returncode == 2
    assert done.stdout.startswith("exemplar-tune health-check node1: error: profile 'nosuch'")
    assert cluster.node_state("node1") == ("drained", "exemplar:healthcheck-error")


@pytest.mark.system
def test_the_node_name_falls_back_to_the_short_host_name(cluster):
    """Without SLURMD_NODENAME: this machine's short host name, no node of this cluster."""
    env = {"SLURM_CONF": str(cluster.conf)}
    done = subprocess.run([EXECUTABLE, "preflight", "--slurm-health-check", *PROFILE,
                           "--sysroot", f"{cluster.trees}/node1"], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    short = os.uname().nodename.split(".")[0]
    assert done.returncode == 2, done.stdout
    assert f"exemplar-tune health-check {short}: no such Slurm node" in done.stdout


def test_health_layers_are_those_with_health_checks():
    assert HEALTH_LAYERS == ["gpu", "vm", "fabric"]
    assert READ_DEADLINE_S < TOTAL_DEADLINE_S <= SLURM_KILLS_AT_S - 10


def test_a_reading_past_its_deadline_makes_the_node_unknown():
    checked = read_node("node9", None, "h100-x86", HEALTH_LAYERS, deadline=time.monotonic())
    assert checked.unreadable.startswith("deadline passed: facts still being read after 0.0 s")
    judged = gate.judge(checked.results, checked.unreadable, "high")
    assert (judged.klass, judged.reason) == ("unknown", "exemplar:unknown:deadline-passed")


def test_commands_are_bounded_by_the_deadline():
    late = BoundedSysroot(time.monotonic())
    with pytest.raises(Exception, match="deadline passed"):
        late.command("dmesg.txt")
    with pytest.raises(Exception, match="tuning only"):
        BoundedSysroot(time.monotonic() + 60).command("lspci-vvv.txt")


@pytest.mark.parametrize("text, reason", [
    ("not a readable host: /proc/cpuinfo: not present (16 facts unreadable)",
     "not-a-readable-host"),
    ("most facts unreadable (30 of 40)", "most-facts-unreadable"),
    ("gpu.xids", "gpu.xids"),
    ("unreachable: ssh: connect to host gpu01 port 22: Connection refused", "unreachable"),
    ("weird [chars] & = 'quotes'", "weird-chars-quotes"),
])
def test_reasons_stay_short_and_plain(text, reason):
    assert gate.short(text) == reason
