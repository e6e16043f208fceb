"""A sos report as a sysroot: where it keeps the command outputs the readers use, and why one
is absent.

A sos report archive (``sos report``, formerly ``sosreport``) unpacks to one directory,
``sosreport-<host>-<date>-<id>/``, that mirrors ``/`` for the files it copied (``proc/``,
``sys/``, ``etc/`` ...) and adds ``sos_commands/<plugin>/<file>`` (each command's output, stdout
and stderr together), ``version.txt`` (``sosreport: 4.2``; ``sos report: 4.8.0`` from 4.8),
``sos_logs/`` (``sos.log``, ``ui.log``), from sos 4.0 ``sos_reports/manifest.json`` (each
command's exit status), and links at the top (``lspci``, ``lsmod``, ``uname`` ...) into
``sos_commands/``. A command's file is named by sos's ``_mangle_command``: a leading
``/bin/``, ``/sbin/``, ``/usr/bin/`` or ``/usr/sbin/`` dropped, each run of characters other
than letters, digits, ``_-./`` made one ``_``, ``/`` made ``.``, ``_-.`` and spaces stripped at
both ends, 255 characters kept (``nvidia-smi nvlink -s`` -> ``nvidia-smi_nvlink_-s``). An
output over sos's size limit is kept as its tail in ``sos_strings/<plugin>/<file>.tailed``,
linked from its ``sos_commands`` place.

:data:`MAPPED` lists, for each command file of the sysroot (``sysroot.COMMANDS``), the sos
outputs that hold it, newest spelling first; :data:`UNREAD` the outputs sos collected instead
that the readers do not take; :data:`NEVER` the commands no sos release runs. sos's ``lspci
-nnvv`` stands for ``lspci -vvv``: ``-vv`` already prints the ACS and ATS control lines
(pciutils ``ls-ecaps.c``: ``verbose < 2`` returns before them) and the lspci reader takes the
``-nn`` ids beside the names. Its ``systemctl show *service --all`` holds one block per loaded
service; the Fabric Manager's block is picked out by its ``Id=``.

Source: sosreport/sos at commit 5c7e63ee22a96435d16e07c1bcb53faa8020a498:
``sos/report/plugins/__init__.py`` (``_mangle_command``, ``collect_cmd_output``,
``add_default_collections``, ``_log_warn``), ``sos/report/__init__.py`` (``version``,
``_collect_plugin``: ``Plugin <name> timed out``), ``sos/report/plugins/kernel.py``
(``dmesg``, ``lsmod``; no copy of ``/sys/module``), ``pci.py`` (``lspci -nnvv``, ``lspci
-tv``), ``nvidia.py`` (``nvidia-smi -q``, ``nvidia-smi nvlink -s``/``-e``, the services'
``systemctl status``), ``systemd.py``
(``systemctl show --all``, ``systemctl show *service --all``, ``systemctl status --all``),
``infiniband.py`` (``ibstat``; no copy of ``/sys/class/infiniband``), ``numa.py``,
``processor.py``; and the releases that changed them: 3.3
(``lspci -nnvv`` replaced ``lspci`` and ``lspci -nvv``, commit 3044fced), 3.4 (``systemctl show
*service --all``), 4.3 (``nvidia-smi -q``, ``nvlink -s``/``-e``, commit f2cc6775), 4.8.1
(``systemctl status`` of ``nvidia-fabricmanager``, commit 757d2b33).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

SOS_COMMANDS = "sos_commands"
VERSION_FILE = "version.txt"
MANIFEST = "sos_reports/manifest.json"
LOGS = ("sos_logs/sos.log", "sos_logs/ui.log")
NAME_MAX = 255
_VERSION = re.compile(r"sos ?report: *(\d+(?:\.\d+)*)")
NOT_FOUND = (126, 127)  # sos keeps no file for these (collect_cmd_output)


def mangle(command: str) -> str:
    """The file name sos gives the output of ``command`` (sos's ``_mangle_command``)."""
    name = re.sub(r"^/(usr/|)(bin|sbin)/", "", command)
    name = re.sub(r"[^\w\-\.\/]+", "_", name)
    return re.sub(r"/", ".", name).strip(" ._-")[:NAME_MAX]


class SosOutput(NamedTuple):
    """One command output of a sos report: the plugin that runs it, the command as sos runs it,
    the first sos release that does (``()``: every release), and for a ``systemctl show`` of
    many units, the one unit whose block is meant."""

    plugin: str
    command: str
    since: tuple[int, ...] = ()
    unit: str | None = None

    @property
    def path(self) -> str:
        """Where the output lies in the report (``sos_commands/pci/lspci_-nnvv``)."""
        return f"{SOS_COMMANDS}/{self.plugin}/{mangle(self.command)}"


class Unread(NamedTuple):
    """An output sos collects in place of a mapped one, in a form the readers do not take."""

    output: SosOutput
    why: str


class Never(NamedTuple):
    """A command no sos release runs; ``instead``: the command file read in its place."""

    why: str
    instead: str | None = None


FM_UNIT = "nvidia-fabricmanager.service"
MAPPED: dict[str, tuple[SosOutput, ...]] = {
    "dmesg.txt": (SosOutput("kernel", "dmesg"),),
    "lsmod.txt": (SosOutput("kernel", "lsmod"),),
    "ibstat.txt": (SosOutput("infiniband", "ibstat"),),
    "nvidia-smi-q.txt": (SosOutput("nvidia", "nvidia-smi -q", (4, 3)),),
    "nvidia-smi-nvlink-s.txt": (SosOutput("nvidia", "nvidia-smi nvlink -s", (4, 3)),),
    "nvidia-smi-nvlink-e.txt": (SosOutput("nvidia", "nvidia-smi nvlink -e", (4, 3)),),
    "lspci-vvv.txt": (SosOutput("pci", "lspci -nnvv", (3, 3)),),
    "systemctl-show-fabricmanager.txt": (
        SosOutput("systemd", "systemctl show *service --all", (3, 4), FM_UNIT),),
}
UNREAD: dict[str, tuple[Unread, ...]] = {
    "lspci-vvv.txt": (Unread(SosOutput("pci", "lspci -nvv"),
                             "numeric ids without class names (sos before 3.3)"),),
    "systemctl-show-fabricmanager.txt": (
        Unread(SosOutput("nvidia", "systemctl status nvidia-fabricmanager", (4, 8, 1)),
               "status text, not the unit's properties"),),
}
NEVER: dict[str, Never] = {
    "nvidia-smi-q-x.xml": Never("sos runs nvidia-smi -q, never -q -x", "nvidia-smi-q.txt"),
    "nvidia-smi-topo-m.txt": Never("sos never runs nvidia-smi topo -m"),
    "nvidia-imex-ctl-N.txt": Never("sos never runs nvidia-imex-ctl"),
    "systemctl-show-slices.txt": Never("sos shows the systemd manager and its services, no "
                                       "slice: systemctl show --all, systemctl show *service "
                                       "--all"),
}


def parse_version(text: str) -> tuple[int, ...] | None:
    """The sos release ``version.txt`` names (its first line), as numbers; ``None`` if none."""
    found = _VERSION.match(text.strip())
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


def unit_block(text: str, unit: str) -> str | None:
    """The block of ``unit`` in a ``systemctl show`` of many units (blocks apart by a blank
    line, each with its ``Id=``); ``None`` when the unit has none."""
    for block in re.split(r"\n[ \t]*\n", text):
        if f"Id={unit}" in block.splitlines():
            return block.strip("\n") + "\n"
    return None


def is_sos_root(root: Sysroot) -> bool:
    """True when ``root`` is the top directory of a sos report: ``sos_commands/`` beside
    ``version.txt`` or ``sos_reports/manifest.json``."""
    return root.is_dir(SOS_COMMANDS) and (root.exists(VERSION_FILE) or root.exists(MANIFEST))


class SosRead(NamedTuple):
    """A mapped output as read: where it came from, its text, its exit status."""

    source: str
    text: str
    rc: int = 0


class SosReport:
    """The command outputs of the sos report at the top of ``root`` (see the module)."""

    def __init__(self, root: Sysroot) -> None:
        self.root = root
        self._logs: dict[str, str] | None = None
        self._exits: dict[str, int] | None = None

    def version(self) -> tuple[int, ...] | None:
        """The sos release that wrote the report, from ``version.txt``."""
        return parse_version(self.root.read_optional(VERSION_FILE) or "")

    def file_for(self, name: str) -> str | None:
        """The report's file that is command file ``name`` as it is (no unit to pick out)."""
        return next((out.path for out in MAPPED.get(name, ())
                     if out.unit is None and self.root.exists(out.path)), None)

    def read(self, name: str) -> SosRead | None:
        """Command file ``name`` read out of the report; ``None`` when it holds none."""
        for out in MAPPED.get(name, ()):
            if not self.root.exists(out.path):
                continue
            text = self.root.read_text(out.path, strip=False)
            if out.unit is not None and (text := unit_block(text, out.unit)) is None:
                continue
            return SosRead(self._source(out), text, self._exit_status(out) or 0)
        return None

    def _source(self, out: SosOutput) -> str:
        tail = self.root.realpath(out.path).startswith("/sos_strings/")
        return (out.path + (f" ({out.unit})" if out.unit else "")
                + (" (its tail: sos cut it at its size limit)" if tail else ""))

    # -- why an output is absent -----------------------------------------------------------

    def why_absent(self, name: str) -> str:
        """One line: why the report holds no command file ``name``."""
        if name in NEVER:
            never = NEVER[name]
            instead = f"; {self._instead(never.instead)}" if never.instead else ""
            return f"not in this sos archive ({never.why}{instead})"
        unread = next((u for u in UNREAD.get(name, ()) if self.root.exists(u.output.path)), None)
        if unread is not None:
            return (f"not in this sos archive in a form read here ({unread.output.path}: "
                    f"collected as {unread.output.command}, not read: {unread.why})")
        return f"not in this sos archive ({self.missing_reason(MAPPED[name][0])})"

    def _instead(self, name: str) -> str:
        if (read := self.read(name)) is not None:
            return f"{read.source} is read instead"
        return self.missing_reason(MAPPED[name][0]).replace(" absent:", " absent too:", 1)

    def missing_reason(self, out: SosOutput) -> str:
        """Why the report holds no ``out`` (its path, and what sos's logs, release, manifest
        and plugin directory say)."""
        if out.unit is not None and self.root.exists(out.path):
            return f"{out.path} has no {out.unit} block: the unit was not loaded when sos ran"
        return f"{out.path} absent: {self._cause(out)}"

    def _cause(self, out: SosOutput) -> str:
        """Why sos kept no file for ``out``: its logs first, then whether the plugin left
        anything at all, the release, the manifest."""
        noted = self._logged(out)
        if noted:
            return noted
        if not self.root.is_dir(f"{SOS_COMMANDS}/{out.plugin}"):
            return f"the {out.plugin} plugin did not run"
        version = self.version()
        if out.since and version is not None and version < out.since:
            return (f"sos {_dotted(version)} predates it (collected since sos "
                    f"{_dotted(out.since)})")
        if self._exit_status(out) in NOT_FOUND:
            return f"{out.command.split()[0]} was not found when sos ran"
        return f"the {out.plugin} plugin ran without collecting it"

    def _logged(self, out: SosOutput) -> str | None:
        """What sos's own logs say about ``out``: the command timed out or was skipped, or
        its plugin timed out; ``None`` when they say nothing (or are absent)."""
        plugin, command = re.escape(out.plugin), re.escape(out.command)
        checks = (
            (rf"\[plugin:{plugin}\] command '{command}' (timed out after \d+s)",
             "sos stopped it: {}"),
            (rf"\[plugin:{plugin}\] skipped command '{command}': ([^\n]*)", "sos skipped it: {}"),
            (rf"Plugin {plugin} (timed out)", f"the {out.plugin} plugin {{}}"),
        )
        for pattern, form in checks:
            for log, text in self._log_texts().items():
                if found := re.search(pattern, text):
                    return f"{form.format(' '.join(found.group(1).split()))} ({log})"
        return None

    def _log_texts(self) -> dict[str, str]:
        """sos's own logs by path, those the report holds (read once)."""
        if self._logs is None:
            self._logs = {log: text for log in LOGS
                          if (text := self.root.read_optional(log)) is not None}
        return self._logs

    def _exit_status(self, out: SosOutput) -> int | None:
        """``out``'s exit status in ``sos_reports/manifest.json`` (sos 4); ``None`` when the
        manifest is absent, unreadable or does not list the command."""
        if self._exits is None:
            self._exits = _manifest_exits(self.root.read_optional(MANIFEST))
        return self._exits.get(f"{out.plugin} {out.command}")


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def _manifest_exits(text: str | None) -> dict[str, int]:
    """``{"<plugin> <command>": exit status}`` of every command a sos manifest lists."""
    try:
        plugins = json.loads(text or "{}")["components"]["report"]["plugins"]
    except (ValueError, KeyError, TypeError):
        return {}
    if not isinstance(plugins, dict):
        return {}
    return {f"{name} {cmd['exec']}": cmd["return_code"]
            for name, plugin in plugins.items() for cmd in _listed_commands(plugin)}


def _listed_commands(plugin: object) -> list[dict]:
    """The well-formed entries (``exec`` and ``return_code``) of one plugin's ``commands``."""
    listed = plugin.get("commands") if isinstance(plugin, dict) else None
    return [cmd for cmd in listed if isinstance(cmd, dict) and isinstance(cmd.get("exec"), str)
            and isinstance(cmd.get("return_code"), int)] if isinstance(listed, list) else []

