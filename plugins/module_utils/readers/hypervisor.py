"""Architecture, kernel release, and whether (and under which hypervisor) the host is a guest.

Files read:

* ``/proc/sys/kernel/arch`` (``uname -m``; ``Documentation/admin-guide/sysctl/kernel.rst``,
  Linux 6.1+), else inferred from ``/proc/cpuinfo`` (``flags`` line on x86, ``Features`` /
  ``CPU architecture`` on arm);
* ``/proc/sys/kernel/osrelease`` (``uname -r``);
* the ``hypervisor`` flag in ``/proc/cpuinfo`` (x86: CPUID.1:ECX bit 31,
  ``arch/x86/include/asm/cpufeatures.h`` ``X86_FEATURE_HYPERVISOR``); arm64 has no such flag;
* DMI/SMBIOS strings ``/sys/class/dmi/id/{product_name,sys_vendor,board_vendor,bios_vendor,
  product_version}`` (``Documentation/ABI/testing/sysfs-class-dmi-id``); the vendor table
  follows systemd's ``detect_vm_dmi_vendor()``;
* ``/sys/hypervisor/type`` (``Documentation/ABI/stable/sysfs-hypervisor-xen``: ``xen``);
* the kernel log line ``Hypervisor detected: <name>`` (x86, ``arch/x86/kernel/cpu/hypervisor.c``)
  -- the text is passed in by the caller, which reads the log once.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

ARCH = "proc/sys/kernel/arch"
CPUINFO = "proc/cpuinfo"
OSRELEASE = "proc/sys/kernel/osrelease"
DMI_DIR = "sys/class/dmi/id"
XEN_TYPE = "sys/hypervisor/type"
# Checked in this order (systemd order): the first vendor match wins.
DMI_FIELDS = ("product_name", "sys_vendor", "board_vendor", "bios_vendor", "product_version")
# DMI string prefix -> hypervisor name.
DMI_VENDORS: tuple[tuple[str, str], ...] = (
    ("KVM", "KVM"),
    ("OpenStack", "OpenStack"),
    ("KubeVirt", "KubeVirt"),
    ("Amazon EC2", "Amazon EC2"),
    ("QEMU", "QEMU"),
    ("VMware", "VMware"),
    ("VMW", "VMware"),
    ("innotek GmbH", "VirtualBox"),
    ("VirtualBox", "VirtualBox"),
    ("Xen", "Xen"),
    ("Bochs", "Bochs"),
    ("Parallels", "Parallels"),
    ("BHYVE", "bhyve"),
    ("Hyper-V", "Hyper-V"),
    ("Apple Virtualization", "Apple Virtualization"),
    ("Google Compute Engine", "Google Compute Engine"),
)
# (.*\S)\s*$ and not (.+?)\s*$: a lazy name before blanks to the line's end reads a run of
# blanks again from each of its characters
DETECTED = re.compile(r"Hypervisor detected: (?P<name>.*\S)\s*$")


class Virtualization(NamedTuple):
    """Verdict: ``virtualized`` is ``None`` only when no source could decide (arm64, no DMI)."""

    virtualized: bool | None
    hypervisor: str | None
    evidence: list[str]


def _cpuinfo_field(text: str, name: str) -> str | None:
    """Value of the first ``name : value`` line of ``/proc/cpuinfo`` text."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == name:
            return value.strip()
    return None


def parse_cpuinfo_flags(text: str) -> list[str]:
    """x86 ``flags`` of the first CPU; ``[]`` when there is no ``flags`` line (arm64)."""
    flags = _cpuinfo_field(text, "flags")
    return flags.split() if flags else []


def parse_cpuinfo_arch(text: str, source: str = "/" + CPUINFO) -> str:
    """``uname -m`` name inferred from ``/proc/cpuinfo``: ``x86_64``, ``aarch64`` or ``armv7l``.

    x86 CPUs list ``flags`` (64-bit kernels are the only ones this tool supports there); arm
    CPUs list ``Features`` and ``CPU architecture`` (``8`` = AArch64). Else ``ParseError``.
    """
    if _cpuinfo_field(text, "flags") is not None:
        return "x86_64"
    arm = _cpuinfo_field(text, "CPU architecture")
    if arm == "8":
        return "aarch64"
    if arm == "7":
        return "armv7l"
    raise ParseError(source, text, "no x86 flags nor arm CPU architecture line")


def arch_source(root: Sysroot) -> str:
    """The file :func:`read_arch` uses on this host."""
    return "/" + (ARCH if root.exists(ARCH) else CPUINFO)


