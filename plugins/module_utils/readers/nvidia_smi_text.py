"""Per-GPU facts from the plain-text ``nvidia-smi -q`` report (what people paste into tickets).

Format (``nvidia-smi(1)``, "-q: display GPU or Unit info"): a ``==== NVSMI LOG ====`` banner,
top-level ``Label : value`` lines (``Driver Version``, ``CUDA Version``, ``Attached GPUs``),
then one ``GPU 00000000:xx:00.0`` block per GPU whose sections nest by indentation (four
spaces a level). ``nvidia-smi -q -d ECC,CLOCK`` prints only some sections: what is absent
stays ``None``, it is not an error.

The text is turned into the tree ``nvidia-smi -q -x`` would print: each label becomes the XML
tag of the same field (:data:`TAGS` where the names differ), and the tree goes through
:func:`nvidia_smi.parse_log`, so the facts have one shape and one set of rules whichever form
was captured. A line that carries a value *and* nested lines (``HW Slowdown`` above ``HW
Thermal Slowdown``) has siblings in the XML: the nested lines are read at its level. Each
element remembers its line, so a field that cannot be read is reported with it. What a paste
adds around a value is dropped: a bracketed note after it (R610 prints ``610.57.04
[Deprecated; ...]``) and a marker a reader added (``Yes   <===``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET  # noqa: S405 - builds a tree from text; parses no XML
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.nvidia_smi import (
    AT_ATTR,
    NO_GPU_EXIT_CODES,
    TEXT_COMMAND,
    NoGpu,
    canonical_tag,
    no_gpu_message,
    parse_log,
    parse_nvidia_smi,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.safe_xml import MAX_DEPTH
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

SOURCE = "nvidia-smi -q"
# (?<!=): the banner starts where its run of "=" does; tried at each "=" of a long run, each
# start would read the rest of the run again (quadratic)
BANNER = re.compile(r"(?<!=)=+\s*NVSMI LOG\s*=+")
GPU_HEADER = re.compile(r"GPU\s+([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7])")
# [ \t] and not \s around a line: \s runs on over blank lines, read again from each one
_GPU_LINE = re.compile(r"^[ \t]*" + GPU_HEADER.pattern + r"[ \t]*$", re.M)
_BANNER_LINE = re.compile(r"^[ \t]*" + BANNER.pattern + r"[ \t]*$", re.M)
# A note after a value ("610.57.04 [Deprecated; ... Use KMD Version instead]") and a marker
# pasted after one ("Yes      <==="). (?<!\s): a run of blanks is tried from its start only
# (from each of its characters, each try would read the rest of the run again).
_NOTE = re.compile(r"(?<!\s)\s+\[[^\[\]]*\]$")
_MARK = re.compile(r"(?<!\s)\s+<[-=]{2,}.*$")

_CLOCKS = {"graphics": "graphics_clock", "sm": "sm_clock", "memory": "mem_clock",
           "video": "video_clock"}
# parent tag -> {label key -> tag}, where the label does not read as the XML tag.
# A "/" in a tag adds the container the XML has and the text omits.
TAGS: dict[str, dict[str, str]] = {
    "gpu": {"gpu_uuid": "uuid", "serial_number": "serial",
            "mig_device": "mig_devices/mig_device"},
    "mig_mode": {"current": "current_mig", "pending": "pending_mig"},
    "ecc_mode": {"current": "current_ecc", "pending": "pending_ecc"},
    "driver_model": {"current": "current_dm", "pending": "pending_dm"},
    "mig_device": {"shared_fb_memory_usage": "fb_memory_usage"},
    "pci": {"bus": "pci_bus", "device": "pci_device", "domain": "pci_domain",
            "device_id": "pci_device_id", "bus_id": "pci_bus_id",
            "sub_system_id": "pci_sub_system_id", "gpu_link_info": "pci_gpu_link_info",
            "replays_since_reset": "replay_counter",
            "replay_number_rollovers": "replay_rollover_counter"},
    "pci_gpu_link_info": {"pcie_generation": "pcie_gen", "link_width": "link_widths"},
    "pcie_gen": {"max": "max_link_gen", "current": "current_link_gen",
                 "device_current": "device_current_link_gen",
                 "device_max": "max_device_link_gen", "host_max": "max_host_link_gen"},
    "link_widths": {"max": "max_link_width", "current": "current_link_width"},
    "clocks_event_reasons": {"idle": "gpu_idle",
                             "display_clock_setting": "display_clocks_setting"},
    "retired_pages": {"single_bit_ecc": "multiple_single_bit_retirement/retired_count",
                      "double_bit_ecc": "double_bit_retirement/retired_count",
                      "pending_page_blacklist": "pending_blacklist",
                      "pending_page_retirement": "pending_retirement",
                      "pending": "pending_retirement"},
    "remapped_rows": {"correctable_error": "remapped_row_corr",
                      "uncorrectable_error": "remapped_row_unc",
                      "pending": "remapped_row_pending",
                      "remapping_failure_occurred": "remapped_row_failure",
                      "bank_remap_availability_histogram": "row_remapper_histogram"},
    "temperature": {
        "gpu_current_temp": "gpu_temp", "memory_current_temp": "memory_temp",
        "gpu_tlimit_temp": "gpu_temp_tlimit", "gpu_current_tlimit_temp": "gpu_temp_tlimit",
        "gpu_shutdown_tlimit_temp": "gpu_temp_max_tlimit_threshold",
        "gpu_slowdown_tlimit_temp": "gpu_temp_slow_tlimit_threshold",
        "gpu_max_operating_tlimit_temp": "gpu_temp_max_gpu_tlimit_threshold",
        "memory_max_operating_tlimit_temp": "gpu_temp_max_mem_tlimit_threshold",
        "gpu_shutdown_temp": "gpu_temp_max_threshold",
        "gpu_slowdown_temp": "gpu_temp_slow_threshold",
        "gpu_max_operating_temp": "gpu_temp_max_gpu_threshold",
        "memory_max_operating_temp": "gpu_temp_max_mem_threshold"},
    "gpu_power_readings": {"instantaneous_power_draw": "instant_power_draw"},
    "fabric": {"cliqueid": "cliqueId", "clusteruuid": "clusterUuid"},
    **{clocks: _CLOCKS for clocks in ("clocks", "max_clocks", "applications_clocks",
                                      "default_applications_clocks", "deferred_clocks",
                                      "max_customer_boost_clocks")},
}
# parent tag -> prefix its children's tags carry in the XML.
PREFIXES = {"clocks_event_reasons": "clocks_event_reason_",
            "row_remapper_histogram": "row_remapper_histogram_"}
# Sub-headings the text adds (R610: power limits under "GPU Ceiling Power Limit"): their
# lines are read at the parent's level.
HOISTED = {"gpu_ceiling_power_limit"}


@dataclass
class _Line:
    """One ``Label : value`` line (``value`` is ``None`` for a section heading)."""

    number: int
    indent: int
    label: str
    value: str | None
    gpu: str | None = None  # the bus id of a ``GPU 00000000:xx:00.0`` line
    children: list[_Line] = field(default_factory=list)


def label_key(label: str) -> str:
    """``"GPU T.Limit Temp"`` -> ``"gpu_tlimit_temp"``, ``"SEC-DED"`` -> ``"secded"``."""
    plain = label.lower().replace(".", "").replace("-", "")
    return re.sub(r"[^a-z0-9]+", "_", plain).strip("_")


def _split(number: int, raw: str) -> _Line | None:
    line = raw.expandtabs(4).rstrip()
    body = line.strip()
    if not body or BANNER.fullmatch(body):
        return None
    indent = len(line) - len(line.lstrip())
    if match := GPU_HEADER.fullmatch(body):
        return _Line(number, indent, "GPU", None, gpu=match.group(1))
    label, sep, value = body.partition(":")
    if not label.strip():
        return None
    value = _NOTE.sub("", _MARK.sub("", value.strip())) if sep else None
    return _Line(number, indent, label.strip(), value)


def outline(text: str, source: str = SOURCE) -> list[_Line]:
    """The report's top-level lines, each with its nested lines (by indentation);
    ``ParseError`` for lines nested deeper than XML is read (``safe_xml.MAX_DEPTH``): the tree
    they become is walked with recursion."""
    top = _Line(0, -1, "", None)
    stack = [top]
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _split(number, raw)
        if line is None:
            continue
        while stack[-1].indent >= line.indent and stack[-1] is not top:
            stack.pop()
        if line.gpu is not None:  # a GPU block always starts at the top level
            stack = [top]
        if len(stack) > MAX_DEPTH:
            raise ParseError(f"{source}:{number}", raw.strip(),
                             f"lines nested more than {MAX_DEPTH} deep (by indentation)")
        stack[-1].children.append(line)
        stack.append(line)
    return top.children


def _tag(parent: str, label: str) -> str:
    key = label_key(label) or "unlabelled"
    tag = TAGS.get(parent, {}).get(key, key)
    prefix = PREFIXES.get(parent, "")
    return tag if tag.startswith(prefix) else prefix + tag


def _element(parent: ET.Element, tag: str) -> ET.Element:
    """A new ``tag`` under ``parent``; ``a/b`` reuses (or adds) the container ``a``."""
    *containers, leaf = tag.split("/")
    for name in containers:
        found = parent.find(name)
        parent = found if found is not None else ET.SubElement(parent, name)
    return ET.SubElement(parent, leaf)


def _build(lines: list[_Line], parent: ET.Element, parent_tag: str) -> None:
    for line in lines:
        tag = _tag(parent_tag, line.label)
        if tag in HOISTED and line.value is None:
            _build(line.children, parent, parent_tag)
            continue
        elem = _element(parent, tag)
        elem.set(AT_ATTR, f"line {line.number} ({line.label})")
        if line.value is None:
            _build(line.children, elem, canonical_tag(tag.rsplit("/", 1)[-1]))
            continue
        elem.text = line.value
        _build(line.children, parent, parent_tag)


def to_tree(text: str, source: str = SOURCE) -> ET.Element:
    """The ``<nvidia_smi_log>`` tree of a plain-text report (tags as in ``-q -x``);
    ``ParseError`` as :func:`outline` raises it."""
    root = ET.Element("nvidia_smi_log")
    for line in outline(text, source):
        if line.gpu is None:
            _build([line], root, "nvidia_smi_log")
            continue
        gpu = ET.SubElement(root, "gpu", {"id": line.gpu, AT_ATTR: f"line {line.number}"})
        _build(line.children, gpu, "gpu")
    return root


def looks_like_text_report(text: str) -> bool:
    """True for ``nvidia-smi -q`` text: the NVSMI LOG banner, or a ``GPU <bus id>`` line."""
    head = text[:65536]
    return bool(_BANNER_LINE.search(head)
                or _GPU_LINE.search(head))


def parse_nvidia_smi_text(text: str, source: str = SOURCE) -> dict[str, Any]:
    """Facts of a plain-text ``nvidia-smi -q`` report, as :func:`nvidia_smi.parse_log` gives.

    ``ParseError`` for empty text, XML, or text with neither the NVSMI LOG banner nor a
    ``GPU <bus id>`` block; a field that cannot be read is ``None`` with an ``errors`` entry.
    """
    if not text.strip():
        raise ParseError(source, text, "empty output")
    if text.lstrip().startswith("<"):
        raise ParseError(source, text, "XML, not the plain-text report (read it as -q -x)")
    if not looks_like_text_report(text):
        raise ParseError(source, text, "not nvidia-smi -q output (no 'NVSMI LOG' banner "
                         "and no 'GPU <bus id>' line)")
    return parse_log(to_tree(text, source), source)


def parse_report(text: str, source: str) -> dict[str, Any]:
    """Facts of either form: ``nvidia-smi -q -x`` XML or ``nvidia-smi -q`` text."""
    if text.lstrip().startswith("<"):
        return parse_nvidia_smi(text, source)
    return parse_nvidia_smi_text(text, source)


def read_nvidia_smi_text(root: Sysroot) -> dict[str, Any]:
    """``parse_nvidia_smi_text`` of the captured ``nvidia-smi -q`` (sysroots capture both).

    Raises as :func:`nvidia_smi.read_nvidia_smi` does: ``NotSupported`` when not captured,
    ``NoGpu`` for nvidia-smi's "no GPU / no driver" messages, ``ParseError`` for other text.
    """
    out = root.command(TEXT_COMMAND)
    message = no_gpu_message(out.stdout + "\n" + out.stderr)
    if out.rc in NO_GPU_EXIT_CODES or (message and not _GPU_LINE.search(out.stdout)):
        raise NoGpu(out.source, message or f"exit status {out.rc}")
    return parse_nvidia_smi_text(out.checked().stdout, out.source)
