"""The profile's ``gpu.xid_policy``: defaults, per-Xid lists, action statuses, repeats, the
incident window, since-boot counting, and a malformed section refused with one line (exit 2).

Hosts are the healthy-h100 fixture with its kernel-log events replaced; the lines use the
driver's Xid format (kernel_rc.c ``XID_PRINT_WITH_ATTR``) or a real corpus capture.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.xid import parse_xid_events
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks.base import FAIL, PASS, WARN, Outcome
from exemplar_tune.checks.gpu import check_xids
from exemplar_tune.profile import ProfileError, load_profile, merge
from exemplar_tune.xid_policy import NOTE, XidPolicy, policy_from_profile
from tests.test_cli import cli

from .conftest import SYSROOTS
from .corpus import REALWORLD

TINYGRAD = REALWORLD / "kernel-log" / "tinygrad-tinygrad-6947-xid31-twice-same-gpu.log"


@functools.cache
def _healthy() -> dict[str, Any]:
    return gather_facts(Sysroot(str(SYSROOTS / "healthy-h100")), ["gpu"])


def line(t: float, number: int, bdf: str = "c2:00") -> str:
    return f"[{t:12.6f}] NVRM: Xid (PCI:0000:{bdf}): {number}, pid=9, name=python, detail\n"


def judge(text: str, policy: dict[str, Any] | None = None) -> Outcome:
    facts = copy.deepcopy(_healthy())
    facts["gpu"]["xids"] = parse_xid_events(text)
    profile = load_profile("h100-x86")
    if policy is not None:
        profile = merge(profile, {"gpu": {"xid_policy": policy}})
    return check_xids(facts, profile)


def rows(outcome: Outcome) -> list[tuple]:
    return [(r["xid"], r["incidents"], r["status"]) for r in outcome.observed]


def test_defaults_apply_when_the_profile_is_silent():
    assert policy_from_profile(load_profile("h100-x86")) == XidPolicy()
    assert policy_from_profile({"gpu": {"xid_policy": {"repeat_count": 5}}}).repeat_count == 5
    partial = policy_from_profile({"gpu": {"xid_policy": {"action_status": {"IGNORE": "ignore"}}}})
    assert partial.action_status["IGNORE"] == "ignore"
    assert partial.action_status["RESET_GPU"] == "fail"  # the rest keeps its default


def test_no_xid_passes():
    have = judge("[    1.000000] Linux version 6.8.0\n")
    assert (have.status, have.observed, have.detail) == (PASS, [], "no Xid incident since the "
                                                                    "last boot")


# -- repeats: how many incidents in what window ----------------------------------------------


def test_application_incidents_are_noted_and_warn_when_they_recur():
    two = line(100, 13) + line(1000, 13)  # 900 s apart: two incidents
    noted = judge(two)
    assert (noted.status, rows(noted)) == (PASS, [(13, 2, NOTE)])
    assert noted.detail.startswith("no Xid incident that needs action on the node since the "
                                   "last boot; the application's own faults, not the GPU's")
    assert "00000000:C2:00.0 Xid 13 (Graphics Engine Exception): 2 incidents" in noted.detail
    three = two + line(2000, 13)
    have = judge(three)
    assert (have.status, rows(have)) == (WARN, [(13, 3, WARN)])  # never a failure by default
    assert "repeated" in have.detail and "RESTART_APP on 00000000:C2:00.0" in have.fix
    assert "dcgmi diag -r 3 on it to tell the GPU from the job" in have.fix
    assert judge(three, {"fail_xids": [13]}).status == FAIL
    assert judge(three, {"action_status": {"RESTART_APP": "warn"}}).status == FAIL  # as before


def test_repeat_count_and_window_are_the_profile_s():
    two = line(100, 13) + line(1000, 13)
    assert rows(judge(two, {"repeat_count": 2})) == [(13, 2, WARN)]
    assert rows(judge(two, {"repeat_count": 2, "repeat_window_s": 600})) == [(13, 2, NOTE)]
    spread = line(100, 13) + line(50000, 13) + line(100000, 13)
    assert rows(judge(spread)) == [(13, 3, NOTE)]  # not 3 within 24 h
    assert rows(judge(spread, {"repeat_window_s": 100000})) == [(13, 3, WARN)]


def test_repeats_count_one_xid_on_one_gpu():
    mixed = line(100, 13) + line(1000, 31) + line(2000, 13, "a4:00")
    assert {r[2] for r in rows(judge(mixed))} == {NOTE}


# -- overrides -------------------------------------------------------------------------------


def test_xid_lists_override_the_action():
    text = line(100, 63) + line(200, 79, "a4:00") + line(300, 31, "e0:00")
    assert judge(text).status == FAIL
    assert rows(judge(text, {"fail_xids": [63]}))[:2] == [(79, 1, FAIL), (63, 1, FAIL)]
    warned = judge(text, {"warn_xids": [79]})
    assert (warned.status, {r[2] for r in rows(warned)}) == (WARN, {WARN, NOTE})
    quiet = judge(text, {"ignore_xids": [31, 63], "warn_xids": [79]})
    assert rows(quiet) == [(79, 1, WARN), (63, 1, "ignore"), (31, 1, "ignore")]
    assert "(2 ignored by the policy)" in quiet.detail
    assert judge(text, {"ignore_xids": [31, 63, 79]}).status == PASS


def test_action_status_overrides_the_default():
    text = line(100, 63)  # catalog: IGNORE -> warn by default
    assert judge(text).status == WARN
    assert judge(text, {"action_status": {"IGNORE": "ignore"}}).status == PASS
    assert judge(line(100, 119), {"action_status": {"RESET_GPU": "warn"}}).status == WARN


def test_repeats_escalate_warnings_but_never_an_ignored_xid():
    three = line(100, 13) + line(1000, 13) + line(2000, 13)
    assert judge(three, {"ignore_xids": [13]}).status == PASS
    assert rows(judge(three, {"warn_xids": [13]})) == [(13, 3, FAIL)]
    assert rows(judge(three, {"warn_xids": [13], "repeat_count": 4})) == [(13, 3, WARN)]


# -- the incident window ---------------------------------------------------------------------


def test_incident_window_is_the_profile_s():
    text = TINYGRAD.read_text()  # two Xid 31 on one GPU, 344 s apart
    assert rows(judge(text)) == [(31, 2, NOTE)]
    merged = judge(text, {"incident_window_s": 600})
    assert [(r["incidents"], r["lines"]) for r in merged.observed] == [(1, 2)]
    split = judge(line(100, 13) + line(130, 13), {"incident_window_s": 10})
    assert [(r["incidents"], r["lines"]) for r in split.observed] == [(2, 2)]


# -- since the last boot ---------------------------------------------------------------------


BOOTS = line(5000, 79) + "[    0.000000] Linux version 6.8.0\n" + line(12, 13)


def test_only_incidents_since_the_last_boot_count_by_default():
    have = judge(BOOTS)
    assert (have.status, rows(have)) == (PASS, [(13, 1, NOTE)])
    assert "1 incident before the last boot not counted" in have.detail
    earlier = judge(BOOTS, {"include_earlier_boots": True})
    assert (earlier.status, rows(earlier)) == (FAIL, [(79, 1, FAIL), (13, 1, NOTE)])


def test_journalctl_boots_count_the_same_way():
    text = ("May 02 21:43:54 n1 kernel: NVRM: Xid (PCI:0000:c2:00): 79, GPU has fallen off the "
            "bus.\n-- Boot 0a1b2c3d4e5f --\n"
            "May 02 22:01:00 n1 kernel: NVRM: Xid (PCI:0000:c2:00): 31, pid=1, name=x, MMU\n")
    assert rows(judge(text)) == [(31, 1, NOTE)]
    assert rows(judge(text, {"include_earlier_boots": True})) == [(79, 1, FAIL), (31, 1, NOTE)]


# -- malformed sections ----------------------------------------------------------------------


@pytest.mark.parametrize(("section", "message"), [
    ({"repeat_count": 0}, "gpu.xid_policy.repeat_count: 0 is less than the minimum of 1"),
    ({"incident_window_s": -5}, "gpu.xid_policy.incident_window_s: -5"),
    ({"action_status": {"REBOOT": "maybe"}}, "gpu.xid_policy.action_status.REBOOT: 'maybe'"),
    ({"action_status": {"REBOOTS": "fail"}}, "gpu.xid_policy.action_status: Additional"),
    ({"fail_xids": [13, 13]}, "gpu.xid_policy.fail_xids: [13, 13] has non-unique elements"),
    ({"warn_xids": ["13"]}, "gpu.xid_policy.warn_xids.0: '13' is not of type 'integer'"),
    ({"fail_xids": [79], "warn_xids": [79]},
     "gpu.xid_policy: Xid 79 is in both fail_xids and warn_xids"),
    ({"window": 300}, "gpu.xid_policy: Additional properties are not allowed ('window'"),
])
def test_malformed_section_is_refused(tmp_path: Path, section: dict, message: str):
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump({"extends": "h100-x86", "gpu": {"xid_policy": section}}))
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_malformed_section_exits_2_with_one_line(tmp_path: Path):
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump({"extends": "h100-x86",
                                    "gpu": {"xid_policy": {"ignore_xids": [13],
                                                           "warn_xids": [13]}}}))
    out = cli("preflight", "--sysroot", str(SYSROOTS / "healthy-h100"), "--profile", str(path))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"exemplar-tune: error: profile {path}: gpu.xid_policy: Xid 13 is in both "
        "ignore_xids and warn_xids"]
    assert "Traceback" not in out.stderr and out.stdout == ""
