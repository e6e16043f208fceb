"""The test session's own machine state: nothing a test runs reaches the operator's.

:func:`isolate` (called by ``tests/conftest.py`` before anything imports the product) gives
the session one private directory, ``<tmp>/exemplar-tests-<pid>-<random>``, holding its own
``HOME`` (the ``XDG_*_HOME`` below it) and exemplar-tune state directory, and the collection
link; :func:`remove_session_dir` removes it at the end (``pytest_sessionfinish``, and at
exit), and :func:`isolate` first removes what killed sessions left behind
(:func:`remove_stale_sessions`).

:class:`OperatorState` watches the operator's real state directories (the default ledger
``~/.local/state/exemplar-tune`` of the password database's home, and wherever the
environment pointed before the session changed it): their entries two levels deep with
type, size and modification time. A test after which they differ fails, naming what
changed (a test that runs the CLI with an environment built from scratch falls back to the
password database's home).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import psutil

SESSION_PREFIX = "exemplar-tests-"
LEGACY_PREFIX = "exemplar-colls-"  # what sessions before this module left in /tmp
LEGACY_AGE_S = 24 * 3600
STATE_NAME = "exemplar-tune"
XDG_HOMES = ("XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME")
_OWNER = os.getpid()

Entry = tuple[str, int, int]  # type, size, mtime_ns


def isolate() -> Path:
    """Make this process's environment the session's own (see the module); its directory.

    Sets ``HOME`` and ``EXEMPLAR_TUNE_STATE_DIR`` and unsets the operator's ``XDG_*_HOME``
    (so that the session's state, cache and configuration homes are those of its ``HOME``,
    also for a test that sets ``HOME`` itself); returns the session directory, which is
    removed when the process exits.
    """
    remove_stale_sessions()
    session = Path(tempfile.mkdtemp(prefix=f"{SESSION_PREFIX}{os.getpid()}-"))
    atexit.register(remove_session_dir, session)
    home = session / "home"
    home.mkdir()
    os.environ["HOME"] = str(home)
    for name in XDG_HOMES:
        os.environ.pop(name, None)
    os.environ["EXEMPLAR_TUNE_STATE_DIR"] = str(session / "state")
    return session


def operator_state_dirs(environ: Mapping[str, str]) -> list[Path]:
    """Where exemplar-tune keeps the operator's state, by ``environ`` (before :func:`isolate`
    changed it) and by the password database's home."""
    homes = [pwd.getpwuid(os.geteuid()).pw_dir, environ.get("HOME")]
    found = [Path(home, ".local", "state", STATE_NAME) for home in homes if home]
    if environ.get("XDG_STATE_HOME"):
        found.append(Path(environ["XDG_STATE_HOME"], STATE_NAME))
    if environ.get("EXEMPLAR_TUNE_STATE_DIR"):
        found.append(Path(environ["EXEMPLAR_TUNE_STATE_DIR"]))
    return list(dict.fromkeys(Path(os.path.abspath(p)) for p in found))


def remove_session_dir(session: Path) -> None:
    """Remove the session directory (only from the process that made it: a forked child
    that exits must not)."""
    if os.getpid() == _OWNER:
        shutil.rmtree(session, ignore_errors=True)


def remove_stale_sessions() -> None:
    """Remove the session directories of test sessions that are gone: those whose process
    has ended, and those of the older kind (no process id in the name) untouched for
    :data:`LEGACY_AGE_S` (a live session writes Ansible's temporary files there)."""
    temp = Path(tempfile.gettempdir())
    for path in temp.glob(f"{SESSION_PREFIX}*"):
        pid = path.name[len(SESSION_PREFIX):].partition("-")[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
    for path in temp.glob(f"{LEGACY_PREFIX}*"):
        if time.time() - _newest_mtime(path) > LEGACY_AGE_S:
            shutil.rmtree(path, ignore_errors=True)


def _newest_mtime(path: Path) -> float:
    """When ``path`` or one of its entries last changed (now, when it cannot be read)."""
    try:
        return max([path.lstat().st_mtime, *(c.lstat().st_mtime for c in path.iterdir())])
    except OSError:
        return time.time()


class OperatorState:
    """The operator's state directories as they were, to tell when a test changed them."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = roots
        self.last = self.snapshot()

    def snapshot(self) -> dict[str, Entry | None]:
        """Each root and its entries two levels deep: type, size, modification time of files
        (links not followed; a directory by its entries); a missing root is ``None``."""
        found: dict[str, Entry | None] = {}
        for root in self.roots:
            found[str(root)] = _entry(root)
            for child in _listed(root):
                found[str(child)] = _entry(child)
                for grandchild in _listed(child):
                    found[str(grandchild)] = _entry(grandchild)
        return found

    def changes(self) -> list[str]:
        """What changed since the last call (or since this was made), one line each."""
        now = self.snapshot()
        changed = [f"{path}: {_what(self.last.get(path), now.get(path))}"
                   for path in sorted(set(self.last) | set(now))
                   if self.last.get(path) != now.get(path)]
        self.last = now
        return changed


def _entry(path: Path) -> Entry | None:
    try:
        info = path.lstat()
    except OSError:
        return None
    kind = "dir" if path.is_dir() and not path.is_symlink() else (
        "link" if path.is_symlink() else "file")
    # a directory is judged by its entries: its own time changes with a file that came and
    # went (SQLite's -wal/-shm beside a ledger opened only to read it)
    return kind, info.st_size if kind == "file" else 0, 0 if kind == "dir" else info.st_mtime_ns


SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")  # there only while a reader has it open


def _listed(path: Path) -> list[Path]:
    if path.is_symlink() or not path.is_dir():
        return []
    with contextlib.suppress(OSError):
        return sorted(p for p in path.iterdir() if not p.name.endswith(SQLITE_SIDE_FILES))
    return []


def _what(before: Entry | None, after: Entry | None) -> str:
    if before is None:
        return f"created ({after[0]})" if after else "changed"
    if after is None:
        return "removed"
    return "modified"
