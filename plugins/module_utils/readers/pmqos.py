"""CPU latency PM QoS: ``/dev/cpu_dma_latency``, its holders, and the per-CPU
``/sys/devices/system/cpu/cpuN/power/pm_qos_resume_latency_us``.

Documentation: ``Documentation/power/pm_qos_interface.rst`` and ``kernel/power/qos.c`` (reading
the device gives the aggregate -- the minimum of all requests -- as a 4-byte s32 in µs;
2000000000 means "no constraint"; a request lives exactly as long as its file descriptor), and
``Documentation/ABI/testing/sysfs-devices-power`` (``0`` = no constraint, ``n/a`` = no latency
allowed). Reading ``/dev/cpu_dma_latency`` needs root.
"""

from __future__ import annotations

import struct
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpuidle import (
    CPU_DIR,
    Problems,
    cpu_numbers,
    read_value,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

DMA_LATENCY = "dev/cpu_dma_latency"
NO_CONSTRAINT = 2_000_000_000  # PM_QOS_CPU_LATENCY_DEFAULT_VALUE
RESUME_LATENCY = "power/pm_qos_resume_latency_us"


def parse_dma_latency(data: bytes, source: str = "/dev/cpu_dma_latency") -> int:
    """The 4 bytes read from ``/dev/cpu_dma_latency`` -> µs (little-endian s32)."""
    if len(data) != 4:
        raise ParseError(source, data.hex(), f"expected 4 bytes, got {len(data)}")
    return struct.unpack("<i", data)[0]


def read_dma_latency(root: Sysroot) -> int:
    """The aggregate CPU latency request in µs; ``NotSupported`` when absent or unreadable."""
    data = root.read_bytes(DMA_LATENCY, limit=16, device=True)
    return parse_dma_latency(data, root.display(DMA_LATENCY))


def parse_resume_latency(text: str, source: str = "pm_qos_resume_latency_us") -> int | str:
    """``"0"`` -> 0 (no constraint), ``"n/a"`` -> ``"n/a"`` (no latency allowed), ``"20"`` -> 20."""
    value = text.strip()
    if value == "n/a":
        return value
    try:
        number = int(value)
    except ValueError:
        raise ParseError(source, text, "not a number of µs or 'n/a'") from None
    if number < 0:
        raise ParseError(source, text, "negative latency")
    return number


def read_resume_latency(root: Sysroot, problems: Problems = None) -> dict[str, list[int]]:
    """``{"0": [0, 1, ...]}``: CPUs grouped by their ``pm_qos_resume_latency_us`` value."""
    groups: dict[str, list[int]] = {}
    for cpu in cpu_numbers(root):
        value = read_value(root, f"{CPU_DIR}/cpu{cpu}/{RESUME_LATENCY}", parse_resume_latency,
                           problems)
        if value is not None:
            groups.setdefault(str(value), []).append(cpu)
    return groups


def holder_fds(root: Sysroot, pid: str) -> list[int]:
    """File descriptors of process ``pid`` that are open on ``/dev/cpu_dma_latency``."""
    target = root.display(DMA_LATENCY)
    fds = [fd for fd in root.listdir(f"proc/{pid}/fd") if fd.isdigit()]
    return sorted(int(fd) for fd in fds if root.readlink(f"proc/{pid}/fd/{fd}") == target)


def find_holders(root: Sysroot) -> list[dict[str, Any]]:
    """Processes holding ``/dev/cpu_dma_latency`` open: ``[{"pid", "comm", "fds"}]``.

    Processes whose ``fd`` directory cannot be read (not root) are not seen.
    """
    holders = []
    for pid in sorted((p for p in root.listdir("proc") if p.isdigit()), key=int):
        fds = holder_fds(root, pid)
        if fds:
            comm = root.read_optional(f"proc/{pid}/comm")
            holders.append({"pid": int(pid), "comm": comm, "fds": fds})
    return holders


def read_pm_qos(root: Sysroot, problems: Problems = None) -> dict[str, Any]:
    """The aggregate ``/dev/cpu_dma_latency`` value, its holders, per-CPU resume latency.

    ``holders`` is ``[]`` without looking when the aggregate value is the default (no
    process constrains it); otherwise the processes with the device open.
    """
    try:
        value: int | None = read_dma_latency(root)
    except HostStateError as exc:
        if problems is None:
            raise
        problems.append(exc)
        value = None
    resume = read_resume_latency(root, problems)
    constrained = None if value is None else value < NO_CONSTRAINT
    return {
        "cpu_dma_latency_us": value,
        "cpu_dma_latency_constrained": constrained,
        # Walking every process's fds costs time on busy nodes; without a constraint no
        # holder matters, so the walk is done only when one exists (or the value is unknown).
        "holders": [] if constrained is False else find_holders(root),
        "resume_latency_us": resume,
        "resume_latency_constrained_cpus": sorted(
            cpu for key, cpus in resume.items() if key != "0" for cpu in cpus),
    }
