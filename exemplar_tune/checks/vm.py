"""vm-layer checks: Grace CMDQ-Virtualisation next to SMMUv3, and the IOMMU default domain.

Semantics from ``drivers/iommu/arm/arm-smmu-v3/tegra241-cmdqv.c``: CMDQV (Linux >= 6.12,
``CONFIG_TEGRA241_CMDQV``) spreads SMMU invalidations over hardware queues; in a guest it
exists only when the VMM exposes a virtual SMMUv3 with CMDQV (ACPI ``NVDA200C``). It matters
only where SMMUv3 translates DMA, i.e. where some IOMMU group is not ``identity``. The state
itself is derived by the fact gatherer (``cmdqv.derive_state``); these checks judge it against
the profile."""

from __future__ import annotations

from typing import Any

from exemplar_tune.checks.base import (
    FAIL,
    PASS,
    WARN,
    Facts,
    Outcome,
    Profile,
    check,
    not_applicable,
    read_error,
    read_errors,
    source,
    unknown,
    why_unknown,
)

LAYER = "vm"
MANAGED_DOMAINS = ("DMA", "DMA-FQ", "identity")
CMDQV_PARAMS = ("disable_cmdqv", "bypass_vcmdq")
HYPERVISOR_ACTION = ("expose a virtual SMMUv3 with CMDQV: QEMU -device arm-smmuv3,accel=on "
                     "with CMDQV (iommufd backend, cold-plugged vfio-pci), libvirt "
                     "<iommu model='smmuv3'> with cmdqv='on'")
# What each CMDQV state means and what removes it (one line each).
CMDQV_STATES: dict[str, str] = {
    "not_in_kernel": "CONFIG_TEGRA241_CMDQV missing: upgrade to >= 6.12 or a vendor kernel "
                     "with the backport",
    "fallback": "the CMDQV driver fell back to the standard SMMU CMDQ: see the kernel log lines",
    "disabled_by_param": "CMDQV disabled by arm_smmu_v3.disable_cmdqv/bypass_vcmdq: "
                         "exemplar-tune apply --layer vm removes them (knob vm.cmdqv_params)",
    "no_device": "the firmware/VMM exposes no NVDA200C device",
}


def _layer(facts: Facts) -> dict[str, Any]:
    return facts.get(LAYER) or {}


def _why(facts: Facts, *keys: str) -> str:
    return why_unknown(facts, LAYER, *keys)


def _translating(facts: Facts) -> Outcome | None:
    """Not applicable unless this is arm64 with SMMUv3 translating DMA (some group not
    identity); unknown where the architecture or the IOMMU units could not be read."""
    vm = _layer(facts)
    arch, smmu = vm.get("arch"), vm.get("smmu_v3")
    if arch is None or smmu is None:
        return unknown(f"architecture or IOMMU units unknown ({_why(facts, 'arch', 'smmu_v3')})")
    if arch != "aarch64":
        return not_applicable(f"not applicable: arch {arch} (CMDQV is an arm64 Grace SMMUv3 "
                              "extension)")
    if not smmu:
        return not_applicable("not applicable: no SMMUv3 unit (/sys/class/iommu/smmu3.*)")
    groups = (vm.get("iommu") or {}).get("groups_by_type")
    if groups and set(groups) == {"identity"}:
        return not_applicable("not applicable: every IOMMU group is identity (no SMMU "
                              "translation)")
    return None


def _require_cmdqv(profile: Profile) -> Outcome | None:
    want = (profile.get(LAYER) or {}).get("require_cmdqv")
    if want is None:
        return not_applicable("profile sets no vm.require_cmdqv")
    if not want:
        return not_applicable("profile vm.require_cmdqv is false")
    return None


def _no_device_action(virtualized: bool | None) -> str:
    if virtualized:
        return f"host-side vSMMU with CMDQV needed ({HYPERVISOR_ACTION})"
    return "update the system firmware (ACPI NVDA200C companion of the SMMUv3)"


def _cmdqv_detail(cmdqv: dict[str, Any], virtualized: bool | None, kernel: str | None) -> str:
    """One line: the state, why it is not active on this host, and what removes it."""
    state = cmdqv.get("state")
    what = CMDQV_STATES.get(state, str(state))
    if state == "not_in_kernel":
        what = f"kernel {kernel}: {what}"
        if cmdqv.get("acpi_devices") == [] and virtualized:
            what += "; the VMM exposes no NVDA200C either (host-side vSMMU with CMDQV needed)"
    elif state == "fallback":
        lines = (cmdqv.get("dmesg") or {}).get("fallback_lines") or []
        what += f" ({lines[0]})" if lines else ""
    elif state == "no_device":
        what += f": {_no_device_action(virtualized)}"
    where = {True: "in a VM", False: "on bare metal"}.get(virtualized, "virtualisation unknown")
    return f"cmdqv {state} ({where}): {what}"


@check("vm.cmdqv",
       hand="the CMDQV state with architecture, virtualisation and IOMMU domains",
       severity="high", title="Grace CMDQV active where SMMUv3 translates DMA",
       risk="SMMU invalidations trap to the VMM: MoE training 12-14 % slower, dense ~3 %",
       fix="kernel >= 6.12 with CONFIG_TEGRA241_CMDQV (or a vendor backport); parameters: knob "
           "vm.cmdqv_params; in a VM, manual hypervisor action: QEMU arm-smmuv3 accel=on with "
           "CMDQV, libvirt <iommu model='smmuv3'> with cmdqv='on'")
