"""How the vm layer's knobs plan: the kernel arguments that keep CMDQV off, the IOMMU domain,
and the hypervisor-side actions a guest needs (declared in ``knobs/vm.py``)."""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import (
    KnobInputError,
    Target,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import Change
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.grub import plan_cmdline
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
