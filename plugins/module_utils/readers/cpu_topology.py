"""CPU topology from sysfs: online CPUs, and sockets / cores / threads built from them.

Files (``Documentation/ABI/stable/sysfs-devices-system-cpu``,
``Documentation/admin-guide/cputopology.rst``): ``/sys/devices/system/cpu/online`` (a cpulist)
and, per online CPU, ``cpuN/topology/physical_package_id``, ``core_id`` and the CPUs of its
core, ``core_cpus_list`` (Linux 5.x) or its older name ``thread_siblings_list``. An offline
CPU has no ``topology`` directory. Package and core ids are platform numbers (a Grace or a
PPTT-described arm64 system may number cores across the whole machine), so only the number of
distinct ids counts, never their values.
"""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple

from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpulist import parse_cpulist
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    NotSupported,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

CPU_DIR = "sys/devices/system/cpu"
ONLINE = f"{CPU_DIR}/online"
SIBLING_FILES = ("core_cpus_list", "thread_siblings_list")


class CpuPlace(NamedTuple):
    """Where one online CPU sits: its package, its core, and the CPUs sharing that core."""

    cpu: int
    package: int
    core: int
    core_cpus: tuple[int, ...] | None


def read_online(root: Sysroot) -> list[int] | None:
    """Online CPUs; ``None`` when ``/sys/devices/system/cpu/online`` is absent."""
    text = root.read_optional(ONLINE)
    if text is None:
        return None
    cpus = parse_cpulist(text, root.display(ONLINE))
    if not cpus:
        raise ParseError(root.display(ONLINE), text, "no CPU online")
    return cpus


def _integer(root: Sysroot, rel: str) -> int:
    text = root.read_text(rel)
    try:
        return int(text)
    except ValueError:
        raise ParseError(root.display(rel), text, "not an integer") from None


def read_place(root: Sysroot, cpu: int) -> CpuPlace:
    """The topology files of one CPU; ``NotSupported``/``ParseError`` when one is missing or
    garbled."""
    base = f"{CPU_DIR}/cpu{cpu}/topology"
    siblings = None
    for name in SIBLING_FILES:
        text = root.read_optional(f"{base}/{name}")
        if text is not None:
            siblings = tuple(parse_cpulist(text, root.display(f"{base}/{name}")))
            break
    return CpuPlace(cpu, _integer(root, f"{base}/physical_package_id"),
                    _integer(root, f"{base}/core_id"), siblings)


def read_places(root: Sysroot, cpus: list[int] | None) -> list[CpuPlace] | None:
    """Every listed CPU's place (``cpus=None``: every CPU that has a ``topology`` directory);
    ``None`` when no CPU has one (containers, some guests). An online CPU without one while
    others have it is an error (``NotSupported``)."""
    names = (path.split("/")[-2][3:] for path in root.glob(f"{CPU_DIR}/cpu[0-9]*/topology"))
    present = {int(name) for name in names if name.isdigit()}
    if not present:
        return None
    wanted = sorted(present) if cpus is None else cpus
    missing = [cpu for cpu in wanted if cpu not in present]
    if missing:
        raise NotSupported(root.display(f"{CPU_DIR}/cpu{missing[0]}/topology"),
                           f"absent for online CPU {missing[0]}")
    return [read_place(root, cpu) for cpu in wanted]


def summarize(places: list[CpuPlace]) -> dict[str, int]:
    """``sockets`` (distinct packages), ``cores_per_socket`` (most distinct cores in one
    package) and ``threads_per_core`` (most online CPUs on one core)."""
    cores: dict[int, set[int]] = defaultdict(set)
    threads: dict[tuple[int, int], set[int]] = defaultdict(set)
    for place in places:
        cores[place.package].add(place.core)
        threads[(place.package, place.core)].update(place.core_cpus or (place.cpu,))
    online = {place.cpu for place in places}
    return {"sockets": len(cores),
            "cores_per_socket": max(len(ids) for ids in cores.values()),
            "threads_per_core": max(len(cpus & online) for cpus in threads.values())}
