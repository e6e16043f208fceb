"""The gpu and vm roles (through tests/playbooks/role.yml) and the apply playbook, through real
ansible-runner runs on sysroot copies.

h100-x86 has GPU 0000:C2:00.0 with persistence Disabled (the seven others Enabled) in its
captured ``nvidia-smi -q -x``; gb200-grace-vm is a KVM guest with a virtual SMMUv3, 16 DMA
IOMMU groups, ``iommu.passthrough=0`` and a 6.8 kernel without CMDQV. The gpu_persistence
module's live path runs only where it cannot change anything: this machine has no nvidia-smi,
and the run is in check mode.
"""

from __future__ import annotations

import shutil

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.grub import read_variable
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks.run import run_checks
from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from tests.conftest import REPO
from tests.helpers import copy_sysroot, tree_hash

CAPTURED = ".exemplar/commands/nvidia-smi-q-x.xml"
GRUB = "etc/default/grub"
JOURNAL = "var/lib/exemplar-tune"
GPU_TASK = "gpu.persistence_mode"
CMDQV_TASK = "vm.cmdqv_params"
IOMMU_TASK = "vm.iommu_passthrough"
REPORT_TASK = "Record the reboot and the manual hypervisor actions this layer needs"
ROLE = REPO / "tests" / "playbooks" / "role.yml"
APPLY = REPO / "playbooks" / "apply.yml"
RESTORE = REPO / "playbooks" / "restore.yml"
GB200_CMDLINE = "console=ttyAMA0 earlycon init_on_alloc=0"


def _run(layer, root, profile, check=False, run_id="r1", playbook=ROLE, **extra):
    extravars = {"layer": layer, "exemplar_run_id": run_id, "exemplar_profile": profile,
                 **({"exemplar_sysroot": str(root)} if root else {}), **extra}
    outcome = AnsibleRun(local_inventory(), timeout=180, check=check).playbook(
        playbook, extravars)
    return outcome.hosts["localhost"]


def _knobs(host):
    """Every knob result of the layer module's task, by ``layer.knob``."""
    return {f"{k['layer']}.{k['knob']}": k for t in host.tasks
            for k in t["result"].get("knobs") or []}


def _changed(host):
    return [name for name, knob in _knobs(host).items() if knob["changed"]]


def _knob(host, name):
    return _knobs(host)[name]


def _layer_result(host):
    return next(t["result"] for t in host.tasks if "knobs" in t["result"])


def _task(host, name):
    return next(t for t in host.tasks if t["task"] == name)


def _files_hash(root):
    """Tree hash without the journal and the directories the run left empty."""
    copy = root.parent / "compare"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root, copy, symlinks=True, ignore=shutil.ignore_patterns("exemplar-tune"))
    for path in sorted(copy.rglob("*"), reverse=True):
        if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
            path.rmdir()
    return tree_hash(copy)


def _statuses(root, profile, layer):
    facts = gather_facts(Sysroot(str(root)), [layer])
    return {r.id: r.status for r in run_checks(facts, profile, [layer])}


def _grub(root, name="GRUB_CMDLINE_LINUX"):
    return read_variable((root / GRUB).read_text(), name)


@pytest.fixture
def h100(tmp_path):
    return copy_sysroot("h100-x86", tmp_path)


@pytest.fixture
def gb200(tmp_path):
    return copy_sysroot("gb200-grace-vm", tmp_path)


# -- gpu --------------------------------------------------------------------------------------

GPU_PROFILE = {"name": "test", "gpu": {"persistence_mode": True}}


def _persistence(root):
    gpus = gather_facts(Sysroot(str(root)), ["gpu"])["gpu"]["gpus"]
    return {g["bdf"]: g["persistence_mode"] for g in gpus}


