"""The vm layer's knobs: the kernel arguments that keep CMDQV off, and the IOMMU domain."""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.changes import Change
from ansible_collections.exemplar.tune.plugins.module_utils.grub import plan_cmdline
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import (
    BOOTLOADER,
    Knob,
    KnobInputError,
    Setting,
    Target,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import (
    WORD,
    clean_path,
    matching,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

# Kernel arguments per architecture and IOMMU default domain (Documentation/admin-guide/
# kernel-parameters.txt): iommu.passthrough (ARM64, X86), iommu=pt (X86), iommu.strict
# (0 lazy = DMA-FQ, 1 strict = DMA). Names in add replace any earlier value of the same name.
IOMMU_CMDLINE: dict[str, dict[str, tuple[list[str], dict[str, str]]]] = {
    "aarch64": {
        "identity": ([], {"iommu.passthrough": "1"}),
        "DMA": ([], {"iommu.passthrough": "0", "iommu.strict": "1"}),
        "DMA-FQ": ([], {"iommu.passthrough": "0", "iommu.strict": "0"}),
    },
    "x86_64": {
        "identity": (["iommu.passthrough"], {"iommu": "pt"}),
        "DMA": (["iommu.passthrough", "iommu"], {"iommu.strict": "1"}),
        "DMA-FQ": (["iommu.passthrough", "iommu"], {"iommu.strict": "0"}),
    },
}
GRUB_PATH = Setting("vm_grub_path", "/etc/default/grub",
                    "Bootloader defaults file holding the kernel command line.")


def _grub(target: Target) -> str:
    return clean_path(target.settings["vm_grub_path"], "vm_grub_path")


def plan_cmdqv_params(root: Sysroot, target: Target) -> list[Change]:
    """Remove the kernel arguments that turn CMDQV off (next boot)."""
    if not target.want.get("require_cmdqv"):
        return []
    remove = [matching(n, WORD, "vm_cmdqv_params_remove")
              for n in target.settings["vm_cmdqv_params_remove"]]
    return plan_cmdline(root, _grub(target), remove, {},
                        target.settings["exemplar_bootloader_command"])


def plan_iommu(root: Sysroot, target: Target) -> list[Change]:
    """Set the IOMMU default domain on the kernel command line (next boot)."""
    domain = target.want.get("iommu_default_domain")
    if domain is None:
        return []
    arch = target.facts.get("arch")
    args = IOMMU_CMDLINE.get(arch or "", {}).get(str(domain))
    if args is None:
        raise KnobInputError("vm.iommu_default_domain", f"{domain!r} on architecture {arch}: "
                             "known are identity, DMA, DMA-FQ on aarch64 and x86_64")
    return plan_cmdline(root, _grub(target), args[0], dict(args[1]),
                        target.settings["exemplar_bootloader_command"])


def manual_actions(target: Target) -> list[dict[str, Any]]:
    """The hypervisor-side action a guest needs when CMDQV is off for a reason only the host
    (or the guest kernel) can remove; ``disabled_by_param`` is the cmdqv_params knob's job."""
    facts, require_cmdqv = target.facts, bool(target.want.get("require_cmdqv"))
    cmdqv = facts.get("cmdqv") or {}
    domains = set((facts.get("iommu") or {}).get("groups_by_type") or {}) - {"identity"}
    if not (require_cmdqv and facts.get("virtualized") is True and facts.get("arch") == "aarch64"
            and facts.get("smmu_v3") is True and domains
            and cmdqv.get("state", "unknown") not in ("active", "not_applicable",
                                                       "disabled_by_param")):
        return []
    return [{"check": "vm.cmdqv", "where": "hypervisor",
             "summary": f"CMDQV {cmdqv.get('state', 'unknown')} in this "
                        f"{facts.get('hypervisor') or ''} guest "
                        f"({'; '.join(cmdqv.get('reasons') or [])}): the SMMU invalidations "
                        "trap to the VMM; only the host can expose CMDQV to the guest",
             "steps": [
                 "Host: give the VM a virtual SMMUv3 with CMDQV acceleration on an iommufd "
                 "backend - QEMU -object iommufd,id=iommufd0 -device arm-smmuv3,primary-bus="
                 "<root port>,accel=on,cmdqv=on (the property name varies by QEMU release: "
                 "qemu-system-aarch64 -device arm-smmuv3,help), libvirt <iommu model='smmuv3'>"
                 "<driver ... cmdqv='on'/></iommu>; the host kernel needs CONFIG_IOMMUFD, "
                 "CONFIG_VFIO_DEVICE_CDEV and CONFIG_ARM_SMMU_V3_IOMMUFD",
                 "Host: attach the GPUs and NICs as cold-plugged vfio-pci devices on that "
                 "iommufd (-device vfio-pci,host=<BDF>,iommufd=iommufd0 at VM start; an "
                 "accelerated vSMMU does not take hot-plugged devices)",
                 "Guest: kernel >= 6.12 (or a vendor backport) with CONFIG_TEGRA241_CMDQV=y; "
                 "after the restart the guest kernel log shows 'found companion CMDQV device: "
                 "NVDA200C:00'"]}]


ROLE_SUMMARY = ("CMDQV and IOMMU kernel arguments for the next boot; report hypervisor "
                "actions")
ROLE_NOTES = (
    "Both knobs edit the bootloader defaults only and regenerate the bootloader configuration "
    "on a live host; nothing reboots. C(vm_reboot_required) is set when either changed the "
    "file.",
    "Read-only - in a guest on arm64 whose SMMUv3 translates DMA and whose CMDQV is not active "
    "for a reason outside the guest (no NVDA200C device, kernel without CMDQV, fallback), the "
    "role warns of the hypervisor-side action and sets C(vm_manual_actions) to its steps "
    "(QEMU/libvirt vSMMUv3 with CMDQV on iommufd, cold-plugged vfio-pci, guest kernel >= 6.12 "
    "with CONFIG_TEGRA241_CMDQV). The role cannot make that change.",
)

KNOBS: tuple[Knob, ...] = (
    Knob("vm", "cmdqv_params", "remove the kernel arguments that turn CMDQV off",
         plan_cmdqv_params,
         {"require_cmdqv": {"type": "boolean",
                            "description": "arm64 hosts with SMMUv3 translation must use CMDQV"}},
         {"vm_require_cmdqv": "require_cmdqv"},
         (Setting("vm_cmdqv_params_remove", ["arm_smmu_v3.disable_cmdqv",
                                             "arm_smmu_v3.bypass_vcmdq"],
                  "Kernel arguments removed."), GRUB_PATH, BOOTLOADER),
         facts=("vm.cmdqv", "vm.iommu", "vm.arch"), reboot=True, advice=manual_actions,
         doc="C(cmdqv_params) removes C(arm_smmu_v3.disable_cmdqv) and "
             "C(arm_smmu_v3.bypass_vcmdq) from C(GRUB_CMDLINE_LINUX) and "
             "C(GRUB_CMDLINE_LINUX_DEFAULT); both are boot-time only (mode 0444 module "
             "parameters), so the change takes effect at the next boot."),
    Knob("vm", "iommu_passthrough", "IOMMU default domain on the kernel command line",
         plan_iommu,
         {"iommu_default_domain": {"enum": ["identity", "DMA", "DMA-FQ"],
                                   "description": "expected type of the IOMMU groups"}},
         {"vm_iommu_default_domain": "iommu_default_domain"}, (GRUB_PATH, BOOTLOADER),
         facts=("vm.arch",), reboot=True,
         doc="C(iommu_passthrough) sets the IOMMU default domain on the kernel command line - "
             "identity is C(iommu.passthrough=1) on aarch64 and C(iommu=pt) on x86_64; DMA and "
             "DMA-FQ remove the passthrough arguments (on x86_64 every C(iommu=) word) and add "
             "C(iommu.passthrough=0) on aarch64 and C(iommu.strict=1) (DMA) or "
             "C(iommu.strict=0) (DMA-FQ). Next boot only."),
)
