"""NVIDIA Xid events and "fallen off the bus" reports in the kernel log (``dmesg``).

The driver logs each Xid as ``NVRM: Xid (PCI:0000:cb:00): 13, pid=1797828,
name=pt_main_thread, <details>``; older drivers wrote ``NVRM: Xid (0000:01:00): 31, <details>``
(no ``PCI:``, no pid/name), and pid or name may be ``'<unknown>'`` or absent. A GPU that
drops off PCIe is also reported as ``NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.``
(``NV_DEV_PRINTF`` in the open kernel modules). The Xid catalog:
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html.

The log's address has no function number and a 4-digit domain; it is normalised to
nvidia-smi's ``00000000:CB:00.0`` so events join with the per-GPU facts.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.nvidia_smi import normalize_bdf
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

COMMAND = "dmesg.txt"
SOURCE = "dmesg"
_ADDR = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_XID = re.compile(
    rf"NVRM: Xid \((?:PCI:)?(?P<bdf>{_ADDR})[^)]*\): (?P<xid>\d+),\s*"
    r"(?:pid=(?P<pid>'?<unknown>'?|\d+),\s*)?(?:name=(?P<name>[^,]*),\s*)?(?P<text>.*)$"
)
_OFF_BUS = re.compile(rf"NVRM: GPU (?:at )?(?:PCI:)?(?P<bdf>{_ADDR}):.*GPU has fallen off the bus")


def _xid_event(match: re.Match[str], line: str) -> dict[str, Any]:
    pid = match.group("pid")
    name = match.group("name")
    return {
        "kind": "xid",
        "bdf": normalize_bdf(match.group("bdf")),
        "xid": int(match.group("xid")),
        "pid": int(pid) if pid and pid.isdigit() else None,
        "process": None if name is None or name.strip() in ("", "<unknown>") else name.strip(),
        "text": match.group("text").strip(),
        "line": line,
    }


def _off_bus_event(match: re.Match[str], line: str) -> dict[str, Any]:
    return {
        "kind": "fallen_off_bus",
        "bdf": normalize_bdf(match.group("bdf")),
        "xid": None,
        "pid": None,
        "process": None,
        "text": "GPU has fallen off the bus",
        "line": line,
    }


def parse_xid_events(text: str) -> list[dict[str, Any]]:
    """Xid and fallen-off-the-bus events in kernel-log ``text``, in log order.

    Each event: ``{"kind": "xid"|"fallen_off_bus", "bdf": "00000000:CB:00.0", "xid": int|None,
    "pid": int|None, "process": str|None, "text": str, "line": str}``. Lines that are neither
    are ignored, so any text (even garbage) gives a list.
    """
    events: list[dict[str, Any]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if "NVRM:" not in line:
            continue
        match = _XID.search(line)
        if match:
            events.append(_xid_event(match, line))
            continue
        match = _OFF_BUS.search(line)
        if match:
            events.append(_off_bus_event(match, line))
    return events


def read_xid_events(root: Sysroot) -> list[dict[str, Any]]:
    """``parse_xid_events`` of the host's kernel log.

    ``NotSupported`` when ``dmesg`` is missing (or was not captured); ``CommandFailed`` when it
    fails, e.g. with ``kernel.dmesg_restrict=1`` for a non-root user (exit status 1, "Operation
    not permitted").
    """
    return parse_xid_events(root.command(COMMAND).checked().stdout)
