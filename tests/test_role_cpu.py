"""The cpu role (through tests/playbooks/role.yml, as a user's playbook includes it), the
apply playbook and restore.yml, through real ansible-runner runs on a tmp_path copy of the
h100-x86 fixture host."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.tuned_switch import (
    parse_tuned_adm_active,
)
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from tests.conftest import REPO
from tests.helpers import copy_sysroot, tree_hash

PROFILE = {"name": "h100-x86-cpu",
           "cpu": {"deep_cstates": True, "governor": "performance", "turbo": True,
                   "housekeeping_confined": True, "housekeeping_cpus": "0,4",
                   "numa_balancing": 0}}
JOURNAL = "var/lib/exemplar-tune"
CPUS = range(8)
CHILD = "accelerator-performance-no-force-latency"
ROLE = REPO / "tests" / "playbooks" / "role.yml"
APPLY = REPO / "playbooks" / "apply.yml"
RESTORE = REPO / "playbooks" / "restore.yml"


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A copy of h100-x86 with CPU 3's policy on powersave, so the governor knob has work."""
    root = copy_sysroot("h100-x86", tmp_path)
    (root / "sys/devices/system/cpu/cpufreq/policy3/scaling_governor").write_text("powersave\n")
    return root


def _play(playbook: Path, root: Path, check: bool = False, **extravars):
    # the fixture's Slurm job sits under system.slice: confining it is allowed explicitly here
    extravars = {"layer": "cpu", "exemplar_profile": PROFILE, "exemplar_sysroot": str(root),
                 "cpu_housekeeping_allow_job_units": True, **extravars}
    runner = AnsibleRun(local_inventory(), timeout=300, check=check)
    return runner.playbook(playbook, extravars)


def _apply(root: Path, check: bool = False, **extravars):
    if not check:
        extravars.setdefault("exemplar_run_id", "r1")
    return _play(ROLE, root, check, **extravars)


def _changed(outcome) -> list[str]:
    return [t["task"] for t in outcome.hosts["localhost"].tasks if t["result"].get("changed")]


def _cpu(root: Path) -> dict:
    return gather_facts(Sysroot(str(root)), ["cpu"])["cpu"]