def test_gpu_apply_enables_persistence_in_the_captured_report(h100):
    before = (h100 / CAPTURED).read_bytes()
    host = _run("gpu", h100, GPU_PROFILE)
    assert host.status == "ok", host.message
    assert _changed(host) == [GPU_TASK]
    result = _knob(host, GPU_TASK)
    assert result["journal_entries"] == [{"seq": 1, "kind": "file", "path": "/" + CAPTURED}]
    assert result["reboot_required"] is False
    assert set(_persistence(h100).values()) == {True}
    # Only the one <persistence_mode> text changed; every other byte is kept.
    after = (h100 / CAPTURED).read_bytes()
    assert after.count(b"<persistence_mode>Disabled<") == 0
    assert after == before.replace(b"<persistence_mode>Disabled<", b"<persistence_mode>Enabled<")
    assert _statuses(h100, GPU_PROFILE, "gpu")["gpu.persistence-mode"] == "pass"


def test_gpu_second_apply_changes_nothing(h100):
    assert _changed(_run("gpu", h100, GPU_PROFILE)) == [GPU_TASK]
    again = _run("gpu", h100, GPU_PROFILE)
    assert again.status == "ok", again.message
    assert _changed(again) == []
    assert _knob(again, GPU_TASK)["journal_entries"] == []


def test_gpu_check_mode_reports_and_writes_nothing(h100):
    pristine = tree_hash(h100)
    host = _run("gpu", h100, GPU_PROFILE, check=True)
    assert host.status == "ok", host.message
    assert _changed(host) == [GPU_TASK]
    assert _layer_result(host)["journal"] is None
    assert tree_hash(h100) == pristine
    assert not (h100 / JOURNAL).exists()


def test_gpu_restore_is_byte_identical_and_idempotent(h100):
    pristine = _files_hash(h100)
    _run("gpu", h100, GPU_PROFILE)
    assert _files_hash(h100) != pristine
    restored = _run("gpu", h100, GPU_PROFILE, playbook=RESTORE)
    assert restored.status == "ok", restored.message
    assert restored.changed
    assert _files_hash(h100) == pristine
    assert _persistence(h100)["00000000:C2:00.0"] is False
    again = _run("gpu", h100, GPU_PROFILE, playbook=RESTORE)
    assert again.status == "ok" and not again.changed


def test_gpu_selected_gpus_only(tmp_path):
    root = copy_sysroot("healthy-h100", tmp_path)
    host = _run("gpu", root, {"name": "t", "gpu": {"persistence_mode": False}},
                gpu_persistence_gpus=["0000:a4:00.0", "00000000:EA:00.0"])
    assert host.status == "ok", host.message
    off = {bdf for bdf, on in _persistence(root).items() if not on}
    assert off == {"00000000:A4:00.0", "00000000:EA:00.0"}


def test_gpu_unknown_address_fails_in_one_line(h100):
    host = _run("gpu", h100, GPU_PROFILE, gpu_persistence_gpus=["0000:a5:00.0"])
    assert host.status == "failed"
    assert host.message.startswith(
        "gpu.persistence_mode: GPU 00000000:A5:00.0: not listed by nvidia-smi (GPUs: ")
    assert not (h100 / JOURNAL).exists()


def test_gpu_profile_without_persistence_skips_the_knob(h100):
    pristine = tree_hash(h100)
    host = _run("gpu", h100, {"name": "t", "gpu": {"count": 8}})
    assert host.status == "ok", host.message
    assert GPU_TASK not in _changed(host)
    assert tree_hash(h100) == pristine


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None,
                    reason="this test needs a host without nvidia-smi")
def test_gpu_live_without_nvidia_smi_fails_with_one_line():
    """The module on the live host (check mode: nothing could change anyway)."""
    outcome = AnsibleRun(local_inventory(), timeout=120, check=True).module(
        "exemplar.tune.gpu_persistence", {"layer": "gpu", "knob": "persistence_mode"})
    result = outcome.hosts["localhost"]
    assert result.status == "failed"
    assert result.message == ("nvidia-smi: command not found: persistence mode can only be set "
                              "through nvidia-smi -pm (install the NVIDIA driver utilities)")


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None,
                    reason="this test needs a host without nvidia-smi")
