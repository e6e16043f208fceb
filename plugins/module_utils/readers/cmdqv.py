"""Evidence for NVIDIA Grace (Tegra241) CMDQ-Virtualisation next to an ARM SMMUv3.

Sources (``drivers/iommu/arm/arm-smmu-v3/{arm-smmu-v3.c,tegra241-cmdqv.c,Kconfig}``):

* ACPI companion devices ``/sys/bus/acpi/devices/NVDA200C:NN/{hid,uid,status}``
  (``Documentation/ABI/testing/sysfs-bus-acpi``);
* boot-time parameters ``/sys/module/arm_smmu_v3/parameters/{disable_cmdqv,bypass_vcmdq}``
  (``module_param(..., bool, 0444)``: ``Y``/``N``);
* the kernel log (``dmesg``): ``found companion CMDQV device: NVDA200C:NN`` on success,
  ``tegra241_cmdqv: Falling back to standard SMMU CMDQ`` / ``Detected disable_cmdqv=true`` and
  the other ``tegra241_cmdqv:`` failure lines otherwise;
* ``/proc/interrupts`` (an IRQ named ``tegra241-cmdqv``);
* the kernel configuration ``/boot/config-<release>`` or ``/proc/config.gz``
  (``CONFIG_TEGRA241_CMDQV``, ``CONFIG_ARM_SMMU_V3``).
"""

from __future__ import annotations

import re
import zlib
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.values import parse_count
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import (
    COMMANDS,
    COMMANDS_DIR,
    Sysroot,
)

ACPI_DEVICES = "sys/bus/acpi/devices"
ACPI_HID = "NVDA200C"
PARAMS_DIR = "sys/module/arm_smmu_v3/parameters"
PARAMS = ("disable_cmdqv", "bypass_vcmdq")
INTERRUPTS = "proc/interrupts"
IRQ_NAME = "tegra241-cmdqv"
PROC_CONFIG = "proc/config.gz"
KCONFIG_NAMES = ("CONFIG_TEGRA241_CMDQV", "CONFIG_ARM_SMMU_V3")
LOG = "dmesg.txt"
FOUND = "found companion CMDQV device"
DISABLED = "Detected disable_cmdqv=true"
DRIVER_PREFIX = "tegra241_cmdqv:"
# Probe outcomes that end in "Falling back to standard SMMU CMDQ" (out_fallback).
FALLBACK_MARKS = ("Falling back to standard SMMU CMDQ", DISABLED, "failed to")
KCONFIG_LINE = re.compile(r"(CONFIG_\w+)=(.*)")
STATES = ("active", "fallback", "disabled_by_param", "not_in_kernel", "no_device",
          "not_applicable", "unknown")


def read_acpi_devices(root: Sysroot) -> list[dict[str, str | int | None]]:
    """``NVDA200C:*`` ACPI devices: ``[{"name", "uid", "status"}]`` (``status`` 15 = present)."""
    found: list[dict[str, str | int | None]] = []
    for name in root.listdir(ACPI_DEVICES):
        if name.split(":", 1)[0] != ACPI_HID:
            continue
        status_rel = f"{ACPI_DEVICES}/{name}/status"
        status = root.read_optional(status_rel)
        found.append({"name": name, "uid": root.read_optional(f"{ACPI_DEVICES}/{name}/uid"),
                      "status": None if status is None else _sta(status,
                                                                 root.display(status_rel))})
    return found


def _sta(text: str, source: str) -> int:
    """An ACPI ``_STA`` value (decimal); ``ParseError`` otherwise."""
    try:
        return parse_count(text, source)
    except ParseError:
        raise ParseError(source, text, "not an ACPI _STA value") from None


def parse_bool_param(text: str, source: str = "module parameter") -> bool:
    """A ``bool`` module parameter as sysfs shows it: ``Y`` -> True, ``N`` -> False."""
    word = text.strip()
    if word in ("Y", "N"):
        return word == "Y"
    raise ParseError(source, text, "not Y or N")


def read_params(root: Sysroot) -> dict[str, bool | None]:
    """``disable_cmdqv``/``bypass_vcmdq``; ``None`` each when the driver lacks the parameter."""
    values: dict[str, bool | None] = {}
    for name in PARAMS:
        rel = f"{PARAMS_DIR}/{name}"
        text = root.read_optional(rel)
        values[name] = None if text is None else parse_bool_param(text, root.display(rel))
    return values


def kernel_log_source(root: Sysroot) -> str:
    """Where :func:`read_kernel_log` reads from: the command, or the captured file."""
    return " ".join(COMMANDS[LOG]) if root.live else root.display(f"{COMMANDS_DIR}/{LOG}")


def read_kernel_log(root: Sysroot) -> str:
    """The kernel log text; ``NotSupported`` when not captured, ``CommandFailed`` when ``dmesg``
    fails (EPERM)."""
    return root.command(LOG).checked().stdout


def parse_kernel_log(text: str) -> dict[str, Any]:
    """CMDQV lines of the kernel log, stripped.

    ``found``/``found_lines``: ``found companion CMDQV device``; ``fallback_lines``: driver
    lines that mean the probe gave up (``Falling back ...``, ``Detected disable_cmdqv=true``,
    ``failed to ...``); ``other_lines``: the driver's other lines (``no interrupt. errors will
    not be reported``, runtime VCMDQ errors), which do not stop CMDQV from being used.
    """
    found: list[str] = []
    fallback: list[str] = []
    other: list[str] = []
    for line in text.splitlines():
        if FOUND in line:
            found.append(line.strip())
        elif DRIVER_PREFIX in line or FALLBACK_MARKS[0] in line:
            is_fallback = any(mark in line for mark in FALLBACK_MARKS)
            (fallback if is_fallback else other).append(line.strip())
    return {"found": bool(found), "found_lines": found, "fallback_lines": fallback,
            "other_lines": other}


