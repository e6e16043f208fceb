"""Kernel command-line arguments in ``/etc/default/grub``.

The bootloader reads ``GRUB_CMDLINE_LINUX`` (every entry) and ``GRUB_CMDLINE_LINUX_DEFAULT``
(normal entries); ``update-grub`` / ``grub2-mkconfig`` turn them into ``grub.cfg``. A change
here takes effect at the next boot only, so callers flag it ``reboot_required``.
"""

from __future__ import annotations

import shlex
import shutil

from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
    Change,
    FileChange,
    Regenerate,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.envfile import edit_text, line_key
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    NotApplicable,
    NotSupported,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

VARIABLES = ("GRUB_CMDLINE_LINUX_DEFAULT", "GRUB_CMDLINE_LINUX")
LABEL = "bootloader configuration"
# TuneD's bootloader plugin keeps the arguments it adds at every boot here (tuned/consts.py)
TUNED_BOOTCMDLINE = "etc/tuned/bootcmdline"


def read_variable(text: str, name: str) -> str | None:
    """The value of ``name`` (last definition, quotes removed), ``None`` when absent."""
    value = None
    for line in text.splitlines():
        if line_key(line, "shell") == name:
            raw = line.split("=", 1)[1].strip()
            try:
                parts = shlex.split(raw)
            except ValueError:
                parts = [raw.strip("\"'")]
            value = " ".join(parts)
    return value


def tuned_boot_args(root: Sysroot) -> dict[str, str | None]:
    """The kernel arguments TuneD's bootloader plugin appends at every boot
    (``TUNED_BOOT_CMDLINE`` in ``/etc/tuned/bootcmdline``, written when a profile with a
    ``[bootloader]`` section is applied; grub.cfg adds them after the defaults, so they win),
    as ``parse_cmdline`` reads them; ``{}`` without TuneD or such a profile."""
    from ansible_collections.exemplar.tune.plugins.module_utils.readers.cmdline import (
        parse_cmdline,
    )
    text = root.read_optional(TUNED_BOOTCMDLINE)
    return parse_cmdline(read_variable(text, "TUNED_BOOT_CMDLINE") or "") if text else {}


def edit_args(args: str, remove: list[str], add: dict[str, str | None]) -> str:
    """``args`` without the parameters named in ``remove`` and with ``add`` set.

    A name in ``remove`` matches ``name`` and ``name=anything``; ``add`` values of ``None``
    mean a bare flag.
    """
    kept = [word for word in args.split() if word.split("=", 1)[0] not in set(remove) | set(add)]
    kept += [name if value is None else f"{name}={value}" for name, value in add.items()]
    return " ".join(kept)


def edit_grub(text: str, remove: list[str], add: dict[str, str | None]) -> str:
    """``/etc/default/grub`` content with the parameters removed/added.

    Removal applies to both variables; additions go to ``GRUB_CMDLINE_LINUX`` (every entry).
    """
    settings: dict[str, str | None] = {}
    for name in VARIABLES:
        current = read_variable(text, name)
        wanted = edit_args(current or "", remove, add if name == VARIABLES[1] else {})
        if current is not None and wanted != current or current is None and wanted:
            settings[name] = wanted
    return edit_text(text, settings, "shell") if settings else text


def bootloader_command(given: list[str] | None = None) -> list[str] | None:
    """The command that rebuilds ``grub.cfg`` from the defaults: ``given``, else the one found."""
    if given:
        return list(given)
    if shutil.which("update-grub"):
        return ["update-grub"]
    if shutil.which("grub2-mkconfig"):
        return ["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"]
    return None


def plan_cmdline(root: Sysroot, path: str, remove: list[str], add: dict[str, str | None],
                 command: list[str] | None = None) -> list[Change]:
    """Edit the kernel arguments in ``path``, then rebuild the bootloader configuration.

    The rebuild is a journaled :class:`Regenerate` step, so restore reruns it once the
    defaults file is back. It runs on a live host (``command``, else ``update-grub`` or
    ``grub2-mkconfig``); in a sysroot only when ``command`` is given, otherwise it is
    recorded as not run. A host without the defaults file (a VM booted with a direct kernel,
    a netboot node, a container), or a live host with no command to rebuild the bootloader
    configuration, does not take kernel arguments this way: ``NotApplicable``. Arguments
    that the host's active TuneD profile already adds at every boot (``TUNED_BOOT_CMDLINE``)
    are left to it: nothing is planned.
    """
    if add and all(tuned_boot_args(root).get(name, False) == value
                   for name, value in add.items()):
        return []  # TuneD's profile adds them at every boot, after the defaults: they win
    try:
        text = root.read_text(path, strip=False)
    except NotSupported as exc:
        raise NotApplicable(exc.path, f"{exc.reason}: this host's kernel arguments are not set "
                            "by GRUB defaults (direct kernel, netboot or container boot)") \
            from None
    new = edit_grub(text, remove, add)
    argv = bootloader_command(command) if root.live else command
    if root.live and not argv:
        raise NotApplicable(LABEL, "neither update-grub nor grub2-mkconfig found: set "
                            "exemplar_bootloader_command (a change the next boot would not "
                            "see is not made)")
    rebuild = Regenerate(LABEL, tuple(argv)) if argv else Regenerate(LABEL, ("update-grub",),
                                                                     run=False)
    return [FileChange(path, new.encode(), root.file_mode(path) or 0o644), rebuild]
