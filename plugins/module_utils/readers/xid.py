"""NVIDIA Xid events and "fallen off the bus" reports in the kernel log (``dmesg``).

The driver logs each Xid as ``NVRM: Xid (PCI:0000:cb:00): 13, pid=1797828,
name=pt_main_thread, <details>`` (``XID_PRINT_WITH_ATTR`` in NVIDIA/open-gpu-kernel-modules
``src/nvidia/src/kernel/gpu/rc/kernel_rc.c``; without a process it writes ``..: 13, <details>``,
under MIG ``(PCI:0000:01:00 GPU-I:05)``); older drivers wrote ``NVRM: Xid (0000:01:00): 31,
<details>``, and pid or name may be ``'<unknown>'``. A GPU that drops off PCIe is reported as
``NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.`` (``NV_DEV_PRINTF``, ``osinit.c``, next
to Xid 79), and, when the driver finds it gone while loading, over three lines: ``NVRM: The
NVIDIA GPU 0000:b3:00.0`` / ``NVRM: (PCI ID: 10de:26b5) installed in this system has`` /
``NVRM: fallen off the bus and is not responding to commands.`` (``osapi.c``). Before its first
Xid the driver names the GPU once: ``NVRM: GPU at PCI:0000:9b:00: GPU-<uuid>`` and ``NVRM: GPU
Board Serial Number: <serial>`` (``_krcLogUuidOnce``); the bus-loss path adds ``NVRM: GPU
0000:91:00.0: GPU serial number is <serial>.``. NVSwitch ``SXid`` lines are counted, not read.

The log's address has no function number and a 4-digit domain; it is normalised to
nvidia-smi's ``00000000:CB:00.0`` so events join with the per-GPU facts.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers import kernel_log, xid_catalog
from ansible_collections.exemplar.tune.plugins.module_utils.readers.lazy_pattern import LazyPattern
from ansible_collections.exemplar.tune.plugins.module_utils.readers.nvidia_smi import normalize_bdf
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

COMMAND = "dmesg.txt"
SOURCE = "dmesg"
_ADDR = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
# Compiled at first use: only a log with NVRM lines needs them.
_XID = LazyPattern(
    rf"NVRM: Xid \((?:PCI:)?(?P<bdf>{_ADDR})[^)]*\): (?P<xid>\d+),\s*"
    r"(?:pid=(?P<pid>'?<unknown>'?|\d+),\s*)?(?:name=(?P<name>[^,]*),\s*)?(?P<text>.*)$"
)
_OFF_BUS = LazyPattern(
    rf"NVRM: GPU (?:at )?(?:PCI:)?(?P<bdf>{_ADDR}):.*GPU has fallen off the bus")
_LOST_START = LazyPattern(rf"NVRM: The NVIDIA GPU (?P<bdf>{_ADDR})\s*$")
_LOST_END = "fallen off the bus and is not responding"
_LOST_PARTS = ("(PCI ID:", "installed in this system", _LOST_END)
_LOST_SPAN = 3  # physical lines of the multi-line message
_UUID = LazyPattern(rf"NVRM: GPU at PCI:(?P<bdf>{_ADDR}): (?P<uuid>GPU-[0-9a-fA-F-]+)")
_BOARD_SERIAL = LazyPattern(r"NVRM: GPU Board Serial Number: (?P<serial>\S+)")
_DEV_SERIAL = LazyPattern(
    rf"NVRM: GPU (?P<bdf>{_ADDR}): GPU serial number is (?P<serial>[^.\s]+)")
_SXID = "SXid (PCI:"  # NVSwitch lines: counted


def _event(kind: str, bdf: str, line: kernel_log.LogLine, **fields: Any) -> dict[str, Any]:
    event = {"kind": kind, "bdf": normalize_bdf(bdf), "xid": None, "pid": None, "process": None,
             "text": "", "line": line.raw.strip(), "time": line.time, "t": line.t,
             "boot": line.boot, "lines": 1, "driver_action": None, "uuid": None, "serial": None}
    event.update(fields)
    return event


def _xid_event(match: re.Match[str], line: kernel_log.LogLine) -> dict[str, Any]:
    pid, name = match.group("pid"), match.group("name")
    number, text = int(match.group("xid")), match.group("text").strip()
    return _event(
        "xid", match.group("bdf"), line, xid=number, text=text,
        pid=int(pid) if pid and pid.isdigit() else None,
        process=None if name is None or name.strip() in ("", "<unknown>") else name.strip(),
        driver_action=xid_catalog.driver_action(text) if number == 154 else None)


class _Reader:
    """State while reading one log: events, GPU identities, the pending multi-line message."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.identity: dict[tuple[int, str], dict[str, str]] = {}
        self.named: str | None = None  # the GPU the last "GPU at PCI:" line named
        self.lost: tuple[int, kernel_log.LogLine, str, list[str]] | None = None
        self.sxid_lines = 0
        self.clock: str | None = None

    def identify(self, boot: int, bdf: str, key: str, value: str) -> None:
        self.identity.setdefault((boot, normalize_bdf(bdf)), {})[key] = value

    def read(self, index: int, line: kernel_log.LogLine) -> None:
        """Take one line that names ``NVRM:`` or ``SXid`` (the others say nothing here)."""
        body = line.body
        if _SXID in body:
            self.sxid_lines += 1
        if "NVRM:" not in body:
            return
        if self._continue_lost(index, line) or self._identity(line):
            return
        match = _XID.search(body)
        if match:
            self.events.append(_xid_event(match, line))
            return
        match = _OFF_BUS.search(body)
        if match:
            self.events.append(_event("fallen_off_bus", match.group("bdf"), line,
                                      text="GPU has fallen off the bus"))
            return
        match = _LOST_START.search(body)
        if match:
            self.lost = (index, line, match.group("bdf"), [body.split("NVRM:", 1)[1].strip()])

    def _identity(self, line: kernel_log.LogLine) -> bool:
        match = _UUID.search(line.body)
        if match:
            self.named = match.group("bdf")
            self.identify(line.boot, self.named, "uuid", match.group("uuid"))
            return True
        match = _BOARD_SERIAL.search(line.body)
        if match and self.named:
            self.identify(line.boot, self.named, "serial", match.group("serial"))
            return True
        match = _DEV_SERIAL.search(line.body)
        if match:
            self.identify(line.boot, match.group("bdf"), "serial", match.group("serial"))
            return True
        return False

    def _continue_lost(self, index: int, line: kernel_log.LogLine) -> bool:
        """A continuation line of "The NVIDIA GPU ... has fallen off the bus" (True if used)."""
        if self.lost is None or index - self.lost[0] >= _LOST_SPAN:
            self.lost = None
            return False
        if not any(part in line.body for part in _LOST_PARTS):
            return False
        start, first, bdf, parts = self.lost
        parts.append(line.body.split("NVRM:", 1)[1].strip())
        if _LOST_END in line.body:
            self.events.append(_event("fallen_off_bus", bdf, first, text=" ".join(parts),
                                      lines=index - start + 1))
            self.lost = None
        return True

    def finish(self, boots: int) -> list[dict[str, Any]]:
        """Events with their GPU's identity and ``boot`` as an offset (0: the last boot)."""
        for event in self.events:
            event.update(self.identity.get((event["boot"], event["bdf"]), {}))
            event["boot"] -= boots - 1
        return self.events


