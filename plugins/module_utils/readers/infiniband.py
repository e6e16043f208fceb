"""InfiniBand / RoCE devices, ``/sys/class/infiniband/<dev>/``.

Layout and formats (``linux:Documentation/ABI/stable/sysfs-class-infiniband``,
``linux:drivers/infiniband/core/sysfs.c``): ``ports/<n>/state``
(``"4: ACTIVE"``), ``ports/<n>/phys_state`` (``"5: LinkUp"``), both printed ``"%d: %s"``;
``ports/<n>/rate`` (``"200 Gb/sec (4X HDR)"``, ``"2.5 Gb/sec (1X SDR)"``);
``ports/<n>/link_layer`` (``InfiniBand`` | ``Ethernet``). ``device`` links to the PCI function
(its basename is the BDF; ``device/numa_node`` is ``-1`` when unknown, ``device/net/`` lists
the netdevs). ``ports/<n>/counters/<name>`` holds the port's PMA counters as decimal numbers
(``N/A (no PMA)`` where the device keeps none); :data:`ERROR_COUNTERS` are read. No
``/sys/class/infiniband`` means no RDMA devices: an empty list, not an error.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.values import parse_count
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

IB_CLASS = "sys/class/infiniband"
_STATE = re.compile(r"^(\d+):\s*(\S.*)$")
_RATE = re.compile(r"^(\d+(?:\.\d+)?) Gb/sec(?: \((.*)\))?$")
_BDF = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# The port error counters (sysfs names), as ``ibqueryerrors`` judges them (rdma-core
# infiniband-diags/etc/error_thresholds); port_xmit_wait is congestion, not an error.
ERROR_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                  "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
                  "port_xmit_discards", "port_xmit_constraint_errors",
                  "port_rcv_constraint_errors", "local_link_integrity_errors",
                  "excessive_buffer_overrun_errors", "VL15_dropped")


def parse_state(text: str, source: str = "state") -> dict[str, Any]:
    """``"4: ACTIVE"`` -> ``{"code": 4, "name": "ACTIVE"}``; ``ParseError`` otherwise."""
    match = _STATE.match(text.strip())
    if not match:
        raise ParseError(source, text, "expected '<code>: <NAME>'")
    return {"code": int(match.group(1)), "name": match.group(2).strip()}


def parse_rate(text: str, source: str = "rate") -> dict[str, Any]:
    """``"200 Gb/sec (4X HDR)"`` -> ``{"gbps": 200.0, "text": "200 Gb/sec (4X HDR)"}``."""
    match = _RATE.match(text.strip())
    if not match:
        raise ParseError(source, text, "expected '<number> Gb/sec (<width><speed>)'")
    return {"gbps": float(match.group(1)), "text": text.strip()}


def parse_numa_node(text: str, source: str = "numa_node") -> int | None:
    """``"1"`` -> ``1``; ``"-1"`` (unknown) -> ``None``; ``ParseError`` when not an integer."""
    try:
        node = int(text.strip())
    except ValueError:
        raise ParseError(source, text, "expected an integer") from None
    return None if node < 0 else node


def _parsed(
    root: Sysroot, rel: str, parser: Callable[[str, str], Any], errors: list[HostStateError]
) -> Any:
    """``parser(text)`` of an optional file; ``None`` when absent, or malformed (logged)."""
    text = root.read_optional(rel)
    if text is None:
        return None
    try:
        return parser(text, root.display(rel))
    except HostStateError as exc:
        errors.append(exc)
        return None


def read_port(
    root: Sysroot, base: str, port: str, errors: list[HostStateError]
) -> dict[str, Any]:
    """One port: ``{port, state, phys_state, rate_gbps, rate, link_layer, counters}``."""
    rel = f"{base}/ports/{port}"
    rate = _parsed(root, f"{rel}/rate", parse_rate, errors)
    return {
        "port": int(port) if port.isdigit() else port,
        "state": _parsed(root, f"{rel}/state", parse_state, errors),
        "phys_state": _parsed(root, f"{rel}/phys_state", parse_state, errors),
        "rate_gbps": rate["gbps"] if rate else None,
        "rate": rate["text"] if rate else None,
        "link_layer": root.read_optional(f"{rel}/link_layer"),
        "counters": read_counters(root, rel, errors),
    }


def parse_counter(text: str, source: str = "counter") -> int | None:
    """``"12"`` -> ``12``; ``"N/A (no PMA)"`` -> ``None``; ``ParseError`` otherwise."""
    value = text.strip()
    if value.startswith("N/A"):
        return None
    if not value.isdigit():
        raise ParseError(source, text, "expected a decimal counter")
    return parse_count(value, source)


def read_counters(root: Sysroot, rel: str, errors: list[HostStateError]) -> dict[str, int]:
    """The port's :data:`ERROR_COUNTERS` that it has (``<rel>/counters/<name>``); a counter
    the device does not keep is left out."""
    found = {}
    for name in ERROR_COUNTERS:
        value = _parsed(root, f"{rel}/counters/{name}", parse_counter, errors)
        if value is not None:
            found[name] = value
    return found


def device_bdf(root: Sysroot, base: str) -> str | None:
    """PCI address behind ``<base>/device`` (basename of its real path), if it is one."""
    if not root.exists(f"{base}/device"):
        return None
    name = posixpath.basename(root.realpath(f"{base}/device")).lower()
    return name if _BDF.match(name) else None


def read_ib_device(root: Sysroot, name: str, errors: list[HostStateError]) -> dict[str, Any]:
    """``{name, hca_type, fw_ver, board_id, bdf, numa_node, netdevs, ports}`` of
    ``/sys/class/infiniband/<name>`` (the first three ``None`` where the driver has none)."""
    base = f"{IB_CLASS}/{name}"
    return {
        "name": name,
        "hca_type": root.read_optional(f"{base}/hca_type"),
        "fw_ver": root.read_optional(f"{base}/fw_ver"),
        "board_id": root.read_optional(f"{base}/board_id"),
        "bdf": device_bdf(root, base),
        "numa_node": _parsed(root, f"{base}/device/numa_node", parse_numa_node, errors),
        "netdevs": root.listdir(f"{base}/device/net"),
        "ports": [read_port(root, base, port, errors)
                  for port in sorted(root.listdir(f"{base}/ports"), key=_port_order)],
    }


def _port_order(port: str) -> tuple[int, str]:
    return (int(port), "") if port.isdigit() else (1 << 30, port)


def read_ib_devices(
    root: Sysroot, errors: list[HostStateError] | None = None
) -> list[dict[str, Any]]:
    """Every RDMA device (natural name order: mlx5_2 before mlx5_10); ``[]`` when none.

    A malformed attribute becomes ``None`` and its ``ParseError`` is appended to ``errors``.
    """
    sink: list[HostStateError] = [] if errors is None else errors
    names = sorted(root.listdir(IB_CLASS), key=_natural)
    return [read_ib_device(root, name, sink) for name in names]


def _natural(name: str) -> list[Any]:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"(\d+)", name)]
