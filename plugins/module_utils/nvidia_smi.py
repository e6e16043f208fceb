"""Per-GPU facts from ``nvidia-smi -q -x`` (the driver's XML report).

Format: the DTD ``nvsmi_device_v1x.dtd`` shipped with the driver (v11 up to R510, v12 from
R535) and the ``nvidia-smi(1)`` manual page ("-q -x: produce XML output"). Every leaf is text,
often with a unit (``"45 C"``, ``"27.22 W"``, ``"16x"``, ``"96 bank(s)"``); ``N/A`` and
``[N/A]`` mean "not supported here" and become ``None``.

Tag names changed between driver branches. :data:`TAG_ALIASES` maps the older names to the
current ones before anything is read, so one parser serves R510 (``clocks_throttle_reasons``,
``power_readings``) and R535+ (``clocks_event_reasons``, ``gpu_power_readings``). The ECC
counters changed layout in R550 (``sram_uncorrectable`` split into ``_parity`` and
``_secded``); both are folded into the same keys. The temperature thresholds changed meaning
(absolute before R535, relative to T.Limit after), so they are kept apart, not aliased.

The XML comes from an external command and is parsed only through ``safe_xml.parse_xml``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET  # noqa: S405 - only for the Element type; parsing is safe_xml
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.errors import (
    NotSupported,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.safe_xml import parse_xml
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

COMMAND = "nvidia-smi-q-x.xml"
SOURCE = "nvidia-smi -q -x"

# Older tag name -> current tag name (exact names).
TAG_ALIASES: dict[str, str] = {
    "clocks_throttle_reasons": "clocks_event_reasons",  # renamed in R535 (DTD v12)
    "power_readings": "gpu_power_readings",  # split into gpu_/module_power_readings in R535
    "enforced_power_limit": "current_power_limit",  # the limit in force
    "power_limit": "requested_power_limit",  # the limit that was set
}
# Older tag prefix -> current prefix.
PREFIX_ALIASES: dict[str, str] = {"clocks_throttle_reason_": "clocks_event_reason_"}

# Temperature leaves: tag -> (group, key). Before R535 thresholds are absolute temperatures;
# from R535 the *_tlimit_* values are margins relative to the GPU's T.Limit.
TEMPERATURE_KEYS: dict[str, tuple[str, str]] = {
    "gpu_temp_max_threshold": ("absolute_c", "shutdown"),
    "gpu_temp_slow_threshold": ("absolute_c", "slowdown"),
    "gpu_temp_max_gpu_threshold": ("absolute_c", "gpu_max"),
    "gpu_temp_max_mem_threshold": ("absolute_c", "memory_max"),
    "gpu_temp_tlimit": ("tlimit_margin_c", "current"),
    "gpu_temp_max_tlimit_threshold": ("tlimit_margin_c", "shutdown"),
    "gpu_temp_slow_tlimit_threshold": ("tlimit_margin_c", "slowdown"),
    "gpu_temp_max_gpu_tlimit_threshold": ("tlimit_margin_c", "gpu_max"),
    "gpu_temp_max_mem_tlimit_threshold": ("tlimit_margin_c", "memory_max"),
}

# nvidia-smi's own "no GPU here" messages (stdout/stderr with a non-zero exit status):
# 6 = no devices found, 9 = driver not loaded, 12 = NVML library not found (nvidia-smi(1)).
NO_GPU_EXIT_CODES = (6, 9, 12)
NO_GPU_MESSAGES = (
    "No devices were found",
    "couldn't communicate with the NVIDIA driver",
    "NVML Shared Library Not Found",
    "Failed to initialize NVML: Driver/library version mismatch",
)
NOT_AVAILABLE = {"", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error",
                 "[Unknown Error]", "Insufficient Permissions", "[Insufficient Permissions]"}
_QUANTITY = re.compile(r"(-?\d+(?:\.\d+)?)\s*(\S*)")
_BDF = re.compile(r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?")
_PCI_ID = re.compile(r"([0-9a-fA-F]{4})([0-9a-fA-F]{4})")


class NoGpu(NotSupported):
    """nvidia-smi is installed but reports no GPU, no driver or no NVML library."""


# -- PCI addresses ---------------------------------------------------------------------------


def _bdf_parts(text: str) -> tuple[int, int, int, int]:
    match = _BDF.fullmatch(text.strip())
    if not match:
        raise ValueError(f"not a PCI address: {text!r}")
    domain, bus, dev, fn = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(dev, 16), int(fn or "0", 16)


def normalize_bdf(text: str) -> str:
    """Any PCI address form -> nvidia-smi's ``00000000:CB:00.0`` (``ValueError`` if none).

    Accepts the kernel-log form ``0000:cb:00`` (no function: ``.0``), sysfs ``0000:cb:00.0``
    and nvidia-smi's own form.
    """
    domain, bus, dev, fn = _bdf_parts(text)
    return f"{domain:08X}:{bus:02X}:{dev:02X}.{fn:X}"


def sysfs_bdf(text: str) -> str:
    """Any PCI address form -> sysfs' ``0000:cb:00.0`` (``/sys/bus/pci/devices/<this>``)."""
    domain, bus, dev, fn = _bdf_parts(text)
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn:x}"