def check_cmdqv(facts: Facts, profile: Profile) -> Outcome:
    not_judged = _translating(facts) or _require_cmdqv(profile)
    if not_judged:
        return not_judged
    vm = _layer(facts)
    cmdqv = vm.get("cmdqv") or {}
    state, reasons = cmdqv.get("state"), cmdqv.get("reasons") or []
    evidence = source(facts, LAYER, "cmdqv")
    if state == "not_applicable":
        return not_applicable(f"CMDQV state {state}: {'; '.join(reasons) or 'no evidence'}")
    if state in (None, "unknown"):
        unread = read_errors(facts, LAYER, "cmdqv")
        return unknown(f"CMDQV state {state or 'unknown'}: {'; '.join(reasons) or 'no evidence'}"
                       + (f" ({unread})" if unread else ""))
    observed = {"state": state, "virtualized": vm.get("virtualized"),
                "kernel_release": vm.get("kernel_release"), "reasons": reasons}
    if state == "active":
        return Outcome(PASS, observed, "active", "cmdqv active: " + "; ".join(reasons), evidence)
    virtualized = vm.get("virtualized")
    detail = _cmdqv_detail(cmdqv, virtualized, vm.get("kernel_release"))
    knob = "vm.cmdqv_params" if state == "disabled_by_param" else None  # a parameter: ours
    return Outcome(FAIL if virtualized else WARN, observed, "active", detail, evidence,
                   knob=knob, actions=("apply",) if knob else ())


@check("vm.cmdqv-params",
       hand="two module parameters and where each was set",
       severity="medium", title="CMDQV not turned off by a driver parameter",
       risk="disable_cmdqv or bypass_vcmdq sends every SMMU command to the single standard CMDQ: "
            "the CMDQ lock contention CMDQV exists to remove comes back",
       fix="exemplar-tune apply --layer vm (knob vm.cmdqv_params: remove "
           "arm_smmu_v3.disable_cmdqv=1 and "
           "arm_smmu_v3.bypass_vcmdq=1 from the kernel command line; reboot)",
       knob="vm.cmdqv_params")
def check_cmdqv_params(facts: Facts, profile: Profile) -> Outcome:
    not_judged = _translating(facts) or _require_cmdqv(profile)
    if not_judged:
        return not_judged
    params = (_layer(facts).get("cmdqv") or {}).get("params") or {}
    values = {name: params.get(name) for name in CMDQV_PARAMS}
    if all(v is None for v in values.values()):
        unread = read_error(facts, LAYER, "cmdqv.params")
        if unread:
            return unknown(f"arm_smmu_v3 parameters not read ({unread})")
        return not_applicable("arm_smmu_v3 has no disable_cmdqv/bypass_vcmdq parameter (driver "
                              "without CMDQV, see vm.cmdqv)")
    expected = dict.fromkeys(CMDQV_PARAMS, False)
    evidence = source(facts, LAYER, "cmdqv")
    on = [name for name, v in values.items() if v]
    if on:
        cmdline = ((_layer(facts).get("iommu") or {}).get("cmdline")) or {}
        set_by = [f"{k}={v}" for k, v in cmdline.items() if k.startswith("arm_smmu_v3.")]
        how = f" (kernel command line: {' '.join(set_by)})" if set_by else ""
        return Outcome(FAIL, values, expected,
                       f"/sys/module/arm_smmu_v3/parameters/{'+'.join(on)} = Y{how}", evidence)
    return Outcome(PASS, values, expected, "disable_cmdqv=N, bypass_vcmdq=N", evidence)


@check("vm.iommu-domain",
       hand="the IOMMU groups' types folded against the profile's domain",
       severity="medium", title="IOMMU groups use the profile's default domain",
       risk="Translated (DMA/DMA-FQ) domains map and unmap every DMA buffer and issue IOTLB "
            "invalidations; on arm64 without CMDQV they contend on the SMMU CMDQ lock "
            "(arm_smmu_cmdq_issue_cmdlist)",
       fix="exemplar-tune apply --layer vm (knob vm.iommu_passthrough: iommu.passthrough=1 "
           "or iommu=pt for identity, "
           "iommu.strict=0 for DMA-FQ on the kernel command line; reboot)",
       knob="vm.iommu_passthrough")
def check_iommu_domain(facts: Facts, profile: Profile) -> Outcome:
    want = (profile.get(LAYER) or {}).get("iommu_default_domain")
    if want is None:
        return not_applicable("profile sets no vm.iommu_default_domain")
    iommu = _layer(facts).get("iommu")
    groups = None if iommu is None else iommu.get("groups_by_type")
    if groups is None:
        return unknown(f"IOMMU groups unknown ({_why(facts, 'iommu.groups_by_type')})")
    evidence = source(facts, LAYER, "iommu")
    if not groups:
        return not_applicable("no IOMMU group (IOMMU off or absent): nothing is translated")
    other = {kind: n for kind, n in groups.items() if kind in MANAGED_DOMAINS and kind != want}
    if other:
        counts = ", ".join(f"{n} {kind}" for kind, n in other.items())
        return Outcome(WARN, groups, want,
                       f"{counts} of {sum(groups.values())} IOMMU groups are not {want} "
                       f"(kernel command line: {_cmdline(iommu)})", evidence)
    rest = {k: n for k, n in groups.items() if k != want}
    extra = f" (also {', '.join(f'{n} {k}' for k, n in rest.items())})" if rest else ""
    return Outcome(PASS, groups, want,
                   f"{groups.get(want, 0)} IOMMU groups {want}{extra}", evidence)


def _cmdline(iommu: dict[str, Any]) -> str:
    params = iommu.get("cmdline") or {}
    words = [k if v is None else f"{k}={v}" for k, v in params.items()]
    return " ".join(words) or "no IOMMU parameter"
