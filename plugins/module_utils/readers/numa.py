"""NUMA topology: ``/sys/devices/system/node``.

Files: ``Documentation/ABI/stable/sysfs-devices-node`` (``online``, ``has_cpu``,
``has_memory``, ``nodeN/cpulist``, ``nodeN/meminfo``, ``nodeN/distance``). CPU-less and
memory-less nodes are normal; use ``has_cpu``. ``kernel.numa_balancing`` is read as the
state of its knob (``knobs/cpu.py``, a sysctl family knob).
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpulist import (
    format_cpulist,
    parse_cpulist,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

NODE_DIR = "sys/devices/system/node"
_MEMINFO_LINE = re.compile(r"^Node\s+\d+\s+([\w()]+):\s+(\d+)(?:\s+kB)?$")


def parse_distance(text: str, source: str = "distance") -> list[int]:
    """``"10 21"`` -> ``[10, 21]`` (SLIT distances to every node; local is 10)."""
    try:
        values = [int(word) for word in text.split()]
    except ValueError:
        raise ParseError(source, text, "not a list of distances") from None
    if not values:
        raise ParseError(source, text, "empty distance list")
    return values


def parse_node_meminfo(text: str, source: str = "meminfo") -> dict[str, int]:
    """``"Node 0 MemTotal:  131859324 kB"`` lines -> ``{"MemTotal": 131859324, ...}``."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _MEMINFO_LINE.match(line.strip())
        if not match:
            raise ParseError(source, line, "not a node meminfo line")
        fields[match.group(1)] = int(match.group(2))
    if "MemTotal" not in fields:
        raise ParseError(source, text, "no MemTotal")
    return fields


def read_node_list(root: Sysroot, name: str) -> list[int]:
    """Node numbers in ``/sys/devices/system/node/<name>`` (``online``, ``has_cpu`` ...)."""
    rel = f"{NODE_DIR}/{name}"
    return parse_cpulist(root.read_text(rel), root.display(rel))


def read_node(root: Sysroot, node: int) -> dict[str, Any]:
    """One node: its CPUs (canonical cpulist), ``MemTotal`` in kB and its distance row."""
    base = f"{NODE_DIR}/node{node}"
    cpus = parse_cpulist(root.read_text(f"{base}/cpulist"), root.display(f"{base}/cpulist"))
    meminfo = root.read_optional(f"{base}/meminfo")
    distance = root.read_optional(f"{base}/distance")
    return {
        "node": node,
        "cpulist": format_cpulist(cpus),
        "mem_total_kb": None if meminfo is None else
        parse_node_meminfo(meminfo, root.display(f"{base}/meminfo"))["MemTotal"],
        "distance": None if distance is None else
        parse_distance(distance, root.display(f"{base}/distance")),
    }


def read_numa(root: Sysroot) -> dict[str, Any]:
    """Online nodes, which have CPUs/memory, and every online node's details.

    ``NotSupported`` when ``/sys/devices/system/node/online`` is absent (kernel without NUMA).
    """
    online = read_node_list(root, "online")
    optional = {}
    for name in ("has_cpu", "has_memory"):
        present = root.exists(f"{NODE_DIR}/{name}")
        optional[name] = read_node_list(root, name) if present else None
    return {
        "online": online,
        **optional,
        "nodes": [read_node(root, node) for node in online],
    }
