"""apply / audit / restore from the command line, on copies of fixture hosts."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
import yaml

from tests.conftest import SYSROOTS
from tests.helpers import tree_hash
from tests.test_cli import cli as _cli

PROFILE = {"name": "swept", "fabric": {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4"}}}


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("EXEMPLAR_TUNE_STATE_DIR", str(tmp_path / "state"))
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    return profile


def cli(*args):
    out = _cli(*args)
    assert "Traceback" not in out.stderr, out.stderr
    return out


def copy(tmp_path, name, as_name=None):
    target = tmp_path / (as_name or name)
    shutil.copytree(SYSROOTS / name, target, symlinks=True)
    return target


def without_journal(root):
    shutil.rmtree(root / "var", ignore_errors=True)
    return tree_hash(root)


def test_check_apply_audit_restore_round_trip(tmp_path, state):
    host = copy(tmp_path, "h100-x86")
    pristine = tree_hash(host)
    out = cli("apply", "--layer", "fabric", "--sysroot", str(host), "--profile", str(state),
              "--check", "--format", "json")
    doc = json.loads(out.stdout)
    assert out.returncode == 0 and doc["run_id"] is None
    assert doc["hosts"]["h100-x86"]["changed"][0]["knob"] == "nccl_conf"
    assert tree_hash(host) == pristine

    drift = cli("audit", "--sysroot", str(host), "--profile", str(state), "--layer", "fabric")
    assert drift.returncode == 1 and "DRIFT  fabric/nccl_conf  1/1 hosts  h100-x86" in drift.stdout
    assert tree_hash(host) == pristine

    applied = json.loads(cli("apply", "--layer", "fabric", "--sysroot", str(host), "--profile",
                             str(state), "--format", "json").stdout)
    run_id = applied["run_id"]
    assert run_id == applied["experiment"]
    change = applied["hosts"]["h100-x86"]["changed"][0]["changes"][0]
    assert change["path"] == "/etc/nccl.conf" and "NCCL_IB_QPS_PER_CONNECTION=4" in change["after"]
    assert (host / f"var/lib/exemplar-tune/journal/{run_id}.json").is_file()

    again = cli("apply", "--layer", "fabric", "--sysroot", str(host), "--profile", str(state))
    assert "changed nothing" in again.stdout
    assert cli("audit", "--sysroot", str(host), "--profile", str(state),
               "--layer", "fabric").returncode == 0

    restored = cli("restore", "--run", "latest")
    assert restored.returncode == 0 and f"restore of experiment {run_id}" in restored.stdout
    assert "fabric h100-x86 (1/1): 1 change(s) put back" in restored.stdout
    assert without_journal(host) == pristine


@pytest.mark.parametrize("args, message", [
    (["restore", "--run", "nope"], "no ledger at "),
    (["apply", "--layer", "workload"], "invalid choice: 'workload'"),
    (["apply", "--layer", "fabric", "--profile", "missing-profile"], "not found"),
])
def test_bad_input_exit_2(state, args, message):
    out = cli(*args)
    assert out.returncode == 2 and message in out.stderr


def test_apply_needs_a_directory_not_an_archive(tmp_path, state):
    archive = tmp_path / "h.tar.gz"
    archive.write_bytes(b"")
    out = cli("apply", "--layer", "fabric", "--sysroot", str(archive), "--profile", str(state))
    assert out.returncode == 2 and "changes need a directory" in out.stderr


def test_corrupted_journal_stops_before_writing(tmp_path, state):
    host = copy(tmp_path, "h100-x86")
    journal = host / "var/lib/exemplar-tune/journal/r1.json"
    journal.parent.mkdir(parents=True)
    journal.write_text("{broken")
    before = tree_hash(host)
    out = cli("apply", "--layer", "fabric", "--sysroot", str(host), "--profile", str(state),
              "--run-id", "r1")
    assert out.returncode == 1
    assert "FAILED: /var/lib/exemplar-tune/journal/r1.json: corrupted (not JSON)" in out.stdout
    assert tree_hash(host) == before


def test_audit_groups_drift_across_a_fleet(tmp_path, state):
    hosts = {"n1": copy(tmp_path, "h100-x86", "n1"), "n2": copy(tmp_path, "h100-x86", "n2"),
             "n3": copy(tmp_path, "healthy-h100", "n3")}
    inventory = {"all": {"vars": {"ansible_connection": "local",
                                  "ansible_python_interpreter": sys.executable},
                         "hosts": {n: {"exemplar_sysroot": str(p)} for n, p in hosts.items()}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    out = cli("audit", "-i", str(path), "--profile", str(state), "--layer", "fabric",
              "--format", "json")
    doc = json.loads(out.stdout)
    assert out.returncode == 1
    [group] = doc["drift"]
    assert {k: group[k] for k in ("layer", "knob", "hosts", "hostlist", "count", "total")} == {
        "layer": "fabric", "knob": "nccl_conf", "hosts": ["n1", "n2"], "hostlist": "n[1-2]",
        "count": 2, "total": 3}
    assert group["changes"] == doc["hosts"]["n1"]["changed"][0]["changes"]


def test_audit_of_the_fixture_fleet_reports_exactly_their_drift(tmp_path, monkeypatch):
    """Every layer, a problem host and the reference host: the drift is the problem host's."""
    monkeypatch.setenv("EXEMPLAR_TUNE_STATE_DIR", str(tmp_path / "state"))
    profile = {"name": "site-h100",
               "gpu": {"count": 8, "product_contains": "H100", "persistence_mode": True},
               "vm": {"iommu_default_domain": "identity"},
               "cpu": {"deep_cstates": True, "governor": "performance", "turbo": True,
                       "housekeeping_confined": True, "housekeeping_cpus": "0,4",
                       "numa_balancing": 0},
               "runtime": {"nccl_topo_file": "/etc/nccl/topo.xml", "require_in_container": True},
               "fabric": {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4"}}}
    (tmp_path / "profile.yaml").write_text(yaml.safe_dump(profile))
    hosts = {"problem": copy(tmp_path, "h100-x86", "problem"),
             "reference": copy(tmp_path, "healthy-h100", "reference")}
    before = {name: tree_hash(path) for name, path in hosts.items()}
    inventory = {"all": {"vars": {"ansible_connection": "local",
                                  "ansible_python_interpreter": sys.executable,
                                  # both fixtures keep their Slurm job under system.slice
                                  "cpu_housekeeping_allow_job_units": True},
                         "hosts": {n: {"exemplar_sysroot": str(p)} for n, p in hosts.items()}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    out = cli("audit", "-i", str(tmp_path / "hosts.yml"), "--profile",
              str(tmp_path / "profile.yaml"), "--format", "json")
    doc = json.loads(out.stdout)
    assert out.returncode == 1
    assert [(g["layer"], g["knob"], g["hosts"]) for g in doc["drift"]] == [
        ("gpu", "persistence_mode", ["problem"]), ("cpu", "deep_cstates", ["problem"]),
        ("cpu", "tuned_profile", ["problem"]), ("cpu", "housekeeping", ["problem"]),
        ("cpu", "numa_balancing", ["problem"]), ("runtime", "enroot_topo", ["problem"]),
        ("fabric", "nccl_conf", ["problem"])]
    assert doc["hosts"]["reference"]["changed"] == []
    # drift is a tuning verdict whose next steps apply each drifting layer, as printed
    verdict = doc["verdicts"]["problem"]
    assert verdict["class"] == "tuning" and verdict["pending_reboot"] is False
    assert [a["command"] for a in verdict["actions"]] == [
        f"exemplar-tune apply --layer {layer} -i {tmp_path / 'hosts.yml'} --limit problem "
        f"--profile {tmp_path / 'profile.yaml'}" for layer in ("gpu", "cpu", "runtime", "fabric")]
    assert {a["kind"] for a in verdict["actions"]} == {"apply"}
    assert doc["verdicts"]["reference"] == {"class": "ok", "pending_reboot": False, "reason": "",
                                            "actions": [{"kind": "none"}]}
    assert {name: tree_hash(path) for name, path in hosts.items()} == before


def test_a_layer_that_cannot_be_audited_is_never_reported_free_of_drift(tmp_path, monkeypatch):
    """'broken' cannot have its cpu layer audited (the housekeeping knob refuses to confine
    units that hold its Slurm job); 'nogrub' has no bootloader defaults. Text, JSON and
    Prometheus say so: no "no drift" for broken's cpu layer, no host called unreachable, the vm
    knob of nogrub N/A with its reason."""
    monkeypatch.setenv("EXEMPLAR_TUNE_STATE_DIR", str(tmp_path / "state"))
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump({"name": "p", "vm": {"iommu_default_domain": "identity"},
                                       "cpu": {"deep_cstates": True, "governor": "performance",
                                               "housekeeping_confined": True,
                                               "housekeeping_cpus": "0,4"}}))
    broken, nogrub = copy(tmp_path, "healthy-h100", "broken"), copy(tmp_path, "healthy-h100",
                                                                   "nogrub")
    (nogrub / "etc/default/grub").unlink()
    inventory = {"all": {"vars": {"ansible_connection": "local",
                                  "ansible_python_interpreter": sys.executable},
                         "hosts": {"broken": {"exemplar_sysroot": str(broken)},
                                   "nogrub": {"exemplar_sysroot": str(nogrub),
                                              "cpu_housekeeping_allow_job_units": True}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    args = ("audit", "-i", str(tmp_path / "hosts.yml"), "--profile", str(profile),
            "--layer", "vm", "--layer", "cpu")
    doc = json.loads(cli(*args, "--format", "json").stdout)
    assert doc["hosts"]["broken"]["audit"]["cpu"]["status"] == "not audited"
    assert doc["hosts"]["broken"]["audit"]["cpu"]["reason"].startswith(
        "cpu.housekeeping: system.slice: hold Slurm job cgroups")
    assert doc["hosts"]["broken"]["audit"]["vm"] == {"status": "no drift", "reason": None}
    assert doc["hosts"]["nogrub"]["audit"] == {"vm": {"status": "no drift", "reason": None},
                                               "cpu": {"status": "no drift", "reason": None}}
    assert [(g["layer"], g["hosts"]) for g in doc["not_audited"]] == [("cpu", ["broken"])]
    assert [(g["layer"], g["knob"], g["hosts"]) for g in doc["not_applicable"]] == [
        ("vm", "iommu_passthrough", ["nogrub"]), ("cpu", "cstate_cmdline", ["nogrub"])]
    assert doc["unreachable"] == {} and doc["drift"] == []

    text = cli(*args)
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    assert lines[0].endswith("2 host(s) answered, 0 drift, 1 not audited in full")
    assert any(line.startswith("  NOT AUDITED  cpu  1/2 hosts  broken: cpu.housekeeping: ")
               for line in lines)
    assert any(line.startswith("  N/A    vm/iommu_passthrough  1/2 hosts  nogrub: "
                               "/etc/default/grub: not present") for line in lines)
    assert "  no drift" not in lines and "  no drift in the layers audited" in lines
    assert "UNREACHABLE" not in text.stdout

    # the host's verdict: it could not be judged in full, never "ok"; nogrub is
    verdicts = doc["verdicts"]
    assert verdicts["broken"]["class"] == "unknown" and verdicts["nogrub"]["class"] == "ok"
    assert verdicts["broken"]["actions"][0]["kind"] == "investigate"
    assert "cpu.housekeeping: system.slice: hold Slurm job cgroups" in verdicts["broken"]["reason"]
    assert verdicts["nogrub"]["actions"] == [{"kind": "none"}]

    metrics = cli(*args, "--format", "prometheus").stdout
    assert 'exemplar_tune_layer_status{host="broken",layer="cpu",command="audit",' \
        'status="not_audited"} 1' in metrics
    assert 'exemplar_tune_knob_drift{host="broken",layer="cpu"' not in metrics
    # the drift series name the profile and inventory asked for (the alert's remedy)
    asked = f'profile="{profile}",inventory="{tmp_path / "hosts.yml"}"'
    assert ('exemplar_tune_knob_drift{host="broken",layer="vm",knob="vm.iommu_passthrough",'
            f'{asked}}} 0') in metrics
    assert all(asked in line for line in metrics.splitlines()
               if line.startswith("exemplar_tune_knob_drift{"))
    assert ('exemplar_tune_host_verdict{host="broken",command="audit",class="unknown",'
            'action="investigate",pending_reboot="false",') in metrics
    assert ('exemplar_tune_host_verdict{host="nogrub",command="audit",class="ok",'
            'action="none",pending_reboot="false",next="none"} 1') in metrics
    assert ('exemplar_tune_knob_not_applicable{host="nogrub",layer="vm",'
            'knob="vm.iommu_passthrough"} 1') in metrics
    # it answered, and its layer module failed (one layer could not be planned)
    assert 'exemplar_tune_host_status{host="broken",command="audit",status="failed"} 1' \
        in metrics
    assert 'status="unreachable"' not in metrics
