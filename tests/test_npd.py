"""Kubernetes node health through node-problem-detector: the plugin protocol of
``preflight --format npd`` (exit 0 OK, 1 NonOK, 2 Unknown, one line), and the shipped
manifests validated against a pinned Kubernetes API (``kubernetes-validate``).

No API server runs here: the DaemonSet is not run, and ``kubectl --dry-run=client`` cannot
check these files without one (it asks the server for the resource types first).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exemplar_tune.reports.npd import MAX_MESSAGE, plugin_config
from tests.conftest import REPO, SYSROOTS
from tests.test_cli import cli

DEPLOY = REPO / "deploy" / "kubernetes"
KUBERNETES = "1.31.0"  # the API version the manifests are checked against


def npd(*args: str) -> subprocess.CompletedProcess[str]:
    return cli("preflight", "--format", "npd", "--quiet", *args)


def test_a_failing_layer_is_non_ok_with_the_failing_check_as_the_message() -> None:
    out = npd("--sysroot", str(SYSROOTS / "h100-x86"), "--profile", "h100-x86",
              "--layer", "cpu")
    assert out.returncode == 1, out.stderr
    line = out.stdout.rstrip("\n")
    assert "\n" not in line and len(line) <= MAX_MESSAGE and out.stderr == ""
    doc = json.loads(cli("preflight", "--sysroot", str(SYSROOTS / "h100-x86"), "--profile",
                         "h100-x86", "--layer", "cpu", "--format", "json").stdout)
    failing = [r for r in doc["hosts"]["h100-x86"]["results"] if r["status"] == "fail"]
    assert line.startswith(f"{failing[0]['id']}: ")
    if len(failing) > 1:
        assert line.endswith(f" (and {len(failing) - 1} more failing)")


def test_a_passing_layer_is_ok_and_says_how_many_checks_ran() -> None:
    out = npd("--sysroot", str(SYSROOTS / "h100-x86"), "--profile", "h100-x86",
              "--layer", "fabric")
    doc = json.loads(cli("preflight", "--sysroot", str(SYSROOTS / "h100-x86"), "--profile",
                         "h100-x86", "--layer", "fabric", "--format", "json").stdout)
    results = doc["hosts"]["h100-x86"]["results"]
    assert not any(r["status"] == "fail" for r in results), "the fixture changed"
    ran = [r for r in results if r["status"] != "skip"]
    assert out.returncode == 0 and out.stdout.startswith(f"{len(ran)} check(s) pass")


def test_a_layer_whose_checks_cannot_run_is_unknown() -> None:
    """No step log, no benchmark result: every workload check skips."""
    out = npd("--sysroot", str(SYSROOTS / "h100-x86"), "--profile", "h100-x86",
              "--layer", "workload")
    assert out.returncode == 2
    assert out.stdout == "no check could run (every check skipped: its facts are missing)\n"


def test_an_error_is_unknown_and_a_fleet_is_refused(tmp_path: Path) -> None:
    bad = npd("--sysroot", str(tmp_path / "missing"), "--layer", "cpu")
    assert bad.returncode == 2 and bad.stdout == ""  # Unknown to NPD, the reason on stderr
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
               "exemplar_sysroot": str(SYSROOTS / "h100-x86")} for name in ("a", "b")}}}))
    fleet = npd("-i", str(inventory), "--profile", "h100-x86", "--layer", "cpu")
    assert fleet.returncode == 2
    assert "--format npd reports one node: run it on the node (no -i)" in fleet.stderr


def test_the_plugin_configuration_has_a_condition_and_a_rule_per_checked_layer() -> None:
    config = plugin_config()
    conditions = [c["type"] for c in config["conditions"]]
    assert conditions == ["ExemplarTuneGpu", "ExemplarTuneVm", "ExemplarTuneCpu",
                          "ExemplarTuneRuntime", "ExemplarTuneFabric", "ExemplarTuneWorkload"]
    for rule, condition in zip(config["rules"], conditions, strict=True):
        assert rule["condition"] == condition and rule["type"] == "permanent"
        layer = rule["args"][rule["args"].index("--layer") + 1]
        assert condition == "ExemplarTune" + layer.capitalize()
        assert rule["path"] == "/usr/bin/nsenter" and "npd" in rule["args"]
    shipped = yaml.safe_load((DEPLOY / "node-problem-detector-config.yaml").read_text())
    assert json.loads(shipped["data"]["exemplar-tune.json"]) == config


def test_the_manifests_are_valid_kubernetes_objects() -> None:
    files = sorted(str(p) for p in DEPLOY.glob("*.yaml"))
    out = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k",
                          KUBERNETES, *files], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    kinds = sorted(line.split("resource ")[1].split("/")[0]
                   for line in out.stdout.splitlines() if " passed for resource " in line)
    assert kinds == ["clusterrole", "clusterrolebinding", "configmap", "daemonset",
                     "serviceaccount"]
    daemonset = next(d for d in yaml.safe_load_all((DEPLOY / "node-problem-detector.yaml")
                                                   .read_text()) if d["kind"] == "DaemonSet")
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert "--config.custom-plugin-monitor=/config/exemplar-tune.json" in container["command"]


@pytest.mark.parametrize("broken", ["replicas", "hostPid"])
def test_the_validation_catches_a_wrong_field(tmp_path: Path, broken: str) -> None:
    """The strict check is not a formality: a misspelt or misplaced field fails it."""
    docs = list(yaml.safe_load_all((DEPLOY / "node-problem-detector.yaml").read_text()))
    daemonset = next(d for d in docs if d["kind"] == "DaemonSet")
    if broken == "replicas":
        daemonset["spec"]["replicas"] = 3  # a Deployment field
    else:
        daemonset["spec"]["template"]["spec"]["hostPid"] = True  # hostPID misspelt
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    out = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k",
                          KUBERNETES, str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
