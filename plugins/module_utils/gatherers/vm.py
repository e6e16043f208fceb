"""vm-layer facts (Grace/VM readiness): architecture, kernel, virtualisation, IOMMU/SMMU, CMDQV.

Keys: ``arch``, ``kernel_release``, ``virtualized``, ``hypervisor``, ``virt_evidence``, ``dmi``,
``iommu``, ``smmu_v3`` and ``cmdqv``. A part of a nested fact that cannot be read becomes
``None`` with an ``errors`` entry named ``<key>.<part>`` (e.g. ``cmdqv.kconfig``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers import cmdqv, hypervisor, iommu
from ansible_collections.exemplar.tune.plugins.module_utils.readers.cmdline import (
    CMDLINE,
    read_cmdline,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def _part(sheet: FactSheet, key: str, reader: Callable[..., Any], *args: Any) -> Any:
    """``reader(*args)``, or ``None`` with an error recorded under ``key``."""
    try:
        return reader(*args)
    except HostStateError as exc:
        sheet.error(key, exc)
        return None


def gather(root: Sysroot) -> dict[str, Any]:
    """Facts of the vm layer."""
    sheet = FactSheet()
    arch = sheet.attempt("arch", hypervisor.arch_source(root), hypervisor.read_arch, root)
    release = sheet.attempt("kernel_release", "/" + hypervisor.OSRELEASE,
                            hypervisor.read_kernel_release, root)
    log_source = cmdqv.kernel_log_source(root)
    log = _part(sheet, "cmdqv.dmesg", cmdqv.read_kernel_log, root)
    _virtualization(sheet, root, arch, log, log_source)
    units = _iommu(sheet, root)
    smmu_v3 = None if units is None else any(u["kind"] == "smmu_v3" for u in units)
    sheet.put("smmu_v3", smmu_v3, "/" + iommu.IOMMU_CLASS)
    _cmdqv(sheet, root, arch, release, smmu_v3, log, log_source)
    return sheet.result()


def _virtualization(
    sheet: FactSheet, root: Sysroot, arch: str | None, log: str | None, log_source: str
) -> None:
    flags = _part(sheet, "virtualized.cpuinfo", hypervisor.read_cpu_flags, root)
    dmi = hypervisor.read_dmi(root)
    xen = hypervisor.read_xen_type(root)
    name = None if log is None else hypervisor.parse_detected_hypervisor(log)
    verdict = hypervisor.classify(arch, flags, dmi, xen, (log_source, name) if name else None)
    sources = ["/" + hypervisor.CPUINFO, "/" + hypervisor.DMI_DIR, "/" + hypervisor.XEN_TYPE,
               log_source]
    sheet.put("virtualized", verdict.virtualized, sources)
    sheet.put("hypervisor", verdict.hypervisor, sources)
    sheet.put("virt_evidence", verdict.evidence, sources)
    sheet.put("dmi", dmi, "/" + hypervisor.DMI_DIR)


def _iommu(sheet: FactSheet, root: Sysroot) -> list[dict[str, str]] | None:
    units = iommu.read_iommu_units(root)
    groups = _part(sheet, "iommu.groups_by_type", iommu.read_iommu_groups, root)
    params = _part(sheet, "iommu.cmdline", read_cmdline, root)
    sheet.put("iommu", {
        "present": bool(units),
        "units": units,
        "group_count": None if groups is None else sum(groups.values()),
        "groups_by_type": groups,
        "cmdline": None if params is None else iommu.iommu_cmdline(params),
    }, ["/" + iommu.IOMMU_CLASS, "/" + iommu.IOMMU_GROUPS, "/" + CMDLINE])
    return units


def _cmdqv(sheet: FactSheet, root: Sysroot, arch: str | None, release: str | None,
           smmu_v3: bool | None, log: str | None, log_source: str) -> None:
    kconfig_source = cmdqv.kconfig_source(root, release)
    facts: dict[str, Any] = {
        "acpi_devices": _part(sheet, "cmdqv.acpi_devices", cmdqv.read_acpi_devices, root),
        "params": _part(sheet, "cmdqv.params", cmdqv.read_params, root),
        "dmesg": None if log is None else cmdqv.parse_kernel_log(log),
        "irq": _part(sheet, "cmdqv.irq", cmdqv.read_irq, root),
        "kconfig": _part(sheet, "cmdqv.kconfig", cmdqv.read_kconfig, root, release),
        "kconfig_source": kconfig_source,
    }
    state, reasons = cmdqv.derive_state(arch, smmu_v3, facts)
    sheet.put("cmdqv", {"state": state, **facts, "reasons": reasons}, [
        "/" + cmdqv.ACPI_DEVICES, "/" + cmdqv.PARAMS_DIR, log_source, "/" + cmdqv.INTERRUPTS,
        kconfig_source])
