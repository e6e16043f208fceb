"""Import this collection's module_utils from a module payload, compiled once and cached.

Ansible runs a module from a zip of Python sources. CPython's zip importer keeps no bytecode
and (3.11 to 3.13) compiles each module twice: once to name the spec's file, once to run it.
:func:`use_bytecode_cache`, called by a module before it imports the rest of this collection,
puts a finder first on ``sys.meta_path`` for this collection's modules in that zip: each is
compiled at most once per run, and its code is kept in a cache directory on the host, keyed by
the source's SHA-256, the interpreter's bytecode version and its optimisation level, so later
runs compile none.

The cache is ``<base>/<cache_tag>``, where the base is the effective user's
``~/.cache/exemplar-tune/bytecode`` (from the password database, not ``$HOME``) or the
absolute directory named by ``EXEMPLAR_TUNE_BYTECODE_CACHE``; ``off`` turns it off. The
``<cache_tag>`` directory is created 0700 and opened once, without following a symlink; it is
used only when it is a directory owned by the effective user and writable by nobody else, and
every later read, write and sweep goes through that open descriptor (checked to still be that
directory before each use), so renaming or replacing the path afterwards (by whoever can write
its parent) cannot redirect them. Entries are used only when they are regular files owned by
the effective user and writable by nobody else, and are written whole (a temporary file of
this process, then rename). Anything wrong with the cache (no home, a read-only file system, a
foreign or malformed entry, any error at all) only means compiling as before. A run that
writes an entry also removes the entries and temporary files of this interpreter's directory
not written for ``MAX_AGE_DAYS``, so old versions of the collection do not accumulate.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import stat
import sys
import time
import zipimport
from importlib.machinery import ModuleSpec
from importlib.util import MAGIC_NUMBER, decode_source
from types import CodeType, ModuleType

PACKAGE = "ansible_collections.exemplar.tune."
CACHE_ENV = "EXEMPLAR_TUNE_BYTECODE_CACHE"
MAX_AGE_DAYS = 30
SUFFIX = ".codecache"
TEMPORARY_SUFFIX = ".tmp"
WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


def use_bytecode_cache() -> None:
    """Serve this collection's later imports from the payload through the cache.

    Does nothing unless this module itself was loaded from a zip (a module payload), so code
    imported from a checkout or an installed collection is untouched.
    """
    loader = globals().get("__loader__")
    if not isinstance(loader, zipimport.zipimporter):
        return
    if any(isinstance(finder, PayloadFinder) for finder in sys.meta_path):
        return
    try:
        finder = PayloadFinder(loader, open_cache_directory())
    except Exception:  # noqa: BLE001 - without the finder the zip importer does the work
        return
    sys.meta_path.insert(0, finder)


def cache_path() -> str | None:
    """The cache directory's path for this interpreter, or ``None`` (off, or no usable base)."""
    chosen = os.environ.get(CACHE_ENV, "")
    if chosen == "off":
        return None
    if not chosen:
        try:
            import pwd

            home = pwd.getpwuid(os.geteuid()).pw_dir
        except (ImportError, KeyError):
            return None
        chosen = os.path.join(home, ".cache", "exemplar-tune", "bytecode")
    if not os.path.isabs(chosen):
        return None
    return os.path.join(chosen, sys.implementation.cache_tag or "unknown")


def open_cache_directory() -> int | None:
    """A descriptor of the private cache directory (created if missing), or ``None``."""
    path = cache_path()
    if path is None:
        return None
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if info.st_uid == os.geteuid() and not info.st_mode & WRITABLE_BY_OTHERS:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def identity(fd: int | None) -> tuple[int, int] | None:
    """Device and inode of the open file ``fd`` (``None`` when there is none or it is closed)."""
    if fd is None:
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    return info.st_dev, info.st_ino


