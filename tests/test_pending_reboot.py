"""Boot-time changes waiting for the next boot: the host's pending-reboot record, the layers'
``pending_reboot`` fact, and the simulated boot that clears it.

Real ansible-runner runs of the layer, restore and facts modules on a copy of the
gb200-grace-vm sysroot whose kernel command line turns CMDQV off
(``arm_smmu_v3.disable_cmdqv=1``), the simulated boot as its own process, and the CLI on a
simulated cluster.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.pending_reboot import (
    BOOT_ID,
    PENDING_REBOOT,
    PendingRebootError,
    pending_knobs,
    read_record,
    record_pending,
)
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from exemplar_tune.sim.boot import new_boot_id
from exemplar_tune.sim.cluster import create_cluster
from tests.helpers import cli_env, copy_sysroot, tree_hash
from tests.test_cli import cli

CMDQV = "vm.cmdqv_params"
PROFILE = {"name": "t", "vm": {"require_cmdqv": True}}
RECORD_PATH = "/" + PENDING_REBOOT
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\n$")
UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture
def guest(tmp_path):
    """The Grace KVM guest, booted with CMDQV turned off on its command line (and in its
    bootloader defaults, so the next boot would keep it off)."""
    root = copy_sysroot("gb200-grace-vm", tmp_path)
    for rel in ("etc/default/grub", "proc/cmdline"):
        path = root / rel
        path.write_text(path.read_text().replace(
            "init_on_alloc=0", "init_on_alloc=0 arm_smmu_v3.disable_cmdqv=1"))
    return root


def _layer(root, check=False, run_id="r1"):
    args = {"layers": ["vm"], "profile": PROFILE, "sysroot": str(root)}
    if not check:
        args["run_id"] = run_id
    outcome = AnsibleRun(local_inventory(), timeout=180, check=check).module(
        "exemplar.tune.layer", args)
    return outcome.hosts["localhost"]


def _restore(root, check=False, run_id="r1"):
    outcome = AnsibleRun(local_inventory(), timeout=180, check=check).module(
        "exemplar.tune.restore", {"run_id": run_id, "sysroot": str(root)})
    return outcome.hosts["localhost"]


def _facts(root, layers=("vm",)):
    """The facts module's facts of ``layers`` (a real run)."""
    outcome = AnsibleRun(local_inventory(), timeout=120).module(
        "exemplar.tune.facts", {"layers": list(layers), "sysroot": str(root)})
    host = outcome.hosts["localhost"]
    assert host.status == "ok", host.message
    return host.tasks[-1]["result"]["ansible_facts"]["exemplar_tune"]


def _boot(root):
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.sim.boot", str(root)],
                         capture_output=True, text=True, env=cli_env(), check=True)
    return out.stdout


def _result(host):
    return host.tasks[-1]["result"]


def _record(root):
    return json.loads((root / PENDING_REBOOT).read_text())


def _changed(host):
    return [f"{k['layer']}.{k['knob']}" for k in _result(host)["knobs"] if k["changed"]]


# -- apply, boot, restore --------------------------------------------------------------------

def test_an_applied_boot_time_knob_is_pending_until_the_next_boot(guest):
    host = _layer(guest)
    assert host.status == "ok", host.message
    assert _changed(host) == [CMDQV]
    assert _result(host)["reboot_required"] is True
    # the running kernel still has CMDQV off: only the bootloader defaults changed
    assert "disable_cmdqv=1" in (guest / "proc/cmdline").read_text()
    assert "disable_cmdqv" not in (guest / "etc/default/grub").read_text()

    facts = _facts(guest, ("vm", "cpu"))
    assert facts["vm"]["pending_reboot"] == [CMDQV]
    assert facts["vm"]["sources"]["pending_reboot"] == (
        f"{RECORD_PATH}, /proc/sys/kernel/random/boot_id")
    assert facts["vm"]["errors"] == []
    assert facts["cpu"]["pending_reboot"] == []  # each layer lists its own knobs only

    record = _record(guest)
    assert record["format"] == 1
    assert record["boot_id"] is None  # the tree has no boot id: null, equal to null
    assert list(record["knobs"]) == [CMDQV]
    note = record["knobs"][CMDQV]
    assert (note["run_id"], note["change"]) == ("r1", "apply")
    assert UTC.match(note["at"]), note["at"]

    assert "booted" in _boot(guest)
    assert UUID.match((guest / BOOT_ID).read_text())
    assert "disable_cmdqv" not in (guest / "proc/cmdline").read_text()
    assert _facts(guest)["vm"]["pending_reboot"] == []
    assert _record(guest) == record  # kept: a record of another boot means nothing pending


