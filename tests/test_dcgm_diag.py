"""``dcgmi diag`` results: read from real outputs by others (``tests/fixtures/realworld/dcgm/
SOURCES.md``: DCGM 2.4.6 to 4.2.3 tables, NVIDIA's 3.1.0 JSON fixture) and from a DCGM 4 JSON
document written in the layout NVIDIA/DCGM's own ``dcgmi/Diag.cpp`` and
``testing/python3/dcgm_diag_schema.json`` define (no public DCGM 4 capture was found); judged by
``diagnose`` and by ``preflight --dcgm-level`` (the check ``gpu.dcgm-diag``), where DCGM is
absent too."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from exemplar_tune.dcgm import from_output, parse
from exemplar_tune.diagnose import diagnose_text
from tests.corpus import REALWORLD
from tests.helpers import captured_host, cli_env
from tests.test_cli import cli

DCGM = REALWORLD / "dcgm"
DCGM4 = {  # the layout of dcgmi/Diag.cpp (DCGM 4): one result per entity, warnings per result
    "DCGM Diagnostic": {"test_categories": [
        {"category": "Deployment", "tests": [
            {"name": "software", "results": [
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Pass"}],
             "test_summary": {"status": "Pass"}}]},
        {"category": "Hardware", "tests": [
            {"name": "memory", "results": [
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Fail",
                 "warnings": [{"warning": "Pending page retirements on GPU 1", "error_id": 29,
                               "error_category": 5, "error_severity": 2}]}],
             "test_summary": {"status": "Fail"}}]}]},
    "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1, "entities": [
        {"entity_id": 0, "device_id": "2330"}, {"entity_id": 1, "device_id": "2330"}]}],
    "metadata": {"version": "4.2.3", "Driver Version Detected": "570.148.08"},
}


@pytest.mark.parametrize(("name", "status", "words"), [
    ("nvidia-dcgm-issue49-2.4.6-a100-r2-table-pcie-fail.txt", "fail",
     "Integration / PCIe: fail on all GPUs: GPU 0GPU 0's NvLink link 0 is currently down Run a"),
    ("nvidia-go-dcgm-issue52-3.3.1-r2-table-memory-fail.txt", "fail",
     "Hardware / GPU Memory: fail on GPU 0: GPU 0 Error using CUDA API cuCtxCreate Check DCGM "
     "and system logs for errors. Reset GPU. Restart DCGM."),
    ("nvidia-dcgm-issue55-3.0.4-r3-table-deployment.txt", "pass", "9 DCGM tests passed"),
    ("nvidia-dcgm-issue253-4.2.3-r2-table-head.txt", "pass", "1 DCGM tests passed"),
    ("nvidia-dcgm-issue198-3.3.7-r2-table-head.txt", "pass", "1 DCGM tests passed"),
    ("nvidia-dcgm-test-fixture-3.1.0-8gpu-diag-j.txt", "pass", "10 DCGM tests passed"),
])
def test_real_outputs_are_read_and_judged(name, status, words):
    report = diagnose_text((DCGM / name).read_text(), name)
    assert report.kind == "dcgmi diag" and report.status == status
    assert any(words in f.message for f in report.findings), [f.message for f in report.findings]


def test_the_tables_keep_versions_per_gpu_results_and_wrapped_warnings():
    dcgm4 = parse((DCGM / "nvidia-dcgm-issue253-4.2.3-r2-table-head.txt").read_text())
    assert (dcgm4["version"], dcgm4["driver"]) == ("4.2.3", "570.148.08")
    assert dcgm4["tests"][0]["results"] == {"all GPUs": "pass"} | {
        f"GPU {i}": "pass" for i in range(4)}  # DCGM 4: the summary, then one row per GPU
    memory = parse((DCGM / "nvidia-go-dcgm-issue52-3.3.1-r2-table-memory-fail.txt").read_text())
    (test,) = [t for t in memory["tests"] if t["test"] == "GPU Memory"]
    assert test["results"] == {"GPU 1": "pass", "GPU 0": "fail"}
    assert test["warnings"][0].endswith("Unable to create CUDA context: 'CUDA-capable "
                                        "device(s) is/are busy or unavailable'.")


def test_dcgm4_json_in_nvidia_s_layout_fails_on_the_failing_entity():
    report = diagnose_text(json.dumps(DCGM4, indent=2), "diag.json")
    assert report.status == "fail" and report.summary["version"] == "4.2.3"
    (failed,) = [f for f in report.findings if f.status == "fail"]
    assert failed.message == ("Hardware / memory: fail on GPU 1: Pending page retirements on "
                              "GPU 1")


def test_dcgm_absent_or_unreachable_says_so():
    assert from_output(1, "", "", None)["absent"].startswith("dcgmi diag -r 1 -j gave no")
    said = from_output(2, "Error: unable to establish a connection to the specified host: "
                       "localhost\n", "", 255)
    assert "unable to establish a connection" in said["absent"]
    assert from_output(1, json.dumps(DCGM4), "", 226)["level"] == 1


def _fake_dcgmi(directory, capture) -> dict[str, str]:
    """A ``dcgmi`` on PATH that prints a real capture (DCGM needs GPUs this machine lacks)."""
    directory.mkdir()
    tool = directory / "dcgmi"
    tool.write_text(f"#!/bin/sh\ncat '{capture}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{directory}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.system
def test_preflight_runs_dcgm_on_the_hosts_and_says_when_it_is_absent(tmp_path):
    """Real Ansible on this host: without dcgmi the check is a skip that names it; with a
    dcgmi that prints the real 3.1.0 output, the check passes with its tests counted."""
    base = [sys.executable, "-m", "exemplar_tune.cli", "preflight", "--layer", "gpu",
            "--profile", "generic", "--dcgm-level", "1", "--format", "json"]
    assert shutil.which("dcgmi") is None  # this machine has no DCGM
    out = subprocess.run(base, capture_output=True, text=True, env=cli_env(), check=False,
                         timeout=300)
    doc = json.loads(out.stdout)
    (result,) = [r for h in doc["hosts"].values() for r in h["results"]
                 if r["id"] == "gpu.dcgm-diag"]
    assert result["status"] == "skip" and "DCGM absent: dcgmi not installed" in result["detail"]
    env = _fake_dcgmi(tmp_path / "bin", DCGM / "nvidia-dcgm-test-fixture-3.1.0-8gpu-diag-j.txt")
    out = subprocess.run(base, capture_output=True, text=True, env={**cli_env(), **env},
                         check=False, timeout=300)
    doc = json.loads(out.stdout)
    (result,) = [r for h in doc["hosts"].values() for r in h["results"]
                 if r["id"] == "gpu.dcgm-diag"]
    assert result["status"] == "pass" and result["detail"] == "level 1: 10 DCGM tests passed"


def test_a_sysroot_reads_its_captured_run(tmp_path):
    """A captured host (the real GB200 nvidia-smi -q -x) with a DCGM 4 run beside it."""
    captured_host(tmp_path / "host", {
        "nvidia-smi-q-x.xml": REALWORLD / "nvidia-smi-xml" / "nvidia-k8s-test-infra-gb200-q-x.xml",
        "dcgmi-diag.json": json.dumps(DCGM4)})
    out = cli("preflight", "--sysroot", str(tmp_path / "host"), "--layer", "gpu", "--profile",
              "generic", "--dcgm-level", "2", "--format", "json")
    doc = json.loads(out.stdout)
    (result,) = [r for h in doc["hosts"].values() for r in h["results"]
                 if r["id"] == "gpu.dcgm-diag"]
    assert result["status"] == "fail", result
    assert result["detail"] == ("level 2: Hardware / memory: fail on GPU 1: Pending page "
                                "retirements on GPU 1")
    assert out.returncode == 1
