"""exemplar-tune preflight end to end: fixture hosts, fleet inventories, formats, bad input."""

from __future__ import annotations

import json
import shlex
import sys

import jsonschema
import pytest
import yaml

from exemplar_tune.checks.base import ACTION_KINDS, CLASSES
from exemplar_tune.profile import PROFILES_DIR
from tests.conftest import REPO, SYSROOTS
from tests.test_cli import cli

SCHEMA = json.loads((REPO / "exemplar_tune/schemas/preflight-result.schema.json").read_text())
ORDER = ["gpu", "vm", "cpu", "runtime", "fabric", "workload"]


def preflight(*args, cwd=None):
    out = cli("preflight", *args, cwd=cwd)
    assert "Traceback" not in out.stderr, out.stderr
    return out


def doc_of(out):
    doc = json.loads(out.stdout)
    jsonschema.validate(doc, SCHEMA)
    return doc


def test_results_are_in_layer_order_and_match_the_schema():
    out = preflight("--sysroot", str(SYSROOTS / "h100-x86"), "--format", "json")
    doc = doc_of(out)
    results = doc["hosts"]["h100-x86"]["results"]
    layers = [r["layer"] for r in results]
    assert layers == sorted(layers, key=ORDER.index)
    assert doc["profile"] == "h100-x86"
    assert doc["schema_version"] == 2
    assert doc["target"] == {"inventory": None, "sysroot": str(SYSROOTS / "h100-x86"),
                             "profile": "auto"}


def test_every_result_has_a_class_and_actions_and_the_host_one_verdict():
    doc = doc_of(preflight("--sysroot", str(SYSROOTS / "h100-x86"), "--format", "json"))
    results = doc["hosts"]["h100-x86"]["results"]
    for r in results:
        assert r["class"] in CLASSES and r["pending_reboot"] is False, r["id"]
        assert r["actions"] and {a["kind"] for a in r["actions"]} <= set(ACTION_KINDS), r["id"]
        if r["status"] == "pass" or r["class"] == "not_applicable":
            assert r["actions"] == [{"kind": "none"}], r["id"]
        if r["class"] == "unknown":  # it applies and could not be judged: look closer
            assert r["status"] == "skip" and r["actions"][0]["kind"] == "investigate"
            assert r["actions"][0]["command"] == shlex.join([
                "exemplar-tune", "facts", "--layer", r["layer"], "--sysroot",
                str(SYSROOTS / "h100-x86")])
        if r["status"] in ("fail", "warn"):
            assert r["class"] in ("health", "tuning") and r["actions"][0]["kind"] != "none"
    # a tuning fix is an apply of the layer, the command reaching this very tree
    persistence = next(r for r in results if r["id"] == "gpu.persistence-mode")
    assert (persistence["class"], persistence["actions"]) == ("tuning", [{
        "kind": "apply", "command": "exemplar-tune apply --layer gpu --sysroot "
        + shlex.quote(str(SYSROOTS / "h100-x86")), "detail": "knob gpu.persistence_mode"}])
    skipped = {r["class"] for r in results if r["status"] == "skip"}
    assert skipped == {"not_applicable", "unknown"}  # a skip says which
    # the summary counts skips as n/a or unknown, and adds up to the results
    by = {k: sum(1 for r in results if r["status"] == k) for k in ("fail", "warn", "pass")}
    assert doc["summary"] == {**by, "n/a": sum(r["class"] == "not_applicable" for r in results),
                              "unknown": sum(r["class"] == "unknown" for r in results)}
    assert sum(doc["summary"].values()) == len(results)
    # health before unknown before tuning: the pending row remap decides, reset the GPU
    verdict = doc["verdicts"]["h100-x86"]
    assert verdict["class"] == "health" and verdict["pending_reboot"] is False
    assert verdict["reason"].startswith("gpu.remapped-rows: ")
    assert [a["kind"] for a in verdict["actions"]] == ["reset_gpu", "replace"]
    assert verdict["counts"] == doc["summary"]


@pytest.mark.parametrize("tree, layers, klass, first, status, code", [
    ("healthy-h100", (), "ok", "none", "pass", 0),
    ("h100-x86", ("cpu",), "tuning", "apply", "fail", 1),  # only tuning checks fail there
    ("h100-x86", ("fabric",), "unknown", "investigate", "unknown", 1),  # not all judged
    ("h100-x86", ("workload",), "not_applicable", "none", "pass", 0),  # nothing to judge
    ("gb200-grace-vm", (), "unknown", "investigate", "fail", 1),  # unknown outranks tuning
])
def test_the_host_verdict_follows_the_precedence(tree, layers, klass, first, status, code):
    args = [arg for layer in layers for arg in ("--layer", layer)]
    out = preflight("--sysroot", str(SYSROOTS / tree), "--profile", "auto", "--format", "json",
                    *args)
    doc = doc_of(out)
    verdict = doc["verdicts"][tree]
    assert (verdict["class"], verdict["actions"][0]["kind"]) == (klass, first)
    assert doc["hosts"][tree]["status"] == status
    assert out.returncode == code  # unknown is never a pass


