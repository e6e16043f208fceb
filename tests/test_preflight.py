"""exemplar-tune preflight end to end: fixture hosts, fleet inventories, formats, bad input."""

from __future__ import annotations

import json
import sys

import jsonschema
import pytest
import yaml

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
    layers = [r["layer"] for r in doc["hosts"]["h100-x86"]["results"]]
    assert layers == sorted(layers, key=ORDER.index)
    assert doc["profile"] == "h100-x86"


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
    table = preflight("-i", str(path), "--profile", "h100-x86").stdout
    some = next(iter(failing))
    assert f"{some}  2/3 hosts  node[1-2]" in table
    assert "### node4: UNREACHABLE" in table


@pytest.mark.parametrize("host, exit_code, findings", [
    ("healthy-h100", 0, []),
    ("h100-x86", 1, [
        ("gpu.persistence-mode", "fail"), ("gpu.remapped-rows", "fail"), ("gpu.xids", "warn"),
        ("cpu.deep-cstates-disabled", "fail"), ("cpu.pm-qos-holder", "fail"),
        ("cpu.housekeeping-overlap", "fail"), ("cpu.irqbalance-banned", "warn"),
        ("cpu.numa-balancing", "warn"), ("runtime.topo-in-container", "fail")]),
    ("gb200-grace-vm", 1, [
        ("vm.cmdqv", "fail"), ("cpu.housekeeping-overlap", "fail"),
        ("cpu.irqbalance-banned", "warn"), ("cpu.numa-balancing", "warn"),
        ("runtime.topo-file", "fail")]),
])
def test_fixture_hosts_give_exactly_their_findings_in_layer_order(host, exit_code, findings):
    out = preflight("--sysroot", str(SYSROOTS / host), "--format", "json")
    assert out.returncode == exit_code
    results = doc_of(out)["hosts"][host]["results"]
    have = [(r["id"], r["status"]) for r in results if r["status"] in ("fail", "warn")]
    assert have == findings
    for r in results:
        if r["status"] in ("fail", "warn"):
            assert r["evidence"] and all(e.startswith(("/", "nvidia-smi", "dmesg", "environment"))
                                         for e in r["evidence"]), r