def parse_interrupts_has(text: str, name: str = IRQ_NAME) -> bool:
    """True when a ``/proc/interrupts`` line's last field (the action name) is ``name``."""
    return any(line.split()[-1:] == [name] for line in text.splitlines()[1:])


def read_irq(root: Sysroot) -> bool:
    """Whether ``/proc/interrupts`` has a ``tegra241-cmdqv`` IRQ; ``NotSupported`` if absent."""
    return parse_interrupts_has(root.read_text(INTERRUPTS, strip=False))


def parse_kconfig(text: str, source: str = "kernel config") -> dict[str, str]:
    """Set options of a kernel ``.config``: ``{"CONFIG_ARM_SMMU_V3": "y", ...}``.

    ``# CONFIG_X is not set`` and absent options are simply missing. Any line that is neither
    blank, a comment nor ``CONFIG_X=value`` (or a file with no option at all) is a ParseError.
    """
    options: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = KCONFIG_LINE.fullmatch(line)
        if not match:
            raise ParseError(source, line, "not a kernel config line")
        options[match.group(1)] = match.group(2).strip('"')
    if not options:
        raise ParseError(source, text, "no CONFIG_ option")
    return options


def kconfig_source(root: Sysroot, release: str | None) -> str:
    """``/boot/config-<release>`` when present, else ``/proc/config.gz``."""
    boot = f"boot/config-{release}"
    return root.display(boot if release and root.exists(boot) else PROC_CONFIG)


def read_kconfig(root: Sysroot, release: str | None) -> dict[str, str | None]:
    """``CONFIG_TEGRA241_CMDQV`` and ``CONFIG_ARM_SMMU_V3`` (``"y"``/``"m"``/``None``)."""
    source = kconfig_source(root, release)
    data = root.read_bytes(source)
    if source.endswith(".gz"):
        import gzip  # only a kernel without /boot/config-<release> needs it

        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise ParseError(source, repr(data[:20]), f"not gzip data ({exc})") from None
    options = parse_kconfig(data.decode("utf-8", errors="replace"), source)
    return {name: options.get(name) for name in KCONFIG_NAMES}


def derive_state(
    arch: str | None,
    smmu_v3: bool | None,
    evidence: dict[str, Any],
) -> tuple[str, list[str]]:
    """``(state, reasons)`` from the facts gathered above (``None`` = could not be read).

    ``evidence`` holds ``acpi_devices``, ``params``, ``dmesg``, ``irq`` and ``kconfig``. The
    kernel log is the most direct evidence; the configuration and the ACPI device explain why
    CMDQV is not used when the log is silent.
    """
    if arch is None or smmu_v3 is None:
        return "unknown", ["architecture or IOMMU units could not be read"]
    if arch != "aarch64":
        return "not_applicable", [f"arch {arch}: CMDQV is an arm64 (Grace) SMMUv3 extension"]
    if not smmu_v3:
        return "not_applicable", ["no SMMUv3 IOMMU unit (/sys/class/iommu/smmu3.*)"]
    verdict = _from_log_and_params(evidence)
    if verdict:
        return verdict
    return _from_config_and_device(evidence)


def _from_log_and_params(evidence: dict[str, Any]) -> tuple[str, list[str]] | None:
    params = evidence.get("params") or {}
    log = evidence.get("dmesg") or {}
    fallback = log.get("fallback_lines") or []
    disabled = [line for line in fallback if DISABLED in line]
    if params.get("disable_cmdqv"):
        return "disabled_by_param", [f"/{PARAMS_DIR}/disable_cmdqv: Y"]
    if disabled:
        return "disabled_by_param", [f"kernel log: {disabled[0]}"]
    if fallback:
        return "fallback", [f"kernel log: {line}" for line in fallback]
    if params.get("bypass_vcmdq"):
        return "disabled_by_param", [
            f"/{PARAMS_DIR}/bypass_vcmdq: Y (every command goes to the standard SMMU CMDQ)"]
    reasons = [f"kernel log: {line}" for line in log.get("found_lines") or []]
    if evidence.get("irq"):
        reasons.append(f"/{INTERRUPTS}: {IRQ_NAME} IRQ")
    return ("active", reasons) if reasons else None


def _from_config_and_device(evidence: dict[str, Any]) -> tuple[str, list[str]]:
    kconfig = evidence.get("kconfig")
    no_device = f"no {ACPI_HID} ACPI device: the firmware or VMM exposes no CMDQV"
    if isinstance(kconfig, dict) and kconfig.get("CONFIG_TEGRA241_CMDQV") not in ("y", "m"):
        where = evidence.get("kconfig_source") or "the kernel configuration"
        reasons = [f"CONFIG_TEGRA241_CMDQV is not set in {where}"]
        if evidence.get("acpi_devices") == []:
            reasons.append(no_device)
        return "not_in_kernel", reasons
    if evidence.get("acpi_devices") == []:
        return "no_device", [no_device]
    if evidence.get("dmesg") is None:
        return "unknown", ["kernel log unavailable"]
    if kconfig is None:
        return "unknown", ["kernel configuration unavailable; no CMDQV line in the kernel log"]
    return "unknown", [f"{ACPI_HID} present but the kernel log shows no CMDQV line"]
