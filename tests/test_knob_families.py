"""Knob families (``knobs/families.py``) on fixture sysroot trees: a family knob is one
declaration that plans, journals, reads back, restores and is checked.

Every apply here goes through the real engine and journal; restore is compared byte for byte
with the tree before (content, mode, owner, group), check mode is proven not to write (content,
mode, owner and mtime of every path), and a second apply changes nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import (
    CheckSpec,
    KnobInputError,
    Setting,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
    Regenerate,
    apply_changes,
    restore_entries,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.engine import (
    LayerFailed,
    run_layer,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.envfile import edit_text
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.families import (
    dropin,
    file_key,
    host_value,
    kernel_arg,
    profile_value,
    sysctl,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.journal import Journal
from ansible_collections.exemplar.tune.plugins.module_utils.layers import get_knob, get_layer
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks.base import PASS, SKIP, WARN
from exemplar_tune.checks.run import run_checks
from tests.helpers import copy_sysroot

SYSCTL_D = "etc/sysctl.d/90-exemplar-tune.conf"
BOTH = {"numa_balancing": 0, "sched_autogroup": 0}
INT01 = {"type": "integer", "minimum": 0, "maximum": 1, "description": "test value"}


def state_of(root: Path) -> dict[str, tuple]:
    """Every path's content (or link target), mode, owner, group and mtime."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath, name)
            info = path.lstat()
            body = os.readlink(path) if path.is_symlink() else (
                path.read_bytes() if path.is_file() else b"")
            found[str(path.relative_to(root))] = (body, info.st_mode, info.st_uid, info.st_gid,
                                                  info.st_mtime_ns)
    return found


def without_mtimes(state: dict[str, tuple]) -> dict[str, tuple]:
    return {path: entry[:4] for path, entry in state.items()}


def assert_restored(before: dict[str, tuple], root: Path) -> None:
    """Every path as it was (content, mode, owner, group); nothing new but the journal."""
    after = without_mtimes(state_of(root))
    journal = "var/lib/exemplar-tune/journal"
    added = set(after) - set(before)
    assert all(journal == p or journal.startswith(p + "/") or p.startswith(journal + "/")
               for p in added), sorted(added)
    assert {p: after.get(p) for p in before} == before


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """h100-x86 with autogroup on, and an operator's sysctl.d file the knobs must share."""
    root = copy_sysroot("h100-x86", tmp_path)
    (root / "proc/sys/kernel/sched_autogroup_enabled").write_text("1\n")
    conf = root / SYSCTL_D
    conf.parent.mkdir(parents=True)
    conf.write_text("# site settings\nvm.swappiness = 10\nkernel/numa_balancing=1\n")
    conf.chmod(0o640)
    os.chown(conf, 1234, 5678)
    return root


def _apply(root: Path, section: dict, check_mode: bool = False, run_id: str = "r1") -> dict:
    sysroot = Sysroot(str(root))
    return run_layer(sysroot, "cpu", {"cpu": section}, {}, Journal(sysroot, run_id),
                     check_mode, only=list(section))


def _restore(root: Path, run_id: str = "r1") -> dict:
    sysroot = Sysroot(str(root))
    journal = Journal(sysroot, run_id)
    return restore_entries(sysroot, journal, journal.load()["entries"], check_mode=False)


# -- values ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "want"), [("0", 0), ("3", 3), ("4", 4), ("-1", -1)])
def test_host_values_are_typed_and_never_refused_for_their_range(text, want):
    assert host_value(text, {"type": "integer", "minimum": 0, "maximum": 3}, "/p") == want


@pytest.mark.parametrize("text", ["", "on", "1 2", "0x1"])
def test_a_host_value_of_the_wrong_type_is_a_parse_error_naming_the_file(text):
    with pytest.raises(ParseError, match="/proc/sys/x"):
        host_value(text, {"type": "integer"}, "/proc/sys/x")


