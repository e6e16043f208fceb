"""The knob engine: journal first, verify after, restore on failure, exact and idempotent."""

from __future__ import annotations

import json
import os
import re

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
    ApplyFailed,
    AttrChange,
    FileChange,
    apply_changes,
    restore_entries,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.envfile import edit_text
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.grub import (
    edit_grub,
    read_variable,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.journal import (
    Journal,
    JournalError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.helpers import tree_hash


@pytest.fixture
def host(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "nccl.conf").write_bytes(b"# keep me\r\nNCCL_DEBUG=WARN\r\n")
    attr = root / "sys" / "devices" / "system" / "cpu" / "cpu0" / "cpuidle" / "state3"
    attr.mkdir(parents=True)
    (attr / "disable").write_text("1\n")
    (attr / "name").write_text("C6\n")
    return root


def changes():
    return [FileChange("etc/nccl.conf", b"NCCL_IB_QPS_PER_CONNECTION=4\n", 0o644),
            FileChange("etc/enroot/environ.d/50-nccl.env", b"NCCL_TOPO_FILE=/etc/nccl/topo.xml\n"),
            AttrChange("sys/devices/system/cpu/cpu0/cpuidle/state3/disable", "0")]


def test_apply_records_then_restore_is_byte_exact_and_idempotent(host):
    before = tree_hash(host)
    root, journal = Sysroot(str(host)), Journal(Sysroot(str(host)), "r1")
    result = apply_changes(root, changes(), journal, "cpu", "k", check_mode=False)
    assert result["changed"] and len(result["entries"]) == 3
    assert (host / "sys/devices/system/cpu/cpu0/cpuidle/state3/disable").read_text() == "0\n"
    again = apply_changes(root, changes(), journal, "cpu", "k", check_mode=False)
    assert again["changed"] is False and again["entries"] == []
    undo = restore_entries(root, journal, journal.load()["entries"], check_mode=False)
    assert undo["changed"] and undo["failed"] == []
    assert not (host / "etc/enroot").exists()  # the directories the run created went too
    os.remove(host / "var/lib/exemplar-tune/journal/r1.json")
    for empty in ("var/lib/exemplar-tune/journal", "var/lib/exemplar-tune", "var/lib", "var"):
        os.rmdir(host / empty)
    assert tree_hash(host) == before


def test_second_restore_changes_nothing(host):
    root, journal = Sysroot(str(host)), Journal(Sysroot(str(host)), "r1")
    apply_changes(root, changes(), journal, "cpu", "k", check_mode=False)
    restore_entries(root, journal, journal.load()["entries"], check_mode=False)
    second = restore_entries(root, journal, journal.load()["entries"], check_mode=False)
    assert second["changed"] is False


def test_check_mode_writes_nothing_not_even_the_journal(host):
    before = tree_hash(host)
    result = apply_changes(Sysroot(str(host)), changes(), None, "cpu", "k", check_mode=True)
    assert result["changed"] and len(result["diff"]) == 3
    assert result["diff"][0]["before"] == "# keep me\r\nNCCL_DEBUG=WARN\r\n"
    assert tree_hash(host) == before


def test_failure_half_way_puts_back_what_was_changed(host):
    before = (host / "etc/nccl.conf").read_bytes(), tree_hash(host / "sys")
    (host / "etc/blocked").write_text("x")  # a file where the last change wants a directory
    root, journal = Sysroot(str(host)), Journal(Sysroot(str(host)), "r2")
    with pytest.raises(ApplyFailed) as err:
        apply_changes(root, changes() + [FileChange("etc/blocked/new", b"new\n")], journal,
                      "cpu", "k", check_mode=False)
    assert str(err.value).startswith("/etc/blocked/new: ")
    assert "everything this step changed was restored" in str(err.value)
    assert ((host / "etc/nccl.conf").read_bytes(), tree_hash(host / "sys")) == before
    assert not (host / "etc/enroot").exists()
    assert len(journal.load()["entries"]) == 4 and len(journal.load()["restored"]) == 4


def test_verify_catches_a_value_the_kernel_did_not_take(host, monkeypatch):
    root, journal = Sysroot(str(host)), Journal(Sysroot(str(host)), "r3")
    monkeypatch.setattr(Sysroot, "write_attr", lambda self, rel, value, exact=False: None)
    with pytest.raises(ApplyFailed, match="read back '1' after writing"):
        apply_changes(root, [AttrChange("sys/devices/system/cpu/cpu0/cpuidle/state3/disable",
                                        "0")], journal, "cpu", "k", check_mode=False)


@pytest.mark.parametrize("content, message", [
    ("{not json", "corrupted (not JSON)"),
    (json.dumps({"run_id": "other", "entries": []}), "unexpected content"),
])
def test_corrupted_journal_is_a_clear_error(host, content, message):
    path = host / "var/lib/exemplar-tune/journal/r4.json"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(JournalError, match=re.escape(message)):
        Journal(Sysroot(str(host)), "r4").load()


@pytest.mark.parametrize("run_id", ["../x", "", "a/b", ".hidden", "x" * 80])
def test_unsafe_run_ids_are_refused(host, run_id):
    with pytest.raises(JournalError):
        Journal(Sysroot(str(host)), run_id)


@pytest.mark.parametrize("text, settings, syntax, want", [
    ("A=1\n#B=2\nB=3\n", {"B": "4"}, "nccl", "A=1\n#B=2\nB=4\n"),
    ("B=1\nB=2\n", {"B": "9"}, "nccl", "B=9\nB=2\n"),  # NCCL: the first definition wins
    ("B=1\nB=2\n", {"B": "9"}, "shell", 'B=1\nB="9"\n'),  # shell: the last one wins
    ("X=1\r\nY=2\r\n", {"Z": "3"}, "nccl", "X=1\r\nY=2\r\nZ=3\r\n"),
    ("X=1", {"Z": "3"}, "nccl", "X=1\nZ=3\n"),
    ("NCCL_DEBUG =INFO\nNCCL_DEBUG=WARN\n", {"NCCL_DEBUG": None}, "nccl", "NCCL_DEBUG =INFO\n"),
    ("# c\nexport K=1\n", {"K": None}, "shell", "# c\n"),
    ("", {"K": 'a "b"'}, "shell", 'K="a \\"b\\""\n'),
])
def test_env_file_edits_keep_other_bytes(text, settings, syntax, want):
    assert edit_text(text, settings, syntax) == want


def test_grub_edit_removes_from_both_and_adds_to_linux():
    text = ('# comment\nGRUB_CMDLINE_LINUX_DEFAULT="quiet intel_idle.max_cstate=1"\n'
            'GRUB_CMDLINE_LINUX="ro idle=poll"\n')
    new = edit_grub(text, ["intel_idle.max_cstate", "idle"], {"iommu": "pt"})
    assert new.startswith("# comment\n")
    assert read_variable(new, "GRUB_CMDLINE_LINUX_DEFAULT") == "quiet"
    assert read_variable(new, "GRUB_CMDLINE_LINUX") == "ro iommu=pt"
    assert edit_grub(new, ["intel_idle.max_cstate", "idle"], {"iommu": "pt"}) == new


@pytest.mark.parametrize("text, syntax", [
    ("IRQBALANCE_BANNED_CPULIST=1-3,5-7\n", "shell"),
    ("IRQBALANCE_BANNED_CPULIST='1-3,5-7'\n", "shell"),
    ('export IRQBALANCE_BANNED_CPULIST="1-3,5-7"\n', "shell"),
])
def test_a_key_already_set_to_the_value_is_left_as_written(text, syntax):
    assert edit_text(text, {"IRQBALANCE_BANNED_CPULIST": "1-3,5-7"}, syntax) == text
