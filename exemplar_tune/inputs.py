"""Reading the user's input files: bounded, UTF-8, every problem a one-line ``UserError``."""

from __future__ import annotations

from pathlib import Path

from exemplar_tune.errors import UserError

MAX_INPUT = 64 << 20  # bytes: profiles, benchmark files, captures for diagnose


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
    """The bytes of ``path``; ``UserError`` (one line) when it is missing or unreadable, or
    holds more than ``limit`` bytes (at most ``limit + 1`` are read: ``/dev/zero`` too)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise UserError(f"{what} {path} not found") from None
    except IsADirectoryError:
        raise UserError(f"{what} {path} is a directory, not a file") from None
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise UserError(f"{what} {path} is larger than {limit >> 20} MiB: give the part that "
                        "matters (e.g. its last lines)")
    return data
