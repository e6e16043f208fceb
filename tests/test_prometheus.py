"""Preflight and audit as node_exporter textfile metrics, read back by the official parser."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from exemplar_tune.reports.prometheus import STATUS_VALUE, audit_text, preflight_text
from tests.conftest import SYSROOTS
from tests.test_cli import cli


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_preflight_metrics_match_the_json_result(tmp_path: Path) -> None:
    host = str(SYSROOTS / "h100-x86")
    doc = json.loads(cli("preflight", "--sysroot", host, "--profile", "h100-x86", "--format",
                         "json").stdout)
    out = tmp_path / "exemplar.prom"
    written = cli("preflight", "--sysroot", host, "--profile", "h100-x86", "--format",
                  "prometheus", "--output", str(out))
    assert written.returncode == 1 and written.stdout == ""  # findings: exit 1, file written
    found = families(out.read_text())
    results = doc["hosts"]["h100-x86"]["results"]
    statuses = {s.labels["check"]: (s.value, s.labels["class"], s.labels["pending_reboot"])
                for s in found["exemplar_tune_check_status"]}
    want = {r["id"]: (STATUS_VALUE[r["status"]], r["class"], "false") for r in results
            if r["status"] in STATUS_VALUE}
    assert statuses == want
    # a failing health check and a failing tuning check, told apart by their class
    assert statuses["gpu.remapped-rows"] == (2, "health", "false")
    assert statuses["cpu.deep-cstates-disabled"] == (2, "tuning", "false")
    assert {klass for _, klass, _ in statuses.values()} == {"health", "tuning"}
    sample = found["exemplar_tune_check_status"][0]
    assert set(sample.labels) == {"host", "layer", "check", "severity", "class",
                                  "pending_reboot"}
    # checks that apply but could not be judged have their own series; those that do not
    # apply have none
    unknown = {s.labels["check"]: s.value for s in found["exemplar_tune_check_unknown"]}
    assert unknown == {r["id"]: 1 for r in results if r["class"] == "unknown"}
    assert "fabric.gpudirect-rdma" in unknown
    assert set(found["exemplar_tune_check_unknown"][0].labels) == {"host", "layer", "check",
                                                                    "severity"}
    absent = {r["id"] for r in results if r["class"] == "not_applicable"}
    assert absent and not absent & (set(statuses) | set(unknown))
    verdict = doc["verdicts"]["h100-x86"]
    assert verdict["class"] == "health"
    first = verdict["actions"][0]
    assert [(s.labels, s.value) for s in found["exemplar_tune_host_verdict"]] == [(
        {"host": "h100-x86", "command": "preflight", "class": "health",
         "action": first["kind"], "pending_reboot": "false",
         "next": first.get("command") or first["kind"]}, 1)]
    assert first["kind"] == "reset_gpu"
    (info,) = found["exemplar_tune_run_info"]
    assert info.labels["command"] == "preflight" and info.labels["profile"] == "h100-x86"
    assert {(s.labels["layer"], s.labels["status"]) for s in found["exemplar_tune_layer_status"]
            } == {*((layer, "checked") for layer in ("gpu", "vm", "cpu", "runtime", "fabric")),
                  ("workload", "not_checked")}  # no workload result given: every check skips
    assert [s.labels for s in found["exemplar_tune_host_status"]] == [
        {"host": "h100-x86", "command": "preflight", "status": "ok"}]
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir()] == ["exemplar.prom"]  # no temp file left


def result(check: str, status: str, klass: str, severity: str = "low",
           pending: bool = False) -> dict:
    """A check result as the preflight document holds it (the fields the metrics read)."""
    return {"id": check, "layer": check.split(".")[0], "status": status, "severity": severity,
            "class": klass, "pending_reboot": pending}


def test_labels_are_escaped_and_unreachable_hosts_listed() -> None:
    hostile = 'exemplar-tune apply --layer cpu -i "a\\b\nc.yml"'
    doc = {"profile": 'site "a"\nb', "unreachable": {"gpu\\7": "timeout"},
           "hosts": {'n"1': {"results": [result("cpu.turbo", "warn", "tuning"),
                                         result("cpu.governor", "skip", "not_applicable"),
                                         result("cpu.bios-cstates", "skip", "unknown")]}},
           "verdicts": {'n"1': {"class": "tuning", "pending_reboot": False, "reason": "",
                                "actions": [{"kind": "apply", "command": hostile}]},
                        "gpu\\7": {"class": "unknown", "pending_reboot": False, "reason": "",
                                    "actions": [{"kind": "investigate",
                                                 "command": "exemplar-tune facts",
                                                 "detail": "unreachable: timeout"}]}}}
    found = families(preflight_text(doc, now=1.0))
    (check,) = found["exemplar_tune_check_status"]
    assert check.labels["host"] == 'n"1' and check.value == 1
    assert check.labels["class"] == "tuning" and check.labels["pending_reboot"] == "false"
    (unknown,) = found["exemplar_tune_check_unknown"]
    assert unknown.labels == {"host": 'n"1', "layer": "cpu", "check": "cpu.bios-cstates",
                              "severity": "low"}
    assert found["exemplar_tune_run_info"][0].labels["profile"] == 'site "a"\nb'
    assert found["exemplar_tune_host_status"][0].labels == {
        "host": "gpu\\7", "command": "preflight", "status": "unreachable"}
    assert {s.labels["host"]: (s.labels["class"], s.labels["action"], s.labels["next"])
            for s in found["exemplar_tune_host_verdict"]} == {
        'n"1': ("tuning", "apply", hostile),
        "gpu\\7": ("unknown", "investigate", "exemplar-tune facts")}


def test_a_change_waiting_for_a_reboot_is_labelled_so() -> None:
    doc = {"profile": "p", "unreachable": {}, "layers": ["vm"],
           "hosts": {"g1": {"results": [result("vm.cmdqv", "fail", "tuning", "high", True)]}},
           "verdicts": {"g1": {"class": "tuning", "pending_reboot": True, "reason": "r",
                               "actions": [{"kind": "reboot", "command": "systemctl reboot",
                                            "detail": "vm.cmdqv_params was changed"}]}}}
    text = preflight_text(doc, now=1.0)
    assert ('exemplar_tune_check_status{host="g1",layer="vm",check="vm.cmdqv",severity="high",'
            'class="tuning",pending_reboot="true"} 2\n') in text
    assert ('exemplar_tune_host_verdict{host="g1",command="preflight",class="tuning",'
            'action="reboot",pending_reboot="true",next="systemctl reboot"} 1\n') in text
    assert "exemplar_tune_check_unknown" not in text


def test_audit_lists_every_knob_of_the_layers_audited() -> None:
    """n3 answered but its module failed before any layer: its layers are not audited (0),
    it has no drift series, and it is not called unreachable; n4 did not answer."""
    audited = {"cpu": {"status": "drift"}, "fabric": {"status": "no drift"}}
    doc = {"profile": "h100-x86", "unreachable": {"n4": "timeout"},
           "failed": {"n3": "module failed"},
           "hosts": {"n1": {"changed": [{"layer": "cpu", "knob": "governor"}],
                            "audit": audited},
                     "n2": {"changed": [], "audit": {**audited, "cpu": {"status": "no drift"}},
                            "not_applicable": [{"layer": "cpu", "knob": "cstate_cmdline",
                                                "reason": "no grub"}]},
                     "n3": {"changed": [], "audit": {
                         layer: {"status": "not audited"} for layer in ("cpu", "fabric")}}}}
    found = families(audit_text(doc, ["cpu", "fabric"]))
    drift = {(s.labels["host"], s.labels["knob"]): s.value
             for s in found["exemplar_tune_knob_drift"]}
    # no target: the profile each host chose itself, no inventory (a local run)
    assert {tuple(sorted(s.labels)) for s in found["exemplar_tune_knob_drift"]} == {
        ("host", "knob", "layer", "profile")}
    assert {s.labels["profile"] for s in found["exemplar_tune_knob_drift"]} == {"auto"}
    assert drift[("n1", "cpu.governor")] == 1 and drift[("n2", "cpu.governor")] == 0
    assert drift[("n1", "fabric.nccl_conf")] == 0
    assert sum(drift.values()) == 1
    assert {host for host, _ in drift} == {"n1", "n2"}
    assert ("n2", "cpu.cstate_cmdline") not in drift
    assert [s.labels for s in found["exemplar_tune_knob_not_applicable"]] == [
        {"host": "n2", "layer": "cpu", "knob": "cpu.cstate_cmdline"}]
    assert {(s.labels["host"], s.labels["layer"]): s.labels["status"]
            for s in found["exemplar_tune_layer_status"]} == {
        ("n1", "cpu"): "drift", ("n1", "fabric"): "no_drift", ("n2", "cpu"): "no_drift",
        ("n2", "fabric"): "no_drift", ("n3", "cpu"): "not_audited",
        ("n3", "fabric"): "not_audited"}
    assert {s.value for s in found["exemplar_tune_layer_status"]} == {1}  # never a zero
    assert {s.labels["host"]: s.labels["status"] for s in found["exemplar_tune_host_status"]
            } == {"n1": "ok", "n2": "ok", "n3": "failed", "n4": "unreachable"}

    # the run's target names the profile and inventory the alert's remedy repeats
    doc["target"] = {"inventory": "/etc/exemplar/hosts.yml", "sysroot": None,
                     "profile": "site.yaml"}
    doc["verdicts"] = {"n1": {"class": "tuning", "pending_reboot": False, "reason": "drift",
                              "actions": [{"kind": "apply", "command": "exemplar-tune apply "
                                           "--layer cpu -i /etc/exemplar/hosts.yml --limit n1 "
                                           "--profile site.yaml"}]},
                       "n2": {"class": "ok", "pending_reboot": False, "reason": "",
                              "actions": [{"kind": "none"}]}}
    found = families(audit_text(doc, ["cpu", "fabric"]))
    assert {(s.labels["profile"], s.labels["inventory"]) for s in
            found["exemplar_tune_knob_drift"]} == {("site.yaml", "/etc/exemplar/hosts.yml")}
    assert [s.labels for s in found["exemplar_tune_knob_drift"] if s.value == 1] == [
        {"host": "n1", "layer": "cpu", "knob": "cpu.governor", "profile": "site.yaml",
         "inventory": "/etc/exemplar/hosts.yml"}]
    assert {s.labels["host"]: (s.labels["command"], s.labels["class"], s.labels["action"],
                               s.labels["next"])
            for s in found["exemplar_tune_host_verdict"]} == {
        "n1": ("audit", "tuning", "apply", "exemplar-tune apply --layer cpu -i "
               "/etc/exemplar/hosts.yml --limit n1 --profile site.yaml"),
        "n2": ("audit", "ok", "none", "none")}


def test_values_are_exact_and_a_local_run_is_labelled_with_the_machine_name() -> None:
    """Before, the time was written with %g: 1.79642e+09, off by up to an hour and more, and
    every node's local run said host="localhost"."""
    doc = {"profile": "p", "unreachable": {}, "layers": ["cpu"],
           "hosts": {"localhost": {"results": [result("cpu.turbo", "fail", "tuning", "high")]}},
           "verdicts": {"localhost": {"class": "tuning", "pending_reboot": False, "reason": "",
                                      "actions": [{"kind": "apply"}]}}}
    text = preflight_text(doc, now=1796420012.3456)
    assert 'exemplar_tune_run_timestamp_seconds{command="preflight"} 1796420012.346\n' in text
    found = families(text)
    assert found["exemplar_tune_run_timestamp_seconds"][0].value == 1796420012.346
    assert found["exemplar_tune_check_status"][0].labels["host"] == socket.gethostname()
    host = socket.gethostname()
    assert f'exemplar_tune_check_status{{host="{host}",layer="cpu",check="cpu.turbo",' \
        'severity="high",class="tuning",pending_reboot="false"} 2\n' in text
    assert f'exemplar_tune_host_verdict{{host="{host}",command="preflight",class="tuning",' \
        'action="apply",pending_reboot="false",next="apply"} 1\n' in text


def test_an_unwritable_output_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "exemplar.prom"
    out = cli("preflight", "--sysroot", str(SYSROOTS / "h100-x86"), "--profile", "h100-x86",
              "--format", "prometheus", "--output", str(target))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "No such file or directory" in out.stderr
    assert not os.path.exists(target.parent)


def test_output_onto_a_device_or_fifo_is_refused_and_the_node_kept(tmp_path: Path) -> None:
    """Before, the rename replaced the node with a regular file (as root, /dev/null)."""
    fifo = tmp_path / "exemplar.prom"
    os.mkfifo(fifo)
    link = tmp_path / "null.prom"
    link.symlink_to("/dev/null")
    for target, kind in ((fifo, "a FIFO"), (link, "a device")):
        for fmt in ("prometheus", "json"):
            out = cli("preflight", "--sysroot", str(SYSROOTS / "h100-x86"), "--format", fmt,
                      "--output", str(target))
            assert out.returncode == 2, out.stderr
            assert out.stderr.strip() == (f"exemplar-tune: error: --output {target} is {kind}, "
                                          "not a regular file: reports are written only to "
                                          "regular files (leave --output out to print to "
                                          "stdout)")
    assert stat.S_ISFIFO(fifo.stat().st_mode) and link.is_symlink()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
