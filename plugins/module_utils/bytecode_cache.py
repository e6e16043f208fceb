"""Import this collection's module_utils from a module payload, compiled once and cached.

Ansible runs a module from a zip of Python sources. CPython's zip importer keeps no bytecode
and (3.11 to 3.13) compiles each module twice: once to name the spec's file, once to run it.
:func:`use_bytecode_cache`, called by a module before it imports the rest of this collection,
puts a finder first on ``sys.meta_path`` for this collection's modules in that zip: each is
compiled at most once per run, and its code is kept in a cache directory on the host, keyed by
the source's SHA-256 and the interpreter's bytecode version, so later runs compile none.

The cache is the effective user's ``~/.cache/exemplar-tune/bytecode`` (from the password
database, not ``$HOME``), or the directory named by ``EXEMPLAR_TUNE_BYTECODE_CACHE``; ``off``
turns it off. It is used only when it is a real directory owned by the effective user and
writable by nobody else (created 0700); entries are written whole (temporary file, then
rename). Anything wrong with it (no home, a read-only file system, a foreign or corrupt entry)
only means compiling as before. Entries older than ``MAX_AGE_DAYS`` are swept when new ones
are written, so old versions of the collection do not accumulate.
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
from importlib.util import MAGIC_NUMBER
from types import CodeType, ModuleType

PACKAGE = "ansible_collections.exemplar.tune."
CACHE_ENV = "EXEMPLAR_TUNE_BYTECODE_CACHE"
MAX_AGE_DAYS = 30
SUFFIX = ".codecache"


def use_bytecode_cache() -> None:
    """Serve this collection's later imports from the payload through the cache.

    Does nothing unless this module itself was loaded from a zip (a module payload), so code
    imported from a checkout or an installed collection is untouched.
    """
    loader = globals().get("__loader__")
    if not isinstance(loader, zipimport.zipimporter):
        return
    if not any(isinstance(finder, PayloadFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, PayloadFinder(loader, cache_directory()))


def cache_directory() -> str | None:
    """The usable cache directory (created if missing), or ``None`` for no cache."""
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
    chosen = os.path.join(chosen, sys.implementation.cache_tag or "unknown")
    try:
        os.makedirs(chosen, mode=0o700, exist_ok=True)
        info = os.lstat(chosen)
    except OSError:
        return None
    private = (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
               and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))
    return chosen if private else None


class PayloadFinder:
    """Finds this collection's modules in the payload zip; loads them through the cache."""

    def __init__(self, archive: zipimport.zipimporter, cache: str | None) -> None:
        self.archive = archive
        self.cache = cache
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
        """The code object of ``member``: from the cache, or compiled (and then cached)."""
        key = hashlib.sha256(member.encode() + b"\0" + source).hexdigest()
        entry = os.path.join(self.cache, key + SUFFIX) if self.cache else None
        if entry:
            cached = read_entry(entry)
            if cached is not None:
                return cached
        code = compile(source, member, "exec", dont_inherit=True)
        if entry:
            write_entry(entry, code)
            if not self.swept:
                self.swept = True
                sweep(self.cache)
        return code


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
        return self.source.decode("utf-8")


def read_entry(path: str) -> CodeType | None:
    """The code object stored at ``path``, or ``None`` if absent, foreign or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return None
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read()
        if not data.startswith(MAGIC_NUMBER):
            return None
        # S302: written by this user into a directory only this user can write
        code = marshal.loads(data[len(MAGIC_NUMBER):])  # noqa: S302
        return code if isinstance(code, CodeType) else None
    except (OSError, ValueError, EOFError, TypeError):
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def write_entry(path: str, code: CodeType) -> None:
    """Store ``code`` at ``path`` whole (temporary file, then rename); errors are ignored."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(MAGIC_NUMBER + marshal.dumps(code))
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def sweep(directory: str) -> None:
    """Remove entries (and stray temporary files) not written in ``MAX_AGE_DAYS``."""
    limit = time.time() - MAX_AGE_DAYS * 86400
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if (entry.name.endswith((SUFFIX, ".tmp")) and entry.is_file(follow_symlinks=False)
                        and entry.stat(follow_symlinks=False).st_mtime < limit):
                    os.unlink(entry.path)
    except OSError:
        pass
