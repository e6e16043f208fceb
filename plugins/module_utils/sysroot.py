"""Access to a host's files and command outputs through a root directory.

On a live host the root is ``/``. In tests, in the demo and for captured bundles it is a
directory tree that mirrors ``/`` (``sys/``, ``proc/``, ``etc/`` ...). Inside such a tree,
symlinks are resolved *within* the tree (an absolute target such as ``/dev/cpu_dma_latency``
means ``<root>/dev/cpu_dma_latency``), so a captured bundle can never make a reader open a
file of the machine that reads it.

Command outputs (``nvidia-smi -q -x``, the kernel log ...) come from running the command on a
live host, and from ``<root>/.exemplar/commands/<name>`` inside a sysroot. A sysroot never
executes host commands. The known commands are listed in :data:`COMMANDS`. A sysroot that is
the top directory of a sos report has its command files in ``sos_commands/`` instead: there a
command file the tree lacks stands for the sos output mapped to it (:mod:`sos_commands`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, BinaryIO, NamedTuple

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    CommandFailed,
    NotSupported,
    UnsafePath,
)

if TYPE_CHECKING:
    from ansible_collections.exemplar.tune.plugins.module_utils.sos_commands import SosReport

COMMANDS_DIR = ".exemplar/commands"
_COMMAND_FILE = COMMANDS_DIR + "/"
MAX_READ = 8 * 1024 * 1024
CHUNK = 64 * 1024
COMMAND_TIMEOUT = 30

# name of the captured output -> argv run on a live host (LANG=C, no shell).
COMMANDS: dict[str, list[str]] = {
    "nvidia-smi-q-x.xml": ["nvidia-smi", "-q", "-x"],
    "nvidia-smi-q.txt": ["nvidia-smi", "-q"],  # read when a capture lacks the XML
    "nvidia-smi-nvlink-s.txt": ["nvidia-smi", "nvlink", "-s"],
    "nvidia-smi-nvlink-e.txt": ["nvidia-smi", "nvlink", "-e"],
    "nvidia-imex-ctl-N.txt": ["nvidia-imex-ctl", "-N"],
    "nvidia-smi-topo-m.txt": ["nvidia-smi", "topo", "-m"],
    "lspci-vvv.txt": ["lspci", "-vvv"],
    "dmesg.txt": ["dmesg"],
    "lsmod.txt": ["lsmod"],  # read in a capture without /sys/module
    "ibstat.txt": ["ibstat"],  # read in a capture without /sys/class/infiniband
    "systemctl-show-fabricmanager.txt": [
        "systemctl", "show", "--property=Id,LoadState,ActiveState,SubState,Result",
        "nvidia-fabricmanager.service"],
    "systemctl-show-slices.txt": ["systemctl", "show", "--property=Id,AllowedCPUs,EffectiveCPUs",
                                  "system.slice", "user.slice", "init.scope"],
}
MAX_SYMLINKS = 40
ENVIRONMENT_FILE = f"{COMMANDS_DIR}/environment.txt"
ENVIRONMENT_PREFIXES = ("NCCL_", "HOME", "SLURM_JOB_ID", "ENROOT_")


class CommandOutput(NamedTuple):
    """What a command printed, and where it came from (argv or captured file)."""

    source: str
    stdout: str
    rc: int = 0
    stderr: str = ""

    def checked(self) -> CommandOutput:
        """This output when the command exited 0; otherwise raise :class:`CommandFailed`
        (the command, its exit status and the first line of its stderr)."""
        if self.rc != 0:
            raise CommandFailed(self.source, self.rc, self.stderr.strip() or self.stdout)
        return self


class Sysroot:
    """A host's filesystem seen through ``root``; ``root == "/"`` is the live host."""

    def __init__(self, root: str = "/", record: set[str] | None = None) -> None:
        self.root = os.path.abspath(root)
        self.live = self.root == "/"
        self._record = record
        self._outputs: dict[str, CommandOutput | NotSupported] = {}
        self._links: dict[str, str | None] = {}
        self._prefixes: dict[str, tuple[tuple[str, ...], int]] = {}
        self._sos: SosReport | None = None
        self._sos_checked = False

    def __repr__(self) -> str:
        return f"Sysroot({self.root!r})"

    # -- paths ---------------------------------------------------------------------------

    def display(self, rel: str) -> str:
        """The host path (``/sys/...``) that ``rel`` stands for; used as evidence."""
        return "/" + rel.strip("/")

    def path(self, rel: str) -> str:
        """Real path of host path ``rel`` (``"sys/class/iommu"`` or ``"/sys/class/iommu"``).

        In a sos report, a command file the tree lacks (``.exemplar/commands/dmesg.txt``) is
        the report's output that holds it as it is (``sos_commands/kernel/dmesg``)."""
        rel = rel.strip("/")
        if self.live:
            return "/" + rel
        real = self._resolve_inside(rel)
        if rel.startswith(_COMMAND_FILE) and not os.path.lexists(real) \
                and (sos := self.sos_report()) is not None \
                and (mapped := sos.file_for(rel[len(_COMMAND_FILE):])) is not None:
            return self._resolve_inside(mapped)
        return real

    def _resolve_inside(self, rel: str) -> str:
        """Resolve ``rel`` component by component, keeping every symlink inside the root.

        The resolution of every leading part of ``rel`` is remembered (as the links it went
        through are), so the files of one directory resolve their directory once.
        """
        given = [p for p in rel.split("/") if p not in ("", ".")]
        start = next((k for k in range(len(given) - 1, 0, -1)
                      if "/".join(given[:k]) in self._prefixes), 0)
        done, hops = self._prefixes["/".join(given[:start])] if start else ((), 0)
        done = list(done)
        parts = given[start:]
        unread = len(parts)  # the given parts not consumed yet (the rest came from links)
        while parts:
            given_part = len(parts) == unread
            part = parts.pop(0)
            if part == "..":
                if done:
                    done.pop()
            elif (target := self._link_target("/".join((*done, part)))) is not None:
                hops += 1
                if hops > MAX_SYMLINKS:
                    raise UnsafePath(self.display(rel), "too many levels of symbolic links")
                if target.startswith("/"):
                    done = []
                parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            else:
                done.append(part)
            if given_part:
                unread -= 1
            if len(parts) == unread:  # every part so far resolved: remember where it led
                self._prefixes["/".join(given[:len(given) - unread])] = (tuple(done), hops)
        return os.path.join(self.root, *done)

    def _link_target(self, inner: str) -> str | None:
        """Target of the symlink at ``inner`` (inside the root); ``None``: not a link.

        Remembered for the life of this object: links do not change while a tree is read, and
        writes through this object act on resolved paths, never on a link itself.
        """
        if inner not in self._links:
            try:
                self._links[inner] = os.readlink(os.path.join(self.root, inner))
            except OSError:  # not a link, or absent
                self._links[inner] = None
        return self._links[inner]

    def _note(self, rel: str) -> None:
        if self._record is not None:
            self._record.add("/" + rel.strip("/"))

    def _leaf(self, rel: str) -> str:
        """Real path of host path ``rel`` with its directories resolved inside the root and its
        last component not followed (the link itself, when it is one)."""
        rel = rel.strip("/")
        parent, _, name = rel.rpartition("/")
        if name in ("", ".", ".."):
            raise UnsafePath(self.display(rel), "names no file")
        if self.live:
            return "/" + rel
        return os.path.join(self._resolve_inside(parent) if parent else self.root, name)

    def kind(self, rel: str) -> str | None:
        """What host path ``rel`` itself is, a link not followed: ``file``, ``symbolic link``,
        ``directory``, ``FIFO``, ``socket``, ``character device`` or ``block device``; ``None``
        when it is absent (``NotSupported`` when it cannot be looked at)."""
        try:
            return file_kind(os.lstat(self._leaf(rel)).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise NotSupported(self.display(rel), exc.strerror or str(exc)) from None

    # -- reads ---------------------------------------------------------------------------

    def exists(self, rel: str) -> bool:
        """True when the host path exists (symlinks followed)."""
        found = os.path.exists(self.path(rel))
        if found:
            self._note(rel)
        return found

    def is_dir(self, rel: str) -> bool:
        """True when the host path is a directory."""
        return os.path.isdir(self.path(rel))

    def read_bytes(self, rel: str, limit: int = MAX_READ, device: bool = False) -> bytes:
        """Bytes of a host file; ``NotSupported`` when it is absent or not a regular file (a
        FIFO, socket or device is never opened, so a read never waits on one). ``device``
        allows a character device (``/dev/cpu_dma_latency``), opened without waiting."""
        real = self.path(rel)
        try:
            with os.fdopen(_open_regular(real, device), "rb") as handle:
                data = _read_chunks(handle, limit)
        except (FileNotFoundError, NotADirectoryError):
            raise NotSupported(self.display(rel)) from None
        except IsADirectoryError:
            raise NotSupported(self.display(rel), "is a directory") from None
        except OSError as exc:
            raise NotSupported(self.display(rel), exc.strerror or str(exc)) from None
        self._note(rel)
        return data

    def read_text(self, rel: str, strip: bool = True) -> str:
        """Text of a host file (UTF-8, undecodable bytes replaced), stripped by default."""
        text = self.read_bytes(rel).decode("utf-8", errors="replace")
        return text.strip() if strip else text

    def read_optional(self, rel: str) -> str | None:
        """Stripped text of a host file, or ``None`` when it is absent or unreadable."""
        try:
            return self.read_text(rel)
        except NotSupported:
            return None

    def listdir(self, rel: str) -> list[str]:
        """Sorted entries of a host directory; ``[]`` when it is absent."""
        try:
            names = sorted(os.listdir(self.path(rel)))
        except OSError:
            return []
        self._note(rel)
        return names

    def readlink(self, rel: str) -> str | None:
        """Target of a host symlink (as stored), or ``None`` when ``rel`` is no symlink."""
        parent, _, name = rel.strip("/").rpartition("/")
        real = os.path.join(self.path(parent), name) if parent else self.path(name)
        try:
            target = os.readlink(real)
        except OSError:
            return None
        self._note(rel)
        return target

    def realpath(self, rel: str) -> str:
        """Host path (``/sys/devices/...``) that ``rel`` resolves to, inside the root."""
        real = self.path(rel)
        if self.live:
            return os.path.realpath(real)
        inside = os.path.relpath(real, self.root)
        return "/" if inside == "." else "/" + inside

    def glob(self, pattern: str) -> list[str]:
        """Host paths matching ``pattern`` (``fnmatch`` per component, e.g.
        ``sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*``), sorted, without leading /."""
        found = [""]
        for part in pattern.strip("/").split("/"):
            if not any(ch in part for ch in "*?["):
                found = [f"{base}/{part}".strip("/") for base in found]
                continue
            found = [f"{base}/{name}".strip("/") for base in found
                     for name in self.listdir(base or "/") if fnmatch.fnmatchcase(name, part)]
        return sorted(path for path in found if os.path.lexists(self.path(path)))

    # -- writes (only the knob modules call these) ----------------------------------------
    #
    # Every file exemplar-tune creates, replaces or removes on a host goes through here. The
    # path's directories resolve inside the root; the file itself must be absent or a regular
    # file: a link (whatever its target), directory, FIFO, socket or device is refused with
    # ``UnsafePath`` before anything is written.

    def writable_path(self, rel: str) -> str:
        """The real path to write or remove for host path ``rel``; ``UnsafePath`` when what is
        there is not a regular file (see above). Planners call it before the first change."""
        real = self._leaf(rel)
        kind = self.kind(rel)
        if kind == "symbolic link":
            raise UnsafePath(self.display(rel), f"is a symbolic link (to {os.readlink(real)}): "
                             "exemplar-tune never writes or removes through a link")
        if kind not in (None, "file"):
            raise UnsafePath(self.display(rel), f"is a {kind}, not a regular file: exemplar-tune "
                             "writes only regular files")
        return real

    def write_bytes(self, rel: str, data: bytes, mode: int = 0o644,
                    owner: tuple[int, int] | None = None) -> None:
        """Replace a regular file atomically (temp file in the same directory, fsync, rename).

        The file keeps the owner and group it had (``owner``, ``(uid, gid)``, sets them); a new
        file belongs to the writing user.
        """
        real = self.writable_path(rel)
        os.makedirs(os.path.dirname(real), exist_ok=True)
        owner = owner or self.file_owner(rel)
        handle, tmp = tempfile.mkstemp(prefix=".exemplar-", dir=os.path.dirname(real))
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            if owner is not None and owner != (os.geteuid(), os.getegid()):
                os.chown(tmp, *owner)
            os.chmod(tmp, mode)
            os.replace(tmp, real)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def write_attr(self, rel: str, value: str, exact: bool = False) -> None:
        """Write a kernel attribute (sysfs/procfs) in place, as ``echo value > file`` does.

        ``exact`` writes ``value`` as it is (restore: a value file without a final newline
        stays without one).
        """
        fd = os.open(self.writable_path(rel),
                     os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(value if exact or value.endswith("\n") else value + "\n")

    def remove(self, rel: str) -> None:
        """Remove a file; absent is fine."""
        real = self.writable_path(rel)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(real)

    def remove_empty_dir(self, rel: str) -> None:
        """Remove a directory if it is empty; otherwise (or absent, or a link) leave it."""
        with contextlib.suppress(OSError):
            os.rmdir(self._leaf(rel))

    def file_mode(self, rel: str) -> int | None:
        """Permission bits of a file, ``None`` when absent."""
        try:
            return stat.S_IMODE(os.stat(self.path(rel)).st_mode)
        except OSError:
            return None

    def file_owner(self, rel: str) -> tuple[int, int] | None:
        """``(uid, gid)`` of a file, ``None`` when absent."""
        try:
            info = os.stat(self.path(rel))
        except OSError:
            return None
        return info.st_uid, info.st_gid

    # -- commands --------------------------------------------------------------------------

    def command(self, name: str) -> CommandOutput:
        """Output of a known command: run it live, or read the captured file in a sysroot.

        Raises ``NotSupported`` when the command is not installed (live) or was not captured
        (sysroot). A command that runs but fails returns its rc and stderr; a sysroot keeps a
        failed run as ``<name>.rc`` (the exit status) and ``<name>.stderr`` beside ``<name>``
        (its stdout, when it printed any), as ``exemplar-tune snapshot`` writes them. A live
        command runs at most once per ``Sysroot`` (two layers reading the kernel log share one
        ``dmesg``); a new ``Sysroot`` reads the host again. The layer module keeps one
        ``Sysroot`` across its layers, so a read-back after a change must not come from here
        (it would see the output from before): run the command itself, as the persistence
        knob's read-back does.
        """
        argv = COMMANDS[name]
        if not self.live:
            return self._captured(name)
        if name not in self._outputs:
            try:
                self._outputs[name] = run_command(argv)
            except NotSupported as missing:
                self._outputs[name] = missing
        found = self._outputs[name]
        if isinstance(found, NotSupported):
            raise NotSupported(found.path, found.reason)  # a fresh one: no shared traceback
        return found

    def sos_report(self) -> SosReport | None:
        """The sos report this sysroot is the top directory of; ``None`` when it is none (a
        live host never is)."""
        if not self._sos_checked and not self.live:
            from ansible_collections.exemplar.tune.plugins.module_utils import sos_commands

            if sos_commands.is_sos_root(self):
                self._sos = sos_commands.SosReport(self)
        self._sos_checked = True
        return self._sos

    def _captured(self, name: str) -> CommandOutput:
        """The captured run of command ``name``: its output, and its exit status and stderr
        when it failed; ``NotSupported`` when the capture has neither. A sos report without
        the capture gives its mapped output, or ``NotSupported`` naming what it lacks."""
        rel = f"{COMMANDS_DIR}/{name}"
        if not any(os.path.lexists(self._leaf(f"{rel}{end}")) for end in ("", ".rc")) \
                and (sos := self.sos_report()) is not None:
            return self._from_sos(sos, name)
        status = self.read_optional(f"{rel}.rc")
        if status is None:
            try:
                stdout = self.read_text(rel, strip=False)
            except NotSupported as exc:
                reason = "not captured" if exc.reason == "not present" else exc.reason
                raise NotSupported(exc.path, reason) from None
            return CommandOutput(source=self.display(rel), stdout=stdout)
        try:
            rc = int(status)
        except ValueError:
            raise NotSupported(self.display(f"{rel}.rc"), f"not an exit status: {status!r}") \
                from None
        stdout = self.read_optional(rel)
        stderr = self.read_optional(f"{rel}.stderr")
        return CommandOutput(source=" ".join(COMMANDS[name]), stdout=stdout or "", rc=rc,
                             stderr=stderr or "")

    def _from_sos(self, sos: SosReport, name: str) -> CommandOutput:
        """Command ``name`` read out of sos report ``sos``; ``NotSupported`` (the command,
        and why the report lacks it) when it holds none."""
        found = sos.read(name)
        if found is None:
            raise NotSupported(" ".join(COMMANDS[name]), sos.why_absent(name))
        return CommandOutput(source=found.source, stdout=found.text, rc=found.rc)

    def environ(self) -> dict[str, str]:
        """The reading process's environment, limited to NCCL_/ENROOT_ variables and HOME.

        Live: this process's environment. Sysroot: ``.exemplar/commands/environment.txt``
        (``KEY=VALUE`` lines, as written by ``exemplar-tune snapshot``); empty when absent.
        """
        if self.live:
            return filter_environment(os.environ)
        text = self.read_optional(ENVIRONMENT_FILE) or ""
        pairs = (line.partition("=") for line in text.splitlines() if "=" in line)
        return filter_environment({key: value for key, _, value in pairs})


def filter_environment(env: Mapping[str, str]) -> dict[str, str]:
    """Only the variables the readers use; nothing else (no secrets) ever leaves the host."""
    return {k: v for k, v in env.items() if k.startswith(ENVIRONMENT_PREFIXES)}


KINDS = ((stat.S_ISREG, "file"), (stat.S_ISLNK, "symbolic link"), (stat.S_ISDIR, "directory"),
         (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
         (stat.S_ISBLK, "block device"))


def file_kind(mode: int) -> str:
    """The kind of file ``mode`` (an ``st_mode``) describes, in words."""
    return next((name for test, name in KINDS if test(mode)), "special file")


def _open_regular(real: str, device: bool = False) -> int:
    """A descriptor of ``real`` opened for reading when it is a regular file (or, with
    ``device``, a character device), checked before and after the open; ``O_NONBLOCK``, so
    nothing swapped in between can make the open wait. ``OSError`` otherwise."""
    allowed = (stat.S_ISREG, stat.S_ISCHR) if device else (stat.S_ISREG,)

    def check(mode: int) -> None:
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(real)
        if not any(test(mode) for test in allowed):
            raise OSError(f"is a {file_kind(mode)}, not a regular file")

    check(os.stat(real).st_mode)
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        check(os.fstat(fd).st_mode)
    except OSError:
        os.close(fd)
        raise
    return fd


def _read_chunks(handle: BinaryIO, limit: int) -> bytes:
    """Read up to ``limit`` bytes in small chunks (procfs refuses one huge read: ENOMEM)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = handle.read(min(CHUNK, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def run_command(argv: list[str], timeout: int = COMMAND_TIMEOUT) -> CommandOutput:
    """Run ``argv`` (never through a shell) with ``LANG=C`` and return its output."""
    source = " ".join(argv)
    env = dict(os.environ, LANG="C", LC_ALL="C")
    try:
        proc = subprocess.run(  # noqa: S603 - argv list, no shell
            argv, capture_output=True, text=True, errors="replace", timeout=timeout,
            env=env, check=False, stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise NotSupported(source, "command not found") from None
    except subprocess.TimeoutExpired:
        raise NotSupported(source, f"timed out after {timeout} s") from None
    except OSError as exc:
        raise NotSupported(source, exc.strerror or str(exc)) from None
    return CommandOutput(source=source, stdout=proc.stdout, rc=proc.returncode, stderr=proc.stderr)
