"""Kubernetes node health through node-problem-detector: the plugin protocol of
``preflight --format npd`` (one line that starts with the node's verdict class and ends with
its next step; exit 1 NonOK only for a health problem, or a tuning one with
``--npd-include-tuning``; 2 Unknown only where the node could not be judged; else 0), and the
shipped manifests validated against a pinned Kubernetes API (``kubernetes-validate``).

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
from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYERS, get_layer

from exemplar_tune.facts import facts_from_sysroot
from exemplar_tune.preflight import preflight_hosts
from exemplar_tune.profile import GIVEN, load_profile
from exemplar_tune.reports.npd import MAX_MESSAGE, npd_result, plugin_config
from tests.conftest import REPO, SYSROOTS
from tests.test_cli import cli

DEPLOY = REPO / "deploy" / "kubernetes"
KUBERNETES = "1.31.0"  # the API version the manifests are checked against


def npd(*args: str) -> subprocess.CompletedProcess[str]:
    return cli("preflight", "--format", "npd", "--quiet", *args)


def as_json(sysroot: Path, layer: str) -> dict:
    """The same preflight as JSON: the verdict every NPD line is a view of."""
    out = cli("preflight", "--sysroot", str(sysroot), "--profile", "h100-x86", "--layer", layer,
              "--format", "json")
    return json.loads(out.stdout)


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    line = out.stdout.rstrip("\n")
    assert out.stdout.endswith("\n") and "\n" not in line and len(line) <= MAX_MESSAGE
    assert out.stderr == "", out.stderr
    return line


def test_a_health_problem_is_non_ok_with_the_verdict_and_its_first_action() -> None:
    """h100-x86's gpu layer: a pending row remap (fail) and an Xid (warn), both health."""
    out = npd("--sysroot", str(SYSROOTS / "h100-x86"), "--profile", "h100-x86", "--layer", "gpu")
    assert out.returncode == 1, out.stderr
    line = one_line(out)
    doc = as_json(SYSROOTS / "h100-x86", "gpu")
    verdict = doc["verdicts"]["h100-x86"]
    assert verdict["class"] == "health" and verdict["actions"][0]["kind"] == "reset_gpu"
    health = [r for r in doc["hosts"]["h100-x86"]["results"]
              if r["class"] == "health" and r["status"] in ("fail", "warn")]
    assert [r["id"] for r in health] == ["gpu.remapped-rows", "gpu.xids"]
    assert line == f"health: {verdict['reason']} (and 1 more); next: reset_gpu"
    assert "gpu.remapped-rows" in verdict["reason"]
    # a tuning failure of the same layer (persistence mode) is not what the line names
    assert any(r["id"] == "gpu.persistence-mode" and r["class"] == "tuning" and
               r["status"] == "fail" for r in doc["hosts"]["h100-x86"]["results"])
    assert "persistence" not in line


def test_a_tuning_finding_is_ok_unless_tuning_is_included() -> None:
    """h100-x86's cpu layer fails only tuning checks: OK to NPD (the node works, slower), with
    the class and the next step in the message; --npd-include-tuning makes it NonOK."""
    args = ("--sysroot", str(SYSROOTS / "h100-x86"), "--profile", "h100-x86", "--layer", "cpu")
    out = npd(*args)
    assert out.returncode == 0, out.stderr
    line = one_line(out)
    doc = as_json(SYSROOTS / "h100-x86", "cpu")
    verdict = doc["verdicts"]["h100-x86"]
    results = doc["hosts"]["h100-x86"]["results"]
    assert verdict["class"] == "tuning" and not verdict["pending_reboot"]
    assert any(r["status"] == "fail" for r in results)
    assert not any(r["class"] == "health" and r["status"] in ("fail", "warn") for r in results)
    assert line == f"tuning: {verdict['reason']}; next: apply"
    assert "cpu.deep-cstates-disabled" in line
    strict = npd(*args, "--npd-include-tuning")
    assert strict.returncode == 1 and one_line(strict) == line


def test_a_passing_layer_is_ok_and_says_how_many_checks_ran() -> None:
    out = npd("--sysroot", str(SYSROOTS / "healthy-h100"), "--profile", "h100-x86",
              "--layer", "fabric")
    doc = as_json(SYSROOTS / "healthy-h100", "fabric")
    assert doc["verdicts"]["healthy-h100"]["class"] == "ok", "the fixture changed"
    ran = [r for r in doc["hosts"]["healthy-h100"]["results"] if r["status"] != "skip"]
    assert ran and all(r["status"] == "pass" for r in ran)
    assert out.returncode == 0
    assert one_line(out) == f"ok: {len(ran)} check(s) of the fabric layer pass"  # no next step
    assert npd("--sysroot", str(SYSROOTS / "healthy-h100"), "--profile", "h100-x86",
               "--layer", "fabric", "--npd-include-tuning").returncode == 0