# -- leaves ----------------------------------------------------------------------------------


def _canonical(tag: str) -> str:
    if tag in TAG_ALIASES:
        return TAG_ALIASES[tag]
    for old, new in PREFIX_ALIASES.items():
        if tag.startswith(old):
            return new + tag[len(old):]
    return tag


def apply_aliases(elem: ET.Element) -> ET.Element:
    """Rename older driver tags to the current names, in place, throughout ``elem``."""
    for node in elem.iter():
        node.tag = _canonical(node.tag)
    return elem


def _text(elem: ET.Element | None, path: str) -> str | None:
    """Stripped text of ``elem/path``; ``None`` when absent or ``N/A``."""
    node = elem.find(path) if elem is not None else None
    if node is None:
        return None
    text = (node.text or "").strip()
    return None if text in NOT_AVAILABLE else text


def parse_quantity(text: str | None, units: tuple[str, ...], source: str) -> int | float | None:
    """``"27.22 W"`` -> ``27.22``, ``"16x"`` -> ``16``; ``None`` stays ``None``.

    ``units`` lists the accepted unit suffixes (``""`` for a bare number); anything else is a
    ``ParseError``.
    """
    if text is None or text.strip() in NOT_AVAILABLE:
        return None
    match = _QUANTITY.fullmatch(text.strip())
    if not match or match.group(2) not in units:
        raise ParseError(source, text, f"not a number in {'/'.join(u or '-' for u in units)}")
    number = match.group(1)
    return float(number) if "." in number else int(number)


def parse_flag(text: str | None, source: str) -> bool | None:
    """``Enabled``/``Yes``/``Active`` -> True, ``Disabled``/``No``/``Not Active`` -> False."""
    if text is None or text.strip() in NOT_AVAILABLE:
        return None
    word = text.strip().lower()
    if word in ("enabled", "yes", "active"):
        return True
    if word in ("disabled", "no", "not active"):
        return False
    raise ParseError(source, text, "not a yes/no value")


def _num(elem: ET.Element | None, path: str, units: tuple[str, ...], source: str) -> Any:
    return parse_quantity(_text(elem, path), units, f"{source}: <{path}>")


def _flag(elem: ET.Element | None, path: str, source: str) -> bool | None:
    return parse_flag(_text(elem, path), f"{source}: <{path}>")


