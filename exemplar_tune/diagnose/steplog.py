"""What a training log says about step time: one series of samples, and how it was read.

A :class:`Series` is what a framework family's reader (:mod:`.steplog_formats`) found: the
samples, what one sample is (one iteration, the mean over a log interval, a rate), the unit
the log used, how the time was obtained (logged, timestamp differences, ...) and notes on what
was chosen or skipped. A reader that recognises its family but finds no timing says why in
``missing``. The helpers here are shared by the readers: lines with their source and raw
text, the lines a reader matched (:class:`Records`, held column by column), one rank's records
out of several, repeated steps counted once, timestamp differences.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import NamedTuple

import numpy as np

from exemplar_tune.diagnose.base import DiagnoseError
from exemplar_tune.diagnose.normalize import natural

_STAMP = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?")
_EPOCH = datetime(1970, 1, 1)
_NON_TRAINING = (  # work that lands in a wall-clock interval without being a training step
    ("evaluation", re.compile(r"validation loss at iteration|\bevaluat(?:ing|ion)\b"
                              r"|\bvalidation (?:step|loop|run)\b", re.IGNORECASE)),
    ("profiler trace dump", re.compile(r"\bprofiler traces?\b", re.IGNORECASE)),
    ("checkpoint save", re.compile(r"\bsav(?:ing|ed) (?:the )?checkpoint\b", re.IGNORECASE)),
)

_WORK_WORDS = ("valid", "evaluat", "profiler", "checkpoint")  # in lower case: gate the above


class NoTiming(DiagnoseError):
    """A step-time log whose timing cannot be read; ``str()`` is the reason, without a file."""


@dataclass(frozen=True, slots=True)
class Line:
    """One line: its number (1-based), clean text, text as given and the source it came from."""

    n: int
    text: str
    raw: str
    source: str | None


@dataclass(slots=True)
class Sample:
    """One sample: milliseconds per iteration (or a rate, in a rate series' unit)."""

    line: int
    value: float
    iteration: int | None = None  # the last iteration the sample covers
    span: int = 1  # iterations it averages over
    tag: str = ""  # what the log marks the iteration as (``optimizer.step``)
    since: int | None = None  # the line its interval starts after, where another line says


class Samples:
    """A series' samples held column by column (an array per number, as :class:`Records`):
    indexing and iterating give :class:`Sample` objects; ``None`` is held as -1."""

    __slots__ = ("iterations", "lines", "sinces", "spans", "tags", "values")

    def __init__(self, samples: Iterable[Sample] = ()) -> None:
        self.lines, self.iterations = array("q"), array("q")
        self.spans, self.sinces = array("q"), array("q")
        self.values = array("d")
        self.tags: list[str] = []
        for sample in samples:
            self.add(sample)

    def add(self, sample: Sample) -> None:
        """Append one sample."""
        self.lines.append(sample.line)
        self.values.append(sample.value)
        self.iterations.append(-1 if sample.iteration is None else sample.iteration)
        self.spans.append(sample.span)
        self.tags.append(sample.tag)
        self.sinces.append(-1 if sample.since is None else sample.since)

    @classmethod
    def columns(cls, lines: array, values: array, iterations: array | None = None,
                span: int = 1, tags: list[str] | None = None) -> Samples:
        """Samples over columns already held (a reader's :class:`Records`), shared, not
        copied: one span for all, no interval start."""
        out, n = cls(), len(lines)
        out.lines, out.values = lines, values
        out.iterations = array("q", [-1]) * n if iterations is None else iterations
        out.spans, out.sinces = array("q", [span]) * n, array("q", [-1]) * n
        out.tags = [""] * n if tags is None else tags
        return out

    def take(self, indices: Iterable[int]) -> Samples:
        """The samples at ``indices``, in that order."""
        return Samples(self[i] for i in indices)

    def shift(self, line_offset: int) -> None:
        """Move the line numbers held (``lines``, ``sinces``) ``line_offset`` on, in place."""
        _moved(self.lines, line_offset)
        _moved(self.sinces, line_offset)

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, i: int) -> Sample:
        iteration, since = self.iterations[i], self.sinces[i]
        return Sample(self.lines[i], self.values[i], None if iteration < 0 else iteration,
                      self.spans[i], self.tags[i], None if since < 0 else since)

    def __iter__(self) -> Iterator[Sample]:
        return (self[i] for i in range(len(self.lines)))


@dataclass
class Series:
    """A family's reading of a log; ``missing`` says why there are no samples. ``samples``
    may be given as any iterable of :class:`Sample`: it is held as :class:`Samples`."""

    fmt: str
    unit: str
    timing: str
    sample_is: str
    samples: Samples = field(default_factory=Samples)
    rate: bool = False  # values are rates (``unit``), not milliseconds
    smoothed: bool = False  # ... and averaged since the start (tqdm), not per interval
    wallclock: bool = False  # samples are wall time between log lines: work logged between
    notes: list[str] = field(default_factory=list)  # them (``events``) lands in them
    events: list[tuple[int, str]] = field(default_factory=list)
    missing: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.samples, Samples):
            self.samples = Samples(self.samples)