def read_arch(root: Sysroot) -> str:
    """Machine name: ``/proc/sys/kernel/arch`` when present, else inferred from cpuinfo."""
    text = root.read_optional(ARCH)
    if text is not None:
        if not re.fullmatch(r"[A-Za-z0-9_]+", text):
            raise ParseError(root.display(ARCH), text, "not a machine name")
        return text
    return parse_cpuinfo_arch(root.read_text(CPUINFO), root.display(CPUINFO))


def read_kernel_release(root: Sysroot) -> str:
    """``uname -r`` from ``/proc/sys/kernel/osrelease``; ``NotSupported`` when absent."""
    text = root.read_text(OSRELEASE)
    if not text or any(ch.isspace() for ch in text):
        raise ParseError(root.display(OSRELEASE), text, "not a kernel release")
    return text


def read_cpu_flags(root: Sysroot) -> list[str]:
    """x86 CPU flags of ``/proc/cpuinfo`` (``[]`` on arm64); ``NotSupported`` when absent."""
    return parse_cpuinfo_flags(root.read_text(CPUINFO, strip=False))


def read_dmi(root: Sysroot) -> dict[str, str | None]:
    """The DMI strings used for detection; every value ``None`` when the host has no DMI."""
    return {name: root.read_optional(f"{DMI_DIR}/{name}") for name in DMI_FIELDS}


def read_xen_type(root: Sysroot) -> str | None:
    """``/sys/hypervisor/type`` (``xen`` in Xen guests and dom0); ``None`` when absent."""
    return root.read_optional(XEN_TYPE) or None


def parse_dmi_hypervisor(dmi: dict[str, str | None]) -> tuple[str | None, list[str]]:
    """``(hypervisor, matching fields)`` from DMI strings; ``(None, [])`` on bare metal.

    The first field (in :data:`DMI_FIELDS` order) that matches names the hypervisor; every
    matching field is returned as evidence. Amazon EC2 ``*.metal`` instances are bare metal;
    Hyper-V guests say ``Microsoft Corporation`` / ``Virtual Machine`` (Surface laptops share
    the vendor, so the vendor alone is not enough).
    """
    product = dmi.get("product_name") or ""
    if product.endswith(".metal"):
        return None, []
    if dmi.get("sys_vendor") == "Microsoft Corporation" and product == "Virtual Machine":
        return "Hyper-V", ["sys_vendor", "product_name"]
    found: list[tuple[str, str]] = []
    for name in DMI_FIELDS:
        value = dmi.get(name) or ""
        match = next((hv for prefix, hv in DMI_VENDORS if value.startswith(prefix)), None)
        if match:
            found.append((name, match))
    if not found:
        return None, []
    return found[0][1], [name for name, _ in found]


def parse_detected_hypervisor(log_text: str) -> str | None:
    """Name in the last ``Hypervisor detected: <name>`` kernel log line (x86 only)."""
    found = None
    for line in log_text.splitlines():
        match = DETECTED.search(line)
        if match:
            found = match.group("name")
    return found


def classify(
    arch: str | None,
    flags: list[str] | None,
    dmi: dict[str, str | None],
    xen_type: str | None,
    log_name: tuple[str, str] | None = None,
) -> Virtualization:
    """Combine the sources; ``log_name`` is ``(log source, name)`` from the kernel log.

    Hypervisor name precedence: ``/sys/hypervisor/type``, kernel log (CPUID-based), DMI.
    """
    names: list[str] = []
    evidence: list[str] = []
    if xen_type:
        names.append("Xen" if xen_type == "xen" else xen_type)
        evidence.append(f"/{XEN_TYPE}: {xen_type}")
    if log_name:
        names.append(log_name[1])
        evidence.append(f"{log_name[0]}: Hypervisor detected: {log_name[1]}")
    if flags and "hypervisor" in flags:
        evidence.append(f"/{CPUINFO}: flag hypervisor")
    dmi_name, dmi_fields = parse_dmi_hypervisor(dmi)
    if dmi_name:
        names.append(dmi_name)
    evidence.extend(f"/{DMI_DIR}/{name}: {dmi[name]}" for name in dmi_fields)
    return Virtualization(_verdict(arch, flags, dmi, evidence), names[0] if names else None,
                          evidence)


def _verdict(
    arch: str | None, flags: list[str] | None, dmi: dict[str, str | None], evidence: list[str]
) -> bool | None:
    """True with any evidence; False when a source that would show it was read; else None."""
    if evidence:
        return True
    x86 = arch is not None and (arch == "x86_64" or re.fullmatch(r"i[3-6]86", arch) is not None)
    if x86 and flags:
        return False
    if any(value is not None for value in dmi.values()):
        return False
    return None
