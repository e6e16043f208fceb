"""cpu-layer ``processor`` fact: which CPU the host has and how many, so a fleet can be
grouped by CPU.

Keys: ``vendor``, ``model_name``; x86 ``family``, ``model``, ``stepping``; arm64
``implementer``, ``part``, ``variant``, ``revision`` (the other architecture's keys are
``None``); ``sockets``, ``cores_per_socket``, ``threads_per_core``, ``cpus_online``,
``topology_source`` (``sysfs``, ``cpuinfo`` or ``None``) and ``soc`` (arm64
``/sys/devices/soc0``, else ``None``).

Counts come from the sysfs topology of the online CPUs; without it (a container, a bundle
that lacks it, an unreadable file) from the x86 package lines of ``/proc/cpuinfo``; arm64
``/proc/cpuinfo`` has none, so they stay ``None``. ``cpus_online`` is
``/sys/devices/system/cpu/online``, else the number of CPUs ``/proc/cpuinfo`` lists. An absent
file gives ``None`` values and no error; a file that cannot be read or understood gives
``None`` values and one ``errors`` entry naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers import (
    cpu_topology,
    cpuinfo,
    soc,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

KEY = "processor"
SOURCES = ["/" + cpuinfo.CPUINFO, "/" + cpu_topology.ONLINE,
           f"/{cpu_topology.CPU_DIR}/cpu*/topology/{{physical_package_id,core_id,"
           f"{'|'.join(cpu_topology.SIBLING_FILES)}}}",
           f"/{soc.SOC_DIR}/{{{','.join(soc.FILES)}}}"]
COUNT_KEYS = ("sockets", "cores_per_socket", "threads_per_core")


def _try(problems: list[HostStateError], reader: Callable[..., Any], *args: Any) -> Any:
    """``reader(*args)``, or ``None`` with the error kept in ``problems``."""
    try:
        return reader(*args)
    except HostStateError as exc:
        problems.append(exc)
        return None


def _read_cpuinfo(root: Sysroot) -> list[dict[str, str]] | None:
    """The CPU blocks of ``/proc/cpuinfo``; ``None`` when the file is absent."""
    if not root.exists(cpuinfo.CPUINFO):
        return None
    text = root.read_text(cpuinfo.CPUINFO, strip=False)
    return cpuinfo.parse_cpuinfo(text, root.display(cpuinfo.CPUINFO))


def _counts(root: Sysroot, problems: list[HostStateError], cpus: list[dict[str, str]] | None,
            online: list[int] | None) -> tuple[dict[str, Any], str | None]:
    """The socket/core/thread counts and where they came from."""
    places = _try(problems, cpu_topology.read_places, root, online)
    if places:
        return cpu_topology.summarize(places), "sysfs"
    source = root.display(cpuinfo.CPUINFO)
    counted = _try(problems, cpuinfo.topology, cpus, source) if cpus else None
    if counted:
        return counted, "cpuinfo"
    return dict.fromkeys(COUNT_KEYS), None


def read_processor(root: Sysroot, problems: list[HostStateError]) -> dict[str, Any]:
    """The ``processor`` fact (see the module docstring); problems go to ``problems``."""
    cpus = _try(problems, _read_cpuinfo, root)
    ident = _try(problems, cpuinfo.identity, cpus, root.display(cpuinfo.CPUINFO)) if cpus else None
    online = _try(problems, cpu_topology.read_online, root)
    counts, origin = _counts(root, problems, cpus, online)
    return {
        **(ident or dict.fromkeys(cpuinfo.IDENTITY_KEYS)),
        **counts,
        "cpus_online": len(online) if online else len(cpus) if cpus else None,
        "topology_source": origin,
        "soc": soc.read_soc(root),
    }


def gather_into(sheet: FactSheet, root: Sysroot) -> None:
    """Add the ``processor`` fact to ``sheet`` (never raises for host state)."""
    problems: list[HostStateError] = []
    sheet.put(KEY, read_processor(root, problems), SOURCES)
    for exc in problems:
        sheet.error(KEY, exc)