def _sum(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


# -- sections of one <gpu> -------------------------------------------------------------------


def _pci_ids(gpu: ET.Element, source: str) -> dict[str, str | None]:
    raw = _text(gpu, "pci/pci_device_id")
    if raw is None:
        return {"pci_vendor_id": None, "pci_device_id": None}
    match = _PCI_ID.fullmatch(raw)
    if not match:
        raise ParseError(f"{source}: <pci_device_id>", raw, "not an 8-digit PCI id")
    return {"pci_vendor_id": "0x" + match.group(2).lower(),
            "pci_device_id": "0x" + match.group(1).lower()}


def _address(gpu: ET.Element, source: str) -> dict[str, str]:
    raw = gpu.get("id") or _text(gpu, "pci/pci_bus_id")
    if raw is None:
        raise ParseError(source, ET.tostring(gpu, encoding="unicode")[:60], "<gpu> has no id")
    try:
        return {"bdf": normalize_bdf(raw), "sysfs_bdf": sysfs_bdf(raw)}
    except ValueError:
        raise ParseError(f"{source}: <gpu id>", raw, "not a PCI address") from None


def _identity(gpu: ET.Element, index: int, source: str) -> dict[str, Any]:
    return {
        "index": index,
        "product_name": _text(gpu, "product_name"),
        "product_brand": _text(gpu, "product_brand"),
        "architecture": _text(gpu, "product_architecture"),
        **_address(gpu, source),
        **_pci_ids(gpu, source),
        "uuid": _text(gpu, "uuid"),
        "serial": _text(gpu, "serial"),
        "vbios_version": _text(gpu, "vbios_version"),
        "minor_number": _num(gpu, "minor_number", ("",), source),
        "persistence_mode": _flag(gpu, "persistence_mode", source),
        "mig_mode": _text(gpu, "mig_mode/current_mig"),
        "virtualization_mode": _text(gpu, "gpu_virtualization_mode/virtualization_mode"),
        "reset_required": _flag(gpu, "gpu_reset_status/reset_required", source),
        "performance_state": _text(gpu, "performance_state"),
        "compute_mode": _text(gpu, "compute_mode"),
        "memory_total_mib": _num(gpu, "fb_memory_usage/total", ("MiB",), source),
    }


def _ecc_counts(scope: ET.Element | None, source: str) -> dict[str, int | None]:
    def count(tag: str) -> int | None:
        return _num(scope, tag, ("",), source)

    sram_unc = count("sram_uncorrectable")
    if sram_unc is None:  # R550+ splits it by protection kind
        sram_unc = _sum(count("sram_uncorrectable_parity"), count("sram_uncorrectable_secded"))
    sram_corr, dram_corr, dram_unc = (
        count(t) for t in ("sram_correctable", "dram_correctable", "dram_uncorrectable"))
    correctable, uncorrectable = _sum(sram_corr, dram_corr), _sum(sram_unc, dram_unc)
    if correctable is None and uncorrectable is None:  # pre-R510: single_bit/, double_bit/
        correctable, uncorrectable = count("single_bit/total"), count("double_bit/total")
    return {
        "correctable": correctable, "uncorrectable": uncorrectable,
        "sram_correctable": sram_corr, "sram_uncorrectable": sram_unc,
        "dram_correctable": dram_corr, "dram_uncorrectable": dram_unc,
    }


def _ecc(gpu: ET.Element, source: str) -> dict[str, Any]:
    return {
        "mode_current": _flag(gpu, "ecc_mode/current_ecc", source),
        "mode_pending": _flag(gpu, "ecc_mode/pending_ecc", source),
        "volatile": _ecc_counts(gpu.find("ecc_errors/volatile"), source),
        "aggregate": _ecc_counts(gpu.find("ecc_errors/aggregate"), source),
        "sram_threshold_exceeded": _flag(gpu, "ecc_errors/aggregate/sram_threshold_exceeded",
                                         source),
    }


def _remapped_rows(gpu: ET.Element, source: str) -> dict[str, Any]:
    """``remapped_rows``; a bare ``N/A`` (MIG, pass-through, pre-A100) gives all ``None``."""
    rows = gpu.find("remapped_rows")
    hist = {key: _num(rows, f"row_remapper_histogram/row_remapper_histogram_{key}",
                      ("bank(s)",), source) for key in ("max", "high", "partial", "low", "none")}
    return {
        "correctable": _num(rows, "remapped_row_corr", ("",), source),
        "uncorrectable": _num(rows, "remapped_row_unc", ("",), source),
        "pending": _flag(rows, "remapped_row_pending", source),
        "failure": _flag(rows, "remapped_row_failure", source),
        "histogram_banks": hist if any(v is not None for v in hist.values()) else None,
    }


def _retired_pages(gpu: ET.Element, source: str) -> dict[str, Any]:
    pages = gpu.find("retired_pages")
    pending = _flag(pages, "pending_retirement", source)
    return {
        "single_bit": _num(pages, "multiple_single_bit_retirement/retired_count", ("",), source),
        "double_bit": _num(pages, "double_bit_retirement/retired_count", ("",), source),
        "pending": pending if pending is not None else _flag(pages, "pending_blacklist", source),
    }


def _pcie(gpu: ET.Element, source: str) -> dict[str, int | None]:
    link = gpu.find("pci/pci_gpu_link_info")
    return {
        "gen_current": _num(link, "pcie_gen/current_link_gen", ("",), source),
        "gen_max": _num(link, "pcie_gen/max_link_gen", ("",), source),
        "gen_device_max": _num(link, "pcie_gen/max_device_link_gen", ("",), source),
        "gen_host_max": _num(link, "pcie_gen/max_host_link_gen", ("",), source),
        "width_current": _num(link, "link_widths/current_link_width", ("x",), source),
        "width_max": _num(link, "link_widths/max_link_width", ("x",), source),
        "replay_counter": _num(gpu, "pci/replay_counter", ("",), source),
    }


def _clock_event_reasons(gpu: ET.Element, source: str) -> list[str] | None:
    """Short names of the active clock-event (throttle) reasons, e.g. ``["sw_power_cap"]``."""
    reasons = gpu.find("clocks_event_reasons")
    if reasons is None:
        return None
    prefix = "clocks_event_reason_"
    return [child.tag[len(prefix):] for child in reasons
            if child.tag.startswith(prefix) and _flag(reasons, child.tag, source)]


def _temperature(gpu: ET.Element, source: str) -> dict[str, Any]:
    temp = gpu.find("temperature")
    limits: dict[str, dict[str, Any]] = {
        "absolute_c": dict.fromkeys(("shutdown", "slowdown", "gpu_max", "memory_max")),
        "tlimit_margin_c": dict.fromkeys(("current", "shutdown", "slowdown", "gpu_max",
                                          "memory_max")),
    }
    for tag, (group, key) in TEMPERATURE_KEYS.items():
        limits[group][key] = _num(temp, tag, ("C",), source)
    return {
        "temperature_c": _num(temp, "gpu_temp", ("C",), source),
        "memory_temperature_c": _num(temp, "memory_temp", ("C",), source),
        "temperature_limits": limits,
    }


def _power(gpu: ET.Element, source: str) -> dict[str, Any]:
    power = gpu.find("gpu_power_readings")
    draws = (_num(power, tag, ("W",), source)
             for tag in ("power_draw", "instant_power_draw", "average_power_draw"))
    return {
        "power_draw_w": next((d for d in draws if d is not None), None),
        "power_limit_w": _num(power, "current_power_limit", ("W",), source),
        "power_default_limit_w": _num(power, "default_power_limit", ("W",), source),
        "power_max_limit_w": _num(power, "max_power_limit", ("W",), source),
    }


def parse_gpu(gpu: ET.Element, index: int, source: str = SOURCE) -> dict[str, Any]:
    """Facts of one (already aliased) ``<gpu>`` element; ``index`` is its position."""
    return {
        **_identity(gpu, index, source),
        "ecc": _ecc(gpu, source),
        "remapped_rows": _remapped_rows(gpu, source),
        "retired_pages": _retired_pages(gpu, source),
        "pcie": _pcie(gpu, source),
        "clocks_event_reasons_active": _clock_event_reasons(gpu, source),
        **_temperature(gpu, source),
        **_power(gpu, source),
        "fabric": {"state": _text(gpu, "fabric/state"), "status": _text(gpu, "fabric/status")},
    }


# -- the whole report ------------------------------------------------------------------------


def parse_nvidia_smi(text: str, source: str = SOURCE) -> dict[str, Any]:
    """Facts of a whole ``nvidia-smi -q -x`` report.

    ``{"driver_version", "cuda_version", "attached_gpus", "timestamp", "gpus": [...]}``;
    ``ParseError`` for malformed or unsafe XML, or a document that is not an nvidia-smi log.
    """
    if not text.strip():
        raise ParseError(source, text, "empty output")
    root = apply_aliases(parse_xml(text, source))
    if root.tag != "nvidia_smi_log":
        raise ParseError(source, text, f"root element is <{root.tag}>, not <nvidia_smi_log>")
    return {
        "timestamp": _text(root, "timestamp"),
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "attached_gpus": _num(root, "attached_gpus", ("",), source),
        "gpus": [parse_gpu(gpu, i, source) for i, gpu in enumerate(root.findall("gpu"))],
    }


def no_gpu_message(text: str) -> str | None:
    """The first line of nvidia-smi's "no GPU / no driver" message in ``text``, if any."""
    for line in text.splitlines():
        if any(msg.lower() in line.lower() for msg in NO_GPU_MESSAGES):
            return line.strip()
    return None


def read_nvidia_smi(root: Sysroot) -> dict[str, Any]:
    """``parse_nvidia_smi`` of the host's ``nvidia-smi -q -x``.

    Raises ``NotSupported`` when nvidia-smi is absent (or was not captured), ``NoGpu`` when it
    reports no GPU/driver, ``CommandFailed`` for another failure (e.g. exit status 15, "GPU
    has fallen off the bus") and ``ParseError`` for a malformed or unsafe document.
    """
    out = root.command(COMMAND)
    message = no_gpu_message(out.stdout + "\n" + out.stderr)
    if out.rc in NO_GPU_EXIT_CODES or (message and not out.stdout.lstrip().startswith("<")):
        raise NoGpu(out.source, message or f"exit status {out.rc}")
    return parse_nvidia_smi(out.checked().stdout, out.source)
