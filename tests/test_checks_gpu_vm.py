"""gpu- and vm-layer checks: the fixture hosts' verdicts, then one case per branch.

Fixture cases gather the real facts of ``tests/fixtures/sysroots/<host>``; branch cases copy
those facts and change one value (``_changed``), so every case starts from a real fact shape.
"""

from __future__ import annotations

import copy
import functools
import shutil
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.xid import parse_xid_events
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, PASS, SKIP, WARN, Outcome
from exemplar_tune.checks.run import run_checks
from exemplar_tune.profile import load_profile

from .conftest import SYSROOTS

GPU_IDS = ("gpu.count", "gpu.product", "gpu.persistence-mode", "gpu.ecc-uncorrectable",
           "gpu.remapped-rows", "gpu.retired-pages-pending", "gpu.pcie-link",
           "gpu.clock-events", "gpu.temperature", "gpu.fabric-state", "gpu.nvlink-links",
           "gpu.imex", "gpu.dcgm-diag", "gpu.xids")
VM_IDS = ("vm.cmdqv", "vm.cmdqv-params", "vm.iommu-domain")
BY_ID = {c.id: c for c in CHECKS}

# (host, profile) -> the exact status of every gpu/vm check.
FIXTURE_STATUSES: dict[tuple[str, str], dict[str, str]] = {
    ("h100-x86", "h100-x86"): {
        "gpu.count": PASS, "gpu.product": PASS, "gpu.persistence-mode": FAIL,
        "gpu.ecc-uncorrectable": PASS, "gpu.remapped-rows": FAIL,
        "gpu.retired-pages-pending": SKIP, "gpu.pcie-link": PASS, "gpu.clock-events": PASS,
        "gpu.temperature": PASS, "gpu.fabric-state": PASS,
        "gpu.nvlink-links": SKIP, "gpu.imex": SKIP, "gpu.dcgm-diag": SKIP, "gpu.xids": WARN,
        "vm.cmdqv": SKIP, "vm.cmdqv-params": SKIP, "vm.iommu-domain": PASS,
    },
    ("healthy-h100", "h100-x86"): {
        "gpu.count": PASS, "gpu.product": PASS, "gpu.persistence-mode": PASS,
        "gpu.ecc-uncorrectable": PASS, "gpu.remapped-rows": PASS,
        "gpu.retired-pages-pending": SKIP, "gpu.pcie-link": PASS, "gpu.clock-events": PASS,
        "gpu.temperature": PASS, "gpu.fabric-state": PASS,  # nvlink -s captured: 18 links each
        "gpu.nvlink-links": PASS, "gpu.imex": SKIP, "gpu.dcgm-diag": SKIP, "gpu.xids": PASS,
        "vm.cmdqv": SKIP, "vm.cmdqv-params": SKIP, "vm.iommu-domain": PASS,
    },
    ("gb200-grace-vm", "gb200-grace"): {
        "gpu.count": PASS, "gpu.product": PASS, "gpu.persistence-mode": PASS,
        "gpu.ecc-uncorrectable": PASS, "gpu.remapped-rows": PASS,
        "gpu.retired-pages-pending": SKIP, "gpu.pcie-link": PASS, "gpu.clock-events": PASS,
        "gpu.temperature": PASS, "gpu.fabric-state": PASS,
        "gpu.nvlink-links": SKIP, "gpu.imex": SKIP, "gpu.dcgm-diag": SKIP, "gpu.xids": PASS,
        "vm.cmdqv": FAIL, "vm.cmdqv-params": SKIP, "vm.iommu-domain": SKIP,
    },
}


@functools.cache
def _facts(host: str) -> dict[str, Any]:
    return gather_facts(Sysroot(str(SYSROOTS / host)), ["gpu", "vm"])


@functools.cache
def _profile(name: str) -> dict[str, Any]:
    return load_profile(name)


def _run(check_id: str, facts: dict[str, Any], profile: dict[str, Any]) -> Outcome:
    return BY_ID[check_id].func(facts, profile)


