"""``exemplar-tune slurm drain --failing RESULT.json`` and ``slurm resume`` on a real Slurm.

The preflight result comes from a real fleet run (``preflight -i INV --format json``) over
four inventory hosts read inside the fake nodes' trees (:func:`node_sysroots`): gpu01/gpu03
healthy, gpu02 with C6 disabled (a tuning preference) and, here, a GPU row remap pending (a
health check: it drains), gpu04 the ``h100-x86`` fixture; each names its Slurm node with
``exemplar_slurm_node``. node4 is drained beforehand by someone else ("RMA 42").
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import SYSROOTS
from tests.helpers import cli_env
from tests.slurmcluster import node_sysroots

pytestmark = pytest.mark.system  # slow: real Ansible/Slurm/SSH end to end

HOSTS = {"gpu01": "node1", "gpu02": "node2", "gpu03": "node3", "gpu04": "node4"}


def cli(cluster, *args):
    env = {**cli_env(), "SLURM_CONF": str(cluster.conf)}
    return subprocess.run([sys.executable, "-m", "exemplar_tune.cli", *args],
                          capture_output=True, text=True, env=env, timeout=300, check=False)


@pytest.fixture(scope="module")
def fleet(slurm_cluster, tmp_path_factory):
    """(inventory, preflight result) of the four hosts."""
    work = tmp_path_factory.mktemp("fleet")
    trees = node_sysroots(work / "trees")
    smi = ".exemplar/commands/nvidia-smi-q-x.xml"
    shutil.copy(SYSROOTS / "h100-x86" / smi, trees / "node2" / smi)  # GPU 3: row remap pending
    base = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = work / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        host: {**base, "exemplar_slurm_node": node, "exemplar_sysroot": str(trees / node)}
        for host, node in HOSTS.items()}}}))
    result = work / "fleet.json"
    out = cli(slurm_cluster, "preflight", "-i", str(inventory), "--profile", "h100-x86",
              "--format", "json", "--output", str(result))
    assert out.returncode == 1, out.stdout + out.stderr  # two hosts fail
    return inventory, result


@pytest.fixture
def cluster(slurm_cluster):
    """node4 drained by someone else; every node back in service after the test."""
    slurm_cluster.scontrol("update", "NodeName=node4", "State=DRAIN", "Reason=RMA 42")
    yield slurm_cluster
    slurm_cluster.resume_all()


def states(cluster):
    return {node: cluster.node_state(node) for node in HOSTS.values()}


def test_dry_run_prints_the_commands_and_changes_nothing(cluster, fleet):
    inventory, result = fleet
    before = states(cluster)
    out = cli(cluster, "slurm", "drain", "--failing", str(result), "-i", str(inventory),
              "--dry-run")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [
        "drain node2 (host gpu02): Reason=exemplar:health:gpu.remapped-rows",
        "left alone node4 (host gpu04): already drained: RMA 42",
        "would run: scontrol update NodeName=node2 State=DRAIN "
        "Reason=exemplar:health:gpu.remapped-rows"]
    assert states(cluster) == before


def test_drain_then_resume_only_what_exemplar_drained(cluster, fleet):
    inventory, result = fleet
    out = cli(cluster, "slurm", "drain", "--failing", str(result), "-i", str(inventory))
    assert out.returncode == 0, out.stdout + out.stderr
    assert cluster.node_state("node2") == ("drained", "exemplar:health:gpu.remapped-rows")
    assert cluster.node_state("node4") == ("drained", "RMA 42")
    assert cluster.node_state("node1")[0] == cluster.node_state("node3")[0] == "idle"

    again = cli(cluster, "slurm", "drain", "--failing", str(result), "-i", str(inventory))
    assert "unchanged node2 (host gpu02): already drained" in again.stdout
    assert again.stdout.rstrip().endswith("nothing to do")

    out = cli(cluster, "slurm", "resume", "--nodes", "node[2-4]")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [
        "resume node2: was exemplar:health:gpu.remapped-rows",
        "left alone node3: not drained (IDLE)",
        "left alone node4: drained by someone else: RMA 42",
        "scontrol update NodeName=node2 State=RESUME"]
    assert cluster.wait_for(lambda: cluster.node_state("node2")[0] == "idle", 10)
    assert cluster.node_state("node4") == ("drained", "RMA 42")


def test_resume_everything_exemplar_drained(cluster, fleet):
    """Nodes drained by the fleet command and by the prolog gate share the reason prefix."""
    inventory, result = fleet
    cluster.scontrol("update", "NodeName=node1", "State=DRAIN", "Reason=exemplar:gpu.xids")
    cli(cluster, "slurm", "drain", "--failing", str(result), "-i", str(inventory))
    out = cli(cluster, "slurm", "resume")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "scontrol update NodeName=node1,node2 State=RESUME" in out.stdout
    assert cluster.wait_for(lambda: {n: s[0] for n, s in states(cluster).items()} == {
        "node1": "idle", "node2": "idle", "node3": "idle", "node4": "drained"}, 10)


def test_without_inventory_the_host_name_is_the_node_name(cluster, tmp_path, fleet):
    _, result = fleet
    doc = json.loads(result.read_text())
    doc["hosts"] = {"node3": doc["hosts"]["gpu02"], "gpu09": doc["hosts"]["gpu04"]}
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    out = cli(cluster, "slurm", "drain", "--failing", str(edited))
    assert out.returncode == 1  # gpu09 is no Slurm node
    assert "not drained gpu09: no such Slurm node" in out.stdout
    assert cluster.node_state("node3") == ("drained", "exemplar:health:gpu.remapped-rows")


@pytest.mark.parametrize("content, message", [
    ("not json", "cannot read it"),
    ('{"hosts": {"gpu01": {"status": "fail"}}}', "not an 'exemplar-tune preflight --format json'"),
])
def test_bad_result_file_is_one_line_and_exit_2(cluster, tmp_path, content, message):
    path = tmp_path / "result.json"
    path.write_text(content)
    out = cli(cluster, "slurm", "drain", "--failing", str(path))
    assert out.returncode == 2
    assert out.stderr.startswith(f"exemplar-tune: error: preflight result {path}: {message}")
    assert out.stderr.count("\n") == 1


def test_missing_result_file(cluster, tmp_path):
    out = cli(cluster, "slurm", "drain", "--failing", str(tmp_path / "nope.json"))
    assert (out.returncode, out.stderr.count("\n")) == (2, 1)


def test_unreachable_slurm_is_exit_1(slurm_cluster, tmp_path):
    dead = tmp_path / "slurm.conf"  # the cluster's configuration, no controller at that port
    dead.write_text("".join(
        "SlurmctldPort=1\n" if line.startswith("SlurmctldPort=") else line
        for line in slurm_cluster.conf.read_text().splitlines(keepends=True)))
    env = {**cli_env(), "SLURM_CONF": str(dead)}
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "slurm", "resume"],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert out.returncode == 1
    assert out.stderr.startswith("exemplar-tune: error: cannot reach Slurm: scontrol show node")