def _files(root: Path) -> dict[str, tuple]:
    """Every file and symlink (content or target, mode) outside the journal directory."""
    found = {}
    for top, _dirs, names in os.walk(root):
        for name in names:
            path = Path(top, name)
            rel = str(path.relative_to(root))
            if rel.startswith(JOURNAL):
                continue
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            else:
                found[rel] = ("file", path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
    return found


def _dirs(root: Path) -> set[str]:
    """Every directory outside var/ (which only the journal creates in a fixture tree)."""
    return {str(Path(top, d).relative_to(root)) for top, dirs, _ in os.walk(root) for d in dirs
            if not str(Path(top, d).relative_to(root)).startswith(("var", JOURNAL))}


def test_apply_fixes_every_knob(host):
    outcome = _apply(host)
    assert outcome.status == "successful", outcome.hosts["localhost"].message
    cpu = _cpu(host)
    c6 = next(s for s in cpu["cpuidle"]["states"] if s["name"] == "C6")
    assert c6["disabled_cpus"] == [] and cpu["cpuidle"]["deepest_state_disabled_anywhere"] is False
    assert cpu["cpufreq"]["governors"] == {"performance": list(CPUS)}
    assert cpu["cpufreq"]["turbo"]["enabled"] is True
    assert {u: h["cpus"] for u, h in cpu["housekeeping"].items()} == dict.fromkeys(
        ("system.slice", "user.slice", "init.scope"), "0,4")
    assert {u: a and a["cpus"] for u, a in cpu["systemd_allowed_cpus"].items()} == dict.fromkeys(
        ("system.slice", "user.slice", "init.scope"), "0,4")
    assert cpu["irqbalance"]["banned"] == "1-3,5-7"
    assert cpu["numa_balancing"] == 0
    assert (host / "etc/sysctl.d/90-exemplar-tune.conf").read_text() == \
        "kernel.numa_balancing = 0\n"
    assert cpu["tuned"]["active_profiles"] == [CHILD]
    assert cpu["tuned"]["force_latency_us"] is None
    rule = (host / "etc/udev/rules.d/90-exemplar-cstates.rules").read_text()
    assert 'ACTION=="add|online", SUBSYSTEM=="cpu"' in rule
    assert 'ATTR{cpuidle/state3/name}=="C6", ATTR{cpuidle/state3/disable}="0"' in rule
    assert "RUN" not in rule and "/bin/sh" not in rule  # udev writes it: no program, no shell



def _layer_result(outcome) -> dict:
    return next(t["result"] for t in outcome.hosts["localhost"].tasks
                if "knobs" in t["result"])


def test_the_apply_playbook_changes_what_the_role_changes(host, tmp_path):
    """``exemplar.tune.apply`` calls the layer module itself, with the role's variables: the
    same knobs change, the same bytes, modes and links land, the same reboot flag."""
    other = tmp_path / "other"
    shutil.copytree(host, other, symlinks=True)
    by_role, by_playbook = _apply(host), _play(APPLY, other, exemplar_run_id="r1")
    assert by_role.status == by_playbook.status == "successful"
    role, playbook = _layer_result(by_role), _layer_result(by_playbook)
    assert [(k["knob"], k["changed"]) for k in playbook["knobs"]] == \
        [(k["knob"], k["changed"]) for k in role["knobs"]]
    assert sum(k["changed"] for k in playbook["knobs"]) >= 5
    assert playbook["reboot_required"] == role["reboot_required"]
    assert _files(other) == _files(host) and _dirs(other) == _dirs(host)


def test_the_apply_playbook_refuses_a_switch_of_the_wrong_type_in_one_line(host):
    before = tree_hash(host)
    outcome = _play(APPLY, host, exemplar_run_id="r1", cpu_governor="maybe")
    result = outcome.hosts["localhost"]
    assert result.status == "failed"
    assert result.tasks[-1]["result"]["msg"] == "cpu_governor: 'maybe' is not a boolean"
    assert tree_hash(host) == before

def test_confining_a_slice_that_holds_slurm_jobs_is_refused(host):
    before = tree_hash(host)
    outcome = _apply(host, cpu_housekeeping_allow_job_units=False, cpu_deep_cstates=False,
                     cpu_tuned_profile=False, cpu_governor=False, cpu_turbo=False,
                     cpu_numa_balancing=False, cpu_cstate_cmdline=False)
    result = outcome.hosts["localhost"]
    assert result.status == "failed"
    failed = [t["result"] for t in result.tasks if t["status"] == "failed"][0]
    assert failed["msg"].startswith("cpu.housekeeping: system.slice: hold Slurm job cgroups")
    assert tree_hash(host) == before


def test_second_apply_changes_nothing(host):
    assert _apply(host).status == "successful"
    again = _apply(host)
    assert again.status == "successful"
    assert _changed(again) == []


def test_check_mode_writes_nothing(host):
    before = tree_hash(host)
    outcome = _apply(host, check=True)
    assert outcome.status == "successful", outcome.hosts["localhost"].message
    assert _changed(outcome)  # the drift is reported
    assert tree_hash(host) == before
    assert not (host / JOURNAL).exists()


def test_restore_puts_the_tree_back_byte_for_byte(host):
    before, dirs = _files(host), _dirs(host)
    assert _apply(host).status == "successful"
    assert _files(host) != before
    restored = _play(RESTORE, host, exemplar_run_id="r1")
    assert restored.status == "successful", restored.hosts["localhost"].message
    assert _files(host) == before
    assert _dirs(host) == dirs  # no directory the run created is left behind
    again = _play(RESTORE, host, exemplar_run_id="r1")
    assert _changed(again) == []


@contextlib.contextmanager
def _unwritable(path: Path):
    """Make ``path`` refuse writes even to root (immutable attribute, e2fsprogs' chattr).

    A machine where that is impossible fails the test loudly rather than passing untested
    (``.ci/packages.txt`` installs e2fsprogs).
    """
    path.chmod(0o444)
    immutable = False
    try:
        if os.geteuid() == 0 and shutil.which("chattr"):
            immutable = subprocess.run(["chattr", "+i", str(path)], check=False,
                                       capture_output=True).returncode == 0
        try:
            with open(path, "a"):
                pytest.fail("cannot make a file unwritable here (root without chattr +i)")
        except PermissionError:
            pass
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=False)
        path.chmod(0o644)


