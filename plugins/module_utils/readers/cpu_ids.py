"""Names for the CPU identifiers that ``/proc/cpuinfo`` prints as numbers or vendor strings.

* x86 ``vendor_id`` is the CPUID leaf 0 vendor string; the kernel matches the same strings
  (``c_ident`` in ``arch/x86/kernel/cpu/{intel,amd,hygon,centaur,zhaoxin}.c``).
* arm64 ``CPU implementer`` and ``CPU part`` are fields of the MIDR_EL1 register; the codes
  are the ``ARM_CPU_IMP_*`` and ``*_CPU_PART_*`` constants of the Linux kernel's
  ``arch/arm64/include/asm/cputype.h``. Names are written as ``lscpu`` prints them
  (``Neoverse-V2``). Neoverse-V2 (0x41/0xd4f) is the core of NVIDIA Grace, AWS Graviton4
  and Google Axion alike: the part names the core, not the chip (see :mod:`soc` for that).

An unknown code is not an error: the lookups return ``None`` and the facts keep the code.
"""

from __future__ import annotations

X86_VENDORS = {
    "GenuineIntel": "Intel",
    "AuthenticAMD": "AMD",
    "HygonGenuine": "Hygon",
    "CentaurHauls": "Centaur",
    "Shanghai": "Zhaoxin",
}

ARM_IMPLEMENTERS = {
    0x41: "Arm",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x46: "Fujitsu",
    0x48: "HiSilicon",
    0x4E: "NVIDIA",
    0x50: "APM",
    0x51: "Qualcomm",
    0x61: "Apple",
    0x6D: "Microsoft",
    0xC0: "Ampere",
}

# (implementer, part) -> core name; server and common cores of cputype.h.
ARM_PARTS = {
    (0x41, 0xD03): "Cortex-A53",
    (0x41, 0xD04): "Cortex-A35",
    (0x41, 0xD05): "Cortex-A55",
    (0x41, 0xD07): "Cortex-A57",
    (0x41, 0xD08): "Cortex-A72",
    (0x41, 0xD09): "Cortex-A73",
    (0x41, 0xD0A): "Cortex-A75",
    (0x41, 0xD0B): "Cortex-A76",
    (0x41, 0xD0C): "Neoverse-N1",
    (0x41, 0xD0D): "Cortex-A77",
    (0x41, 0xD40): "Neoverse-V1",
    (0x41, 0xD41): "Cortex-A78",
    (0x41, 0xD44): "Cortex-X1",
    (0x41, 0xD46): "Cortex-A510",
    (0x41, 0xD47): "Cortex-A710",
    (0x41, 0xD48): "Cortex-X2",
    (0x41, 0xD49): "Neoverse-N2",
    (0x41, 0xD4F): "Neoverse-V2",
    (0x41, 0xD80): "Cortex-A520",
    (0x41, 0xD81): "Cortex-A720",
    (0x41, 0xD82): "Cortex-X4",
    (0x41, 0xD84): "Neoverse-V3",
    (0x41, 0xD8E): "Neoverse-N3",
    (0x42, 0x516): "Vulcan",
    (0x43, 0x0A1): "ThunderX",
    (0x43, 0x0AF): "ThunderX2",
    (0x46, 0x001): "A64FX",
    (0x48, 0xD01): "TSV110",
    (0x4E, 0x003): "Denver",
    (0x4E, 0x004): "Carmel",
    (0x50, 0x000): "X-Gene",
    (0x51, 0xC00): "Falkor",
    (0x6D, 0xD49): "Azure-Cobalt-100",
    (0xC0, 0xAC3): "Ampere-1",
    (0xC0, 0xAC4): "Ampere-1a",
}


def x86_vendor(vendor_id: str) -> str:
    """``GenuineIntel`` -> ``Intel``; an unknown vendor string is returned as it is."""
    return X86_VENDORS.get(vendor_id.strip(), vendor_id.strip())


def arm_vendor(implementer: int) -> str | None:
    """``0x41`` -> ``Arm``, ``0x4e`` -> ``NVIDIA``; ``None`` for an unknown implementer."""
    return ARM_IMPLEMENTERS.get(implementer)


def arm_part(implementer: int, part: int) -> str | None:
    """``(0x41, 0xd4f)`` -> ``Neoverse-V2``; ``None`` for a part this table does not know."""
    return ARM_PARTS.get((implementer, part))