def test_auto_profile_follows_the_arch():
    out = preflight("--sysroot", str(SYSROOTS / "gb200-grace-vm"), "--format", "json")
    assert doc_of(out)["profile"] == "gb200-grace"


def test_stop_at_first_failing_layer_evaluates_nothing_after_it():
    doc = doc_of(preflight("--sysroot", str(SYSROOTS / "h100-x86"), "--format", "json",
                           "--stop-at-first-failing-layer"))
    results = doc["hosts"]["h100-x86"]["results"]
    failing = [r["layer"] for r in results if r["status"] == "fail"]
    assert failing, "h100-x86 has failing checks"
    first = min(failing, key=ORDER.index)
    assert {r["layer"] for r in results} <= set(ORDER[: ORDER.index(first) + 1])


def test_layer_selection():
    doc = doc_of(preflight("--sysroot", str(SYSROOTS / "h100-x86"), "--format", "json",
                           "--layer", "cpu"))
    assert {r["layer"] for r in doc["hosts"]["h100-x86"]["results"]} == {"cpu"}


@pytest.mark.parametrize("fmt, marker", [("markdown", "# exemplar-tune preflight"),
                                          ("html", "<!DOCTYPE html>")])
def test_report_files(tmp_path, fmt, marker):
    target = tmp_path / f"report.{fmt}"
    out = preflight("--sysroot", str(SYSROOTS / "h100-x86"), "--format", fmt, "--output",
                    str(target))
    assert out.stdout.strip() == f"wrote {target}"
    text = target.read_text()
    assert text.startswith(marker)
    assert "h100-x86" in text
    if fmt == "html":
        assert "<script" not in text and "http" not in text.split("<body>")[1]


@pytest.mark.parametrize("profile_text, message", [
    ("name: x\ncpu:\n  governer: performance\n", "cpu: Additional properties are not allowed"),
    ("name: x\ngpu:\n  count: eight\n", "gpu.count: 'eight' is not of type 'integer'"),
    ("name: [unclosed\n", "not valid YAML: expected ',' or ']', but got '<stream end>' (line 2"),
    ("cpu: {}\n", "(top level): 'name' is a required property"),
])
def test_bad_profile_is_one_line_exit_2(tmp_path, profile_text, message):
    path = tmp_path / "site.yaml"
    path.write_text(profile_text)
    out = preflight("--sysroot", str(SYSROOTS / "h100-x86"), "--profile", str(path))
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


def test_unknown_profile_name_lists_the_shipped_ones():
    out = preflight("--sysroot", str(SYSROOTS / "h100-x86"), "--profile", "h200-bogus")
    assert out.returncode == 2
    assert ("shipped profiles: b200-x86, gb200-grace, gb300-grace, generic, h100-x86, "
            "h200-x86") in out.stderr


def test_unknown_layer_exit_2():
    out = preflight("--sysroot", str(SYSROOTS / "h100-x86"), "--layer", "disks")
    assert out.returncode == 2 and "unknown layer 'disks'" in out.stderr


def test_shipped_profiles_are_valid():
    from exemplar_tune.profile import load_profile, shipped_profiles
    assert len(shipped_profiles()) == len(list(PROFILES_DIR.glob("*.yaml")))
    for name in shipped_profiles():
        assert load_profile(name)["name"] == name  # its extends chain merged, then validated


