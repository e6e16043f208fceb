"""PCI devices: ``/sys/bus/pci/devices/<DDDD:BB:DD.F>/``.

Files: ``Documentation/ABI/testing/sysfs-bus-pci`` and ``drivers/pci/pci-sysfs.c``:
``vendor``/``device``/``class`` (hex), ``numa_node`` (``-1`` = unknown), ``local_cpulist``,
``current_link_speed``/``max_link_speed`` (``"32.0 GT/s PCIe"``; older kernels ``"8 GT/s"``,
``"Unknown"`` when not known), ``current_link_width``/``max_link_width`` and the ``driver``
symlink. :func:`list_pci_devices` is shared by every layer that needs device locality.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import NamedTuple, TypeVar

from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpulist import (
    format_cpulist,
    parse_cpulist,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.values import parse_int
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

PCI_DEVICES = "sys/bus/pci/devices"
NVIDIA = "0x10de"
MELLANOX = "0x15b3"
GPU_CLASSES = ("0x0302", "0x0300")  # 3D controller, VGA controller
NIC_CLASSES = ("0x0207", "0x0200")  # InfiniBand, Ethernet
_SPEED = re.compile(r"^(\d+(?:\.\d+)?)\s*GT/s(?:\s+PCIe)?$")
_HEX = re.compile(r"^0x[0-9a-f]+$")
T = TypeVar("T")


class PciDevice(NamedTuple):
    """One PCI function; ``numa_node`` ``None`` when the kernel says ``-1``."""

    bdf: str
    vendor: str
    device: str
    pci_class: str
    numa_node: int | None
    local_cpulist: str | None
    current_link_gts: float | None
    max_link_gts: float | None
    current_link_width: int | None
    max_link_width: int | None
    driver: str | None
    sysfs_path: str


def parse_hex_id(text: str, source: str = "id") -> str:
    """``"0x10DE\\n"`` -> ``"0x10de"`` (vendor, device and class files)."""
    value = text.strip().lower()
    if not _HEX.match(value):
        raise ParseError(source, text, "not a hex id")
    return value


def parse_link_speed(text: str, source: str = "link_speed") -> float | None:
    """``"32.0 GT/s PCIe"`` -> ``32.0``; ``"Unknown"``/``"Unknown speed"`` -> ``None``."""
    value = text.strip()
    if value.startswith("Unknown"):
        return None
    match = _SPEED.match(value)
    if not match:
        raise ParseError(source, text, "not a PCIe link speed")
    return float(match.group(1))


def parse_numa_node(text: str, source: str = "numa_node") -> int | None:
    """``"1"`` -> ``1``; ``"-1"`` (no NUMA information) -> ``None``."""
    try:
        node = int(text.strip())
    except ValueError:
        raise ParseError(source, text, "not a NUMA node number") from None
    return None if node < 0 else node


def _optional(root: Sysroot, rel: str, parser: Callable[[str, str], T]) -> T | None:
    text = root.read_optional(rel)
    return None if text is None else parser(text, root.display(rel))


def read_pci_device(root: Sysroot, bdf: str) -> PciDevice:
    """Attributes of ``/sys/bus/pci/devices/<bdf>``; ``NotSupported`` when it is absent."""
    base = f"{PCI_DEVICES}/{bdf}"
    cpus = _optional(root, f"{base}/local_cpulist", parse_cpulist)
    driver = root.readlink(f"{base}/driver")
    return PciDevice(
        bdf=bdf,
        vendor=parse_hex_id(root.read_text(f"{base}/vendor"), root.display(f"{base}/vendor")),
        device=parse_hex_id(root.read_text(f"{base}/device"), root.display(f"{base}/device")),
        pci_class=parse_hex_id(root.read_text(f"{base}/class"), root.display(f"{base}/class")),
        numa_node=_optional(root, f"{base}/numa_node", parse_numa_node),
        local_cpulist=None if cpus is None else format_cpulist(cpus),
        current_link_gts=_optional(root, f"{base}/current_link_speed", parse_link_speed),
        max_link_gts=_optional(root, f"{base}/max_link_speed", parse_link_speed),
        current_link_width=_optional(root, f"{base}/current_link_width", parse_int),
        max_link_width=_optional(root, f"{base}/max_link_width", parse_int),
        driver=None if driver is None else driver.rstrip("/").rsplit("/", 1)[-1],
        sysfs_path=root.realpath(base),
    )


def _matches(root: Sysroot, bdf: str, vendors: Iterable[str] | None,
             classes: Iterable[str] | None) -> bool:
    base = f"{PCI_DEVICES}/{bdf}"
    if vendors is not None:
        vendor = root.read_optional(f"{base}/vendor")
        if vendor is None or vendor.lower() not in vendors:
            return False
    if classes is not None:
        pci_class = (root.read_optional(f"{base}/class") or "").lower()
        return any(pci_class.startswith(prefix) for prefix in classes)
    return True


def list_pci_devices(root: Sysroot, vendors: Iterable[str] | None = None,
                     classes: Iterable[str] | None = None) -> list[PciDevice]:
    """PCI functions whose vendor is in ``vendors`` and class starts with one of ``classes``.

    ``vendors``: ``("0x10de",)``; ``classes``: prefixes such as ``("0x0302", "0x0300")``.
    ``None`` means no filter. No PCI bus (some VMs) is an empty list, not an error.
    """
    wanted_vendors = None if vendors is None else {v.lower() for v in vendors}
    wanted_classes = None if classes is None else tuple(c.lower() for c in classes)
    return [
        read_pci_device(root, bdf)
        for bdf in root.listdir(PCI_DEVICES)
        if _matches(root, bdf, wanted_vendors, wanted_classes)
    ]


def list_gpus(root: Sysroot) -> list[PciDevice]:
    """NVIDIA display/3D controllers (vendor 0x10de, class 0x0302xx or 0x0300xx)."""
    return list_pci_devices(root, vendors=(NVIDIA,), classes=GPU_CLASSES)


def list_nics(root: Sysroot) -> list[PciDevice]:
    """Mellanox/NVIDIA network functions (vendor 0x15b3, class 0x0207xx or 0x0200xx)."""
    return list_pci_devices(root, vendors=(MELLANOX,), classes=NIC_CLASSES)
