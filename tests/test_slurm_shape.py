"""The srun/sbatch argv a Slurm shape gives, and inventory hosts -> Slurm nodes."""

from __future__ import annotations

import shlex
import subprocess

import pytest
import yaml

from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from exemplar_tune.slurm.inventory import InventoryError, host_nodes
from exemplar_tune.slurm.shape import batch_script, sbatch_argv, slurm_shape, srun_argv

FULL = {"mode": "srun", "partition": "gpu", "nodes": 2, "ntasks_per_node": 8,
        "time_limit": "30:00", "container_image": "nvcr.io#nvidia/pytorch:24.05-py3",
        "container_mounts": ["/etc/nccl/topo.xml:/etc/nccl/topo.xml:ro", "/data:/data"],
        "export": ["PATH", "NCCL_DEBUG"], "options": ["--gpus-per-node=8", "--exclusive"]}


def test_srun_argv_full():
    argv = srun_argv("/usr/bin/srun", slurm_shape(FULL), ["all_gather_perf", "-b", "1M"],
                     "exemplar-ag-1", ["node1", "node2"], ["NCCL_DEBUG", "NCCL_IB_HCA"])
    assert argv == [
        "/usr/bin/srun", "--job-name=exemplar-ag-1", "--partition=gpu", "--nodes=2",
        "--nodelist=node1,node2", "--time=30:00", "--export=PATH,NCCL_DEBUG,NCCL_IB_HCA",
        "--gpus-per-node=8", "--exclusive", "--ntasks-per-node=8", "--distribution=block",
        "--label", "--container-image=nvcr.io#nvidia/pytorch:24.05-py3",
        "--container-mounts=/etc/nccl/topo.xml:/etc/nccl/topo.xml:ro,/data:/data", "--",
        "all_gather_perf", "-b", "1M"]


def test_minimal_shape_exports_all_and_lets_slurm_choose():
    argv = srun_argv("srun", slurm_shape({"mode": "srun", "partition": "p"}), ["x"], "j", [],
                     [])
    assert argv == ["srun", "--job-name=j", "--partition=p", "--export=ALL",
                    "--ntasks-per-node=1", "--distribution=block", "--label", "--", "x"]


def test_sbatch_argv_and_script():
    shape = slurm_shape({**FULL, "mode": "sbatch", "nodelist": ["node7"], "export": []})
    argv = sbatch_argv("sbatch", shape, "/tmp/d/job.sh", "j", ["node7"], [], "/tmp/d/%j.out",
                       "/tmp/d/%j.err")
    assert argv[:3] == ["sbatch", "--wait", "--parsable"]
    assert "--export=NONE" in argv and "--nodes=2" in argv and "--nodelist=node7" in argv
    assert argv[-3:] == ["--output=/tmp/d/%j.out", "--error=/tmp/d/%j.err", "/tmp/d/job.sh"]
    script = batch_script("/usr/bin/srun", shape, ["prog", "a b", "$(id)"])
    assert script.startswith("#!/bin/sh\n")
    exec_line = script.splitlines()[-1]
    assert shlex.split(exec_line)[1:] == [
        "/usr/bin/srun", "--export=ALL", "--ntasks-per-node=8", "--distribution=block",
        "--label", "--container-image=nvcr.io#nvidia/pytorch:24.05-py3",
        "--container-mounts=/etc/nccl/topo.xml:/etc/nccl/topo.xml:ro,/data:/data", "--",
        "prog", "a b", "$(id)"]
    run = subprocess.run(["/bin/sh", "-n", "-c", script], capture_output=True, check=False)
    assert run.returncode == 0


def test_inventory_file_with_group_vars_and_limit(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {
        "rack1": {"hosts": {"gpu01": {"exemplar_slurm_node": "n001"}, "gpu02": None}},
        "rack2": {"hosts": {"gpu03": None}, "vars": {"exemplar_slurm_node": "shared"}}}}}))
    assert host_nodes(AnsibleRun(str(path))) == {"gpu01": "n001", "gpu02": "gpu02",
                                                 "gpu03": "shared"}
    assert host_nodes(AnsibleRun(str(path), limit="rack1")) == {"gpu01": "n001",
                                                                "gpu02": "gpu02"}


def test_inventory_mapping():
    inventory = local_inventory(["a", "b"], {"a": {"exemplar_slurm_node": "node9"}})
    assert host_nodes(AnsibleRun(inventory)) == {"a": "node9", "b": "b"}
    assert host_nodes(AnsibleRun(inventory, limit="b")) == {"b": "b"}


@pytest.mark.parametrize("node", ["node 1", "$(id)", "-w"])
def test_unusable_node_name(node):
    inventory = local_inventory(["a"], {"a": {"exemplar_slurm_node": node}})
    with pytest.raises(InventoryError, match=r"host a: exemplar_slurm_node .* is not a Slurm"):
        host_nodes(AnsibleRun(inventory))


@pytest.mark.parametrize("content, limit, why", [
    ("all: [unbalanced\n", None, "Ansible cannot parse it"),
    ("all:\n  hosts:\n    gpu01:\n", "gpu99", "no host matches --limit gpu99")])
def test_inventory_without_hosts_is_an_error(tmp_path, content, limit, why):
    path = tmp_path / "hosts.yml"
    path.write_text(content)
    with pytest.raises(InventoryError, match=f"inventory {path}: {why}"):
        host_nodes(AnsibleRun(str(path), limit=limit))
