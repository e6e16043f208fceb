"""Open a ``--sysroot`` argument: a directory that mirrors ``/`` or a snapshot archive.

Archives are unpacked into a private temporary directory after every member has been
checked: absolute names, ``..`` components, device files and links that point outside the
archive are refused with one clear error, before anything is written.
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

from exemplar_tune.errors import UserError

MAX_UNPACKED = 512 * 1024 * 1024
MAX_MEMBERS = 100_000  # a snapshot holds a few thousand files


class BundleError(UserError):
    """The sysroot argument is not a usable directory or snapshot archive."""


@contextlib.contextmanager
def open_sysroot(path: str) -> Iterator[str]:
    """Yield a directory for ``path``; an archive is unpacked and removed afterwards."""
    source = Path(path)
    if source.is_dir():
        yield str(source)
        return
    if not source.exists():
        raise BundleError(f"sysroot {path}: no such file or directory")
    if not source.is_file():  # a FIFO or device would be read forever
        raise BundleError(f"sysroot {path}: neither a directory nor an archive file")
    workdir = tempfile.mkdtemp(prefix=f"exemplar-sysroot-{os.getpid()}-")
    try:
        extract_archive(source, Path(workdir))
        yield workdir
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def extract_archive(archive: Path, dest: Path) -> None:
    """Unpack a snapshot archive into ``dest`` after validating every member."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members, size = [], 0
            for member in tar:  # one at a time: the limits hold before the whole list is read
                check_member(member)
                members.append(member)
                size += member.size
                if len(members) > MAX_MEMBERS:
                    raise BundleError(f"sysroot {archive}: more than {MAX_MEMBERS} members")
                if size > MAX_UNPACKED:
                    raise BundleError(f"sysroot {archive}: archive unpacks to more than "
                                      f"{MAX_UNPACKED >> 20} MiB")
            tar.extractall(dest, members=members, filter="tar")  # noqa: S202 - checked above
    except tarfile.ReadError:
        raise BundleError(f"sysroot {archive}: not a directory or a snapshot archive (.tar, "
                          ".tar.gz, .tar.bz2, .tar.xz)") from None
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise BundleError(f"sysroot {archive}: not a readable snapshot archive "
                          f"({' '.join(str(exc).split())})") from None


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
