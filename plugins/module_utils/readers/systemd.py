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

from typing import Any, NamedTuple

from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpulist import (
    format_cpulist,
    parse_cpulist,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    ParseError,
)
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
# sd_booted(3): systemd is the running init system exactly when this directory exists.
BOOTED_MARK = "run/systemd/system"


class ShownUnits(NamedTuple):
    """Parsed ``systemctl show`` of the slices: properties by unit ``Id``, and their source."""

    units: dict[str, dict[str, str]]
    source: str


def systemd_booted(root: Sysroot) -> bool:
    """True when systemd runs as PID 1 on the host (its ``/run/systemd/system`` exists)."""
    return root.exists(BOOTED_MARK)


def read_systemctl_show(root: Sysroot) -> ShownUnits | None:
    """One ``systemctl show`` of the slices, parsed.

    ``None`` when systemd is not the init system (no ``/run/systemd/system``): nothing to show,
    an answer rather than an error. On a systemd host, raises ``NotSupported`` when systemctl
    is missing (or its output was not captured), ``CommandFailed`` when it exits non-zero and
    ``ParseError`` when its output has no ``Id=`` block. A live host without systemd is asked
    nothing (``systemctl`` could only say so, at the cost of a process).
    """
    if root.live and not systemd_booted(root):
        return None
    try:
        out = root.command(SHOW_COMMAND).checked()
    except HostStateError:
        if not systemd_booted(root):
            return None
        raise
    units = parse_systemctl_show_units(out.stdout)
    if not units:
        raise ParseError(out.source, out.stdout, "no unit block with an 'Id=' line")
    return ShownUnits(units, out.source)


def show_cpus(shown: ShownUnits | None, unit: str) -> dict[str, str | None] | None:
    """``{"allowed_cpus", "effective_cpus"}`` of ``unit`` in ``shown``.

    ``None`` when nothing was shown or ``unit`` has no block. A key missing from the output
    (systemd < 244) is ``None``; ``""`` means not set/empty.
    """
    props = None if shown is None else shown.units.get(unit)
    if props is None:
        return None
    return {
        "allowed_cpus": _show_cpus(props, "AllowedCPUs", shown.source),
        "effective_cpus": _show_cpus(props, "EffectiveCPUs", shown.source),
    }


def _show_cpus(props: dict[str, str], key: str, source: str) -> str | None:
    return None if key not in props else parse_cpu_set(props[key], f"{source}: {key}")
