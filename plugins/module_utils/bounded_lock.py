"""Exclusive ``flock`` locks that wait a bounded time and then say who holds them.

Every lock exemplar-tune takes (a host's claim directory, the controller's lock registry, the
simulated benchmark's run counter) is held only for one read-and-write. A holder that keeps it
longer is stuck (stopped, hung on a dead filesystem) or is not exemplar-tune at all, so a waiter
gives up after :func:`wait_seconds` with :class:`LockTimeout`: one line naming the holder's pid,
machine and command, read from ``/proc/locks`` (the kernel's list of held locks, by device and
inode) and ``/proc/PID/cmdline``.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time

WAIT_ENV = "EXEMPLAR_TUNE_LOCK_WAIT"
DEFAULT_WAIT = 30.0  # seconds; one read-and-write under a lock takes milliseconds
PROC_LOCKS = "/proc/locks"
SHOWN_COMMAND = 120  # characters of the holder's command line


class LockTimeout(OSError):
    """The lock stayed held for the whole wait; ``str()`` is the one-line reason."""

    def __init__(self, what: str, waited: float, holder: str) -> None:
        super().__init__(f"{what}: still locked after {waited:g} s by {holder}; nothing was "
                         "changed (if that process is stuck, stop it and try again)")
        self.strerror = str(self)


def wait_seconds() -> float:
    """How long a waiter waits: ``$EXEMPLAR_TUNE_LOCK_WAIT`` seconds when it is a positive
    number, else :data:`DEFAULT_WAIT`."""
    try:
        value = float(os.environ.get(WAIT_ENV, ""))
    except ValueError:
        return DEFAULT_WAIT
    return value if 0 < value < float("inf") else DEFAULT_WAIT


def lock_exclusive(fd: int, what: str, wait: float | None = None) -> None:
    """Take an exclusive ``flock`` on ``fd`` within ``wait`` seconds (default
    :func:`wait_seconds`); :class:`LockTimeout` naming the holder otherwise. ``what`` names the
    locked thing in the message."""
    wait = wait_seconds() if wait is None else wait
    deadline = time.monotonic() + wait
    pause = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        if time.monotonic() >= deadline:
            raise LockTimeout(what, wait, holder_of(os.fstat(fd)))
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


def holder_of(*files: os.stat_result) -> str:
    """``pid N on MACHINE ('command')`` for the process holding a lock (``flock`` or POSIX) on
    one of ``files`` (their ``os.stat`` results), or ``an unknown process`` when
    ``/proc/locks`` does not tell."""
    keys = {f"{os.major(i.st_dev):02x}:{os.minor(i.st_dev):02x}:{i.st_ino}" for i in files}
    try:
        with open(PROC_LOCKS, encoding="ascii", errors="replace") as handle:
            lines = handle.read(1 << 20).splitlines()
    except OSError:
        return "an unknown process"
    held = [fields for fields in (line.split() for line in lines)
            # "1: FLOCK  ADVISORY  WRITE 4054 00:2b:1234 0 EOF"; a waiter is "1: -> FLOCK ..."
            if len(fields) >= 6 and fields[1] != "->" and fields[5] in keys
            and fields[4] != str(os.getpid())]
    held.sort(key=lambda fields: fields[3] != "WRITE")  # a writer is who a waiter waits for
    if held:
        pid = held[0][4]
        return f"pid {pid} on {socket.gethostname()} ({command_of(pid)!r})"
    return "an unknown process"


def command_of(pid: str) -> str:
    """The command line of ``pid`` (arguments joined by spaces, shortened), or ``?``."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as handle:
            raw = handle.read(4096)
    except (OSError, ValueError):
        return "?"
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", errors="replace")
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= SHOWN_COMMAND else text[:SHOWN_COMMAND - 3] + "..."