def test_a_restore_of_a_boot_time_knob_is_pending_again(guest):
    assert _layer(guest).status == "ok"
    _boot(guest)
    boot_id = (guest / BOOT_ID).read_text().strip()

    restored = _restore(guest)
    assert restored.status == "ok", restored.message
    assert restored.changed
    assert _result(restored)["pending_reboot"] == [CMDQV]
    assert "arm_smmu_v3.disable_cmdqv=1" in (guest / "etc/default/grub").read_text()
    assert _facts(guest)["vm"]["pending_reboot"] == [CMDQV]
    record = _record(guest)
    assert record["boot_id"] == boot_id  # the apply of the boot before was dropped
    assert record["knobs"][CMDQV]["change"] == "restore"
    assert record["knobs"][CMDQV]["run_id"] == "r1"

    again = _restore(guest)  # nothing left to put back: the record stays as it was
    assert again.status == "ok" and not again.changed, again.message
    assert _result(again)["pending_reboot"] == []
    assert _record(guest) == record

    _boot(guest)
    assert "disable_cmdqv=1" in (guest / "proc/cmdline").read_text()
    assert _facts(guest)["vm"]["pending_reboot"] == []


def test_check_mode_writes_no_record(guest):
    pristine = tree_hash(guest)
    host = _layer(guest, check=True)
    assert host.status == "ok", host.message
    assert _changed(host) == [CMDQV]
    assert tree_hash(guest) == pristine
    assert not (guest / PENDING_REBOOT).exists()

    assert _layer(guest).status == "ok"
    _boot(guest)
    applied = tree_hash(guest)
    restore = _restore(guest, check=True)
    assert restore.status == "ok" and restore.changed, restore.message
    assert _result(restore)["pending_reboot"] == []
    assert tree_hash(guest) == applied


def test_a_second_apply_that_changes_nothing_keeps_the_record(guest):
    assert _layer(guest).status == "ok"
    before = (guest / PENDING_REBOOT).read_bytes()
    again = _layer(guest, run_id="r2")
    assert again.status == "ok", again.message
    assert _changed(again) == []
    assert (guest / PENDING_REBOOT).read_bytes() == before
    assert _facts(guest)["vm"]["pending_reboot"] == [CMDQV]


def test_a_second_knob_on_the_same_boot_joins_the_first(guest):
    assert _layer(guest).status == "ok"
    outcome = AnsibleRun(local_inventory(), timeout=180).module("exemplar.tune.layer", {
        "layers": ["vm"], "profile": {"name": "t", "vm": {"iommu_default_domain": "identity"}},
        "sysroot": str(guest), "run_id": "r2"})
    assert outcome.hosts["localhost"].status == "ok"
    record = _record(guest)
    assert {k: (v["run_id"], v["change"]) for k, v in record["knobs"].items()} == {
        CMDQV: ("r1", "apply"), "vm.iommu_passthrough": ("r2", "apply")}
    assert _facts(guest)["vm"]["pending_reboot"] == [CMDQV, "vm.iommu_passthrough"]


# -- a record that cannot be read ------------------------------------------------------------

@pytest.mark.parametrize(("content", "reason"), [
    (b"{not json", "corrupted (not JSON)"),
    (b"\xff\xfe", "corrupted (not JSON)"),
    (b"[]", "corrupted (not a JSON object)"),
    (b'{"format": 2, "boot_id": null, "knobs": {}}', "corrupted (format 2, expected 1)"),
    (b'{"format": 1, "boot_id": 7, "knobs": {}}', "corrupted (boot_id is not a string or null)"),
    (b'{"format": 1, "boot_id": null, "knobs": []}', "corrupted (knobs is not an object)"),
    (b'{"format": 1, "boot_id": null, "knobs": {"vm.cmdqv_params": {"change": "x"}}}',
     "corrupted (knob 'vm.cmdqv_params': not an object with change apply or restore)"),
])
def test_a_corrupt_record_is_a_fact_error_not_a_crash(guest, content, reason):
    path = guest / PENDING_REBOOT
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    facts = _facts(guest, ("vm", "cpu"))
    for layer in ("vm", "cpu"):
        assert facts[layer]["pending_reboot"] is None
        assert {"fact": "pending_reboot", "path": RECORD_PATH, "error": reason} in \
            facts[layer]["errors"]
    assert facts["vm"]["cmdqv"] is not None  # the other facts are all there
    # the next boot-time change replaces it: a corrupt record cannot be trusted anyway
    assert _layer(guest).status == "ok"
    assert list(_record(guest)["knobs"]) == [CMDQV]
    assert gather_facts(Sysroot(str(guest)), ["vm"])["vm"]["pending_reboot"] == [CMDQV]