class PayloadFinder:
    """Finds this collection's modules in the payload zip; loads them through the cache."""

    def __init__(self, archive: zipimport.zipimporter, cache: int | None) -> None:
        self.archive = archive
        self.cache = cache
        self.identity = identity(cache)
        self.swept = False

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> ModuleSpec | None:
        """A spec for ``fullname`` if it is this collection's and in the zip; else ``None``."""
        if not fullname.startswith(PACKAGE):
            return None
        base = fullname.replace(".", "/")
        for member, is_package in ((f"{base}/__init__.py", True), (f"{base}.py", False)):
            try:
                source = self.archive.get_data(member)
            except OSError:
                continue
            spec = ModuleSpec(fullname, PayloadLoader(self, member, source),
                              origin=f"{self.archive.archive}/{member}", is_package=is_package)
            spec.has_location = True
            if is_package:
                spec.submodule_search_locations = [f"{self.archive.archive}/{base}"]
            return spec
        return None

    def code(self, member: str, source: bytes) -> CodeType:
        """The code object of ``member``: from the cache, or compiled (and then cached).

        Nothing the cache does can fail the import: any error means compiling."""
        try:
            return self.cached_code(member, source)
        except Exception:  # noqa: BLE001 - the cache is only ever a shortcut
            return compile(source, member, "exec", dont_inherit=True)

    def cached_code(self, member: str, source: bytes) -> CodeType:
        """:meth:`code`, with the cache's errors raised."""
        directory = self.directory()
        if directory is None:
            return compile(source, member, "exec", dont_inherit=True)
        name = entry_name(member, source)
        cached = read_entry(directory, name)
        if cached is not None:
            return cached
        code = compile(source, member, "exec", dont_inherit=True)
        write_entry(directory, name, code)
        if not self.swept:
            self.swept = True
            sweep(directory)
        return code

    def directory(self) -> int | None:
        """The cache's descriptor while it is still the directory that was checked; once it
        is not (closed, or its number reused by the module), the cache is off for the run."""
        if self.identity is None or identity(self.cache) != self.identity:
            self.cache = self.identity = None
        return self.cache


class PayloadLoader:
    """Executes one module of the payload; gives its source to tracebacks."""

    def __init__(self, finder: PayloadFinder, member: str, source: bytes) -> None:
        self.finder = finder
        self.member = member
        self.source = source

    def create_module(self, spec: ModuleSpec) -> None:
        """Default module creation."""
        return None

    def exec_module(self, module: ModuleType) -> None:
        """Run the module's code in its namespace."""
        exec(self.finder.code(self.member, self.source), module.__dict__)  # noqa: S102

    def get_source(self, fullname: str) -> str:
        """The module's source text (for tracebacks)."""
        return decode_source(self.source)


def entry_name(member: str, source: bytes) -> str:
    """The cache file name of ``member`` with ``source`` at this optimisation level."""
    key = f"{member}\0{sys.flags.optimize}\0".encode() + source
    return hashlib.sha256(key).hexdigest() + SUFFIX


def read_entry(directory: int, name: str) -> CodeType | None:
    """The code object stored as ``name``, or ``None`` if absent, foreign or unreadable."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid()
                or info.st_mode & WRITABLE_BY_OTHERS):
            return None
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read()
        if not data.startswith(MAGIC_NUMBER):
            return None
        # S302: written by this user into a directory only this user can write
        code = marshal.loads(data[len(MAGIC_NUMBER):])  # noqa: S302
        return code if isinstance(code, CodeType) else None
    except Exception:  # noqa: BLE001 - a malformed entry is a miss (and is written again)
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def write_entry(directory: int, name: str, code: CodeType) -> None:
    """Store ``code`` as ``name`` whole (own temporary file, then rename); errors are ignored."""
    temporary = f"{name}.{os.getpid()}.{os.urandom(4).hex()}{TEMPORARY_SUFFIX}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                     dir_fd=directory)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(MAGIC_NUMBER + marshal.dumps(code))
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except Exception:  # noqa: BLE001 - not cached this time; leave nothing half-written
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)


def sweep(directory: int) -> None:
    """Remove entries (and stray temporary files) not written in ``MAX_AGE_DAYS``."""
    limit = time.time() - MAX_AGE_DAYS * 86400
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if (entry.name.endswith((SUFFIX, TEMPORARY_SUFFIX))
                    and entry.is_file(follow_symlinks=False)
                    and entry.stat(follow_symlinks=False).st_mtime < limit):
                os.unlink(entry.name, dir_fd=directory)
