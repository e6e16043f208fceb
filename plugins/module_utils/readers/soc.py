"""The system-on-chip behind an arm64 CPU: ``/sys/devices/soc0``.

Files (``Documentation/ABI/testing/sysfs-devices-soc``): ``family``, ``machine`` and
``soc_id``, each present only when the platform fills it. On ACPI arm64 servers the SMCCC
driver (``drivers/firmware/smccc/soc_id.c``) writes ``family = jep106:BBMM`` (JEP106 bank and
manufacturer) and ``soc_id = jep106:BBMM:SSSS``; ``jep106:036b:0241`` is NVIDIA's Grace chip
(``036b`` NVIDIA, ``0241`` Grace, as NVIDIA DCGM's system monitor reads it). The core itself
(Neoverse-V2 for Grace) is the ``CPU part`` of ``/proc/cpuinfo``, see :mod:`cpu_ids`.
"""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

SOC_DIR = "sys/devices/soc0"
FILES = ("family", "machine", "soc_id")
SOC_NAMES = {"jep106:036b:0241": "NVIDIA Grace"}


def soc_name(soc_id: str | None) -> str | None:
    """``jep106:036b:0241`` -> ``NVIDIA Grace``; ``None`` for an id this table does not know."""
    return SOC_NAMES.get((soc_id or "").strip().lower())


def read_soc(root: Sysroot) -> dict[str, str | None] | None:
    """``family``, ``machine``, ``soc_id`` (each ``None`` when absent) and the chip's ``name``;
    ``None`` when the host has no ``/sys/devices/soc0`` (x86, most guests)."""
    if not root.is_dir(SOC_DIR):
        return None
    values: dict[str, str | None] = {
        name: root.read_optional(f"{SOC_DIR}/{name}") or None for name in FILES}
    values["name"] = soc_name(values["soc_id"])
    return values