def test_gpu_role_on_a_live_host_without_gpu_does_nothing():
    host = _run("gpu", None, GPU_PROFILE, check=True)
    assert host.status == "ok", host.message
    assert GPU_TASK not in _changed(host)


# -- vm ---------------------------------------------------------------------------------------

VM_PROFILE = {"name": "test", "vm": {"require_cmdqv": True, "iommu_default_domain": "identity"}}


def _disable_cmdqv(root):
    """The guest booted once with CMDQV turned off by both parameters (test-local edit)."""
    path = root / GRUB
    text = path.read_text()
    text = text.replace('GRUB_CMDLINE_LINUX_DEFAULT=""',
                        'GRUB_CMDLINE_LINUX_DEFAULT="arm_smmu_v3.bypass_vcmdq=1"')
    text = text.replace("init_on_alloc=0", "init_on_alloc=0 arm_smmu_v3.disable_cmdqv=1")
    path.write_text(text)


def test_vm_apply_edits_the_next_boot_arguments(gb200):
    _disable_cmdqv(gb200)
    host = _run("vm", gb200, VM_PROFILE)
    assert host.status == "ok", host.message
    assert _changed(host) == [CMDQV_TASK, IOMMU_TASK]
    assert _grub(gb200) == f"{GB200_CMDLINE} iommu.passthrough=1"
    assert _grub(gb200, "GRUB_CMDLINE_LINUX_DEFAULT") == ""
    for name in (CMDQV_TASK, IOMMU_TASK):
        result = _knob(host, name)
        assert result["reboot_required"] is True
        # no bootloader command is given for this sysroot: the rebuild is recorded, not run
        assert [e["path"] for e in result["journal_entries"]] == [
            "/etc/default/grub", "bootloader configuration"]
        assert result["changes"][-1]["after"] == "update-grub  (recorded, not run here)\n"
    facts = _task(host, REPORT_TASK)["result"]["ansible_facts"]
    assert facts["vm_reboot_required"] is True
    # The running kernel is unchanged until the reboot: /proc/cmdline still says passthrough=0.
    assert gather_facts(Sysroot(str(gb200)), ["vm"])["vm"]["iommu"]["cmdline"] == {
        "iommu.passthrough": "0"}


def test_vm_guest_without_cmdqv_reports_the_hypervisor_action(gb200):
    host = _run("vm", gb200, VM_PROFILE)
    assert host.status == "ok", host.message
    actions = _task(host, REPORT_TASK)["result"]["ansible_facts"]["vm_manual_actions"]
    assert len(actions) == 1
    action = actions[0]
    assert (action["check"], action["where"]) == ("vm.cmdqv", "hypervisor")
    assert action["summary"].startswith("CMDQV not_in_kernel in this KVM guest (")
    steps = " ".join(action["steps"])
    for words in ("iommufd", "arm-smmuv3", "accel=on", "<iommu model='smmuv3'>",
                  "cold-plugged vfio-pci", "kernel >= 6.12", "CONFIG_TEGRA241_CMDQV=y"):
        assert words in steps, words
    # shown as a warning, by the role and by the apply playbook alike
    warning = "vm.cmdqv: " + action["summary"] + " (what to do on the hypervisor: manual_actions"
    assert [w.startswith(warning) for w in _layer_result(host)["warnings"]] == [True]
    played = _run("vm", gb200, VM_PROFILE, playbook=APPLY)
    assert played.status == "ok", played.message
    assert _layer_result(played)["manual_actions"] == actions
    assert [w.startswith(warning) for w in _layer_result(played)["warnings"]] == [True]


def test_vm_second_apply_changes_nothing(gb200):
    _disable_cmdqv(gb200)
    assert _changed(_run("vm", gb200, VM_PROFILE)) == [CMDQV_TASK, IOMMU_TASK]
    again = _run("vm", gb200, VM_PROFILE)
    assert again.status == "ok", again.message
    assert _changed(again) == []
    facts = _task(again, REPORT_TASK)["result"]["ansible_facts"]
    assert facts["vm_reboot_required"] is False
    assert len(facts["vm_manual_actions"]) == 1