@pytest.mark.parametrize(("value", "schema", "message"), [
    (True, INT01, "is not a whole number"),
    (2, INT01, "2 is outside 0..1"),
    ("1; reboot", INT01, "is not a whole number"),
    ("a b", {"type": "string", "pattern": "^[a-z]+$"}, "is not allowed"),
    ("x\ny", {"type": "string", "pattern": "^.*$"}, "newline or control character"),
    ("slow", {"type": "string", "pattern": "^[a-z]+$", "enum": ["fast"]}, "is not one of"),
])
def test_profile_values_are_checked_against_the_key_schema(value, schema, message):
    with pytest.raises(KnobInputError, match=message):
        profile_value(value, schema, "cpu.x")


def test_a_family_value_without_a_pattern_or_description_is_refused_at_declaration():
    with pytest.raises(ValueError, match="needs a type"):
        sysctl("cpu", "x", "kernel.x", "x", {"type": "string", "description": "d"})
    with pytest.raises(ValueError, match="needs a type"):
        sysctl("cpu", "x", "kernel.x", "x", {"type": "integer"})


# -- sysctl: two knobs, one file -------------------------------------------------------------

def test_two_sysctl_knobs_share_the_file_line_by_line_and_converge(host):
    conf = host / SYSCTL_D
    result = _apply(host, BOTH)
    assert {k["knob"] for k in result["knobs"] if k["changed"]} == set(BOTH)
    assert conf.read_text() == ("# site settings\nvm.swappiness = 10\nkernel.numa_balancing = 0\n"
                                "kernel.sched_autogroup_enabled = 0\n")
    assert (conf.stat().st_mode & 0o777, conf.stat().st_uid, conf.stat().st_gid) == \
        (0o640, 1234, 5678)
    assert (host / "proc/sys/kernel/numa_balancing").read_text().strip() == "0"
    assert (host / "proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "0"
    again = _apply(host, BOTH, check_mode=True)
    assert [k["knob"] for k in again["knobs"] if k["changed"]] == []  # no false drift
    assert not _apply(host, BOTH, run_id="r2")["changed"]


def test_restore_puts_the_shared_file_back_byte_for_byte_with_owner_and_mode(host):
    before = without_mtimes(state_of(host))
    _apply(host, BOTH)
    assert _restore(host)["failed"] == []
    assert_restored(before, host)


def test_check_mode_writes_nothing(host):
    before = state_of(host)
    result = _apply(host, BOTH, check_mode=True)
    assert result["changed"] and state_of(host) == before


def test_the_knob_reads_back_as_a_fact_and_its_declared_check_judges_it(host):
    def verdict() -> tuple[str, str]:
        facts = {"cpu": get_layer("cpu").gather(Sysroot(str(host)))}
        found = {r.id: r for r in run_checks(facts, {"cpu": BOTH}, ["cpu"])}
        return found["cpu.sched-autogroup"].status, found["cpu.sched-autogroup"].detail

    assert verdict() == (WARN, "kernel.sched_autogroup_enabled=1, profile wants 0")
    _apply(host, BOTH)
    assert verdict() == (PASS, "kernel.sched_autogroup_enabled=0")
    facts = get_layer("cpu").gather(Sysroot(str(host)))
    assert facts["sources"]["sched_autogroup"] == "/proc/sys/kernel/sched_autogroup_enabled"


def test_a_floor_is_raised_to_never_lowered_and_its_check_says_at_least(host):
    """vm.max_map_count is declared with ``minimum``: a host below the profile's value is
    raised (now and in sysctl.d), one above it is left as it is and passes."""
    proc = host / "proc/sys/vm/max_map_count"
    proc.parent.mkdir(parents=True, exist_ok=True)
    proc.write_text("65530\n")
    want = {"vm_max_map_count": 262144}

    def verdict() -> tuple[str, str]:
        facts = {"cpu": get_layer("cpu").gather(Sysroot(str(host)))}
        found = {r.id: r for r in run_checks(facts, {"cpu": want}, ["cpu"])}
        return found["cpu.vm-max-map-count"].status, found["cpu.vm-max-map-count"].detail

    assert verdict() == (WARN, "vm.max_map_count=65530, profile wants at least 262144")
    before = without_mtimes(state_of(host))
    assert _apply(host, want)["changed"]
    assert proc.read_text().strip() == "262144"
    assert "vm.max_map_count = 262144" in (host / SYSCTL_D).read_text()
    assert verdict() == (PASS, "vm.max_map_count=262144")
    assert not _apply(host, want, run_id="r2")["changed"]
    assert _restore(host)["failed"] == []
    assert_restored(before, host)
    proc.write_text("1048576\n")
    untouched = state_of(host)
    assert not _apply(host, want, run_id="r3")["changed"]
    assert state_of(host) == untouched
    assert verdict() == (PASS, "vm.max_map_count=1048576")


def test_a_host_without_the_parameter_skips_the_check_and_the_knob_saying_why(host):
    """A kernel without the parameter has nothing to set now, and a sysctl.d line for it
    would only fail at every boot: the knob does not apply (never "no drift")."""
    (host / "proc/sys/kernel/sched_autogroup_enabled").unlink()
    facts = {"cpu": get_layer("cpu").gather(Sysroot(str(host)))}
    found = {r.id: r for r in run_checks(facts, {"cpu": BOTH}, ["cpu"])}
    assert found["cpu.sched-autogroup"].status == SKIP
    assert "/proc/sys/kernel/sched_autogroup_enabled absent" in found["cpu.sched-autogroup"].detail
    before = state_of(host)
    (knob,) = _apply(host, {"sched_autogroup": 0})["knobs"]
    assert knob["not_applicable"] == (
        "/proc/sys/kernel/sched_autogroup_enabled: not present: the running kernel has no "
        "kernel.sched_autogroup_enabled (built without it, or its module is not loaded)")
    assert not knob["changed"] and knob["journal_entries"] == []
    assert "sched_autogroup" not in (host / SYSCTL_D).read_text()
    assert {p: e[:4] for p, e in state_of(host).items() if "journal" not in p} == \
        without_mtimes(before)


def test_a_host_value_of_the_wrong_type_is_a_fact_error_and_the_check_says_why(host):
    (host / "proc/sys/kernel/sched_autogroup_enabled").write_text("on\n")
    facts = {"cpu": get_layer("cpu").gather(Sysroot(str(host)))}
    assert facts["cpu"]["sched_autogroup"] is None
    assert {"fact": "sched_autogroup", "path": "/proc/sys/kernel/sched_autogroup_enabled",
            "error": "not an integer: 'on'"} in facts["cpu"]["errors"]
    found = {r.id: r for r in run_checks(facts, {"cpu": BOTH}, ["cpu"])}
    assert found["cpu.sched-autogroup"].detail == \
        "kernel.sched_autogroup_enabled unknown: not an integer: 'on'"


def test_every_other_name_of_a_family_knob_derives_from_its_name():
    knob = get_knob("cpu.sched_autogroup")
    assert (knob.check_id, knob.switch, list(knob.overrides), list(knob.profile_keys),
            knob.state.fact) == ("cpu.sched-autogroup", "cpu_sched_autogroup",
                                 ["cpu_sched_autogroup_target"], ["sched_autogroup"],
                                 "sched_autogroup")


# -- the other families, declared here, applied and restored by the same engine --------------

def _round_trip(root: Path, knob, want, journal_id: str = "f1") -> tuple[list, dict]:
    """Plan ``knob`` at ``want``, apply, check a second plan is empty, restore; the restored
    tree is compared by the caller."""
    sysroot = Sysroot(str(root))
    target = knob.target({knob.name: want}, {}, {})
    changes = knob.plan(sysroot, target)
    journal = Journal(sysroot, journal_id)
    result = apply_changes(sysroot, changes, journal, knob.layer, knob.name, False)
    again = apply_changes(sysroot, knob.plan(sysroot, target), None, knob.layer, knob.name, True)
    assert not again["changed"]
    return changes, result


def test_a_file_key_is_edited_in_place_and_its_service_reloaded_as_a_journaled_step(tmp_path):
    root = copy_sysroot("h100-x86", tmp_path)
    conf = root / "etc/default/irqbalance"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text('# irqbalance\nIRQBALANCE_ONESHOT=0\n')
    before = without_mtimes(state_of(root))
    knob = file_key("cpu", "irq_hint", "/etc/default/irqbalance", "IRQBALANCE_ARGS", "shell",
                    "irqbalance arguments",
                    {"type": "string", "pattern": "^[a-z=-]+$", "description": "arguments"},
                    service="irqbalance.service")
    changes, result = _round_trip(root, knob, "--hintpolicy=subset")
    assert conf.read_text() == '# irqbalance\nIRQBALANCE_ONESHOT=0\nIRQBALANCE_ARGS=' \
                               '"--hintpolicy=subset"\n'
    assert changes[-1] == Regenerate("systemctl try-reload-or-restart irqbalance.service",
                                     ("systemctl", "try-reload-or-restart",
                                      "irqbalance.service"), run=False)
    assert [d["before_header"] for d in result["diff"]] == [
        "/etc/default/irqbalance", "systemctl try-reload-or-restart irqbalance.service"]
    assert knob.state.read(Sysroot(str(root))) == "--hintpolicy=subset"
    assert _restore(root, "f1")["failed"] == []
    assert_restored(before, root)


def test_a_dropin_is_written_with_daemon_reload_and_removed_on_restore(tmp_path):
    root = copy_sysroot("h100-x86", tmp_path)
    knob = dropin("cpu", "irq_nice", "irqbalance.service", "Service", "Nice",
                  "irqbalance niceness", {"type": "integer", "minimum": -20, "maximum": 19,
                                          "description": "nice value"}, restart=True,
                  check=CheckSpec("low", "t", "r"))
    changes, _ = _round_trip(root, knob, 5)
    dropin_file = root / "etc/systemd/system/irqbalance.service.d/90-exemplar-tune-irq_nice.conf"
    assert dropin_file.read_text().endswith("[Service]\nNice=5\n")
    assert [c.label for c in changes[1:]] == ["systemctl daemon-reload",
                                              "systemctl try-restart irqbalance.service"]
    assert knob.state.read(Sysroot(str(root))) == "5" and knob.check.fix.startswith(
        "systemctl edit irqbalance.service")
    assert _restore(root, "f1")["failed"] == []
    assert not (root / "etc/systemd/system/irqbalance.service.d").exists()


def test_a_kernel_argument_is_added_or_removed_in_the_bootloader_defaults(tmp_path):
    root = copy_sysroot("h100-x86", tmp_path)
    grub = root / "etc/default/grub"
    original = grub.read_bytes()
    path = Setting("cpu_grub_defaults_path", "/etc/default/grub", "grub defaults.")
    knob = kernel_arg("cpu", "nosmt", "nosmt", "SMT off at boot",
                      {"type": "boolean", "description": "SMT off"}, grub=path)
    assert knob.reboot
    _round_trip(root, knob, True)
    assert " nosmt" in grub.read_text()
    assert knob.state.read(Sysroot(str(root))) is False  # the running kernel did not get it
    assert knob.state.matches(False, False) and not knob.state.matches(False, True)
    assert _restore(root, "f1")["failed"] == []
    assert grub.read_bytes() == original


def test_family_values_that_would_change_a_file_s_syntax_are_refused_before_planning(tmp_path):
    root = Sysroot(str(copy_sysroot("h100-x86", tmp_path)))
    knob = get_knob("cpu.governor")
    for bad in ("performance\nschedutil", "perf ormance", "$(reboot)"):
        with pytest.raises(KnobInputError, match="cpu.governor"):
            knob.plan(root, knob.target({"governor": bad}, {}, {}))


def test_a_kernel_argument_replaces_every_earlier_value_so_the_next_boot_has_it(tmp_path):
    """A value left in GRUB_CMDLINE_LINUX_DEFAULT comes later on the command line and would
    win: it is removed there too."""
    root = copy_sysroot("h100-x86", tmp_path)
    grub = root / "etc/default/grub"
    grub.write_text('GRUB_CMDLINE_LINUX_DEFAULT="quiet mitigations=off"\n'
                    'GRUB_CMDLINE_LINUX="ro mitigations=off"\n')
    path = Setting("cpu_grub_defaults_path", "/etc/default/grub", "grub defaults.")
    knob = kernel_arg("cpu", "mitigations", "mitigations", "CPU mitigations",
                      {"type": "string", "pattern": "^[a-z,]+$", "description": "mode"},
                      grub=path)
    _round_trip(root, knob, "auto")
    assert grub.read_text() == ('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
                                'GRUB_CMDLINE_LINUX="ro mitigations=auto"\n')


@pytest.mark.parametrize(("family", "value"), [
    ("kernel_arg", "auto nosmt"), ("kernel_arg", 'a"b'), ("dropin", "5\\"),
    ("dropin", "%H"), ("sysctl", "1 2"), ("sysctl", "1#2")])
def test_values_that_a_family_s_file_would_read_otherwise_are_refused(tmp_path, family, value):
    """A pattern may allow them; the family still refuses what its file gives a meaning."""
    loose = {"type": "string", "pattern": "^.{1,20}$", "description": "any"}
    knob = {"kernel_arg": lambda: kernel_arg(
                "cpu", "x", "x", "x", loose,
                grub=Setting("cpu_grub_defaults_path", "/etc/default/grub", "grub.")),
            "dropin": lambda: dropin("cpu", "x", "irqbalance.service", "Service", "Nice", "x",
                                     loose),
            "sysctl": lambda: sysctl("cpu", "x", "kernel.x", "x", loose)}[family]()
    root = Sysroot(str(copy_sysroot("h100-x86", tmp_path)))
    with pytest.raises(KnobInputError, match="cannot carry"):
        knob.plan(root, knob.target({"x": value}, {}, {}))


def test_a_pattern_is_matched_whole():
    with pytest.raises(KnobInputError, match="is not allowed"):
        profile_value("performance extra", {"type": "string", "pattern": "^[a-z]+"}, "cpu.x")


def test_a_final_newline_never_passes_a_pattern(tmp_path):
    """``$`` matches before a final newline: every planner's check matches the whole value, so
    a role variable cannot add a line to the udev rule (or any rendered file)."""
    root = Sysroot(str(copy_sysroot("h100-x86", tmp_path)))
    knob = get_knob("cpu.deep_cstates")
    with pytest.raises(KnobInputError, match="cpu.deep_cstate_names"):
        knob.plan(root, knob.target({"deep_cstates": True, "deep_cstate_names": ["C6\n"]},
                                    {}, {}))


@pytest.mark.parametrize("line", ["kernel/numa_balancing=1", "/kernel/numa_balancing = 1",
                                  "-kernel.numa_balancing = 1", "  kernel.numa_balancing=1"])
def test_sysctl_d_names_one_key_in_all_its_spellings(line):
    """sysctl.d(5): '/' for '.', a leading '/' or '-', blanks around '='; the line is edited."""
    text = f"# keep\n{line}\n; keep too\n"
    assert edit_text(text, {"kernel.numa_balancing": "0"}, "sysctl") == \
        "# keep\nkernel.numa_balancing = 0\n; keep too\n"


# -- sysfs attributes: host memory pages -------------------------------------------------------

THP = "sys/kernel/mm/transparent_hugepage/enabled"
POOL_2M = "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"


@pytest.fixture
def memory_host(tmp_path: Path) -> Path:
    """h100-x86 with the THP mode and hugetlb pools as this machine's kernel shows them."""
    root = copy_sysroot("h100-x86", tmp_path)
    for rel in (THP, POOL_2M, "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("0\n")
    (root / THP).write_text("always [madvise] never\n")
    return root


def test_the_real_thp_mode_reads_as_the_choice_in_brackets():
    knob = get_knob("cpu.transparent_hugepage")
    mode = knob.state.read(Sysroot("/"))
    if mode is None:
        pytest.fail("this kernel has no /sys/kernel/mm/transparent_hugepage/enabled")
    (word,) = mode
    assert f"[{word}]" in Path("/", THP).read_text()
    assert word in ("always", "madvise", "never")


def test_the_thp_mode_is_set_checked_and_put_back_as_the_choice_in_force(memory_host):
    def verdict() -> tuple[str, str]:
        facts = {"cpu": get_layer("cpu").gather(Sysroot(str(memory_host)))}
        found = {r.id: r for r in run_checks(facts, {"cpu": want}, ["cpu"])}
        return found["cpu.transparent-hugepage"].status, found["cpu.transparent-hugepage"].detail

    want = {"transparent_hugepage": "always"}
    before = state_of(memory_host)
    assert _apply(memory_host, want, check_mode=True)["changed"]
    assert state_of(memory_host) == before
    assert verdict() == (WARN, f"/{THP}=madvise, profile wants always")
    assert _apply(memory_host, want)["changed"]
    assert verdict() == (PASS, f"/{THP}=always")
    assert not _apply(memory_host, want, run_id="r2")["changed"]
    entry = Journal(Sysroot(str(memory_host)), "r1").load()["entries"][0]
    assert entry["previous"] == "madvise\n"  # the kernel takes a word, not its list back
    assert _restore(memory_host)["failed"] == []
    assert get_knob("cpu.transparent_hugepage").state.read(Sysroot(str(memory_host))) == \
        {"madvise": 1}


def test_a_thp_mode_the_kernel_does_not_offer_is_refused_before_planning(memory_host):
    before = state_of(memory_host)
    with pytest.raises(LayerFailed, match="'defer' is not one of .*nothing was changed"):
        _apply(memory_host, {"transparent_hugepage": "defer"})
    assert state_of(memory_host) == before


def test_the_hugetlb_pool_is_reserved_and_restored_byte_for_byte(memory_host):
    before = without_mtimes(state_of(memory_host))
    facts = {"cpu": get_layer("cpu").gather(Sysroot(str(memory_host)))}
    profile = {"cpu": {"hugepages_2m": 5128, "hugepages_1g": 2}}
    found = {r.id: r for r in run_checks(facts, profile, ["cpu"])}
    assert (found["cpu.hugepages-2m"].status, found["cpu.hugepages-2m"].detail) == \
        (WARN, f"/{POOL_2M}=0, profile wants 5128")
    result = _apply(memory_host, profile["cpu"])
    assert {k["knob"] for k in result["knobs"] if k["changed"]} == {"hugepages_2m",
                                                                     "hugepages_1g"}
    assert (memory_host / POOL_2M).read_text().strip() == "5128"
    assert _restore(memory_host)["failed"] == []
    assert_restored(before, memory_host)


def test_a_kernel_without_the_pool_size_skips_the_check_saying_so(memory_host):
    shutil.rmtree(memory_host / "sys/kernel/mm/hugepages/hugepages-1048576kB")
    facts = {"cpu": get_layer("cpu").gather(Sysroot(str(memory_host)))}
    found = {r.id: r for r in run_checks(facts, {"cpu": {"hugepages_1g": 2}}, ["cpu"])}
    assert found["cpu.hugepages-1g"].status == SKIP
    assert "hugepages-1048576kB/nr_hugepages absent" in found["cpu.hugepages-1g"].detail
