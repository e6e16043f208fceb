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

A job's files may be read in chunks, each by a stream of its own (:mod:`.parallel`): a chunk's
stream numbers its lines from 1 (or on from ``start_line``), and what it read is added to the
job's in order (:meth:`LineStream.tally`, :meth:`LineStream.add`), its lines numbered on.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
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
                 max_bytes: int, what: str = "the input", start_line: int = 0,
                 start_bytes: int = 0) -> None:
        self.inputs = inputs
        self.max_bytes = max_bytes
        self.what = what
        self.read = self._read_before = start_bytes  # bytes (of the job, with those before)
        self.count = self._lines_before = start_line  # lines
        self.files: list[tuple[str, int]] = []
        self.stripped: Counter[str] = Counter()
        self.noise: Counter[str] = Counter()
        self.sources: set[str] = set()
        # called instead of the progress line at each check (a chunk's stream: its bytes read)
        self.checked: Callable[[int], None] | None = None
        self._next_check = start_bytes + CHECK_EVERY
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
                raise bound_error(self.what, self.max_bytes)
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
        if self.checked is not None:
            self.checked(self.read - self._read_before)
            return
        now = time.monotonic()
        if now - self._said >= HEARTBEAT_S:
            self._said = now
            rate = (self.read - self._read_before) / (now - self._started) / (1 << 20)
            say(f"diagnose: {self.what}: {size_text(self.read)} read ({rate:.0f} MiB/s)")

    def tally(self) -> Tally:
        """What this stream read, its lines numbered from its own first (:class:`Tally`)."""
        before = self._lines_before
        return Tally(self.count - before, self.read - self._read_before,
                     [(name, first - before) for name, first in self.files],
                     Counter(self.stripped), Counter(self.noise), set(self.sources))

    def add(self, tally: Tally) -> None:
        """Count what another stream read after this one's lines (a chunk of the job): its
        files numbered on from here; its bytes added to the bound's count."""
        self.files += [(name, first + self.count) for name, first in tally.files]
        self.count += tally.lines
        self.read += tally.bytes
        self.stripped.update(tally.stripped)
        self.noise.update(tally.noise)
        self.sources |= tally.sources

    def described(self) -> dict[str, object]:
        """What a report says about the input: prefixes and noise removed (the prefixes by
        name: a line with several counts them in no set order), sources seen."""
        return described(dict(sorted(self.stripped.items())), self.noise, self.sources)

    def text(self, lines: list[Line]) -> CleanText:
        """``lines`` (read from this stream) as one :class:`~.normalize.CleanText`."""
        clean = CleanText("\n".join(line for _, line, _, _ in lines))
        clean.raw = "\n".join(raw for _, _, _, raw in lines)
        clean.sources = tuple(source for _, _, source, _ in lines)
        clean.stripped, clean.noise = dict(self.stripped), dict(self.noise)
        clean.files = tuple(self.files)
        return clean


@dataclass
class Tally:
    """What a stream read: its lines and bytes, its files with their first line (counted
    from the stream's own first), the prefixes and noise removed, the sources seen."""

    lines: int = 0
    bytes: int = 0
    files: list[tuple[str, int]] = field(default_factory=list)
    stripped: Counter[str] = field(default_factory=Counter)
    noise: Counter[str] = field(default_factory=Counter)
    sources: set[str] = field(default_factory=set)


def bound_error(what: str, max_bytes: int) -> UserError:
    """The error of an input (``what``) that holds more than ``max_bytes`` to read."""
    return UserError(f"{what}: more than {size_text(max_bytes)} to read; --max-input raises "
                     "the bound")


def size_text(n: int) -> str:
    """``8 MiB``, ``1.5 GiB``, ``190 KiB``: the largest binary unit ``n`` holds one of."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.4g} {unit}"
    return f"{n} bytes"