def test_vm_check_mode_reports_and_writes_nothing(gb200):
    _disable_cmdqv(gb200)
    pristine = tree_hash(gb200)
    host = _run("vm", gb200, VM_PROFILE, check=True)
    assert host.status == "ok", host.message
    assert _changed(host) == [CMDQV_TASK, IOMMU_TASK]
    assert _knob(host, IOMMU_TASK)["reboot_required"] is True
    assert tree_hash(gb200) == pristine
    assert not (gb200 / JOURNAL).exists()


def test_vm_restore_is_byte_identical_and_idempotent(gb200):
    _disable_cmdqv(gb200)
    pristine = _files_hash(gb200)
    _run("vm", gb200, VM_PROFILE)
    restored = _run("vm", gb200, VM_PROFILE, playbook=RESTORE)
    assert restored.status == "ok", restored.message
    assert restored.changed
    assert _files_hash(gb200) == pristine
    again = _run("vm", gb200, VM_PROFILE, playbook=RESTORE)
    assert again.status == "ok" and not again.changed


@pytest.mark.parametrize(("domain", "want"), [
    ("DMA", f"{GB200_CMDLINE} iommu.passthrough=0 iommu.strict=1"),
    ("DMA-FQ", f"{GB200_CMDLINE} iommu.passthrough=0 iommu.strict=0"),
])
def test_vm_translated_domains_on_aarch64(gb200, domain, want):
    host = _run("vm", gb200, {"name": "t", "vm": {"iommu_default_domain": domain}})
    assert host.status == "ok", host.message
    assert _changed(host) == [IOMMU_TASK]
    assert _grub(gb200) == want
    # require_cmdqv not set: no CMDQV knob, no hypervisor report.
    assert CMDQV_TASK not in _changed(host)
    assert _task(host, REPORT_TASK)["result"]["ansible_facts"]["vm_manual_actions"] == []


@pytest.mark.parametrize(("domain", "want"), [
    ("identity", None),  # iommu=pt already there: nothing to change
    ("DMA", "intel_iommu=on iommu.strict=1"),
    ("DMA-FQ", "intel_iommu=on iommu.strict=0"),
])
def test_vm_x86_bare_metal(h100, domain, want):
    host = _run("vm", h100, {"name": "t", "vm": {"iommu_default_domain": domain,
                                                  "require_cmdqv": True}})
    assert host.status == "ok", host.message
    assert _changed(host) == ([IOMMU_TASK] if want else [])
    assert _grub(h100) == (want or "intel_iommu=on iommu=pt")
    assert _grub(h100, "GRUB_CMDLINE_LINUX_DEFAULT") == "quiet splash"
    assert _task(host, REPORT_TASK)["result"]["ansible_facts"]["vm_manual_actions"] == []


def test_vm_profile_without_vm_settings_changes_nothing(gb200):
    pristine = tree_hash(gb200)
    host = _run("vm", gb200, {"name": "t"})
    assert host.status == "ok", host.message
    assert CMDQV_TASK not in _changed(host)
    assert IOMMU_TASK not in _changed(host)
    facts = _task(host, REPORT_TASK)["result"]["ansible_facts"]
    assert facts == {"vm_reboot_required": False, "vm_manual_actions": []}
    assert tree_hash(gb200) == pristine


def test_vm_unknown_domain_fails_before_any_change(gb200):
    pristine = tree_hash(gb200)
    host = _run("vm", gb200, {"name": "t", "vm": {"iommu_default_domain": "dma"}})
    assert host.status == "failed"
    assert host.message == ("vm.iommu_passthrough: vm.iommu_default_domain: 'dma' on "
                            "architecture aarch64: known are identity, DMA, DMA-FQ on aarch64 "
                            "and x86_64; nothing was changed")
    assert tree_hash(gb200) == pristine
