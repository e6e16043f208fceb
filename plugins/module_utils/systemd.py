"""systemd CPU confinement: ``CPUAffinity=``, ``AllowedCPUs=`` drop-ins and ``systemctl show``.

Files: systemd-system.conf(5) (``/etc/systemd/system.conf`` and ``system.conf.d/*.conf``,
``[Manager] CPUAffinity=``: PID 1 and default service affinity), systemd.resource-control(5)
(``AllowedCPUs=``; ``systemctl set-property`` writes ``/etc/systemd/system.control/<unit>.d/``
or, with ``--runtime``, ``/run/systemd/system.control/<unit>.d/``) and systemctl(1)
(``systemctl show <unit>`` prints ``Key=Value`` lines, ``AllowedCPUs=``, ``EffectiveCPUs=``).
Drop-ins are applied in file-name order; for the same name the higher-priority directory
wins; within the files the last assignment wins and an empty one resets the setting.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.cpulist import (
    format_cpulist,
    parse_cpulist,
)
from ansible_collections.exemplar.tune.plugins.module_utils.errors import NotSupported
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import COMMANDS, Sysroot

SYSTEM_CONF = "etc/systemd/system.conf"
SYSTEM_CONF_DIRS = ("etc/systemd/system.conf.d", "run/systemd/system.conf.d",
                    "usr/local/lib/systemd/system.conf.d", "usr/lib/systemd/system.conf.d")
CONTROL_DIRS = ("etc/systemd/system.control", "run/systemd/system.control")


def parse_cpu_set(text: str, source: str = "cpu set") -> str:
    """systemd CPU set (``"0 4"``, ``"0-3,8"``) -> canonical cpulist (``""`` when empty)."""
    return format_cpulist(parse_cpulist(",".join(text.replace(",", " ").split()), source))


def parse_unit_file(text: str, key: str) -> list[str]:
    """Every value assigned to ``key`` in a systemd INI file, in order (``""`` = reset).

    Comments (``#``/``;``) and section headers are skipped; a trailing backslash joins lines.
    """
    values: list[str] = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line[0] in "#;[":
            continue
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            values.append(value.strip())
    return values


def _last(root: Sysroot, files: list[str], key: str) -> tuple[str | None, str | None]:
    """(last value of ``key``, file that set it) over ``files``; an empty value resets."""
    value = origin = None
    for rel in files:
        for assigned in parse_unit_file(root.read_optional(rel) or "", key):
            value, origin = (assigned, rel) if assigned else (None, None)
    return value, origin


def dropin_files(root: Sysroot, dirs: tuple[str, ...]) -> list[str]:
    """``*.conf`` files of ``dirs`` (highest priority first) in the order systemd applies them."""
    chosen: dict[str, str] = {}
    for directory in dirs:
        for name in root.listdir(directory):
            if name.endswith(".conf") and name not in chosen:
                chosen[name] = f"{directory}/{name}"
    return [chosen[name] for name in sorted(chosen)]


def read_cpu_affinity(root: Sysroot) -> dict[str, Any] | None:
    """``{"cpus", "file"}`` of the effective ``CPUAffinity=``; ``None`` when not set."""
    files = [SYSTEM_CONF] + dropin_files(root, SYSTEM_CONF_DIRS)
    value, origin = _last(root, files, "CPUAffinity")
    if value is None or origin is None:
        return None
    return {"cpus": parse_cpu_set(value, root.display(origin)), "file": root.display(origin)}


def read_allowed_cpus_dropins(root: Sysroot, unit: str) -> dict[str, Any] | None:
    """``{"cpus", "file", "files"}`` of ``AllowedCPUs=`` drop-ins of ``unit``; ``None`` if none."""
    files = dropin_files(root, tuple(f"{d}/{unit}.d" for d in CONTROL_DIRS))
    setting = [f for f in files if parse_unit_file(root.read_optional(f) or "", "AllowedCPUs")]
    if not setting:
        return None
    value, origin = _last(root, setting, "AllowedCPUs")
    return {
        "cpus": None if value is None else parse_cpu_set(value, root.display(origin or "")),
        "file": None if origin is None else root.display(origin),
        "files": [root.display(f) for f in setting],
    }


def parse_systemctl_show(text: str) -> dict[str, str]:
    """``systemctl show`` output (``Key=Value`` lines) -> dict; later keys win."""
    pairs = (line.partition("=") for line in text.splitlines())
    return {key.strip(): value.strip() for key, sep, value in pairs if sep and key.strip()}


def parse_systemctl_show_units(text: str) -> dict[str, dict[str, str]]:
    """``systemctl show A B C`` output (one block per unit, blank-line separated) -> by ``Id``."""
    blocks = (parse_systemctl_show(block) for block in text.split("\n\n"))
    return {props["Id"]: props for props in blocks if props.get("Id")}


SHOW_COMMAND = "systemctl-show-slices.txt"
SHOW_SOURCE = " ".join(COMMANDS[SHOW_COMMAND])


def read_systemctl_cpus(root: Sysroot, unit: str) -> dict[str, str | None] | None:
    """``{"allowed_cpus", "effective_cpus"}`` of ``unit`` from one ``systemctl show`` of the slices.

    ``None`` when systemctl is absent, was not captured, or fails (no systemd as PID 1).
    A key missing from the output (systemd < 244) is ``None``; ``""`` means not set/empty.
    """
    try:
        out = root.command(SHOW_COMMAND)
    except NotSupported:
        return None
    props = parse_systemctl_show_units(out.stdout).get(unit) if out.rc == 0 else None
    if props is None:
        return None
    return {
        "allowed_cpus": _show_cpus(props, "AllowedCPUs", out.source),
        "effective_cpus": _show_cpus(props, "EffectiveCPUs", out.source),
    }


def _show_cpus(props: dict[str, str], key: str, source: str) -> str | None:
    return None if key not in props else parse_cpu_set(props[key], f"{source}: {key}")
