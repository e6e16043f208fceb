"""One capture's lines, or one job's files' lines, read once as a stream and cleaned.

Each file is read line by line (expanded on the way when it is gzip or zstd:
:mod:`exemplar_tune.compressed`) and cleaned by a :class:`~.normalize.LineCleaner` decided on
the file's first :data:`FILE_WINDOW` bytes (which prefixes most lines carry, the indentation
they share). Lines are numbered across the files in order; a line's source is its file's name
(a job's files) followed by what its own prefixes say. Nothing is kept per line: only counts
per prefix kind and noise, the set of sources, and each file's first line number.

The bound is the number of bytes read (``max_bytes``), which the user can raise: a
``UserError`` names it when a job's input holds more. A long read says how far it got on stderr
every :data:`~exemplar_tune.progress.HEARTBEAT_S` seconds.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import chain

from exemplar_tune.diagnose.normalize import CleanText, LineCleaner, described
from exemplar_tune.errors import UserError
from exemplar_tune.progress import HEARTBEAT_S, say

FILE_WINDOW = 1 << 20  # bytes of a file its prefixes and indentation are decided on
CHECK_EVERY = 16 << 20  # bytes read between two looks at the clock (progress lines)
Line = tuple[int, str, "str | None", str]  # (number, cleaned, source, as written)


class LineStream:
    """``(n, line, source, raw)`` for every line of ``inputs`` (``(name, lines)`` each: a
    file's name in a job, else ``None``, and its lines as bytes or text, with or without their
    ``\\n``), in order; iterable once. ``files``, ``stripped``, ``noise`` and ``sources`` grow
    as it is read."""

    def __init__(self, inputs: Iterable[tuple[str | None, Iterable[bytes | str]]],
                 max_bytes: int, what: str = "the input") -> None:
        self.inputs = inputs
        self.max_bytes = max_bytes
        self.what = what
        self.read = 0  # bytes
        self.count = 0  # lines
        self.files: list[tuple[str, int]] = []
        self.stripped: Counter[str] = Counter()
        self.noise: Counter[str] = Counter()
        self.sources: set[str] = set()
        self._next_check = CHECK_EVERY
        self._started = self._said = time.monotonic()

    def __iter__(self) -> Iterator[Line]:
        for name, lines in self.inputs:
            if name is not None:
                self.files.append((name, self.count + 1))
            yield from self._file(name, lines)

    def _file(self, name: str | None, lines: Iterable[bytes | str]) -> Iterator[Line]:
        texts = self._texts(lines)
        window, size = [], 0
        for text in texts:
            window.append(text)
            size += len(text) + 1
            if size >= FILE_WINDOW:
                break
        cleaner = LineCleaner(window)
        try:
            for raw in chain(window, texts):
                self.count += 1
                line, own = cleaner.clean(raw)
                source = (f"{name} {own}" if own else name) if name is not None else own
                if source is not None:
                    self.sources.add(source)
                yield self.count, line, source, raw
        finally:
            self.stripped.update(cleaner.stripped)
            self.noise.update(cleaner.noise)

    def _texts(self, lines: Iterable[bytes | str]) -> Iterator[str]:
        """The lines as text without their ``\\n``, as ``str.split("\\n")`` gives them (a
        final ``\\n`` is followed by an empty line); the byte bound checked on the way."""
        ended = True
        for line in lines:
            self.read += len(line)
            if self.read > self.max_bytes:
                raise UserError(f"{self.what}: more than {size_text(self.max_bytes)} to read; "
                                "--max-input raises the bound")
            if self.read > self._next_check:
                self._heartbeat()
            text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line
            ended = text.endswith("\n")
            yield text[:-1] if ended else text
        if ended:
            yield ""

    def _heartbeat(self) -> None:
        """A progress line every :data:`~exemplar_tune.progress.HEARTBEAT_S` seconds of a
        long read (checked every :data:`CHECK_EVERY` bytes), so it never looks hung."""
        self._next_check = self.read + CHECK_EVERY
        now = time.monotonic()
        if now - self._said >= HEARTBEAT_S:
            self._said = now
            rate = self.read / (now - self._started) / (1 << 20)
            say(f"diagnose: {self.what}: {size_text(self.read)} read ({rate:.0f} MiB/s)")

    def described(self) -> dict[str, object]:
        """What a report says about the input: prefixes and noise removed, sources seen."""
        return described(self.stripped, self.noise, self.sources)

    def text(self, lines: list[Line]) -> CleanText:
        """``lines`` (read from this stream) as one :class:`~.normalize.CleanText`."""
        clean = CleanText("\n".join(line for _, line, _, _ in lines))
        clean.raw = "\n".join(raw for _, _, _, raw in lines)
        clean.sources = tuple(source for _, _, source, _ in lines)
        clean.stripped, clean.noise = dict(self.stripped), dict(self.noise)
        clean.files = tuple(self.files)
        return clean


def size_text(n: int) -> str:
    """``8 MiB``, ``1.5 GiB``, ``190 KiB``: the largest binary unit ``n`` holds one of."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.4g} {unit}"
    return f"{n} bytes"
