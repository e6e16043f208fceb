"""Per-GPU facts through NVML (``pynvml`` from the ``nvidia-ml-py`` package), when available.

NVML is the library behind nvidia-smi (API reference:
https://docs.nvidia.com/deploy/nvml-api/). It is optional: it is only tried on a live host
(``Sysroot("/")``) where ``pynvml`` can be imported, and every failure (no module, no driver, a
call not supported by this GPU) quietly gives ``None``. ``pynvml`` is imported inside the
functions so that this module loads on every host.

The per-GPU dictionaries have the same keys as ``nvidia_smi.parse_gpu``; what NVML does not
offer through these calls is ``None``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.nvidia_smi import (
    normalize_bdf,
    sysfs_bdf,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

SOURCE = "nvml"
# nvmlClocksEventReasons bits (nvml.h) -> nvidia-smi's short names.
CLOCK_EVENT_BITS: dict[int, str] = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}
# nvmlGpuVirtualizationMode_t -> nvidia-smi's wording.
VIRTUALIZATION_MODES = {0: "None", 1: "Pass-Through", 2: "VGPU", 3: "Host VGPU",
                        4: "Host VSGA"}
# NVML enum values (nvml.h), used when the binding lacks the named constant.
CORRECTED, UNCORRECTED = 0, 1
VOLATILE, AGGREGATE = 0, 1
TEMPERATURE_GPU = 0
CLOCK_GRAPHICS, CLOCK_SM, CLOCK_MEM = 0, 1, 2  # nvmlClockType_t
RETIRE_SINGLE, RETIRE_DOUBLE = 0, 1


def _import_pynvml() -> ModuleType | None:
    try:
        import pynvml  # optional: only some hosts have nvidia-ml-py
    except ImportError:
        return None
    return pynvml


def nvml_status(root: Sysroot) -> dict[str, Any]:
    """``{"available": bool, "reason": str|None}``: can NVML be tried on this root?"""
    if not root.live:
        return {"available": False, "reason": "not a live host (captured sysroot)"}
    if _import_pynvml() is None:
        return {"available": False, "reason": "pynvml (nvidia-ml-py) is not installed"}
    return {"available": True, "reason": None}


def _decode(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _caller(nvml: ModuleType) -> Callable[..., Any]:
    """``call("nvmlX", *args)``: the result, or ``None`` when missing or NVML refuses."""
    def call(name: str, *args: Any) -> Any:
        func = getattr(nvml, name, None)
        if func is None:
            return None
        try:
            return _decode(func(*args))
        except nvml.NVMLError:
            return None
    return call


def _milli(value: int | None) -> float | None:
    return None if value is None else round(value / 1000.0, 2)


def _bits(mask: int | None) -> list[str] | None:
    if mask is None:
        return None
    return [name for bit, name in CLOCK_EVENT_BITS.items() if mask & bit]


def _ecc_scope(call: Callable[..., Any], handle: Any, scope: int) -> dict[str, int | None]:
    return {
        "correctable": call("nvmlDeviceGetTotalEccErrors", handle, CORRECTED, scope),
        "uncorrectable": call("nvmlDeviceGetTotalEccErrors", handle, UNCORRECTED, scope),
        "sram_correctable": None, "sram_uncorrectable": None,
        "dram_correctable": None, "dram_uncorrectable": None,
    }


def _ecc(call: Callable[..., Any], handle: Any) -> dict[str, Any]:
    mode = call("nvmlDeviceGetEccMode", handle)
    current, pending = mode if isinstance(mode, (list, tuple)) else (None, None)
    return {
        "mode_current": None if current is None else bool(current),
        "mode_pending": None if pending is None else bool(pending),
        "volatile": _ecc_scope(call, handle, VOLATILE),
        "aggregate": _ecc_scope(call, handle, AGGREGATE),
        "sram_threshold_exceeded": None,
    }


def _remapped_rows(call: Callable[..., Any], handle: Any) -> dict[str, Any]:
    rows = call("nvmlDeviceGetRemappedRows", handle)
    corr, unc, pending, failure = rows if isinstance(rows, (list, tuple)) else (None,) * 4
    return {
        "correctable": corr, "uncorrectable": unc,
        "pending": None if pending is None else bool(pending),
        "failure": None if failure is None else bool(failure),
        "histogram_banks": None,
    }


def _retired_pages(call: Callable[..., Any], handle: Any) -> dict[str, Any]:
    single = call("nvmlDeviceGetRetiredPages", handle, RETIRE_SINGLE)
    double = call("nvmlDeviceGetRetiredPages", handle, RETIRE_DOUBLE)
    pending = call("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    return {
        "single_bit": None if single is None else len(single),
        "double_bit": None if double is None else len(double),
        "pending": None if pending is None else bool(pending),
    }


def _pcie(call: Callable[..., Any], handle: Any) -> dict[str, Any]:
    return {
        "gen_current": call("nvmlDeviceGetCurrPcieLinkGeneration", handle),
        "gen_max": call("nvmlDeviceGetMaxPcieLinkGeneration", handle),
        "gen_device_max": call("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
        "gen_host_max": None,
        "width_current": call("nvmlDeviceGetCurrPcieLinkWidth", handle),
        "width_max": call("nvmlDeviceGetMaxPcieLinkWidth", handle),
        "replay_counter": call("nvmlDeviceGetPcieReplayCounter", handle),
    }


def _clocks(call: Callable[..., Any], handle: Any) -> dict[str, int | None]:
    """Keyed like ``nvidia_smi.CLOCK_KEYS`` (MHz)."""
    kinds = {"graphics": CLOCK_GRAPHICS, "sm": CLOCK_SM, "memory": CLOCK_MEM}
    return {
        **{key: call("nvmlDeviceGetClockInfo", handle, kind) for key, kind in kinds.items()},
        **{f"max_{key}": call("nvmlDeviceGetMaxClockInfo", handle, kind)
           for key, kind in kinds.items()},
        "app_graphics": call("nvmlDeviceGetApplicationsClock", handle, CLOCK_GRAPHICS),
        "app_memory": call("nvmlDeviceGetApplicationsClock", handle, CLOCK_MEM),
    }


def _identity(call: Callable[..., Any], handle: Any, index: int) -> dict[str, Any]:
    pci = call("nvmlDeviceGetPciInfo", handle)
    bus_id = _decode(getattr(pci, "busId", None)) if pci is not None else None
    pci_id = getattr(pci, "pciDeviceId", None) if pci is not None else None
    persistence = call("nvmlDeviceGetPersistenceMode", handle)
    return {
        "index": index, "product_name": call("nvmlDeviceGetName", handle),
        "product_brand": None, "architecture": None,
        "bdf": normalize_bdf(bus_id) if bus_id else None,
        "sysfs_bdf": sysfs_bdf(bus_id) if bus_id else None,
        "pci_vendor_id": None if pci_id is None else f"0x{pci_id & 0xFFFF:04x}",
        "pci_device_id": None if pci_id is None else f"0x{pci_id >> 16:04x}",
        "uuid": call("nvmlDeviceGetUUID", handle), "serial": call("nvmlDeviceGetSerial", handle),
        "vbios_version": call("nvmlDeviceGetVbiosVersion", handle),
        "minor_number": call("nvmlDeviceGetMinorNumber", handle),
        "persistence_mode": None if persistence is None else persistence == 1,
        "mig_mode": None, "reset_required": None, "recovery_action": None,
        "performance_state": None,
        "virtualization_mode": VIRTUALIZATION_MODES.get(
            call("nvmlDeviceGetVirtualizationMode", handle)),
        "compute_mode": None, "memory_total_mib": None,
    }


def _power(call: Callable[..., Any], handle: Any) -> dict[str, Any]:
    return {
        "power_draw_w": _milli(call("nvmlDeviceGetPowerUsage", handle)),
        "power_limit_w": _milli(call("nvmlDeviceGetEnforcedPowerLimit", handle)),
        "power_default_limit_w": _milli(call("nvmlDeviceGetPowerManagementDefaultLimit",
                                             handle)),
        "power_max_limit_w": None,
    }


def read_gpu(call: Callable[..., Any], handle: Any, index: int) -> dict[str, Any]:
    """One GPU's facts, keyed like ``nvidia_smi.parse_gpu``."""
    reasons = call("nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:
        reasons = call("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    return {
        **_identity(call, handle, index),
        "ecc": _ecc(call, handle),
        "remapped_rows": _remapped_rows(call, handle),
        "retired_pages": _retired_pages(call, handle),
        "pcie": _pcie(call, handle),
        "clocks_event_reasons_active": _bits(reasons),
        "clocks_mhz": _clocks(call, handle),
        "mig_devices": None,  # not read through NVML
        "temperature_c": call("nvmlDeviceGetTemperature", handle, TEMPERATURE_GPU),
        "memory_temperature_c": None,
        "temperature_limits": None,
        **_power(call, handle),
        "fabric": {"state": None, "status": None},
    }


def _cuda_version(value: int | None) -> str | None:
    return None if value is None else f"{value // 1000}.{value % 1000 // 10}"


def read_nvml(root: Sysroot) -> dict[str, Any] | None:
    """``{"driver_version", "cuda_version", "attached_gpus", "timestamp", "gpus"}`` via NVML.

    ``None`` (quietly) on a captured sysroot, without ``pynvml``, or when NVML cannot start
    (no driver, no ``libnvidia-ml.so``).
    """
    nvml = _import_pynvml() if root.live else None
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        call = _caller(nvml)
        count = call("nvmlDeviceGetCount") or 0
        handles = [call("nvmlDeviceGetHandleByIndex", i) for i in range(count)]
        return {
            "timestamp": None,
            "driver_version": call("nvmlSystemGetDriverVersion"),
            "cuda_version": _cuda_version(call("nvmlSystemGetCudaDriverVersion")),
            "attached_gpus": count,
            "gpus": [read_gpu(call, h, i) for i, h in enumerate(handles) if h is not None],
        }
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
