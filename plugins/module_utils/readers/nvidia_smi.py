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

A field that cannot be read (``[REDACTED]`` in ``<pci_device_id>``, an unknown unit) is
``None`` with an entry in the report's ``errors``; it never loses the other fields or GPUs.
The plain-text report (``nvidia-smi -q``) is read by :mod:`nvidia_smi_text` into the same
tree and then through :func:`parse_log`, so both forms give the same facts.

The XML comes from an external command and is parsed only through ``safe_xml.parse_xml``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotSupported,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.safe_xml import parse_xml
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET  # noqa: S405 - types only; parsing is safe_xml

COMMAND = "nvidia-smi-q-x.xml"
SOURCE = "nvidia-smi -q -x"
TEXT_COMMAND = "nvidia-smi-q.txt"  # the text form, read by nvidia_smi_text

# Older tag name -> current tag name (exact names).
TAG_ALIASES: dict[str, str] = {
    "clocks_throttle_reasons": "clocks_event_reasons",  # renamed in R535 (DTD v12)
    "power_readings": "gpu_power_readings",  # split into gpu_/module_power_readings in R535
    "enforced_power_limit": "current_power_limit",  # the limit in force
    "power_limit": "requested_power_limit",  # the limit that was set
}
# True/False flags under ``<fabric><health>`` (nvidia-smi R570+).
FABRIC_HEALTH_FLAGS = ("route_recovery_in_progress", "route_unhealthy",
                       "access_timeout_recovery")
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
                 "[Unknown Error]", "Insufficient Permissions", "[Insufficient Permissions]",
                 "Requested functionality has been deprecated"}  # R580+: app clocks, display