def _changed(host: str, *edits: tuple[str, Any]) -> dict[str, Any]:
    """A deep copy of ``host``'s facts with ``("gpu.gpus.3.pcie.width_current", 8)`` applied.

    A path segment ``*`` sets the value in every element of a list.
    """
    facts = copy.deepcopy(_facts(host))
    for path, value in edits:
        _set(facts, path.split("."), value)
    return facts


def _set(node: Any, keys: list[str], value: Any) -> None:
    head, rest = keys[0], keys[1:]
    if head == "*":
        for index in range(len(node)):
            _set(node, [str(index), *rest], value)
        return
    key: Any = int(head) if isinstance(node, list) else head
    if rest:
        _set(node[key], rest, value)
    else:
        node[key] = value


def _without(profile: str, section: str, key: str) -> dict[str, Any]:
    data = copy.deepcopy(_profile(profile))
    data.get(section, {}).pop(key, None)
    return data


def _with(profile: str, section: str, key: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(_profile(profile))
    data.setdefault(section, {})[key] = value
    return data


# -- registry --------------------------------------------------------------------------------


def test_every_check_is_registered_once_with_one_line_risk_and_fix():
    for check_id in GPU_IDS + VM_IDS:
        found = [c for c in CHECKS if c.id == check_id]
        assert len(found) == 1, check_id
        item = found[0]
        assert item.layer == check_id.split(".")[0]
        assert item.risk and "\n" not in item.risk and item.fix and "\n" not in item.fix
    assert BY_ID["gpu.persistence-mode"].knob == "gpu.persistence_mode"
    assert BY_ID["vm.cmdqv-params"].knob == "vm.cmdqv_params"
    assert BY_ID["vm.iommu-domain"].knob == "vm.iommu_passthrough"
    assert BY_ID["vm.cmdqv"].risk == ("SMMU invalidations trap to the VMM: MoE training "
                                      "12-14 % slower, dense ~3 %")
    assert "vm.cmdqv_params" in BY_ID["vm.cmdqv"].fix and "smmuv3" in BY_ID["vm.cmdqv"].fix


# -- fixture hosts ---------------------------------------------------------------------------


@pytest.mark.parametrize(("host", "profile"), list(FIXTURE_STATUSES))
def test_fixture_statuses(host: str, profile: str):
    want = FIXTURE_STATUSES[(host, profile)]
    results = run_checks(_facts(host), _profile(profile), layers=["gpu", "vm"])
    have = {r.id: r.status for r in results if r.id in want}
    assert have == want
    for r in results:
        assert r.detail and "\n" not in r.detail, r.id
        if r.status != SKIP:
            assert r.evidence, r.id


def test_healthy_h100_has_no_gpu_or_vm_finding():
    results = run_checks(_facts("healthy-h100"), _profile("h100-x86"), layers=["gpu", "vm"])
    assert {r.status for r in results} <= {PASS, SKIP}


def test_h100_x86_names_the_gpu_without_persistence():
    have = _run("gpu.persistence-mode", _facts("h100-x86"), _profile("h100-x86"))
    assert "00000000:C2:00.0" in have.detail and "1 of 8" in have.detail
    assert have.observed["00000000:C2:00.0"] is False and have.expected is True
    assert have.evidence == ("nvidia-smi -q -x",)


def test_h100_x86_remap_pending_and_xid_incidents():
    remap = _run("gpu.remapped-rows", _facts("h100-x86"), _profile("h100-x86"))
    assert "00000000:C2:00.0" in remap.detail and "reset GPU to activate" in remap.detail
    xids = _run("gpu.xids", _facts("h100-x86"), _profile("h100-x86"))
    # Xid 63 (row remap recorded) is IGNORE in NVIDIA's catalog: it warns; Xid 31 RESTART_APP
    # is the application's fault, noted; the pending remap itself fails gpu.remapped-rows.
    assert xids.status == WARN
    assert [(r["gpu"], r["xid"], r["action"], r["status"], r["incidents"], r["lines"])
            for r in xids.observed] == [
        ("00000000:C2:00.0", 63, "IGNORE", WARN, 1, 1),
        ("00000000:E0:00.0", 31, "RESTART_APP", "note", 1, 1)]
    assert "GPU memory remapping event" in xids.detail and "[86412.003816]" in xids.detail
    assert "the application's own faults, not the GPU's" in xids.detail
    assert "IGNORE on 00000000:C2:00.0" in xids.fix and "RESTART_APP" not in xids.fix
    assert xids.evidence == ("dmesg",)


def test_gb200_grace_vm_cmdqv_not_in_kernel():
    have = _run("vm.cmdqv", _facts("gb200-grace-vm"), _profile("gb200-grace"))
    assert have.status == FAIL
    assert "not_in_kernel" in have.detail and ">= 6.12" in have.detail
    assert "6.8.0-1017-nvidia-64k" in have.detail and "in a VM" in have.detail
    assert "NVDA200C" in have.detail
    assert have.observed["state"] == "not_in_kernel" and have.expected == "active"
    assert have.evidence and "/boot/config-6.8.0-1017-nvidia-64k" in have.evidence[0]


# -- branch cases: (check, host, profile, facts edits, want status, text in detail) ---------

Edit = tuple[str, Any]
G3 = "gpu.gpus.3"
ALL = "gpu.gpus.*"
BRANCHES: list[tuple[str, str, str | dict[str, Any], tuple[Edit, ...], str, str]] = [
    # gpu.count
    ("gpu.count", "healthy-h100", "h100-x86", (("gpu.count", 7),), FAIL, "7 GPUs visible"),
    ("gpu.count", "healthy-h100", "h100-x86", (("gpu.count", 9),), PASS, "expects 8"),
    ("gpu.count", "healthy-h100", "h100-x86",
     (("gpu.present", False), ("gpu.count", 0), ("gpu.reason", "nvidia-smi: not found")),
     FAIL, "no GPU visible (nvidia-smi: not found)"),
    ("gpu.count", "healthy-h100", "h100-x86",
     (("gpu.present", None), ("gpu.count", None)), SKIP, "unknown"),
    ("gpu.count", "healthy-h100", _without("h100-x86", "gpu", "count"), (), SKIP,
     "profile sets no gpu.count"),
    # gpu.ecc-uncorrectable
    ("gpu.ecc-uncorrectable", "healthy-h100", "h100-x86",
     ((f"{G3}.ecc.volatile.uncorrectable", 2), (f"{G3}.ecc.aggregate.uncorrectable", 2)),
     FAIL, "00000000:C2:00.0: 2 volatile uncorrectable"),
    ("gpu.ecc-uncorrectable", "healthy-h100", "h100-x86",
     ((f"{G3}.ecc.aggregate.uncorrectable", 3),), WARN, "3 aggregate"),
    ("gpu.ecc-uncorrectable", "healthy-h100", "h100-x86",
     ((f"{G3}.ecc.sram_threshold_exceeded", True),), FAIL, "SRAM uncorrectable threshold"),
    ("gpu.ecc-uncorrectable", "healthy-h100", "h100-x86",
     ((f"{ALL}.ecc.volatile.uncorrectable", None), (f"{ALL}.ecc.aggregate.uncorrectable", None)),
     SKIP, "not reported"),
    # gpu.remapped-rows
    ("gpu.remapped-rows", "healthy-h100", "h100-x86", ((f"{G3}.remapped_rows.failure", True),),
     FAIL, "00000000:C2:00.0: row remapping failure: drain and RMA"),
    ("gpu.remapped-rows", "healthy-h100", "h100-x86",
     ((f"{G3}.remapped_rows.uncorrectable", 513),), FAIL, "513 uncorrectable remapped rows"),
    ("gpu.remapped-rows", "healthy-h100", "h100-x86",
     ((f"{ALL}.remapped_rows.pending", None), (f"{ALL}.remapped_rows.failure", None)),
     SKIP, "remapped rows not reported"),
    # gpu.pcie-link: width below max fails, gen below max alone warns
    ("gpu.pcie-link", "healthy-h100", "h100-x86", ((f"{G3}.pcie.width_current", 8),), FAIL,
     "00000000:C2:00.0: width x8 < max x16"),
    ("gpu.pcie-link", "healthy-h100", "h100-x86", ((f"{G3}.pcie.gen_current", 3),), WARN,
     "gen 3 < profile gen 5"),
    ("gpu.pcie-link", "gb200-grace-vm", "gb200-grace", (("gpu.gpus.0.pcie.gen_current", 1),),
     WARN, "gen 1 < max gen 5"),
    ("gpu.pcie-link", "healthy-h100", "h100-x86",
     ((f"{G3}.pcie.gen_current", 4), (f"{G3}.pcie.gen_max", 4)), FAIL, "max gen 4 < profile"),
    ("gpu.pcie-link", "healthy-h100", "h100-x86",
     ((f"{G3}.pcie.width_current", 8), (f"{G3}.pcie.width_max", 8)), FAIL,
     "max width x8 < profile x16"),
    ("gpu.pcie-link", "healthy-h100", _with("h100-x86", "gpu", "pcie_width_min", 32), (), FAIL,
     "width x16 < profile x32"),
    ("gpu.pcie-link", "healthy-h100", "h100-x86",
     ((f"{ALL}.pcie.gen_current", None), (f"{ALL}.pcie.width_current", None)), SKIP,
     "not reported"),
    # gpu.clock-events
    ("gpu.clock-events", "healthy-h100", "h100-x86",
     ((f"{G3}.clocks_event_reasons_active", ["sw_power_cap"]),), WARN,
     "00000000:C2:00.0: sw_power_cap"),
    ("gpu.clock-events", "healthy-h100", "h100-x86",
     ((f"{G3}.clocks_event_reasons_active", ["gpu_idle", "applications_clocks_setting"]),),
     PASS, "no slowdown"),
    ("gpu.clock-events", "healthy-h100", "h100-x86",
     ((f"{ALL}.clocks_event_reasons_active", None),), SKIP, "not reported"),
    # gpu.xids
    ("gpu.xids", "healthy-h100", "h100-x86", (("gpu.xids", None),), SKIP,
     "kernel log not readable"),
    ("gpu.xids", "healthy-h100", "h100-x86", (("gpu.present", False),), SKIP, "no GPU"),
    # gpu.dcgm-diag: not asked for, or asked for and DCGM gave nothing
    ("gpu.dcgm-diag", "healthy-h100", "h100-x86", (), SKIP, "DCGM diagnostics not run"),
    ("gpu.dcgm-diag", "healthy-h100", "h100-x86",
     (("gpu.dcgm_diag", {"absent": "dcgmi not installed (no such program on the host)"}),),
     SKIP, "DCGM absent: dcgmi not installed"),
    # vm.cmdqv: the state and whether this is a VM decide
    ("vm.cmdqv", "gb200-grace-vm", "gb200-grace", (("vm.virtualized", False),), WARN,
     "not_in_kernel (on bare metal)"),
    ("vm.cmdqv", "gb200-grace-vm", "gb200-grace", (("vm.virtualized", None),), WARN,
     "virtualisation unknown"),
    ("vm.cmdqv", "gb200-grace-vm", "gb200-grace",
     (("vm.cmdqv.state", "active"),
      ("vm.cmdqv.reasons", ["kernel log: found companion CMDQV device: NVDA200C:00"])),
     PASS, "found companion CMDQV device"),
    ("vm.cmdqv", "gb200-grace-vm", "gb200-grace",
     (("vm.cmdqv.state", "fallback"),
      ("vm.cmdqv.dmesg.fallback_lines",
       ["tegra241_cmdqv: Falling back to standard SMMU CMDQ"])),
     FAIL, "fallback (in a VM): the CMDQV driver fell back"),
    ("vm.cmdqv", "gb200-grace-vm", "gb200-grace",
     (("vm.cmdqv.state", "disabled_by_param"),), FAIL, "vm.cmdqv_params"),
    ("vm.cmdqv", "gb200-grace-vm", "gb200-grace", (("vm.cmdqv.state", "no_device"),), FAIL,
     "host-side vSMMU with CMDQV needed"),
    ("vm.cmdqv", "gb200-grace-vm", "gb200-grace",
     (("vm.cmdqv.state", "no_device"), ("vm.virtualized", False)), WARN,
     "update the system firmware"),
    ("vm.cmdqv", "gb200-grace-vm", "gb200-grace",
     (("vm.cmdqv.state", "unknown"), ("vm.cmdqv.reasons", ["kernel log unavailable"])), SKIP,
     "kernel log unavailable"),
    ("vm.cmdqv", "gb200-grace-vm", "gb200-grace",
     (("vm.iommu.groups_by_type", {"identity": 16}),), SKIP, "not applicable: every IOMMU"),
    ("vm.cmdqv", "gb200-grace-vm", "gb200-grace", (("vm.smmu_v3", False),), SKIP,
     "not applicable: no SMMUv3"),
    ("vm.cmdqv", "gb200-grace-vm", "gb200-grace", (("vm.arch", None),), SKIP, "unknown"),
    ("vm.cmdqv", "h100-x86", "gb200-grace", (), SKIP, "not applicable: arch x86_64"),
    ("vm.cmdqv", "gb200-grace-vm", "h100-x86", (), SKIP, "profile sets no vm.require_cmdqv"),
    ("vm.cmdqv", "gb200-grace-vm", _with("gb200-grace", "vm", "require_cmdqv", False), (),
     SKIP, "require_cmdqv is false"),
    # vm.cmdqv-params
    ("vm.cmdqv-params", "gb200-grace-vm", "gb200-grace",
     (("vm.cmdqv.params", {"disable_cmdqv": True, "bypass_vcmdq": False}),
      ("vm.iommu.cmdline", {"arm_smmu_v3.disable_cmdqv": "1"})),
     FAIL, "disable_cmdqv = Y (kernel command line: arm_smmu_v3.disable_cmdqv=1)"),
    ("vm.cmdqv-params", "gb200-grace-vm", "gb200-grace",
     (("vm.cmdqv.params", {"disable_cmdqv": False, "bypass_vcmdq": True}),), FAIL,
     "bypass_vcmdq = Y"),
    ("vm.cmdqv-params", "gb200-grace-vm", "gb200-grace",
     (("vm.cmdqv.params", {"disable_cmdqv": False, "bypass_vcmdq": False}),), PASS,
     "disable_cmdqv=N"),
    ("vm.cmdqv-params", "h100-x86", "gb200-grace", (), SKIP, "not applicable"),
    # vm.iommu-domain
    ("vm.iommu-domain", "healthy-h100", "h100-x86",
     (("vm.iommu.groups_by_type", {"DMA": 2, "DMA-FQ": 1, "identity": 14}),), WARN,
     "2 DMA, 1 DMA-FQ of 17 IOMMU groups are not identity (kernel command line: iommu=pt"),
    ("vm.iommu-domain", "healthy-h100", "h100-x86",
     (("vm.iommu.groups_by_type", {"identity": 15, "unmanaged": 2}),), PASS, "also 2 unmanaged"),
    ("vm.iommu-domain", "gb200-grace-vm", _with("gb200-grace", "vm", "iommu_default_domain",
                                                "identity"), (), WARN, "16 DMA of 16"),
    ("vm.iommu-domain", "gb200-grace-vm", _with("gb200-grace", "vm", "iommu_default_domain",
                                                "DMA"), (), PASS, "16 IOMMU groups DMA"),
    ("vm.iommu-domain", "healthy-h100", "h100-x86", (("vm.iommu.groups_by_type", None),), SKIP,
     "IOMMU groups unknown"),
    ("vm.iommu-domain", "healthy-h100", "h100-x86", (("vm.iommu", None),), SKIP,
     "IOMMU groups unknown"),
    ("vm.iommu-domain", "healthy-h100", "h100-x86", (("vm.iommu.groups_by_type", {}),), SKIP,
     "no IOMMU group"),
]


# The skipped branches that could not be judged (check, detail text); every other skipped
# branch does not apply (profile silent, no GPU, not reported by this GPU, not arm64 ...).
UNKNOWN_BRANCHES = {
    ("gpu.count", "unknown"), ("gpu.xids", "kernel log not readable"),
    ("gpu.dcgm-diag", "DCGM absent: dcgmi not installed"),
    ("vm.cmdqv", "kernel log unavailable"), ("vm.cmdqv", "unknown"),
    ("vm.iommu-domain", "IOMMU groups unknown"),
}


def test_unknown_branches_are_skip_branches():
    skips = {(b[0], b[5]) for b in BRANCHES if b[4] == SKIP}
    assert not UNKNOWN_BRANCHES - skips, UNKNOWN_BRANCHES - skips


@pytest.mark.parametrize(("check_id", "host", "profile", "edits", "want", "text"), BRANCHES,
                         ids=[f"{b[0]}-{b[4]}-{i}" for i, b in enumerate(BRANCHES)])
def test_branch(check_id: str, host: str, profile: str | dict[str, Any],
                edits: tuple[Edit, ...], want: str, text: str):
    prof = _profile(profile) if isinstance(profile, str) else profile
    have = _run(check_id, _changed(host, *edits), prof)
    assert (have.status, text in have.detail) == (want, True), have.detail
    assert "\n" not in have.detail
    assert have.unknown is ((check_id, text) in UNKNOWN_BRANCHES), have.detail


# -- not applicable vs unknown on real fixture trees -------------------------------------------

GPU_JUDGED = [i for i in GPU_IDS if i != "gpu.dcgm-diag"]  # dcgm-diag: not asked for here


def _tree(tmp_path: Path, host: str) -> Path:
    """A copy of fixture sysroot ``host`` to break."""
    root = tmp_path / host
    shutil.copytree(SYSROOTS / host, root, symlinks=True)
    return root


def _outcomes(root: Path, profile: str, layers: list[str]) -> dict[str, Outcome]:
    facts = gather_facts(Sysroot(str(root)), layers)
    return {c.id: c.func(facts, _profile(profile)) for c in CHECKS if c.layer in ("gpu", "vm")}


def test_garbled_nvidia_smi_capture_leaves_the_gpu_checks_unknown(tmp_path: Path):
    """GPUs there, their nvidia-smi report cut in half: no GPU check can judge them (unknown,
    naming the file and why); nvidia-smi itself fails, as a broken nvidia-smi does."""
    root = _tree(tmp_path, "healthy-h100")
    xml = root / ".exemplar/commands/nvidia-smi-q-x.xml"
    xml.write_text(xml.read_text()[:5000])
    found = _outcomes(root, "h100-x86", ["gpu", "vm", "cpu"])
    for check_id in GPU_JUDGED:
        have = found[check_id]
        assert (have.status, have.unknown) == (SKIP, True), check_id
        assert "/.exemplar/commands/nvidia-smi-q-x.xml: malformed XML" in have.detail, check_id
    assert found["gpu.nvidia-smi"].status == FAIL
    assert (found["gpu.dcgm-diag"].status, found["gpu.dcgm-diag"].unknown) == (SKIP, False)


def test_gpus_on_the_bus_without_nvidia_smi_are_unknown_not_absent(tmp_path: Path):
    """The capture lacks nvidia-smi but the PCI bus shows the 8 H100s: the GPU checks cannot
    judge them (unknown), they do not call the host GPU-less."""
    root = _tree(tmp_path, "healthy-h100")
    (root / ".exemplar/commands/nvidia-smi-q-x.xml").unlink()
    found = _outcomes(root, "h100-x86", ["gpu", "vm", "cpu"])
    for check_id in [*GPU_JUDGED, "gpu.nvidia-smi"]:
        if check_id == "gpu.count":  # a GPU count the profile expects: no GPU visible fails
            assert found[check_id].status == FAIL
            continue
        have = found[check_id]
        assert (have.status, have.unknown) == (SKIP, True), check_id
        assert "8 NVIDIA GPUs on the PCI bus" in have.detail, check_id
        assert "nvidia-smi-q-x.xml: not captured" in have.detail, check_id


def test_a_host_without_gpus_makes_the_gpu_checks_not_applicable(tmp_path: Path):
    """A CPU node: no nvidia-smi and no NVIDIA device on the PCI bus."""
    root = _tree(tmp_path, "h100-x86")
    (root / ".exemplar/commands/nvidia-smi-q-x.xml").unlink()
    for link in (root / "sys/bus/pci/devices").iterdir():
        device = link.resolve()
        if (device / "vendor").read_text().strip() == "0x10de":
            link.unlink()
            shutil.rmtree(device)
    found = _outcomes(root, "h100-x86", ["gpu", "vm", "cpu"])
    for check_id in [i for i in GPU_JUDGED if i not in ("gpu.count", "gpu.xids")]:
        have = found[check_id]
        assert (have.status, have.unknown) == (SKIP, False), check_id
        assert have.detail.startswith("no GPU on this host"), check_id
    assert (found["gpu.nvidia-smi"].status, found["gpu.nvidia-smi"].unknown) == (SKIP, False)


def test_vm_checks_not_applicable_on_x86_unknown_when_the_arch_cannot_be_read(tmp_path: Path):
    x86 = _outcomes(SYSROOTS / "h100-x86", "gb200-grace", ["vm"])["vm.cmdqv"]
    assert (x86.status, x86.unknown) == (SKIP, False)
    assert x86.detail.startswith("not applicable: arch x86_64")
    root = _tree(tmp_path, "gb200-grace-vm")
    (root / "proc/sys/kernel/arch").write_text("aarch64 (emulated)\n")
    have = _outcomes(root, "gb200-grace", ["vm"])["vm.cmdqv"]
    assert (have.status, have.unknown) == (SKIP, True)
    assert "/proc/sys/kernel/arch: not a machine name" in have.detail


def test_an_unreadable_iommu_group_type_leaves_the_domain_unknown(tmp_path: Path):
    root = _tree(tmp_path, "healthy-h100")
    (root / "sys/kernel/iommu_groups/0/type").write_text("\n")
    have = _outcomes(root, "h100-x86", ["vm"])["vm.iommu-domain"]
    assert (have.status, have.unknown) == (SKIP, True)
    assert "/sys/kernel/iommu_groups/0/type" in have.detail
    absent = _with("h100-x86", "vm", "iommu_default_domain", None)
    silent = BY_ID["vm.iommu-domain"].func(_facts("healthy-h100"), absent)
    assert (silent.status, silent.unknown, silent.detail) == (
        SKIP, False, "profile sets no vm.iommu_default_domain")


@pytest.mark.parametrize("reason", ["hw_slowdown", "hw_thermal_slowdown",
                                    "hw_power_brake_slowdown", "sw_thermal_slowdown"])
def test_clock_event_slowdowns_fail(reason: str):
    facts = _changed("healthy-h100", (f"{G3}.clocks_event_reasons_active", ["gpu_idle", reason]))
    have = _run("gpu.clock-events", facts, _profile("h100-x86"))
    assert have.status == FAIL
    assert have.observed == {"00000000:C2:00.0": [reason]}


# -- Xid incidents: catalog action -> status (default policy) -----------------------------


def _xid_lines(*numbers: int, bdf: str = "c2:00", start: float = 100.0, step: float = 1.0) -> list:
    """Events of kernel-log lines in the driver's format (kernel_rc.c ``XID_PRINT_WITH_ATTR``,
    no process attributed), one per number, ``step`` seconds apart."""
    text = "".join(f"[{start + k * step:12.6f}] NVRM: Xid (PCI:0000:{bdf}): {n}, detail\n"
                   for k, n in enumerate(numbers))
    return parse_xid_events(text)


XID_CASES = [  # (Xid, action from NVIDIA's catalog, default status: an application's is noted)
    (13, "RESTART_APP", PASS), (31, "RESTART_APP", PASS), (43, "IGNORE", WARN),
    (45, "RESTART_APP", PASS), (8, "RESTART_APP", PASS), (63, "IGNORE", WARN),
    (92, "IGNORE", WARN), (94, "RESTART_APP", PASS), (999, "INVESTIGATE", WARN),
    (48, "RESET_GPU", FAIL), (62, "RESET_GPU", FAIL), (64, "RESET_GPU", FAIL),
    (74, "RESET_GPU", FAIL), (95, "RESET_GPU", FAIL), (109, "RESET_GPU", FAIL),
    (119, "RESET_GPU", FAIL), (120, "RESET_GPU", FAIL), (79, "REBOOT", FAIL),
    (54, "HARDWARE", FAIL),
]


@pytest.mark.parametrize(("number", "action", "want"), XID_CASES)
def test_xid_action_and_status(number: int, action: str, want: str):
    # two lines 1 s apart: one incident of two lines
    facts = _changed("healthy-h100", ("gpu.xids", _xid_lines(number, number)))
    have = _run("gpu.xids", facts, _profile("h100-x86"))
    assert have.status == want
    (row,) = have.observed
    assert (row["gpu"], row["xid"], row["incidents"], row["lines"], row["action"]) == (
        "00000000:C2:00.0", number, 1, 2, action)
    assert f"Xid {number}" in have.detail and "00000000:C2:00.0" in have.detail
    assert f"-> {action} (" in have.detail
    if want == PASS:  # named, and the job is to be restarted: no action on the node
        assert "not the GPU's (restart the job" in have.detail and have.fix is None
    else:
        assert f"{action} on 00000000:C2:00.0" in have.fix


def test_fallen_off_bus_joins_its_xid_79_and_fails():
    text = ("[6781741.548779] NVRM: Xid (PCI:0000:ea:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus.\n"
            "[6781741.548783] NVRM: GPU 0000:ea:00.0: GPU has fallen off the bus.\n"
            "[6781800.000000] NVRM: Xid (PCI:0000:a4:00): 13, pid=7, name=python, Graphics\n")
    facts = _changed("healthy-h100", ("gpu.xids", parse_xid_events(text)))
    have = _run("gpu.xids", facts, _profile("h100-x86"))
    assert have.status == FAIL
    assert [(r["gpu"], r["xid"], r["incidents"], r["lines"], r["status"])
            for r in have.observed] == [
        ("00000000:EA:00.0", 79, 1, 2, FAIL), ("00000000:A4:00.0", 13, 1, 1, "note")]
    assert have.fix.startswith("manual: REBOOT on 00000000:EA:00.0: drain and power-cycle")


def test_check_on_missing_layer_skips_instead_of_raising():
    for check_id in GPU_IDS + VM_IDS:
        assert _run(check_id, {}, _profile("gb200-grace")).status == SKIP, check_id


def test_no_gpu_skips_every_gpu_check_but_count():
    facts = _changed("healthy-h100", ("gpu.present", False), ("gpu.count", 0),
                     ("gpu.gpus", []), ("gpu.xids", []), ("gpu.reason", "no GPU listed"))
    statuses = {cid: _run(cid, facts, _profile("h100-x86")).status for cid in GPU_IDS}
    assert statuses.pop("gpu.count") == FAIL
    assert set(statuses.values()) == {SKIP}