def parse_kernel_log(text: str) -> dict[str, Any]:
    """The Xid-related reading of kernel-log ``text``.

    ``{"events": [...], "boots": n, "clock": "boot"|"wall"|None, "sxid_lines": n}``. Each
    event: ``{"kind": "xid"|"fallen_off_bus", "bdf": "00000000:CB:00.0", "xid": int|None,
    "pid": int|None, "process": str|None, "text": str, "line": str, "time": str|None,
    "t": float|None, "boot": 0|-1|..., "lines": int, "driver_action": str|None,
    "uuid": str|None, "serial": str|None}`` in log order. ``lines`` is the physical lines of
    the message (3 for the multi-line bus loss); ``driver_action`` is what an Xid 154 states
    (:func:`xid_catalog.driver_action`); ``boot`` 0 is the last boot in the log. Any text, even
    garbage, gives a reading.
    """
    reader, boot = _Reader(), 0
    for index, line in enumerate(kernel_log.read_lines(text)):
        boot = line.boot
        reader.clock = reader.clock or line.clock
        if "NVRM:" in line.body or _SXID in line.body:
            reader.read(index, line)
    events = reader.finish(boot + 1)
    return {"events": events, "boots": boot + 1, "clock": reader.clock,
            "sxid_lines": reader.sxid_lines}


def parse_xid_events(text: str) -> list[dict[str, Any]]:
    """The events of :func:`parse_kernel_log`."""
    return parse_kernel_log(text)["events"]


def read_kernel_log(root: Sysroot) -> dict[str, Any]:
    """``parse_kernel_log`` of the host's kernel log.

    ``NotSupported`` when ``dmesg`` is missing (or was not captured); ``CommandFailed`` when it
    fails, e.g. with ``kernel.dmesg_restrict=1`` for a non-root user (exit status 1, "Operation
    not permitted").
    """
    return parse_kernel_log(root.command(COMMAND).checked().stdout)


def read_xid_events(root: Sysroot) -> list[dict[str, Any]]:
    """The events of :func:`read_kernel_log`."""
    return read_kernel_log(root)["events"]
