"""``exemplar-tune slurm undrain`` on a real Slurm: the nodes exemplar-tune took out of service
are checked again and put back once they pass; a node drained by someone else is never touched.

Each test gets fresh node trees (:func:`tests.slurmcluster.node_sysroots`: node1/node3
healthy, node2 with C6 disabled -- a tuning preference --, node4 the ``h100-x86`` fixture, a
GPU row remap pending) and takes nodes out of service the way the gates do: the prolog gate
run as slurmd runs it, or ``scontrol`` with the argv the gates use.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exemplar_tune.slurm import gate as slurm_gate
from tests.helpers import cli_env
from tests.slurmcluster import break_gpu, heal

pytestmark = pytest.mark.system  # slow: real Ansible/Slurm/SSH end to end

PROFILE = ["--profile", "h100-x86"]
EXECUTABLE = str(Path(sys.executable).with_name("exemplar-tune"))


def cli(cluster, *args):
    env = {**cli_env(), "SLURM_CONF": str(cluster.conf)}
    return subprocess.run([sys.executable, "-m", "exemplar_tune.cli", *args],
                          capture_output=True, text=True, env=env, timeout=300, check=False)


def prolog(cluster, trees, node):
    """The prolog gate on ``node``, run as slurmd runs it (its variables, no PATH)."""
    env = {"SLURMD_NODENAME": node, "SLURM_JOB_ID": "1", "SLURM_CONF": str(cluster.conf)}
    return subprocess.run([EXECUTABLE, "preflight", "--slurm-prolog", *PROFILE,
                           "--sysroot", f"{trees}/%n"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


@pytest.fixture
def cluster(gated_cluster):
    """The cluster with fresh trees (conftest's ``gated_cluster``)."""
    return gated_cluster


@pytest.fixture
def out_of_service(cluster):
    """node1 drained by the prolog for an Xid 79 (its tree healed since), node3 drained by
    someone else ("bad fan"), node4 drained by the prolog (still broken)."""
    break_gpu(cluster.trees / "node1")
    for node, reason in (("node1", "exemplar:health:gpu.xids"),
                         ("node4", "exemplar:health:gpu.remapped-rows")):
        done = prolog(cluster, cluster.trees, node)
        assert done.returncode == 1, done.stdout + done.stderr
        assert cluster.node_state(node) == ("drained", reason)
    cluster.scontrol("update", "NodeName=node3", "State=DRAIN", "Reason=bad fan")
    heal(cluster.trees / "node1")
    return cluster


def states(cluster):
    return {node: cluster.node_state(node) for node in cluster.node_names}


def test_dry_run_checks_and_says_what_it_would_do(out_of_service):
    cluster = out_of_service
    before = states(cluster)
    out = cli(cluster, "slurm", "undrain", "--sysroot", f"{cluster.trees}/%n", *PROFILE,
              "--dry-run")
    assert out.returncode == 1, out.stdout + out.stderr  # node4 stays drained
    lines = out.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "resume node1 (Reason=exemplar", "left alone node3 (Reason=bad fan)",
        "keep node4 (Reason=exemplar", "would run"]
    assert lines[0].startswith("resume node1 (Reason=exemplar:health:gpu.xids): passes now; "
                               "verdict: ")
    assert lines[1] == "left alone node3 (Reason=bad fan): drained by someone else: bad fan"
    assert lines[2].startswith(
        "keep node4 (Reason=exemplar:health:gpu.remapped-rows): still out of service: "
        "exemplar:health:gpu.remapped-rows; verdict: health: gpu.remapped-rows: "
        "00000000:C2:00.0: row remap pending")
    assert "; first action: " in lines[2]
    assert lines[3] == "would run: scontrol update NodeName=node1 State=RESUME"
    assert states(cluster) == before


def test_resumes_the_fixed_node_only(out_of_service):
    cluster = out_of_service
    out = cli(cluster, "slurm", "undrain", "--sysroot", f"{cluster.trees}/%n", *PROFILE)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "scontrol update NodeName=node1 State=RESUME" in out.stdout.splitlines()
    assert cluster.wait_for(lambda: cluster.node_state("node1")[0] == "idle", 10)
    assert cluster.node_state("node3") == ("drained", "bad fan")
    assert cluster.node_state("node4") == ("drained", "exemplar:health:gpu.remapped-rows")
    assert cluster.node_state("node2")[0] == "idle"

    heal(cluster.trees / "node4")  # the GPU reset: node4 passes too, the rest is nobody's
    out = cli(cluster, "slurm", "undrain", "--sysroot", f"{cluster.trees}/%n", *PROFILE,
              "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert (doc["resumed"], doc["kept"], doc["left_alone"]) == (["node4"], [], ["node3"])
    assert doc["nodes"][1]["commands"] == ["scontrol update NodeName=node4 State=RESUME"]
    assert cluster.wait_for(lambda: cluster.node_state("node4")[0] == "idle", 10)
    assert cluster.node_state("node3") == ("drained", "bad fan")


def test_a_reserved_node_gets_its_reservation_deleted(cluster):
    """node2 (tuning findings only: it passes) holds exemplar-node2 (the gates' reserve
    mode); node1 holds exemplar-node1 and is still broken: it keeps it."""
    break_gpu(cluster.trees / "node1")
    for node in ("node1", "node2"):
        cluster.run(slurm_gate.reserve_argv(node))
    out = cli(cluster, "slurm", "undrain", "--sysroot", f"{cluster.trees}/%n", *PROFILE)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.splitlines()[0].startswith(
        "keep node1 (ReservationName=exemplar-node1): still out of service: "
        "exemplar:health:gpu.xids; verdict: health: gpu.xids: ")
    assert out.stdout.splitlines()[1].startswith(
        "resume node2 (ReservationName=exemplar-node2): passes now; verdict: ")
    assert "scontrol delete ReservationName=exemplar-node2" in out.stdout.splitlines()
    shown = cluster.scontrol("show", "reservation", "--oneliner")
    assert "ReservationName=exemplar-node1 " in shown
    assert "exemplar-node2" not in shown


def test_nothing_to_do(cluster):
    out = cli(cluster, "slurm", "undrain", "--sysroot", f"{cluster.trees}/%n", *PROFILE)
    assert (out.returncode, out.stdout) == (0, "no node drained or reserved by exemplar-tune\n")


def test_through_the_inventory(out_of_service, tmp_path):
    """-i: each node read through Ansible as its inventory host (exemplar_slurm_node); node4
    has no host in this inventory: it stays, and says why."""
    cluster = out_of_service
    base = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        f"gpu0{i}": {**base, "exemplar_slurm_node": f"node{i}",
                     "exemplar_sysroot": str(cluster.trees / f"node{i}")} for i in (1, 2, 3)}}}))
    out = cli(cluster, "slurm", "undrain", "-i", str(inventory), *PROFILE)
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("resume node1 (Reason=exemplar:health:gpu.xids): passes now")
    assert lines[2] == ("keep node4 (Reason=exemplar:health:gpu.remapped-rows): no inventory "
                        "host is this node (exemplar_slurm_node or host name)")
    assert cluster.wait_for(lambda: cluster.node_state("node1")[0] == "idle", 10)
    assert cluster.node_state("node3") == ("drained", "bad fan")


def test_says_how_to_read_the_nodes(cluster):
    out = cli(cluster, "slurm", "undrain")
    assert out.returncode == 2
    assert "one of the arguments -i/--inventory --sysroot is required" in out.stderr
