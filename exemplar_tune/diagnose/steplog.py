"""What a training log says about step time: one series of samples, and how it was read.

A :class:`Series` is what a framework family's reader (:mod:`.steplog_formats`) found: the
samples, what one sample is (one iteration, the mean over a log interval, a rate), the unit
the log used, how the time was obtained (logged, timestamp differences, ...) and notes on what
was chosen or skipped. A reader that recognises its family but finds no timing says why in
``missing``. The helpers here are shared by the readers: lines with their source and raw
text, one rank's records out of several, repeated steps counted once, timestamp differences.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

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


@dataclass
class Series:
    """A family's reading of a log; ``missing`` says why there are no samples."""

    fmt: str
    unit: str
    timing: str
    sample_is: str
    samples: list[Sample] = field(default_factory=list)
    rate: bool = False  # values are rates (``unit``), not milliseconds
    smoothed: bool = False  # ... and averaged since the start (tqdm), not per interval
    wallclock: bool = False  # samples are wall time between log lines: work logged between
    notes: list[str] = field(default_factory=list)  # them (``events``) lands in them
    events: list[tuple[int, str]] = field(default_factory=list)
    missing: str = ""


class Record(NamedTuple):
    """A log line a reader matched: its step, value and timestamp (seconds) where known."""

    line: int
    source: str | None
    step: int | None
    value: float | None
    stamp: float | None = None
    tag: str = ""


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


def events(lines: list[Line]) -> list[tuple[int, str]]:
    """Lines that log non-training work (evaluation, profiler dump, checkpoint save)."""
    return [(ln.n, why) for ln in lines if is_work(ln.text)
            for why, rx in _NON_TRAINING if rx.search(ln.text)]


def one_source(records: list[Record]) -> tuple[list[Record], str]:
    """The records of one source when several log steps (the lowest rank), and a note."""
    names = sorted({r.source for r in records if r.source}, key=natural)
    if len(names) <= 1:
        return records, ""
    keep = [r for r in records if r.source == names[0]]
    return keep, (f"{len(names)} sources log step times ({', '.join(names[:4])}"
                  f"{', ...' if len(names) > 4 else ''}): {names[0]}'s series read, "
                  "the others not merged into it")


def dedupe(records: list[Record]) -> tuple[list[Record], str]:
    """Consecutive records of the same step counted once (ranks without a prefix, redraws)."""
    keep: list[Record] = []
    repeats: dict[int, int] = {}
    for r in records:
        if keep and r.step is not None and r.step == keep[-1].step:
            repeats[r.step] = repeats.get(r.step, 1) + 1
            continue
        keep.append(r)
    if not repeats:
        return keep, ""
    worst = max(repeats, key=lambda s: repeats[s])
    many = "1 step" if len(repeats) == 1 else f"{len(repeats)} steps"
    return keep, (f"{many} logged more than once (step {worst}: {repeats[worst]} times, "
                  "e.g. by ranks without a prefix): counted once")


def stamp_samples(records: list[Record]) -> list[Sample]:
    """Per-iteration means from the timestamps of consecutive step records."""
    out = []
    for a, b in zip(records, records[1:], strict=False):
        if None in (a.stamp, b.stamp, a.step, b.step) or b.step <= a.step or b.stamp < a.stamp:
            continue
        span = b.step - a.step
        out.append(Sample(b.line, 1000.0 * (b.stamp - a.stamp) / span, b.step, span, b.tag,
                          a.line))
    return out


def longest_run(records: list[Record]) -> tuple[list[Record], str]:
    """The longest stretch of increasing steps (a restart begins a new one), and a note."""
    runs: list[list[Record]] = []
    for r in records:
        if not runs or (r.step is not None and runs[-1][-1].step is not None
                        and r.step < runs[-1][-1].step):
            runs.append([])
        runs[-1].append(r)
    if len(runs) <= 1:
        return records, ""
    best = max(runs, key=len)
    return best, (f"{len(runs)} runs (the step count restarts): the longest, "
                  f"{line_range(best)}, read")


def line_range(records: list[Record]) -> str:
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