def test_a_record_that_is_a_symlink_is_neither_read_nor_written_through(guest):
    """A link planted where the record goes points elsewhere in the tree (on a live host,
    anywhere): nothing is read or written through it."""
    target = guest / "etc/hostname"
    before = target.read_bytes()
    (guest / PENDING_REBOOT).parent.mkdir(parents=True)
    (guest / PENDING_REBOOT).symlink_to("/etc/hostname")
    vm = _facts(guest)["vm"]
    assert vm["pending_reboot"] is None
    assert {"fact": "pending_reboot", "path": RECORD_PATH,
            "error": "is a symbolic link (not followed)"} in vm["errors"]
    # the change is made and reported as it is; the record's trouble is a warning
    host = _layer(guest)
    assert host.status == "ok", host.message
    assert _changed(host) == [CMDQV]
    assert _result(host)["reboot_required"] is True
    assert [w for w in _result(host)["warnings"] if RECORD_PATH in w] == [
        f"{RECORD_PATH}: is a symbolic link (not followed): not written; the change of "
        f"{CMDQV} waits for the next boot all the same"]
    restored = _restore(guest)
    assert restored.status == "ok" and restored.changed, restored.message
    assert _result(restored)["pending_reboot"] == [CMDQV]
    assert any(RECORD_PATH in w for w in _result(restored)["warnings"])
    assert target.read_bytes() == before
    assert (guest / PENDING_REBOOT).is_symlink()


# -- the record itself (in process) ----------------------------------------------------------

def test_the_record_follows_the_boot_id(tmp_path):
    root = Sysroot(str(tmp_path))
    assert pending_knobs(root) == [] and read_record(root) is None
    record_pending(root, [], "r1", "apply")
    assert not (tmp_path / PENDING_REBOOT).exists()  # nothing to note: nothing written
    first = new_boot_id(tmp_path)
    record_pending(root, ["vm.cmdqv_params", "cpu.cstate_cmdline"], "r1", "apply")
    assert pending_knobs(root) == ["cpu.cstate_cmdline", "vm.cmdqv_params"]
    assert read_record(root)["boot_id"] == first
    assert oct((tmp_path / PENDING_REBOOT).stat().st_mode & 0o777) == "0o644"
    record_pending(root, ["vm.cmdqv_params"], "r2", "restore")  # same boot: updated
    knobs = read_record(root)["knobs"]
    assert (knobs["vm.cmdqv_params"]["run_id"], knobs["vm.cmdqv_params"]["change"]) == (
        "r2", "restore")
    assert knobs["cpu.cstate_cmdline"]["run_id"] == "r1"

    second = new_boot_id(tmp_path)  # rebooted
    assert pending_knobs(root) == []
    record_pending(root, ["vm.iommu_passthrough"], "r3", "apply")  # the old boot's dropped
    doc = read_record(root)
    assert doc["boot_id"] == second and list(doc["knobs"]) == ["vm.iommu_passthrough"]
    assert [p.name for p in (tmp_path / PENDING_REBOOT).parent.iterdir()] == [
        "pending-reboot.json"]  # no temp file left behind

    (tmp_path / BOOT_ID).unlink()  # a tree without a boot id (null) is not that boot
    assert pending_knobs(root) == []
    with pytest.raises(ValueError):
        record_pending(root, ["vm.cmdqv_params"], "r1", "reboot")


def test_an_unreadable_record_is_a_host_state_error(tmp_path):
    (tmp_path / PENDING_REBOOT).mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(PendingRebootError) as raised:
        pending_knobs(Sysroot(str(tmp_path)))
    assert (raised.value.path, raised.value.reason) == (RECORD_PATH, "is a directory")


# -- the simulated cluster -------------------------------------------------------------------

def test_apply_on_a_simulated_host_is_pending_until_its_boot(tmp_path):
    """``exemplar-tune apply --layer vm`` on a GB300 node whose command line turns CMDQV off:
    the preflight still fails (running state) and the facts say why, until the node boots."""
    cluster = tmp_path / "c"
    create_cluster(cluster, "gb300-exemplar-gap", hosts=1)
    host = cluster / "hosts/node01"
    assert UUID.match((host / BOOT_ID).read_text())  # a new host has booted once
    common = ["-i", str(cluster / "inventory.yml"), "--profile", str(cluster / "profile.yaml")]
    out = cli("apply", "--layer", "vm", *common, "--ledger", str(tmp_path / "l.db"))
    assert out.returncode == 0, out.stdout + out.stderr

    def state():
        facts = json.loads(cli("facts", "--sysroot", str(host), "--layer", "vm", "--format",
                               "json").stdout)
        doc = json.loads(cli("preflight", *common, "--layer", "vm", "--format", "json").stdout)
        failing = {g["id"] for g in doc["groups"] if g["status"] == "fail"}
        return facts["vm"]["pending_reboot"], "vm.cmdqv-params" in failing

    assert state() == ([CMDQV], True)
    _boot(host)
    assert state() == ([], False)
