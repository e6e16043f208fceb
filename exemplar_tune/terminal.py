"""Text for a terminal: what came from a host, a file, a claim or the ledger is shown, never
obeyed.

Printed raw, such a value could clear the screen or move the cursor (``ESC [ ...``), write
over its line (carriage return), start a line the tool never wrote (newline), or reorder what
follows it (Unicode bidirectional controls). Two layers keep that out of every text output:

* The renderers put each such value through :func:`escape` before it joins a line: a line at
  a time (:func:`escape`, :func:`join_lines`), or a whole document before it is rendered
  (:func:`escaped`). A value never starts a line, whatever it holds.
* :func:`guarded` puts standard output and error behind a :class:`Guard` for the whole run:
  whatever is written there has every control character but newline and tab escaped
  (:func:`clean`), so nothing printed anywhere (a library's message, a line no renderer
  escaped) moves the cursor. The tool's own colours and progress bars are written beneath it
  (:func:`raw`), from text whose values were escaped.

An escape is printable (``\\x1b``, ``\\n``, ``\\u202e``): escaping twice changes nothing.
JSON needs none of this (``json.dumps`` escapes every control character itself); it is
never given escaped values.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Collection, Iterable, Iterator
from typing import Any, TextIO, TypeVar

T = TypeVar("T")
# bidirectional controls (marks, embeddings, overrides, isolates) and lone surrogates (a
# file name read with surrogateescape: unprintable in UTF-8 as they are)
_INVISIBLE = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
_UNSAFE_IN_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")  # \t, \n kept
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escape(text: object) -> str:
    """``text`` (``str()`` of anything else) as one line that only shows what it holds: every
    C0 and C1 control character, DEL, bidirectional control, line or paragraph separator and
    lone surrogate written as its escape (``\\n``, ``\\r``, ``\\t``, ``\\x1b``, ``\\u202e``);
    printable characters, of any script, as they are."""
    return _UNSAFE.sub(_visible, text if isinstance(text, str) else str(text))


def clean(text: str) -> str:
    """``text`` of several lines: as :func:`escape`, but newline and tab stay."""
    return _UNSAFE_IN_TEXT.sub(_visible, text)


def escaped(value: T, keep: Collection[str] = ()) -> T:
    """A copy of a document (dicts, lists and tuples of strings, numbers ...) with every
    string in it, keys included, put through :func:`escape`, but the values of the keys in
    ``keep`` (which the renderer escapes itself, e.g. after ``json.dumps``); for the text
    renderers of a document, never for JSON."""
    if isinstance(value, str):
        return escape(value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {escaped(k): v if k in keep else escaped(v, keep)  # type: ignore[return-value]
                for k, v in value.items()}
    if isinstance(value, list):
        return [escaped(v, keep) for v in value]  # type: ignore[return-value]
    if isinstance(value, tuple):
        return tuple(escaped(v, keep) for v in value)  # type: ignore[return-value]
    return value


def join_lines(lines: Iterable[str]) -> str:
    """``lines`` (each one line of text, without colour) escaped and joined by newlines."""
    return "\n".join(map(escape, lines))


class Guard:
    """A text stream over ``stream`` that writes everything through :func:`clean`; the rest
    (``flush``, ``isatty``, ``fileno`` ...) is ``stream``'s."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(clean(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def raw(stream: TextIO) -> TextIO:
    """The stream beneath a :class:`Guard` (``stream`` itself otherwise): only for text whose
    values were escaped and that carries the tool's own terminal codes (colours, bars)."""
    return stream.stream if isinstance(stream, Guard) else stream  # type: ignore[return-value]


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Standard output and error behind a :class:`Guard` for the ``with`` block."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (s if isinstance(s, Guard) else Guard(s) for s in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


class EscapingFormatter(logging.Formatter):
    """A log formatter whose record line is one line (:func:`escape`); a traceback, added
    after it, keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        return escape(super().formatMessage(record))
