"""``/proc/cpuinfo``: which CPU this is, and (x86) how its packages are built.

Format (``arch/x86/kernel/cpu/proc.c``, ``arch/arm64/kernel/cpuinfo.c``): one block per
online CPU, blocks separated by a blank line, lines ``key<tabs>: value``. x86 blocks carry
``vendor_id``, ``cpu family``, ``model``, ``model name``, ``stepping`` and the package view
``physical id``, ``siblings`` (online CPUs in the package), ``core id`` and ``cpu cores``
(cores in the package); arm64 blocks carry the MIDR_EL1 fields ``CPU implementer``,
``CPU variant``, ``CPU part`` and ``CPU revision`` and no topology at all.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers import cpu_ids
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError

CPUINFO = "proc/cpuinfo"
IDENTITY_KEYS = ("vendor", "model_name", "family", "model", "stepping",
                 "implementer", "part", "variant", "revision")


def parse_cpuinfo(text: str, source: str = "/" + CPUINFO) -> list[dict[str, str]]:
    """The blocks that describe a CPU (those with a ``processor`` line), keys and values
    stripped. ``ParseError`` for a line without ``:`` or when no block has ``processor``."""
    blocks: list[dict[str, str]] = [{}]
    for line in text.splitlines():
        if not line.strip():
            blocks.append({})
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ParseError(source, line, "not a 'key : value' line")
        blocks[-1].setdefault(key.strip(), value.strip())
    cpus = [block for block in blocks if "processor" in block]
    if not cpus:
        raise ParseError(source, text, "no 'processor' entry (not /proc/cpuinfo)")
    return cpus


def _number(block: dict[str, str], key: str, source: str, base: int = 10) -> int | None:
    """``block[key]`` as an integer; ``None`` when absent or ``unknown`` (x86 stepping)."""
    value = block.get(key)
    if value is None or value == "unknown":
        return None
    try:
        return int(value, base)
    except ValueError:
        raise ParseError(source, f"{key}: {value}", "not a number") from None


def identity(cpus: list[dict[str, str]], source: str = "/" + CPUINFO) -> dict[str, Any]:
    """Vendor and model of the first CPU: x86 ``family``/``model``/``stepping``, arm
    ``implementer``/``part`` (``"0x41"``/``"0xd4f"``) with ``variant``/``revision``. Every
    key of :data:`IDENTITY_KEYS` is present; what the architecture has not is ``None``."""
    first = cpus[0]
    facts: dict[str, Any] = dict.fromkeys(IDENTITY_KEYS)
    if "vendor_id" in first:
        facts.update(vendor=cpu_ids.x86_vendor(first["vendor_id"]),
                     model_name=first.get("model name") or None,
                     family=_number(first, "cpu family", source),
                     model=_number(first, "model", source),
                     stepping=_number(first, "stepping", source))
    elif "CPU implementer" in first:
        facts.update(_arm(first, source))
    return facts


def _arm(first: dict[str, str], source: str) -> dict[str, Any]:
    implementer = _number(first, "CPU implementer", source, 16)
    part = _number(first, "CPU part", source, 16)
    known = None if implementer is None or part is None else cpu_ids.arm_part(implementer, part)
    return {
        "vendor": None if implementer is None else cpu_ids.arm_vendor(implementer),
        "model_name": known or first.get("model name") or None,
        "implementer": None if implementer is None else f"0x{implementer:02x}",
        "part": None if part is None else f"0x{part:03x}",
        "variant": _number(first, "CPU variant", source, 16),
        "revision": _number(first, "CPU revision", source),
    }


def topology(cpus: list[dict[str, str]], source: str = "/" + CPUINFO) -> dict[str, int] | None:
    """``sockets``, ``cores_per_socket`` and ``threads_per_core`` from the x86 package view;
    ``None`` when the blocks have no ``physical id`` (arm64, some hypervisors).

    Sockets are the distinct ``physical id`` values. Cores per socket are ``cpu cores`` and
    threads per core ``siblings / cpu cores`` rounded up (a package with one thread offline
    still has 2-thread cores); without those lines both are counted from ``core id``.
    """
    packages: dict[int, list[dict[str, str]]] = defaultdict(list)
    for cpu in cpus:
        package = _number(cpu, "physical id", source)
        if package is not None:
            packages[package].append(cpu)
    if not packages:
        return None
    cores = max((_number(cpu, "cpu cores", source) or 0) for cpu in cpus)
    siblings = max((_number(cpu, "siblings", source) or 0) for cpu in cpus)
    if cores and siblings:
        threads = math.ceil(siblings / cores)
    else:
        cores, threads = _counted(packages, source)
    return {"sockets": len(packages), "cores_per_socket": cores, "threads_per_core": threads}


def _counted(packages: dict[int, list[dict[str, str]]], source: str) -> tuple[int, int]:
    """(most cores in a package, most CPUs on one core), counted from ``core id``."""
    per_core: dict[tuple[int, int | None], int] = defaultdict(int)
    for package, cpus in packages.items():
        for cpu in cpus:
            per_core[(package, _number(cpu, "core id", source))] += 1
    cores = max(sum(1 for key in per_core if key[0] == package) for package in packages)
    return cores, max(per_core.values())
