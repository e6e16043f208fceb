"""The user's files: inputs read bounded and as UTF-8, and ``--output`` targets that are
regular files; every problem a one-line ``UserError``."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import BinaryIO

from exemplar_tune.errors import UserError

MAX_INPUT = 64 << 20  # bytes: profiles, benchmark files, captures for diagnose
MAX_MESSAGE = 300  # characters of a message about an input (a value it holds may be huge)


def read_input(path: Path | str, what: str, limit: int = MAX_INPUT) -> str:
    """The text of ``path`` (``what`` names it in messages: "profile", "benchmark file" ...).

    Raises ``UserError`` as :func:`read_input_bytes` does, and when the file is not UTF-8.
    """
    data = read_input_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path} is not UTF-8 text (byte {exc.start}: "
                        f"{data[exc.start:exc.start + 1]!r})") from None


def read_input_bytes(path: Path | str, what: str, limit: int = MAX_INPUT) -> bytes:
    """The bytes of ``path`` (``-``: standard input); ``UserError`` (one line) when it is
    missing or unreadable, a device or socket (``/dev/zero`` never ends), or holds more than
    ``limit`` bytes (at most ``limit + 1`` are read). A pipe (``<(cat log)``) is read; a FIFO
    nobody writes to is opened without waiting and reads as empty."""
    with open_input(path, what) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise unreadable(path, what, exc) from None
    return _bounded(data, path if str(path) != "-" else "standard input", what, limit)


def open_input(path: Path | str, what: str) -> BinaryIO:
    """``path`` opened for reading bytes, checked as :func:`read_input_bytes` checks it
    (``-``: standard input, which closing leaves open); ``UserError`` (one line) when it cannot
    be. A read error later is the caller's to turn into one line (:func:`unreadable`)."""
    if str(path) == "-":
        return open(sys.stdin.buffer.fileno(), "rb", closefd=False)
    try:
        return open(path, "rb", opener=_regular_file)
    except FileNotFoundError:
        raise UserError(f"{what} {path} not found") from None
    except _NotRegular as exc:
        raise UserError(f"{what} {path} is {exc}, not a regular file (give - to read standard "
                        "input)") from None
    except OSError as exc:
        raise unreadable(path, what, exc) from None


def unreadable(path: Path | str, what: str, exc: OSError) -> UserError:
    """The one-line error for ``exc``, raised reading ``path``."""
    if isinstance(exc, IsADirectoryError):
        return UserError(f"{what} {path} is a directory, not a file")
    return UserError(f"{what} {path}: cannot read it: {exc.strerror or exc}")

def _bounded(data: bytes, path: Path | str, what: str, limit: int) -> bytes:
    if len(data) > limit:
        raise UserError(f"{what} {path} is larger than {limit >> 20} MiB: give the part that "
                        "matters (e.g. its last lines)")
    return data

class _NotRegular(OSError):
    """The path names a device or socket (the text says which)."""

def _regular_file(path: str, flags: int) -> int:
    """``os.open`` for a file or a pipe, checked on the open descriptor; ``O_NONBLOCK`` so
    that opening a FIFO nobody writes to does not wait (it then reads as empty)."""
    fd = os.open(path, flags | os.O_NONBLOCK)
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISFIFO(mode):
        os.set_blocking(fd, True)  # a directory: IsADirectoryError on read
        return fd
    os.close(fd)
    raise _NotRegular(_kind(mode))

def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")

def output_file(path: Path | str, what: str = "--output") -> Path:
    """``path`` when a report may be written there: a regular file, or a name not taken yet.

    A device, FIFO, socket or directory is refused (``UserError``): a report replaced by a
    rename would destroy such a node (``/dev/null`` as root), and writing into a FIFO would
    wait forever for a reader. Without ``--output`` the report goes to stdout instead.
    """
    try:
        mode = Path(path).stat().st_mode  # through links: a link to /dev/null is refused too
    except FileNotFoundError:
        return Path(path)
    except OSError as exc:
        raise UserError(f"{what} {path}: {exc.strerror or exc}") from None
    if stat.S_ISREG(mode):
        return Path(path)
    raise UserError(f"{what} {path} is {_kind(mode)}, not a regular file: reports are written "
                    "only to regular files (leave --output out to print to stdout)")


def one_line(text: object, limit: int = MAX_MESSAGE) -> str:
    """``text`` on one line (each run of white space one space) and at most about ``limit``
    characters: a longer one keeps its start and its end (where a schema message says what
    is wrong: "... is not of type 'string'") around ``[... N characters left out ...]``.
    A huge text is never split whole."""
    raw = str(text)
    if len(raw) <= 4 * limit:
        line = " ".join(raw.split())
        if len(line) <= limit:
            return line
    keep = max(limit - 40, 2) // 2
    head = " ".join(raw[:4 * keep].split())[:keep]
    tail = " ".join(raw[-4 * keep:].split())[-keep:]
    return f"{head} [... {len(raw) - 2 * keep} characters left out ...] {tail}"
