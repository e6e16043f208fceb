"""The vm layer's knobs: the kernel arguments that keep CMDQV off, and the IOMMU domain
(planners in ``planners/vm.py``)."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import BOOTLOADER, Knob, Setting

GRUB_PATH = Setting("vm_grub_path", "/etc/default/grub",
                    "Bootloader defaults file holding the kernel command line.")

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
         "plan_cmdqv_params",
         {"require_cmdqv": {"type": "boolean",
                            "description": "arm64 hosts with SMMUv3 translation must use CMDQV"}},
         (Setting("vm_cmdqv_params_remove", ["arm_smmu_v3.disable_cmdqv",
                                             "arm_smmu_v3.bypass_vcmdq"],
                  "Kernel arguments removed."), GRUB_PATH, BOOTLOADER),
         facts=("vm.cmdqv", "vm.iommu", "vm.arch"), reboot=True, advice="manual_actions",
         former={"vm_require_cmdqv": "require_cmdqv"},
         doc="C(cmdqv_params) removes C(arm_smmu_v3.disable_cmdqv) and "
             "C(arm_smmu_v3.bypass_vcmdq) from C(GRUB_CMDLINE_LINUX) and "
             "C(GRUB_CMDLINE_LINUX_DEFAULT); both are boot-time only (mode 0444 module "
             "parameters), so the change takes effect at the next boot."),
    Knob("vm", "iommu_passthrough", "IOMMU default domain on the kernel command line",
         "plan_iommu",
         {"iommu_default_domain": {"enum": ["identity", "DMA", "DMA-FQ"],
                                   "description": "expected type of the IOMMU groups"}},
         (GRUB_PATH, BOOTLOADER), facts=("vm.arch",), reboot=True,
         former={"vm_iommu_default_domain": "iommu_default_domain"},
         doc="C(iommu_passthrough) sets the IOMMU default domain on the kernel command line - "
             "identity is C(iommu.passthrough=1) on aarch64 and C(iommu=pt) on x86_64; DMA and "
             "DMA-FQ remove the passthrough arguments (on x86_64 every C(iommu=) word) and add "
             "C(iommu.passthrough=0) on aarch64 and C(iommu.strict=1) (DMA) or "
             "C(iommu.strict=0) (DMA-FQ). Next boot only."),
)
