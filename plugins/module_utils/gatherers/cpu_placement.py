"""cpu-layer placement facts: NUMA, device locality, cpusets, systemd confinement, isolation,
IRQ affinity and irqbalance (readers: numa, pci, cgroup, systemd, isolation).

CPU sets are canonical kernel cpulists (``"0-3,8"``; ``""`` = empty); node sets are lists.
The housekeeping set used to judge IRQs is, in order: ``system.slice``'s effective cpuset,
``irqaffinity=`` on the command line, or the online CPUs minus isolated/nohz_full CPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers import (
    cgroup,
    isolation,
    numa,
    pci,
    systemd,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpulist import parse_cpulist
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

UNITS = cgroup.HOUSEKEEPING_UNITS
ONLINE = "sys/devices/system/cpu/online"


def _per_unit(sheet: FactSheet, key: str, reader: Callable[[Sysroot, str], Any],
              root: Sysroot) -> dict[str, Any]:
    """``{unit: reader(root, unit)}``; one unit's error is ``None`` plus an ``errors`` entry."""
    values: dict[str, Any] = {}
    for unit in UNITS:
        try:
            values[unit] = reader(root, unit)
        except HostStateError as exc:
            sheet.error(f"{key}.{unit}", exc)
            values[unit] = None
    return values


def _devices(root: Sysroot, lister: Callable[[Sysroot], list[pci.PciDevice]]) -> list[dict]:
    return [device._asdict() for device in lister(root)]


def _gather_numa_pci(sheet: FactSheet, root: Sysroot) -> None:
    sheet.attempt("numa", root.display(numa.NODE_DIR), numa.read_numa, root)
    devices = root.display(pci.PCI_DEVICES)
    sheet.attempt("gpus_pci", devices, _devices, root, pci.list_gpus)
    sheet.attempt("nics_pci", devices, _devices, root, pci.list_nics)


def _gather_cgroups(sheet: FactSheet, root: Sysroot) -> None:
    facts = sheet.attempt("cgroup", root.display(cgroup.CGROUP), cgroup.read_cgroup, root)
    base = (facts or {}).get("cpuset_hierarchy") or root.display(cgroup.CGROUP)
    sheet.put("housekeeping", _per_unit(sheet, "housekeeping", cgroup.read_unit_cpuset, root),
              [f"{base}/{unit}" for unit in UNITS])
    jobs = (f"{base}/slurm/uid_*/job_*" if (facts or {}).get("cpuset_interface") == "v1"
            else f"{base}/*/{cgroup.SLURM_SCOPE}/job_*")
    sheet.attempt("slurm_jobs", jobs, cgroup.read_slurm_jobs, root)


def _gather_systemd(sheet: FactSheet, root: Sysroot) -> None:
    sheet.attempt("systemd_cpu_affinity", root.display(systemd.SYSTEM_CONF),
                  systemd.read_cpu_affinity, root)
    dirs = [f"{root.display(d)}/<unit>.d" for d in systemd.CONTROL_DIRS]
    sheet.put("systemd_allowed_cpus",
              _per_unit(sheet, "systemd_allowed_cpus", systemd.read_allowed_cpus_dropins, root),
              dirs)
    sheet.put("systemd_show", _systemd_show(sheet, root), systemd.SHOW_SOURCE)


def _systemd_show(sheet: FactSheet, root: Sysroot) -> dict[str, Any]:
    """Each unit's ``systemctl show`` CPUs; a failed ``systemctl show`` is one ``errors`` entry
    (``systemd_show``) and ``None`` for every unit."""
    try:
        shown = systemd.read_systemctl_show(root)
    except HostStateError as exc:
        sheet.error("systemd_show", exc)
        shown = None
    return _per_unit(sheet, "systemd_show", lambda _root, unit: systemd.show_cpus(shown, unit),
                     root)


def housekeeping_cpus(facts: dict[str, Any], root: Sysroot) -> list[int] | None:
    """The housekeeping CPU set used for the IRQ summary (see the module docstring)."""
    system_slice = (facts.get("housekeeping") or {}).get("system.slice") or {}
    if system_slice.get("effective"):
        return parse_cpulist(system_slice["effective"])
    iso = facts.get("isolation") or {}
    irqaffinity = (iso.get("cmdline") or {}).get("irqaffinity")
    if irqaffinity:
        return parse_cpulist(irqaffinity, "/proc/cmdline irqaffinity=")
    online = root.read_optional(ONLINE)
    if online is None:
        return None
    return sorted(set(parse_cpulist(online, root.display(ONLINE))) - set(_auto_banned(facts)))


def _auto_banned(facts: dict[str, Any]) -> list[int]:
    iso = facts.get("isolation") or {}
    return sorted(set(parse_cpulist(iso.get("isolated") or ""))
                  | set(parse_cpulist(iso.get("nohz_full") or "")))


def _irq_summary(root: Sysroot, facts: dict[str, Any]) -> dict[str, Any]:
    irqs = isolation.read_irqs(root)
    default = isolation.read_default_affinity(root)
    return isolation.summarize_irqs(irqs, housekeeping_cpus(facts, root), default)


def _gather_isolation(sheet: FactSheet, root: Sysroot) -> None:
    sheet.attempt("isolation", "/proc/cmdline, /sys/devices/system/cpu/{isolated,nohz_full}",
                  isolation.read_isolation, root)
    sheet.attempt("irq", "/proc/irq/*/{smp_affinity_list,effective_affinity_list}, "
                  "/proc/irq/default_smp_affinity, /proc/interrupts",
                  _irq_summary, root, sheet.facts)
    sources = [root.display(rel) for rel in isolation.IRQBALANCE_FILES] + ["/proc/*/comm"]
    sheet.attempt("irqbalance", ", ".join(sources), isolation.read_irqbalance, root,
                  _auto_banned(sheet.facts))


def gather_into(sheet: FactSheet, root: Sysroot) -> None:
    """Add the placement facts to ``sheet``."""
    _gather_numa_pci(sheet, root)
    _gather_cgroups(sheet, root)
    _gather_systemd(sheet, root)
    _gather_isolation(sheet, root)