# clocks_mhz key -> tag path under <gpu> (values in MHz).
CLOCK_KEYS: dict[str, str] = {
    "graphics": "clocks/graphics_clock", "sm": "clocks/sm_clock", "memory": "clocks/mem_clock",
    "max_graphics": "max_clocks/graphics_clock", "max_sm": "max_clocks/sm_clock",
    "max_memory": "max_clocks/mem_clock",
    "app_graphics": "applications_clocks/graphics_clock",
    "app_memory": "applications_clocks/mem_clock",
}
# Attribute the plain-text reader sets on the elements it builds: where the value was read.
AT_ATTR = "at"
_QUANTITY = re.compile(r"(-?\d+(?:\.\d+)?)\s*(\S*)")
_BDF = re.compile(r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?")
_PCI_ID = re.compile(r"(?:0[xX])?([0-9a-fA-F]{4})([0-9a-fA-F]{4})")  # 233010DE, 0x233010DE


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


def canonical_tag(tag: str) -> str:
    """The current name of a tag (:data:`TAG_ALIASES`, :data:`PREFIX_ALIASES`)."""
    if tag in TAG_ALIASES:
        return TAG_ALIASES[tag]
    for old, new in PREFIX_ALIASES.items():
        if tag.startswith(old):
            return new + tag[len(old):]
    return tag


def apply_aliases(elem: ET.Element) -> ET.Element:
    """Rename older driver tags to the current names, in place, throughout ``elem``."""
    for node in elem.iter():
        node.tag = canonical_tag(node.tag)
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
    """``Enabled``/``Yes``/``Active``/``True`` -> True, ``Disabled``/``No``/``Not Active``/
    ``False`` -> False."""
    if text is None or text.strip() in NOT_AVAILABLE:
        return None
    word = text.strip().lower()
    if word in ("enabled", "yes", "active", "true"):
        return True
    if word in ("disabled", "no", "not active", "false"):
        return False
    raise ParseError(source, text, "not a yes/no value")


def _sum(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


class Fields:
    """Leaf reads for one fact (``gpus.3``): a leaf that cannot be read is ``None`` plus an error.

    One bad field (a ``[REDACTED]`` PCI id, a unit nvidia-smi never printed before) must not
    lose the rest of the report: the value becomes ``None`` and ``errors`` gets a
    ``{"fact", "path", "error"}`` entry (the gatherer's error form) whose path names the field:
    ``<pci/pci_device_id>`` in the XML, the line and label in the plain-text report.
    """

    def __init__(self, source: str, fact: str, errors: list[dict[str, str]]) -> None:
        self.source, self.fact, self.errors = source, fact, errors

    def where(self, elem: ET.Element | None, path: str) -> str:
        """``source: <path>``, or ``source: line N (Label)`` for a node built from text."""
        node = elem.find(path) if elem is not None else None
        at = node.get(AT_ATTR) if node is not None else None
        return f"{self.source}: {at}" if at else f"{self.source}: <{path}>"

    def fail(self, exc: HostStateError) -> None:
        """Record a field that could not be read."""
        self.errors.append({"fact": self.fact, "path": exc.path, "error": exc.reason})

    def num(self, elem: ET.Element | None, path: str, units: tuple[str, ...]) -> Any:
        """:func:`parse_quantity` of ``elem/path``; ``None`` (and an error) when malformed."""
        try:
            return parse_quantity(_text(elem, path), units, self.where(elem, path))
        except ParseError as exc:
            self.fail(exc)
            return None

    def flag(self, elem: ET.Element | None, path: str) -> bool | None:
        """:func:`parse_flag` of ``elem/path``; ``None`` (and an error) when malformed."""
        try:
            return parse_flag(_text(elem, path), self.where(elem, path))
        except ParseError as exc:
            self.fail(exc)
            return None


# -- sections of one <gpu> -------------------------------------------------------------------


def _pci_ids(gpu: ET.Element, f: Fields) -> dict[str, str | None]:
    raw = _text(gpu, "pci/pci_device_id")
    match = _PCI_ID.fullmatch(raw) if raw is not None else None
    if raw is not None and match is None:
        f.fail(ParseError(f.where(gpu, "pci/pci_device_id"), raw, "not an 8-digit PCI id"))
    if match is None:
        return {"pci_vendor_id": None, "pci_device_id": None}
    return {"pci_vendor_id": "0x" + match.group(2).lower(),
            "pci_device_id": "0x" + match.group(1).lower()}


def _address(gpu: ET.Element, f: Fields) -> dict[str, str | None]:
    raw = gpu.get("id") or _text(gpu, "pci/pci_bus_id")
    if raw is None:
        from xml.etree.ElementTree import tostring  # noqa: S405 - writes, does not parse

        f.fail(ParseError(f.source, tostring(gpu, encoding="unicode")[:60], "<gpu> has no id"))
        return {"bdf": None, "sysfs_bdf": None}
    try:
        return {"bdf": normalize_bdf(raw), "sysfs_bdf": sysfs_bdf(raw)}
    except ValueError:
        f.fail(ParseError(f"{f.source}: <gpu id>", raw, "not a PCI address"))
        return {"bdf": None, "sysfs_bdf": None}


def _identity(gpu: ET.Element, index: int, f: Fields) -> dict[str, Any]:
    return {
        "index": index,
        "product_name": _text(gpu, "product_name"),
        "product_brand": _text(gpu, "product_brand"),
        "architecture": _text(gpu, "product_architecture"),
        **_address(gpu, f),
        **_pci_ids(gpu, f),
        "uuid": _text(gpu, "uuid"),
        "serial": _text(gpu, "serial"),
        "vbios_version": _text(gpu, "vbios_version"),
        "minor_number": f.num(gpu, "minor_number", ("",)),
        "persistence_mode": f.flag(gpu, "persistence_mode"),
        "mig_mode": _text(gpu, "mig_mode/current_mig"),
        "virtualization_mode": _text(gpu, "gpu_virtualization_mode/virtualization_mode"),
        "reset_required": f.flag(gpu, "gpu_reset_status/reset_required"),
        "recovery_action": _text(gpu, "gpu_recovery_action"),
        "performance_state": _text(gpu, "performance_state"),
        "compute_mode": _text(gpu, "compute_mode"),
        "memory_total_mib": f.num(gpu, "fb_memory_usage/total", ("MiB",)),
    }


def _ecc_counts(scope: ET.Element | None, f: Fields) -> dict[str, int | None]:
    def count(tag: str) -> int | None:
        return f.num(scope, tag, ("",))

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


def _ecc(gpu: ET.Element, f: Fields) -> dict[str, Any]:
    return {
        "mode_current": f.flag(gpu, "ecc_mode/current_ecc"),
        "mode_pending": f.flag(gpu, "ecc_mode/pending_ecc"),
        "volatile": _ecc_counts(gpu.find("ecc_errors/volatile"), f),
        "aggregate": _ecc_counts(gpu.find("ecc_errors/aggregate"), f),
        "sram_threshold_exceeded": f.flag(gpu, "ecc_errors/aggregate/sram_threshold_exceeded"),
    }


def _remapped_rows(gpu: ET.Element, f: Fields) -> dict[str, Any]:
    """``remapped_rows``; a bare ``N/A`` (MIG, pass-through, pre-A100) gives all ``None``."""
    rows = gpu.find("remapped_rows")
    hist = {key: f.num(rows, f"row_remapper_histogram/row_remapper_histogram_{key}",
                       ("bank(s)",)) for key in ("max", "high", "partial", "low", "none")}
    return {
        "correctable": f.num(rows, "remapped_row_corr", ("",)),
        "uncorrectable": f.num(rows, "remapped_row_unc", ("",)),
        "pending": f.flag(rows, "remapped_row_pending"),
        "failure": f.flag(rows, "remapped_row_failure"),
        "histogram_banks": hist if any(v is not None for v in hist.values()) else None,
    }


def _retired_pages(gpu: ET.Element, f: Fields) -> dict[str, Any]:
    pages = gpu.find("retired_pages")
    pending = f.flag(pages, "pending_retirement")
    return {
        "single_bit": f.num(pages, "multiple_single_bit_retirement/retired_count", ("",)),
        "double_bit": f.num(pages, "double_bit_retirement/retired_count", ("",)),
        "pending": pending if pending is not None else f.flag(pages, "pending_blacklist"),
    }


def _pcie(gpu: ET.Element, f: Fields) -> dict[str, int | None]:
    link = gpu.find("pci/pci_gpu_link_info")
    return {
        "gen_current": f.num(link, "pcie_gen/current_link_gen", ("",)),
        "gen_max": f.num(link, "pcie_gen/max_link_gen", ("",)),
        "gen_device_max": f.num(link, "pcie_gen/max_device_link_gen", ("",)),
        "gen_host_max": f.num(link, "pcie_gen/max_host_link_gen", ("",)),
        "width_current": f.num(link, "link_widths/current_link_width", ("x",)),
        "width_max": f.num(link, "link_widths/max_link_width", ("x",)),
        "replay_counter": f.num(gpu, "pci/replay_counter", ("",)),
    }


def _clock_event_reasons(gpu: ET.Element, f: Fields) -> list[str] | None:
    """Short names of the active clock-event (throttle) reasons, e.g. ``["sw_power_cap"]``."""
    reasons = gpu.find("clocks_event_reasons")
    if reasons is None:
        return None
    prefix = "clocks_event_reason_"
    return [child.tag[len(prefix):] for child in reasons
            if child.tag.startswith(prefix) and f.flag(reasons, child.tag)]


def _clocks(gpu: ET.Element, f: Fields) -> dict[str, int | None]:
    """Current, maximum and application clocks in MHz (:data:`CLOCK_KEYS`)."""
    return {key: f.num(gpu, path, ("MHz",)) for key, path in CLOCK_KEYS.items()}


def _mig_devices(gpu: ET.Element, f: Fields) -> list[dict[str, Any]]:
    """The MIG devices listed under the GPU (``[]`` when none is)."""
    return [{"index": f.num(dev, "index", ("",)),
             "gpu_instance_id": f.num(dev, "gpu_instance_id", ("",)),
             "compute_instance_id": f.num(dev, "compute_instance_id", ("",)),
             "memory_total_mib": f.num(dev, "fb_memory_usage/total", ("MiB",))}
            for dev in gpu.findall("mig_devices/mig_device")]


def _temperature(gpu: ET.Element, f: Fields) -> dict[str, Any]:
    temp = gpu.find("temperature")
    limits: dict[str, dict[str, Any]] = {
        "absolute_c": dict.fromkeys(("shutdown", "slowdown", "gpu_max", "memory_max")),
        "tlimit_margin_c": dict.fromkeys(("current", "shutdown", "slowdown", "gpu_max",
                                          "memory_max")),
    }
    for tag, (group, key) in TEMPERATURE_KEYS.items():
        limits[group][key] = f.num(temp, tag, ("C",))
    return {
        "temperature_c": f.num(temp, "gpu_temp", ("C",)),
        "memory_temperature_c": f.num(temp, "memory_temp", ("C",)),
        "temperature_limits": limits,
    }


def _power(gpu: ET.Element, f: Fields) -> dict[str, Any]:
    power = gpu.find("gpu_power_readings")
    draws = (f.num(power, tag, ("W",))
             for tag in ("power_draw", "instant_power_draw", "average_power_draw"))
    return {
        "power_draw_w": next((d for d in draws if d is not None), None),
        "power_limit_w": f.num(power, "current_power_limit", ("W",)),
        "power_default_limit_w": f.num(power, "default_power_limit", ("W",)),
        "power_max_limit_w": f.num(power, "max_power_limit", ("W",)),
    }


def parse_gpu(gpu: ET.Element, index: int, source: str = SOURCE,
              errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """Facts of one (already aliased) ``<gpu>`` element; ``index`` is its position.

    A field that cannot be read is ``None``, with an entry appended to ``errors``.
    """
    f = Fields(source, f"gpus.{index}", errors if errors is not None else [])
    return {
        **_identity(gpu, index, f),
        "ecc": _ecc(gpu, f),
        "remapped_rows": _remapped_rows(gpu, f),
        "retired_pages": _retired_pages(gpu, f),
        "pcie": _pcie(gpu, f),
        "clocks_event_reasons_active": _clock_event_reasons(gpu, f),
        "clocks_mhz": _clocks(gpu, f),
        "mig_devices": _mig_devices(gpu, f),
        **_temperature(gpu, f),
        **_power(gpu, f),
        "fabric": _fabric(gpu, f),
    }


def _fabric(gpu: ET.Element, f: Fields) -> dict[str, Any]:
    """The GPU's NVLink fabric registration (``<fabric>``, R550+; GB200/GB300 NVL and HGX
    with NVSwitch): state, status, clique and cluster, and the health flags of R570+."""
    health = gpu.find("fabric/health")
    return {
        "state": _text(gpu, "fabric/state"),
        "status": _text(gpu, "fabric/status"),
        "clique_id": f.num(gpu, "fabric/cliqueId", ("",)),
        "cluster_uuid": _text(gpu, "fabric/clusterUuid"),
        "health": {
            "summary": _text(health, "summary"),
            "bandwidth": _text(health, "bandwidth"),
            **{key: f.flag(health, key) for key in FABRIC_HEALTH_FLAGS},
            "incorrect_configuration": _text(health, "incorrect_configuration"),
        },
    }


# -- the whole report ------------------------------------------------------------------------


def parse_log(root: ET.Element, source: str = SOURCE) -> dict[str, Any]:
    """Facts of an ``<nvidia_smi_log>`` tree: parsed XML, or one built from the text report.

    ``{"driver_version", "cuda_version", "attached_gpus", "timestamp", "gpus": [...],
    "errors": [...]}``. ``errors`` names each field that could not be read, and an
    ``attached_gpus`` that differs from the GPUs listed (a cut or partial capture).
    """
    root = apply_aliases(root)
    errors: list[dict[str, str]] = []
    gpus = [parse_gpu(gpu, i, source, errors) for i, gpu in enumerate(root.findall("gpu"))]
    attached = Fields(source, "attached_gpus", errors).num(root, "attached_gpus", ("",))
    if attached is not None and attached != len(gpus):
        errors.append({"fact": "attached_gpus", "path": source,
                       "error": f"attached_gpus is {attached} but {len(gpus)} GPU(s) listed: "
                                "a cut or partial capture"})
    return {
        "timestamp": _text(root, "timestamp"),
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "attached_gpus": attached,
        "gpus": gpus,
        "errors": errors,
    }


def parse_nvidia_smi(text: str, source: str = SOURCE) -> dict[str, Any]:
    """Facts of a whole ``nvidia-smi -q -x`` report (see :func:`parse_log`).

    ``ParseError`` for malformed or unsafe XML, or a document that is not an nvidia-smi log;
    a field that cannot be read is ``None`` with an ``errors`` entry, never a lost report.
    """
    if not text.strip():
        raise ParseError(source, text, "empty output")
    root = parse_xml(text, source)
    if root.tag != "nvidia_smi_log":
        raise ParseError(source, text, f"root element is <{root.tag}>, not <nvidia_smi_log>")
    return parse_log(root, source)


def no_gpu_message(text: str) -> str | None:
    """The first line of nvidia-smi's "no GPU / no driver" message in ``text``, if any."""
    messages = [msg.lower() for msg in NO_GPU_MESSAGES]
    if not any(msg in text.lower() for msg in messages):  # the usual case, in one pass
        return None
    return next(line.strip() for line in text.splitlines()
                if any(msg in line.lower() for msg in messages))


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
