"""RDMA NIC link state changes in the kernel log: ``Link down`` / ``Link up`` per interface.

The NVIDIA/Mellanox drivers log a port's state change as ``mlx5_core 0000:01:00.0 enp1s0f0np0:
Link down`` (``Link up``; the device name, its PCI address, then the interface) and the mlx4
Ethernet driver as ``mlx4_en: eth1: Link Down``; ``Port module event: module 0, Cable
unplugged`` marks a transceiver or cable removed (``plugged`` when put back). Each line keeps
its stamp and boot (:mod:`kernel_log`): ``boot`` 0 is the last boot in the log, -1 the one
before, as for Xid events.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers import kernel_log
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

COMMAND = "dmesg.txt"
SOURCE = "dmesg"

_LINK = re.compile(r"^(?P<driver>mlx[45]_(?:core|en|ib))(?: (?P<bdf>[0-9a-fA-F:.]+))?:? "
                   r"(?P<iface>[\w.-]+): Link (?P<state>[Dd]own|[Uu]p)\b")
_MODULE = re.compile(r"^(?P<driver>mlx5_core) (?P<bdf>[0-9a-fA-F:.]+): Port module event: "
                     r"module (?P<module>\d+), Cable (?P<state>unplugged|plugged)")


def parse_link_events(text: str) -> list[dict[str, Any]]:
    """``[{"iface", "device", "state": "down"|"up"|"unplugged"|"plugged", "time", "t", "clock",
    "boot"}]`` in log order (``iface`` is ``module N`` for a module event)."""
    found, lines = [], list(kernel_log.read_lines(text))
    last = lines[-1].boot if lines else 0
    for line in lines:
        body = line.body.strip()
        match = _LINK.match(body) or _MODULE.match(body)
        if not match:
            continue
        groups = match.groupdict()
        found.append({"iface": groups.get("iface") or f"module {groups['module']}",
                      "device": groups.get("bdf") or groups["driver"],
                      "state": groups["state"].lower(), "time": line.time, "t": line.t,
                      "clock": line.clock, "boot": line.boot - last})
    return found


def read_link_events(root: Sysroot) -> list[dict[str, Any]]:
    """``parse_link_events`` of the host's kernel log (``dmesg``, shared with the Xid
    reading); ``NotSupported`` where dmesg is absent or was not captured."""
    return parse_link_events(root.command(COMMAND).checked().stdout)