def test_a_layer_with_a_check_that_cannot_be_judged_is_unknown() -> None:
    """h100-x86's fabric layer: nothing fails, but the NVIDIA driver's version file is not in
    the tree, so GPUDirect RDMA (and others) apply and cannot be judged: never OK."""
    out = npd("--sysroot", str(SYSROOTS / "h100-x86"), "--profile", "h100-x86",
              "--layer", "fabric")
    assert out.returncode == 2, out.stderr
    line = one_line(out)
    doc = as_json(SYSROOTS / "h100-x86", "fabric")
    results = doc["hosts"]["h100-x86"]["results"]
    assert not any(r["status"] in ("fail", "warn") for r in results)
    unknown = [r["id"] for r in results if r["class"] == "unknown"]
    assert "fabric.gpudirect-rdma" in unknown
    verdict = doc["verdicts"]["h100-x86"]
    assert verdict["class"] == "unknown"
    assert any(verdict["reason"].startswith(f"{check}: ") for check in unknown)
    assert line == f"unknown: h100-x86 could not be judged: {verdict['reason']}; next: investigate"


def test_an_unreadable_host_is_unknown_with_the_true_reason(tmp_path: Path) -> None:
    """An empty tree is no host: Unknown (exit 2), never a pass, naming what was not there."""
    empty = tmp_path / "node07"
    empty.mkdir()
    out = npd("--sysroot", str(empty), "--profile", "h100-x86", "--layer", "cpu")
    assert out.returncode == 2, out.stderr
    line = one_line(out)
    assert line.startswith("unknown: node07 could not be judged: not a readable host: "
                           "/proc/cpuinfo: not present (")
    assert line.endswith("; next: investigate")


def test_a_workload_layer_with_nothing_to_judge_is_not_applicable_and_ok() -> None:
    """No step log, no benchmark result, no reference in the profile: nothing to judge here
    (before: Unknown, exit 2, a condition that could never become OK)."""
    for tree in ("h100-x86", "healthy-h100"):
        for extra in ((), ("--npd-include-tuning",)):
            out = npd("--sysroot", str(SYSROOTS / tree), "--profile", "h100-x86",
                      "--layer", "workload", *extra)
            assert out.returncode == 0, out.stderr
            assert one_line(out) == (
                "not_applicable: nothing to judge in the workload layer here, profile h100-x86: "
                "workload.reference: profile sets no workload.reference")
    doc = as_json(SYSROOTS / "h100-x86", "workload")
    assert doc["verdicts"]["h100-x86"]["class"] == "not_applicable"
    assert {r["class"] for r in doc["hosts"]["h100-x86"]["results"]} == {"not_applicable"}


def test_a_change_waiting_for_a_reboot_is_ok_and_says_reboot() -> None:
    """The library's view: the cpu knob applied on this boot waits for the next one; the
    tuning verdict says so and its next step is the reboot, still OK to NPD (NonOK with
    tuning included)."""
    facts = facts_from_sysroot(str(SYSROOTS / "h100-x86"), None)
    facts["cpu"]["pending_reboot"] = ["cpu.deep_cstates"]
    doc = preflight_hosts({"gpu01": facts}, {"gpu01": (load_profile("h100-x86"), GIVEN)},
                          ["cpu"], False)
    verdict = doc["verdicts"]["gpu01"]
    assert verdict["class"] == "tuning" and verdict["pending_reboot"] is True
    assert verdict["actions"][0] == {
        "kind": "reboot", "command": "systemctl reboot",
        "detail": "cpu.deep_cstates was changed on this boot and takes effect at the next"}
    status, line = npd_result(doc)
    assert status == 0
    assert line.startswith("tuning: pending reboot: ") and line.endswith("; next: reboot")
    assert "cpu.deep-cstates-disabled" in line and len(line) <= MAX_MESSAGE
    assert npd_result(doc, include_tuning=True) == (1, line)


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


def test_the_plugin_configuration_has_a_condition_and_a_rule_per_layer_read_on_the_node() -> None:
    """The workload layer is judged from results a node does not hold: no condition."""
    config = plugin_config()
    conditions = [c["type"] for c in config["conditions"]]
    assert conditions == ["ExemplarTuneGpu", "ExemplarTuneVm", "ExemplarTuneCpu",
                          "ExemplarTuneRuntime", "ExemplarTuneFabric"]
    assert [layer.name for layer in LAYERS if not layer.reads_host] == ["workload"]
    for rule, condition in zip(config["rules"], conditions, strict=True):
        assert rule["condition"] == condition and rule["type"] == "permanent"
        layer = rule["args"][rule["args"].index("--layer") + 1]
        assert condition == "ExemplarTune" + layer.capitalize()
        assert get_layer(layer).reads_host
        assert rule["path"] == "/usr/bin/nsenter" and "npd" in rule["args"]
        assert "--npd-include-tuning" not in rule["args"]  # only health is NonOK
    shipped = yaml.safe_load((DEPLOY / "node-problem-detector-config.yaml").read_text())
    assert json.loads(shipped["data"]["exemplar-tune.json"]) == config
    assert "Workload" not in shipped["data"]["exemplar-tune.json"]


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