class Record(NamedTuple):
    """A log line a reader matched: its step, value and timestamp (seconds) where known."""

    line: int
    source: str | None
    step: int | None
    value: float | None
    stamp: float | None = None
    tag: str = ""


class Records:
    """The lines a reader matched, held column by column (an array per number): a few dozen
    bytes a record, however long its line. Indexing and iterating give :class:`Record`
    tuples; ``None`` is held as -1 (a step) or NaN (a value, a stamp). ``names``: the sources
    of the records added."""

    __slots__ = ("lines", "names", "sources", "stamps", "steps", "tags", "values")

    def __init__(self, records: Iterable[Record] = ()) -> None:
        self.lines, self.steps = array("q"), array("q")
        self.values, self.stamps = array("d"), array("d")
        self.sources: list[str | None] = []
        self.tags: list[str] = []
        self.names: set[str] = set()
        for record in records:
            self.add(record)

    def add(self, record: Record) -> None:
        """Append one record."""
        if record.source is not None:
            self.names.add(record.source)
        self.lines.append(record.line)
        self.sources.append(record.source)
        self.steps.append(-1 if record.step is None else record.step)
        self.values.append(math.nan if record.value is None else record.value)
        self.stamps.append(math.nan if record.stamp is None else record.stamp)
        self.tags.append(record.tag)

    def take(self, indices: Iterable[int]) -> Records:
        """The records at ``indices``, in that order."""
        return Records(self[i] for i in indices)

    def merge(self, other: Records, line_offset: int) -> None:
        """Append ``other``'s records, matched in the lines after these (numbered from 1
        there, ``line_offset`` on here): what adding each of them gives."""
        self._extend(other, range(len(other)), line_offset)

    def _extend(self, other: Records, indices: Iterable[int] | range,
                line_offset: int) -> None:
        """Append ``other``'s records at ``indices`` (a range: the columns copied whole)."""
        if isinstance(indices, range) and indices == range(len(other)):
            lines = array("q", other.lines)
            _moved(lines, line_offset)
            self.lines.extend(lines)
            self.steps.extend(other.steps)
            self.values.extend(other.values)
            self.stamps.extend(other.stamps)
            self.sources.extend(other.sources)
            self.tags.extend(other.tags)
        else:
            for i in indices:
                self.lines.append(other.lines[i] + line_offset)
                self.steps.append(other.steps[i])
                self.values.append(other.values[i])
                self.stamps.append(other.stamps[i])
                self.sources.append(other.sources[i])
                self.tags.append(other.tags[i])
        self.names |= other.names

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, i: int) -> Record:
        step, value, stamp = self.steps[i], self.values[i], self.stamps[i]
        return Record(self.lines[i], self.sources[i], None if step < 0 else step,
                      None if math.isnan(value) else value,
                      None if math.isnan(stamp) else stamp, self.tags[i])

    def __iter__(self) -> Iterator[Record]:
        return (self[i] for i in range(len(self.lines)))


class LowestSource(Records):
    """Records held as :func:`one_source` will keep them: once a second source logs, only the
    lowest source's records are held (the others count by name). A job's thousand ranks in
    one log cost one rank's records."""

    __slots__ = ("lowest",)

    def __init__(self) -> None:
        super().__init__()
        self.lowest: str | None = None

    def add(self, record: Record) -> None:
        source = record.source
        if source is not None and source not in self.names:
            lower = self.lowest is None or rank_order(source) < rank_order(self.lowest)
            self.lowest = source if lower else self.lowest
            self.names.add(source)
            if len(self.names) == 2 or (lower and len(self.names) > 2):
                kept = Records(r for r in self if r.source == self.lowest)
                self.lines, self.sources, self.steps = kept.lines, kept.sources, kept.steps
                self.values, self.stamps, self.tags = kept.values, kept.stamps, kept.tags
        if len(self.names) < 2 or source == self.lowest:
            super().add(record)

    def merge(self, other: Records, line_offset: int) -> None:
        """Fold ``other`` (a :class:`LowestSource` too), the records of the lines after these
        (numbered from 1 there, ``line_offset`` on here): what adding each of them gives. That
        is every record while at most one source logs, else the lowest source's."""
        names = self.names | other.names
        if len(names) <= 1:
            super().merge(other, line_offset)
            self.lowest = next(iter(names), None)
            return
        lowest = min(names, key=rank_order)
        if self.lowest != lowest or len(self.names) < 2:
            kept = [i for i, name in enumerate(self.sources) if name == lowest]
            mine = Records()
            mine._extend(self, kept, 0)
            self.lines, self.sources, self.steps = mine.lines, mine.sources, mine.steps
            self.values, self.stamps, self.tags = mine.values, mine.stamps, mine.tags
        theirs = other.sources
        self._extend(other, range(len(other)) if all(name == lowest for name in theirs)
                     else [i for i, name in enumerate(theirs) if name == lowest], line_offset)
        self.names, self.lowest = names, lowest