def test_failed_cstate_write_puts_back_the_cpus_already_changed(host):
    stuck = host / "sys/devices/system/cpu/cpu5/cpuidle/state3/disable"
    before = _files(host)
    with _unwritable(stuck):
        outcome = _apply(host)
        result = outcome.hosts["localhost"]
        assert result.status == "failed"
        assert result.tasks[-1]["task"].startswith("Apply the cpu layer's knobs")
        assert result.message.startswith(
            "cpu.deep_cstates: /sys/devices/system/cpu/cpu5/cpuidle/state3/disable: ")
        assert "everything this step changed was restored" in result.message
    assert _files(host) == before


def test_a_tuned_switch_onto_a_directory_is_refused_before_the_layer_changes(host):
    """The second file of the switch is a directory: refused while the layer is planned, so
    nothing is written (the idle states and the udev rule planned before it included).
    A failure half-way is put back: tests/test_engine.py."""
    mode = host / "etc/tuned/profile_mode"
    mode.unlink()
    mode.mkdir()
    before, dirs = _files(host), _dirs(host)
    outcome = _apply(host)
    result = outcome.hosts["localhost"]
    assert result.status == "failed"
    assert result.message == ("cpu.tuned_profile: /etc/tuned/profile_mode: is a directory, not a "
                              "regular file: exemplar-tune writes only regular files; nothing "
                              "was changed")
    assert (host / "etc/tuned/active_profile").read_text() == "accelerator-performance\n"
    assert _files(host) == before and _dirs(host) == dirs


def test_knob_switch_of_the_wrong_type_fails_in_one_line(host):
    before = tree_hash(host)
    outcome = _apply(host, cpu_governor="maybe")
    result = outcome.hosts["localhost"]
    assert result.status == "failed"
    assert result.tasks[-1]["task"].startswith("Validating arguments against arg spec 'main'")
    errors = result.tasks[-1]["result"]["argument_errors"]
    assert len(errors) == 1
    assert errors[0].startswith("argument 'cpu_governor' is of type str and we were unable to "
                                "convert to bool")
    assert tree_hash(host) == before


def test_missing_run_id_fails_in_one_line(host):
    before = tree_hash(host)
    outcome = _play(ROLE, host)
    result = outcome.hosts["localhost"]
    assert result.status == "failed"
    assert result.message.startswith("run_id is required to change anything")
    assert tree_hash(host) == before


def test_switched_off_knobs_and_empty_profile_change_nothing(host):
    before = tree_hash(host)
    off = {f"cpu_{k}": False for k in ("deep_cstates", "cstate_cmdline", "tuned_profile",
                                       "governor", "turbo", "housekeeping", "numa_balancing")}
    assert _changed(_apply(host, **off)) == []
    assert _changed(_apply(host, exemplar_profile={"name": "empty"})) == []
    assert tree_hash(host) == before


@pytest.mark.parametrize(("text", "want"), [
    ("Current active profile: accelerator-performance\n", "accelerator-performance"),
    ("Current active profile: a  b\nProfile mode: manual\n", "a b"),
    ("No current active profile.\n", None),
])
def test_parse_tuned_adm_active(text, want):
    assert parse_tuned_adm_active(text) == want


def test_parse_tuned_adm_active_garbage_is_a_parse_error():
    with pytest.raises(ParseError):
        parse_tuned_adm_active("tuned is not running\n")
