"""Captures compressed the way clusters keep them (logrotate's gzip, zstd): recognised by
their magic bytes, never by the file name, and expanded in memory only up to the input limit
(a file that would expand past it is refused, never expanded).

gzip is read with zlib (every member of a concatenated file); zstd with the ``zstd`` program
(argv, no shell), which must be installed to read such a file.
"""

from __future__ import annotations

import subprocess
import threading
import zlib
from pathlib import Path
from typing import IO

from exemplar_tune.errors import UserError

GZIP = b"\x1f\x8b"
ZSTD = b"\x28\xb5\x2f\xfd"


def decompressed(data: bytes, path: Path | str, what: str, limit: int) -> bytes:
    """``data`` expanded when it is gzip or zstd, else as it is; ``UserError`` (one line)
    for damaged data, a missing ``zstd`` or more than ``limit`` bytes once expanded."""
    if data.startswith(GZIP):
        return _gunzip(data, path, what, limit)
    if data.startswith(ZSTD):
        return _unzstd(data, path, what, limit)
    return data


def _too_big(path: Path | str, what: str, limit: int) -> UserError:
    return UserError(f"{what} {path} expands to more than {limit >> 20} MiB: give the part "
                     "that matters (e.g. its last lines)")


def _gunzip(data: bytes, path: Path | str, what: str, limit: int) -> bytes:
    out = bytearray()
    rest = data
    while rest.startswith(GZIP):
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += inflate.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise UserError(f"{what} {path}: damaged gzip data ({exc})") from None
        if len(out) > limit or inflate.unconsumed_tail:
            raise _too_big(path, what, limit)
        if not inflate.eof:
            raise UserError(f"{what} {path}: truncated gzip data (the file ends inside it)")
        rest = inflate.unused_data
    return bytes(out)


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except (BrokenPipeError, ValueError):
        pass  # zstd stopped reading: its exit status says why


def _unzstd(data: bytes, path: Path | str, what: str, limit: int) -> bytes:
    try:
        proc = subprocess.Popen(["zstd", "-d", "-c", "-q"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise UserError(f"{what} {path} is zstd-compressed: install zstd (apt install zstd, "
                        "dnf install zstd) to read it") from None
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    writer = threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True)
    writer.start()
    out = proc.stdout.read(limit + 1)
    if len(out) > limit:
        proc.kill()
        proc.wait()
        raise _too_big(path, what, limit)
    errors = proc.stderr.read().decode(errors="replace").strip().splitlines()
    proc.wait()
    writer.join()
    if proc.returncode:
        why = errors[-1] if errors else f"exit status {proc.returncode}"
        raise UserError(f"{what} {path}: damaged zstd data ({why})")
    return out