def _moved(numbers: array, line_offset: int) -> None:
    """Line numbers (``-1`` for none) ``line_offset`` on, in place."""
    if line_offset and len(numbers):
        view = np.frombuffer(numbers, dtype=np.int64)
        view[view >= 0] += line_offset


def rank_order(name: str) -> tuple[tuple, str]:
    """The order sources are taken in: natural (``rank2`` before ``rank10``), then by name."""
    return natural(name), name


def lines_of(text: str) -> list[Line]:
    """Every line with its source (``text.sources``) and raw form (``text.raw``) if known."""
    clean = text.split("\n")
    raw = getattr(text, "raw", text).split("\n")
    if len(raw) != len(clean):
        raw = clean
    sources = getattr(text, "sources", ())
    return [Line(i + 1, line, raw[i], sources[i] if i < len(sources) else None)
            for i, line in enumerate(clean)]


def stamp(line: Line) -> float | None:
    """The first ``YYYY-MM-DD HH:MM:SS[.fff]`` timestamp of the raw line, in seconds."""
    m = _STAMP.search(line.raw)
    if not m:
        return None
    try:
        when = datetime.fromisoformat(f"{m.group(1)} {m.group(2)}")
    except ValueError:
        return None
    seconds = (when - _EPOCH).total_seconds()  # naive: no time zone, no DST jump
    return seconds + (float(f"0.{m.group(3)}") if m.group(3) else 0.0)


def is_work(text: str) -> bool:
    """Whether a line may log non-training work (a gate: :func:`events` tells which)."""
    low = text.lower()
    return any(word in low for word in _WORK_WORDS)


def events_of(line: Line) -> list[tuple[int, str]]:
    """What non-training work (evaluation, profiler dump, checkpoint save) a line logs."""
    if not is_work(line.text):
        return []
    return [(line.n, why) for why, rx in _NON_TRAINING if rx.search(line.text)]


def one_source(records: Records) -> tuple[Records, str]:
    """The records of one source when several log steps (the lowest rank), and a note."""
    names = sorted(records.names, key=rank_order)
    if len(names) <= 1:
        return records, ""
    keep = records.take(i for i, name in enumerate(records.sources) if name == names[0])
    return keep, (f"{len(names)} sources log step times ({', '.join(names[:4])}"
                  f"{', ...' if len(names) > 4 else ''}): {names[0]}'s series read, "
                  "the others not merged into it")


def dedupe(records: Records) -> tuple[Records, str]:
    """Consecutive records of the same step counted once (ranks without a prefix, redraws)."""
    steps = records.steps
    if not any(0 <= b == a for a, b in pairwise(steps)):
        return records, ""
    keep = [0]
    repeats: dict[int, int] = {}
    for i in range(1, len(steps)):
        if 0 <= steps[i] == steps[keep[-1]]:
            repeats[steps[i]] = repeats.get(steps[i], 1) + 1
        else:
            keep.append(i)
    worst = max(repeats, key=lambda s: repeats[s])
    many = "1 step" if len(repeats) == 1 else f"{len(repeats)} steps"
    return records.take(keep), (f"{many} logged more than once (step {worst}: "
                                f"{repeats[worst]} times, e.g. by ranks without a prefix): "
                                "counted once")


def stamp_samples(records: Iterable[Record]) -> list[Sample]:
    """Per-iteration means from the timestamps of consecutive step records."""
    out = []
    for a, b in pairwise(records):
        if None in (a.stamp, b.stamp, a.step, b.step) or b.step <= a.step or b.stamp < a.stamp:
            continue
        span = b.step - a.step
        out.append(Sample(b.line, 1000.0 * (b.stamp - a.stamp) / span, b.step, span, b.tag,
                          a.line))
    return out


def longest_run(records: Records) -> tuple[Records, str]:
    """The longest stretch of increasing steps (a restart begins a new one), and a note."""
    starts = [0] if len(records) else []
    steps = records.steps
    for i in range(1, len(steps)):
        if 0 <= steps[i] < steps[i - 1]:
            starts.append(i)
    if len(starts) <= 1:
        return records, ""
    ends = [*starts[1:], len(steps)]
    first, end = max(zip(starts, ends, strict=True), key=lambda run: run[1] - run[0])
    best = records.take(range(first, end))
    return best, (f"{len(starts)} runs (the step count restarts): the longest, "
                  f"{line_range(best)}, read")


def line_range(records: Records) -> str:
    """``line 7`` or ``lines 7-18``: where the records lie."""
    first, last = records[0].line, records[-1].line
    return f"line {first}" if first == last else f"lines {first}-{last}"


def number(token: str) -> float:
    """A logged number: ``7,282`` (thousands separators) or ``2e+3``."""
    return float(token.replace(",", ""))


def step_of(token: str) -> int | None:
    """A logged step count (``2e+3`` is 2000), or ``None`` when it cannot be one."""
    value = number(token)
    return int(value) if math.isfinite(value) and 0 <= value < 1e15 else None
