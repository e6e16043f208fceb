"""Captures compressed the way clusters keep them (logrotate's gzip, zstd), read as a stream of
lines: recognised by their magic bytes, never by the file name, and expanded as they are read,
so a file of any size is held one line at a time.

gzip is read with Python's ``gzip`` (every member of a concatenated file); zstd with the
``zstd`` program (argv, no shell), which must be installed to read such a file.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, BinaryIO

from exemplar_tune.errors import UserError
from exemplar_tune.inputs import open_input, unreadable

GZIP = b"\x1f\x8b"
ZSTD = b"\x28\xb5\x2f\xfd"
MAX_LINE = 1 << 20  # bytes: a longer line is read as several, so no line fills memory


def capture_lines(path: Path | str, what: str) -> Iterator[bytes]:
    """The lines of ``path`` (``-``: standard input) as bytes, each with its ``\\n``, expanded
    when the file is gzip or zstd (a line longer than :data:`MAX_LINE` comes in pieces of that
    size); ``UserError`` (one line) when it cannot be opened or read, for damaged data and for
    a missing ``zstd``, raised where the stream reaches it."""
    with open_input(path, what) as handle:
        try:
            head = handle.peek(4)[:4]
            if head.startswith(GZIP):
                yield from _gunzip(handle, path, what)
            elif head.startswith(ZSTD):
                yield from _unzstd(handle, path, what)
            else:
                yield from _lines(handle)
        except OSError as exc:
            raise unreadable(path, what, exc) from None


def _lines(handle: IO[bytes]) -> Iterator[bytes]:
    read = handle.readline
    while line := read(MAX_LINE):
        yield line


def _gunzip(handle: BinaryIO, path: Path | str, what: str) -> Iterator[bytes]:
    try:
        yield from _lines(gzip.GzipFile(fileobj=handle, mode="rb"))
    except EOFError:
        raise UserError(f"{what} {path}: truncated gzip data (the file ends inside it)") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise UserError(f"{what} {path}: damaged gzip data ({exc})") from None


def _feed(source: BinaryIO, pipe: IO[bytes]) -> None:
    try:
        shutil.copyfileobj(source, pipe)
        pipe.close()
    except (BrokenPipeError, ValueError, OSError):
        pass  # zstd stopped reading (or was stopped): its exit status says why


def _unzstd(handle: BinaryIO, path: Path | str, what: str) -> Iterator[bytes]:
    try:
        proc = subprocess.Popen(["zstd", "-d", "-c", "-q"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise UserError(f"{what} {path} is zstd-compressed: install zstd (apt install zstd, "
                        "dnf install zstd) to read it") from None
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    writer = threading.Thread(target=_feed, args=(handle, proc.stdin), daemon=True)
    writer.start()
    finished = False
    try:
        yield from _lines(proc.stdout)
        finished = True
    finally:  # a reader that stops early must not leave zstd running
        if not finished:
            proc.kill()
        proc.wait()
        writer.join()
        errors = proc.stderr.read().decode(errors="replace").strip().splitlines()
        proc.stdout.close()
        proc.stderr.close()
    if proc.returncode:
        why = errors[-1] if errors else f"exit status {proc.returncode}"
        raise UserError(f"{what} {path}: damaged zstd data ({why})")
