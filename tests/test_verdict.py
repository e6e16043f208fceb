"""The verdict model (``exemplar_tune.verdict``): classes, host precedence, actions with
commands that run as printed, an unreadable host never judged healthy."""

from __future__ import annotations

import shlex
import socket

import pytest

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import ACTION_KINDS
from exemplar_tune.facts import facts_from_sysroot
from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from exemplar_tune.verdict import Target, counts, host_verdict, result_actions, unreadable
from tests.conftest import SYSROOTS
from tests.test_cli import cli


def _result(check: str, status: str, klass: str, severity: str = "high", *,
            knob: str | None = None, pending: bool = False) -> dict:
    found = {"id": check, "layer": check.split(".")[0], "status": status, "class": klass,
             "severity": severity, "detail": f"{check} detail", "knob": knob,
             "fix": f"{check} fix", "pending_reboot": pending}
    kinds = ("apply",) if knob else ("drain", "investigate")
    found["actions"] = result_actions(found, kinds, "gpu07", Target("hosts.yml"), pending)
    return found


PASSING = _result("cpu.numa-balancing", "pass", "tuning", knob="cpu.numa_balancing")
NOT_HERE = _result("vm.cmdqv", "skip", "not_applicable")
UNJUDGED = _result("gpu.nvlink-links", "skip", "unknown")
UNTUNED = _result("cpu.deep-cstates-disabled", "fail", "tuning", knob="cpu.deep_cstates")
BROKEN = _result("gpu.xids", "fail", "health")
WAITING = _result("vm.cmdqv-params", "fail", "tuning", "medium", knob="vm.cmdqv_params",
                  pending=True)


@pytest.mark.parametrize(("results", "klass", "first"), [
    ([PASSING, NOT_HERE], "ok", "none"),
    ([NOT_HERE], "not_applicable", "none"),
    ([PASSING, UNTUNED], "tuning", "apply"),
    ([UNTUNED, UNJUDGED], "unknown", "investigate"),
    ([UNTUNED, UNJUDGED, BROKEN], "health", "drain"),
    ([UNTUNED, WAITING], "tuning", "reboot"),
    ([PASSING, WAITING], "tuning", "reboot"),
    ([BROKEN, WAITING], "health", "drain"),
])
def test_a_host_takes_the_class_and_actions_of_its_worst_result(results, klass, first) -> None:
    verdict = host_verdict(results, Target("hosts.yml"), "gpu07")
    assert verdict["class"] == klass and verdict["actions"][0]["kind"] == first
    assert verdict["pending_reboot"] is any(r["pending_reboot"] for r in results)


def test_an_unreadable_host_is_unknown_whatever_its_results() -> None:
    verdict = host_verdict([PASSING], Target(), "localhost", "not a readable host: ...")
    assert verdict["class"] == "unknown" and verdict["actions"][0]["kind"] == "investigate"
    assert verdict["actions"][0]["command"] == "exemplar-tune facts"


def test_an_empty_tree_is_unreadable_and_a_real_tree_is_not(tmp_path) -> None:
    assert "/proc/cpuinfo" in unreadable(facts_from_sysroot(str(tmp_path), None))
    assert unreadable(facts_from_sysroot(str(SYSROOTS / "h100-x86"), None)) == ""


def test_the_apply_command_names_the_inventory_limit_and_profile_quoted() -> None:
    target = Target("my hosts.yml", profile="site.yaml")
    (step,) = result_actions(UNTUNED, ("apply",), "gpu07", target, False)
    assert shlex.split(step["command"]) == ["exemplar-tune", "apply", "--layer", "cpu", "-i",
                                            "my hosts.yml", "--limit", "gpu07", "--profile",
                                            "site.yaml"]
    local = result_actions(UNTUNED, ("apply",), "localhost", Target(profile="auto"), False)
    assert local[0]["command"] == "exemplar-tune apply --layer cpu"


def test_a_captured_archive_gets_no_apply_command_and_facts_no_profile(tmp_path) -> None:
    archive = tmp_path / "node07.tar.gz"
    archive.write_bytes(b"")
    target = Target(sysroot=str(archive), profile="h100-x86")
    (step,) = result_actions(UNTUNED, ("apply",), "node07", target, False)
    assert "command" not in step and step["kind"] == "apply"
    (look,) = result_actions(UNJUDGED, (), "node07", target, False)
    assert look["command"] == f"exemplar-tune facts --layer gpu --sysroot {archive}"


def test_every_check_declares_actions_from_the_vocabulary() -> None:
    for check in CHECKS:
        assert check.actions and set(check.actions) <= set(ACTION_KINDS), check.id
        assert ("apply" in check.actions) <= bool(check.knob), check.id


def test_counts_name_every_outcome() -> None:
    assert counts([PASSING, NOT_HERE, UNJUDGED, UNTUNED, BROKEN]) == {
        "fail": 2, "warn": 0, "pass": 1, "n/a": 1, "unknown": 1}


def test_the_machine_name_selects_the_local_host() -> None:
    """A local run's reports name the machine; --limit with that name reaches it."""
    assert AnsibleRun(local_inventory(), limit=socket.gethostname()).limit == "localhost"
    assert AnsibleRun("hosts.yml", limit=socket.gethostname()).limit == socket.gethostname()
    out = cli("facts", "--layer", "vm", "--limit", socket.gethostname(), "--quiet")
    assert out.returncode == 0 and "no host matched" not in out.stderr, out.stderr


def test_the_drift_alerts_remedy_runs_on_the_host_it_names() -> None:
    """ExemplarTuneDrift prints 'exemplar-tune audit --details --profile P --limit HOST'; on
    a local run HOST is the machine's name (the textfile's host label)."""
    out = cli("audit", "--details", "--profile", "auto", "--limit", socket.gethostname(),
              "--layer", "runtime", "--quiet")
    assert out.returncode in (0, 1) and "no host matched" not in out.stderr, out.stderr
    assert "localhost" in out.stdout


def test_a_fleet_group_carries_the_actions_of_its_own_hosts() -> None:
    """The group of h100-x86 hosts gets their actions, not a passing host's."""
    from exemplar_tune.preflight import preflight_hosts
    from exemplar_tune.profile import GIVEN, load_profile
    facts = {name: facts_from_sysroot(str(SYSROOTS / tree), None)
             for name, tree in (("node1", "h100-x86"), ("node2", "h100-x86"),
                                ("node3", "healthy-h100"))}
    profile = load_profile("h100-x86")
    doc = preflight_hosts(facts, dict.fromkeys(facts, (profile, GIVEN)), None, False, None,
                          Target("hosts.yml"))
    for group in doc["groups"]:
        own = next(r for r in doc["hosts"][group["hosts"][0]]["results"]
                   if r["id"] == group["id"])
        assert [a["kind"] for a in group["actions"]] == [a["kind"] for a in own["actions"]]
        for step in (a for a in group["actions"] if "command" in a):
            argv = shlex.split(step["command"])
            assert argv[argv.index("--limit") + 1] == group["hostlist"], step


@pytest.mark.parametrize("name", ["preflight", "audit", "slow-nodes", "benchmark"])
def test_the_schema_command_prints_each_shipped_schema(name: str) -> None:
    import json

    import jsonschema

    from exemplar_tune.json_schemas import schema
    out = cli("schema", name)
    assert out.returncode == 0 and json.loads(out.stdout) == schema(name)
    jsonschema.Draft202012Validator.check_schema(schema(name))
