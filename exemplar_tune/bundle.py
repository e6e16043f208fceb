"""Open a ``--sysroot`` argument: a directory that mirrors ``/``, a snapshot archive, or a sos
report (its archive or its unpacked directory).

Archives are unpacked into a private temporary directory after every member has been
checked: absolute names, ``..`` components, device files and links that point outside the
archive are refused with one clear error, before anything is written. A sos report holds
device nodes and FIFOs it copied (``/dev/null`` ...): in its top directory
(``sosreport-*/``) they are left out, not refused. Every unpacked directory and file is
readable and writable by its owner (sos marks some directories ``r-x``), so the reader can
read it and the temporary directory can be removed.

A sos report's sysroot is its top directory (``sosreport-<host>-<date>-<id>/``, holding
``sos_commands/``): given its archive, or a directory that holds only it, that directory is
the one yielded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from ansible_collections.exemplar.tune.plugins.module_utils.sos_commands import is_sos_root
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.errors import UserError

MAX_UNPACKED = 512 * 1024 * 1024
MAX_MEMBERS = 100_000  # a snapshot holds a few thousand files
SOS_TOP = "sosreport-"  # sos report archives unpack to sosreport-<host>-<date>-<id>/


class BundleError(UserError):
    """The sysroot argument is not a usable directory or snapshot archive."""


@contextlib.contextmanager
def open_sysroot(path: str) -> Iterator[str]:
    """Yield a directory for ``path``; an archive is unpacked and removed afterwards. A sos
    report yields its top directory."""
    source = Path(path)
    if source.is_dir():
        yield sos_top(source)
        return
    if not source.exists():
        raise BundleError(f"sysroot {path}: no such file or directory")
    if not source.is_file():  # a FIFO or device would be read forever
        raise BundleError(f"sysroot {path}: neither a directory nor an archive file")
    workdir = tempfile.mkdtemp(prefix=f"exemplar-sysroot-{os.getpid()}-")
    try:
        extract_archive(source, Path(workdir))
        yield sos_top(Path(workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def sos_top(directory: Path) -> str:
    """``directory``, or the sos report top directory that is its only entry."""
    try:
        entries = list(directory.iterdir())
    except OSError:
        return str(directory)  # read as it is: each unreadable file is named by its reader
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink() \
            and is_sos_root(Sysroot(str(entries[0]))):
        return str(entries[0])
    return str(directory)


def extract_archive(archive: Path, dest: Path) -> None:
    """Unpack a snapshot or sos report archive into ``dest`` after validating every member
    (a sos report's device nodes and FIFOs are left out)."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members, size = [], 0
            for count, member in enumerate(tar, start=1):  # one at a time: the limits hold
                if count > MAX_MEMBERS:                    # before the whole list is read
                    raise BundleError(f"sysroot {archive}: more than {MAX_MEMBERS} members")
                if _sos_node(member):
                    continue
                check_member(member)
                members.append(member)
                size += member.size
                if size > MAX_UNPACKED:
                    raise BundleError(f"sysroot {archive}: archive unpacks to more than "
                                      f"{MAX_UNPACKED >> 20} MiB")
            tar.extractall(dest, members=members, filter=_owner_access)  # noqa: S202 - checked
    except tarfile.ReadError:
        raise BundleError(f"sysroot {archive}: not a directory or a snapshot archive (.tar, "
                          ".tar.gz, .tar.bz2, .tar.xz)") from None
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise BundleError(f"sysroot {archive}: not a readable snapshot archive "
                          f"({' '.join(str(exc).split())})") from None


def _sos_node(member: tarfile.TarInfo) -> bool:
    """A device node or FIFO that sos copied into its report: nothing to read, left out."""
    parts = PurePosixPath(member.name).parts
    return member.isdev() and bool(parts) and parts[0].startswith(SOS_TOP)


def _owner_access(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """tarfile's ``tar`` filter, and owner read/write (directories: and enter) on top."""
    member = tarfile.tar_filter(member, dest)
    if member.mode is None:
        return member
    needed = 0o700 if member.isdir() else 0o600 if member.isfile() else 0
    return member.replace(mode=member.mode | needed, deep=False)


def check_member(member: tarfile.TarInfo) -> None:
    """Refuse a member that could write outside the destination or create a device."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts:
        raise BundleError(f"unsafe path in archive: {member.name!r}")
    if not (member.isfile() or member.isdir() or member.issym()):
        raise BundleError(f"unsupported member type in archive: {member.name!r}")
    if member.issym() and ".." in PurePosixPath(member.linkname).parts:
        depth = len(name.parts) - 1
        if _climbs_out(PurePosixPath(member.linkname), depth):
            raise BundleError(f"symlink leaves the archive: {member.name!r} -> {member.linkname}")


def _climbs_out(target: PurePosixPath, depth: int) -> bool:
    """True when a relative link target at directory depth ``depth`` goes above the top."""
    if target.is_absolute():
        return False  # resolved inside the sysroot by Sysroot, never on the host
    level = depth
    for part in target.parts:
        level += -1 if part == ".." else (0 if part == "." else 1)
        if level < 0:
            return True
    return False
