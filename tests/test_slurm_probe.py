"""The ``--launcher`` probe inside a real Slurm allocation: ``srun -N1 -w NODE`` with
bubblewrap standing in for pyxis/enroot.

The test cluster binds tasks to CPUs (``TaskPlugin=task/affinity``) and gives each node 8 GPUs
through GRES (character devices), so the job's cpuset and ``SLURM_STEP_GPUS`` are Slurm's own.
The container wrapper clears the environment and carries only the job's ``SLURM_*`` variables
and what the launcher configures (``--setenv``, ``--ro-bind``), as enroot does with pyxis. The
placement check then judges that real cpuset against the GPU/NIC NUMA layout of the
``healthy-h100`` fixture (GPUs 0-3 and their NICs on node0 = CPUs 0-3, GPUs 4-7 on node1).
"""

from __future__ import annotations

import json
import shutil
import sys

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks.base import PASS, WARN
from exemplar_tune.checks.cpu import check_job_cpus_gpu_local
from exemplar_tune.checks.runtime import check_topo_in_container
from exemplar_tune.probe import probe_container
from exemplar_tune.profile import load_profile
from tests.conftest import SYSROOTS
from tests.helpers import cli_env

pytestmark = pytest.mark.system  # slow: real Ansible/Slurm/SSH end to end

SLURM_CLUSTER = {"nodes": 2, "fake_gpus": 8, "extra": "TaskPlugin=task/affinity"}
TOPO = SYSROOTS / "h100-x86" / "etc" / "nccl" / "topo.xml"
WRAPPER = """#!/bin/sh
# pyxis/enroot stand-in: clean environment (the job's SLURM_* and the configured variables
# only), configured bind mounts, its own pid namespace and /tmp.
for v in SLURM_JOB_ID SLURM_STEP_ID SLURMD_NODENAME SLURM_JOB_NODELIST SLURM_STEP_GPUS \\
         SLURM_JOB_GPUS CUDA_VISIBLE_DEVICES; do
    eval "[ -n \\"\\${$v+x}\\" ]" && eval "set -- --setenv $v \\"\\$$v\\" \\"\\$@\\""
done
exec bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-pid --clearenv \\
    --setenv PATH /usr/bin:/bin "$@"
"""


@pytest.fixture(scope="module")
def wrapper(slurm_cluster, tmp_path_factory):
    if not shutil.which("bwrap"):
        pytest.fail("bubblewrap not installed: apt-get install -y bubblewrap (.ci/packages.txt)")
    path = tmp_path_factory.mktemp("ctr") / "ctr-launch"
    path.write_text(WRAPPER)
    path.chmod(0o755)
    return path


@pytest.fixture
def job_env(slurm_cluster, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    monkeypatch.setenv("NCCL_DEBUG", "INFO")  # the submitting shell's: must not reach the job


def healthy_facts(probe):
    facts = gather_facts(Sysroot(str(SYSROOTS / "healthy-h100")))
    facts["runtime"]["container"] = probe
    return facts


def test_probe_reads_the_jobs_cpuset_gpus_and_clean_environment(wrapper, job_env):
    probe = probe_container(f"srun -N1 -w node2 -c2 --cpu-bind=map_cpu:1 --gres=gpu:5 {wrapper} "
                            "--setenv NCCL_IB_HCA mlx5")
    assert probe["ok"] is True, probe["error"]
    assert probe["env"] == {"NCCL_IB_HCA": "mlx5"}
    job = probe["job"]
    assert job["node"] == "node2"
    assert job["id"] and job["id"].isdigit()
    assert job["gpus"] == [0, 1, 2, 3, 4]
    assert job["cpus_allowed"] == "1"
    assert job["slurm"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4"
    assert job["cgroup"], "the probe read /proc/self/cgroup inside the job"


@pytest.mark.parametrize("gpus, status, detail", [
    ("gpu:1", PASS, "every job has CPUs on the GPU/NIC nodes"),  # node1 would fail it
    ("gpu:5", WARN, "(1) has no CPU on node1 (4-7: 1 GPUs, 4 NICs)"),
])
def test_placement_is_judged_on_the_jobs_own_cpuset_and_gpus(wrapper, job_env, gpus, status,
                                                             detail):
    probe = probe_container(f"srun -N1 -w node1 -c2 --cpu-bind=map_cpu:1 --gres={gpus} "
                            f"{wrapper}")
    assert probe["ok"] is True, probe["error"]
    outcome = check_job_cpus_gpu_local(healthy_facts(probe), load_profile("h100-x86"))
    assert outcome.status == status, outcome.detail
    assert detail in outcome.detail
    assert outcome.observed[probe["job"]["id"]] == "1"
    assert any("inside the job" in e for e in outcome.evidence)


def test_topology_carried_into_the_container_through_srun(wrapper, job_env, tmp_path):
    topo_dir = tmp_path / "nccl"
    topo_dir.mkdir()
    path = topo_dir / "topo.xml"
    shutil.copy(TOPO, path)
    profile = {"name": "t", "runtime": {"nccl_topo_file": str(path),
                                        "require_in_container": True}}
    runtime = {"nccl_topo_file": {"value": str(path), "readable": True}}
    hidden = probe_container(f"srun -N1 -w node2 {wrapper} --tmpfs {topo_dir}")
    carried = probe_container(f"srun -N1 -w node2 {wrapper} --tmpfs {topo_dir} "
                              f"--ro-bind {path} {path} --setenv NCCL_TOPO_FILE {path}")
    assert check_topo_in_container({"runtime": {**runtime, "container": hidden}},
                                   profile).status == "fail"
    outcome = check_topo_in_container({"runtime": {**runtime, "container": carried}}, profile)
    assert outcome.status == PASS, outcome.detail


def test_preflight_with_a_slurm_launcher(wrapper, job_env):
    """The command line: host facts from the sysroot, the job's cpuset from inside srun."""
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "exemplar_tune.cli", "preflight", "--sysroot",
         str(SYSROOTS / "healthy-h100"), "--profile", "h100-x86", "--layer", "cpu",
         "--format", "json", "--launcher",
         f"srun -N1 -w node1 -c2 --cpu-bind=map_cpu:1 --gres=gpu:5 {wrapper}"],
        capture_output=True, text=True, env=cli_env(), timeout=120, check=False)
    doc = json.loads(out.stdout)
    results = {r["id"]: r for r in doc["hosts"]["healthy-h100"]["results"]}
    placement = results["cpu.job-cpus-gpu-local"]
    assert placement["status"] == WARN, placement["detail"]
    assert "has no CPU on node1" in placement["detail"]
    assert out.returncode == 0  # a warning is not a failing check
