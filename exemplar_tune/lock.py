"""One controller at a time per set of hosts: an ``flock`` under the state directory.

``<state_dir>/locks/<sha256(target_key)[:16]>.lock`` is locked with ``LOCK_EX | LOCK_NB`` for
as long as the loop runs, and holds who took it (pid, host, since, target) for the message a
second controller prints. The kernel drops an ``flock`` when its last file descriptor closes,
so a controller that dies, even by SIGKILL, never leaves a stale lock; the file itself stays
(removing it would let two processes lock two different inodes).

The descriptor is opened close-on-exec, so ansible-runner and other children started with
``exec`` do not inherit the lock. ``flock`` is per host: on a state directory shared over NFS
it does not protect controllers on different machines.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from exemplar_tune.errors import UserError


def lock_path(state_dir: Path | str, target_key: str) -> Path:
    """Where the lock for ``target_key`` (e.g. inventory path + limit, or a sysroot) lives."""
    digest = hashlib.sha256(target_key.encode()).hexdigest()[:16]
    return Path(state_dir) / "locks" / f"{digest}.lock"


def _holder(fd: int) -> dict[str, Any]:
    """What the current holder wrote; empty when it has not written yet or wrote garbage."""
    try:
        data = json.loads(os.pread(fd, 65536, 0) or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _busy(path: Path, holder: dict[str, Any]) -> UserError:
    if "pid" in holder:
        who = (f"pid {holder['pid']} on {holder.get('host', '?')}, "
               f"since {holder.get('started', '?')}")
    else:
        who = "holder not yet recorded"
    return UserError(f"another exemplar-tune ({who}) is working on these hosts; wait for it "
                     f"or stop it, then try again (lock {path})")


@contextmanager
def hold_lock(state_dir: Path | str, target_key: str) -> Iterator[Path]:
    """Hold the lock for ``target_key`` for the ``with`` block; yield the lock file's path.

    Raises ``UserError`` naming the holder (pid, host, since when) if another process, or
    another ``hold_lock`` in this process, already holds it. Never waits.
    """
    path = lock_path(state_dir, target_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(path, _holder(fd)) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "target": target_key}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder, sort_keys=True) + "\n").encode(), 0)
        os.fsync(fd)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)  # still ours: nobody reads a departed holder
    finally:
        os.close(fd)
