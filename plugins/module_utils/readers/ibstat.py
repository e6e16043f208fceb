"""``ibstat`` text: RDMA devices and their ports, where ``/sys/class/infiniband`` is not at hand.

Format (infiniband-diags ``src/ibstat.c``): per device a ``CA 'mlx5_0'`` line, then indented
``CA type:``, ``Number of ports:``, ``Firmware version:`` ... and per port ``Port 1:`` with
``State:`` (``port_state_str``: Down, Initializing, Armed, Active), ``Physical state:``
(``port_phy_state_str``: Sleep, Polling, Disabled, PortConfigurationTraining, LinkUp,
LinkErrorRecovery, PhyTest), ``Rate:`` (Gb/s), ``Base lid:``, ``SM lid:`` and ``Link layer:``.
Indentation is tabs or spaces, or gone in a paste. ``ibpanic``/``ibwarn`` lines end the device
they follow (ibstat stops at the first device it cannot stat).

A sos report keeps ``ibstat``'s output (its infiniband plugin) but not ``/sys/class/infiniband``:
:func:`devices_from_ibstat` gives the fabric facts the same device shape the sysfs reader gives,
states coded as the kernel codes them (``4: ACTIVE``, ``5: LinkUp``), no counters.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

SOURCE = "ibstat.txt"
_CA = re.compile(r"^CA '([^'\n]{1,200})'$")
_PORT = re.compile(r"^Port (\d{1,4}):$")
_FIELD = re.compile(r"^([A-Z][A-Za-z ]{0,40}): *(\S.{0,500})?$")
# ibstat's names -> the kernel's (code, sysfs name): IB spec port and physical port states
PORT_STATES = {"Down": (1, "DOWN"), "Initializing": (2, "INIT"), "Armed": (3, "ARMED"),
               "Active": (4, "ACTIVE"), "ActiveDefer": (5, "ACTIVE_DEFER")}
PHYS_STATES = {"Sleep": (1, "Sleep"), "Polling": (2, "Polling"), "Disabled": (3, "Disabled"),
               "PortConfigurationTraining": (4, "PortConfigurationTraining"),
               "LinkUp": (5, "LinkUp"), "LinkErrorRecovery": (6, "LinkErrorRecovery"),
               "PhyTest": (7, "Phy Test")}


def parse_ibstat(text: str, ends_block: Callable[[str], bool] | None = None
                 ) -> list[dict[str, Any]]:
    """Every device: ``{name, line, fields, ports: [{port, line, last, fields}]}`` (lines
    from 1). An ``ibpanic``/``ibwarn`` line, or one ``ends_block`` accepts (a shell prompt in
    a paste), ends the device block it follows."""
    devices: list[dict[str, Any]] = []
    device: dict[str, Any] | None = None
    port: dict[str, Any] | None = None
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if m := _CA.match(line):
            device, port = {"name": m.group(1), "line": n, "fields": {}, "ports": []}, None
            devices.append(device)
        elif device is None or not line:
            continue
        elif m := _PORT.match(line):
            port = {"port": int(m.group(1)), "line": n, "last": n, "fields": {}}
            device["ports"].append(port)
        elif m := _FIELD.match(line):
            (port or device)["fields"][m.group(1)] = (m.group(2) or "").strip()
            if port is not None:
                port["last"] = n
        elif line.startswith(("ibpanic", "ibwarn")) or (ends_block and ends_block(line)):
            device = port = None
    return devices


def rate_gbps(text: str | None) -> float | None:
    """``Rate:`` as a number of Gb/s; ``None`` when absent or not a number."""
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _state(table: dict[str, tuple[int, str]], text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    code, name = table.get(text, (0, text))
    return {"code": code, "name": name}


def devices_from_ibstat(text: str) -> list[dict[str, Any]]:
    """The devices of an ibstat output in the sysfs reader's shape (``readers.infiniband``):
    ``bdf``, ``numa_node`` and ``board_id`` unknown (``None``), no netdevs, no counters."""
    out = []
    for device in parse_ibstat(text):
        ports = []
        for port in device["ports"]:
            fields = port["fields"]
            rate = rate_gbps(fields.get("Rate"))
            ports.append({"port": port["port"],
                          "state": _state(PORT_STATES, fields.get("State")),
                          "phys_state": _state(PHYS_STATES, fields.get("Physical state")),
                          "rate_gbps": rate, "rate": f"{rate:g} Gb/sec" if rate else None,
                          "link_layer": fields.get("Link layer"), "counters": {}})
        out.append({"name": device["name"], "hca_type": device["fields"].get("CA type"),
                    "fw_ver": device["fields"].get("Firmware version"), "board_id": None,
                    "bdf": None, "numa_node": None, "netdevs": [], "ports": ports})
    return out