def test_fleet_groups_hosts_by_failing_check_and_reports_unreachable(tmp_path):
    inventory = {"all": {"hosts": {}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    for name, tree in (("node1", "h100-x86"), ("node2", "h100-x86"), ("node3", "healthy-h100")):
        inventory["all"]["hosts"][name] = {"exemplar_sysroot": str(SYSROOTS / tree)}
    inventory["all"]["hosts"]["node4"] = {
        "ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1,
        "ansible_ssh_common_args": "-o ConnectTimeout=3"}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    out = preflight("-i", str(path), "--profile", "h100-x86", "--format", "json")
    assert out.returncode == 1
    doc = doc_of(out)
    assert sorted(doc["hosts"]) == ["node1", "node2", "node3"]
    assert list(doc["unreachable"]) == ["node4"]
    assert doc["hosts"]["node3"]["status"] == "pass"
    failing = {g["id"]: g for g in doc["groups"] if g["status"] == "fail"}
    assert failing, "the two h100-x86 nodes fail checks"
    for group in failing.values():
        assert group["hosts"] == ["node1", "node2"] and group["total"] == 3
    assert {h: v["class"] for h, v in doc["verdicts"].items()} == {
        "node1": "health", "node2": "health", "node3": "ok", "node4": "unknown"}
    assert doc["verdicts"]["node4"]["reason"].startswith("unreachable: ")
    assert doc["verdicts"]["node4"]["actions"][0] == {
        "kind": "investigate", "command": f"exemplar-tune facts -i {path} --limit node4",
        "detail": doc["verdicts"]["node4"]["reason"]}
    assert doc["target"] == {"inventory": str(path), "sysroot": None, "profile": "h100-x86"}
    table = preflight("-i", str(path), "--profile", "h100-x86").stdout
    lines = table.splitlines()
    summary = doc["summary"]
    assert lines[0] == (f"profile h100-x86; 4 host(s): 2 health, 1 unknown, 1 ok; checks: "
                        f"{summary['fail']} fail, {summary['warn']} warn, {summary['pass']} "
                        f"pass, {summary['n/a']} n/a, {summary['unknown']} unknown")
    some = next(iter(failing))
    assert f"{some}  2/3 hosts  node[1-2]  ({failing[some]['class']})" in table
    assert "  FAIL  cpu.deep-cstates-disabled  2/3 hosts  node[1-2]  (tuning)" in lines
    assert "  FAIL  gpu.remapped-rows  2/3 hosts  node[1-2]  (health)" in lines
    apply = (f"        next: apply: exemplar-tune apply --layer cpu -i {path} "
             "--limit 'node[1-2]' --profile h100-x86")
    assert apply in lines
    assert not any(line.lstrip().startswith("fix:") for line in lines)
    assert any(line.startswith("### node4: UNREACHABLE (unknown): ") for line in lines)
    assert f"  next: investigate: exemplar-tune facts -i {path} --limit node4" in lines

    details = preflight("-i", str(path), "--profile", "h100-x86", "--details").stdout
    lines = details.splitlines()
    assert "### node1: FAIL (health)" in lines and "### node3: PASS (ok)" in lines
    at = lines.index("### node1: FAIL (health)")
    assert lines[at + 1] == f"  why:  {doc['verdicts']['node1']['reason']}"
    assert lines[at + 2].startswith("  next: reset_gpu: ")
    assert lines[lines.index("### node3: PASS (ok)") + 1] == "  next: none"
    # a skipped check says whether it cannot apply here or could not be judged
    assert "  n/a   workload.reference: profile sets no workload.reference" in lines
    assert any(line.startswith("  UNKN  fabric.gpudirect-rdma: ") for line in lines)
    assert not any(line.startswith("  skip  ") for line in lines)


@pytest.mark.parametrize("host, exit_code, findings", [
    ("healthy-h100", 0, []),
    ("h100-x86", 1, [
        ("gpu.persistence-mode", "fail", "tuning"), ("gpu.remapped-rows", "fail", "health"),
        ("gpu.xids", "warn", "health"), ("cpu.deep-cstates-disabled", "fail", "tuning"),
        ("cpu.pm-qos-holder", "fail", "tuning"), ("cpu.housekeeping-overlap", "fail", "tuning"),
        ("cpu.irqbalance-banned", "warn", "tuning"), ("cpu.numa-balancing", "warn", "tuning"),
        ("runtime.topo-in-container", "fail", "tuning")]),
    ("gb200-grace-vm", 1, [
        ("vm.cmdqv", "fail", "tuning"), ("cpu.housekeeping-overlap", "fail", "tuning"),
        ("cpu.irqbalance-banned", "warn", "tuning"), ("cpu.numa-balancing", "warn", "tuning"),
        ("runtime.topo-file", "fail", "tuning")]),
])
def test_fixture_hosts_give_exactly_their_findings_in_layer_order(host, exit_code, findings):
    out = preflight("--sysroot", str(SYSROOTS / host), "--format", "json")
    assert out.returncode == exit_code
    results = doc_of(out)["hosts"][host]["results"]
    have = [(r["id"], r["status"], r["class"]) for r in results
            if r["status"] in ("fail", "warn")]
    assert have == findings
    for r in results:
        if r["status"] in ("fail", "warn"):
            assert r["evidence"] and all(e.startswith(("/", "nvidia-smi", "dmesg", "environment"))
                                         for e in r["evidence"]), r
