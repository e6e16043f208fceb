"""Training-log families, each read into a :class:`~.steplog.Series` by its own reader.

Every family is fed every line once (:class:`StepLines`) and keeps only the records it
matched, as numbers in columns (:class:`~.steplog.Records`). They are asked most specific
first (``FAMILIES``); the first family with samples is the reading. A family recognised
without timing (``missing``) lets the later ones try, and names the reason when none finds
any.

* ``megatron``: ``iteration N/ M | ... | elapsed time per iteration (ms): X`` (``(s)`` in the
  bigscience fork). A line is the mean over ``--log-interval`` iterations (from the arguments
  dump, else the iteration numbers). Records hard-wrapped over up to 3 lines are joined.
* ``nemo``: ``train_step_timing in s: X`` (or ``=X`` in a progress bar), NeMo and Lightning;
  the step from ``global_step``; redraws of one step counted once.
* ``step_time``: ``step_time=X`` (seconds, or ms when every value says ``ms``).
* ``litgpt``: ``iter N step M: loss ..., iter time: X ms``; ``(optimizer.step)`` is kept.
* ``torchtitan``: ``step: N  loss: ...  tps: T``: time from the timestamps of consecutive
  metric lines over the steps between them; else ``local_batch_size x seq_len / tps`` when the
  config is in the log; else the ``tps`` (``wps``) series itself, a rate in tokens/s.
* ``deepspeed``: ``[Rank 0] step=N, skipped=K`` and timer lines ``E/N, SamplesPerSec=``: time
  from their timestamps; else ``CurrSamplesPerSec`` (per step) as a rate. ``SamplesPerSec`` and
  ``RunningAvgSamplesPerSec`` are running averages since the start, never step times.
* ``hf-trainer``: loss dicts ``{'loss': ..., 'train_runtime': T}``: differences of the
  cumulative runtime. Loss dicts without it carry no time; the final ``train_runtime`` /
  ``train_steps_per_second`` is one average over the run, not a series.
* ``tqdm``: progress bars ``n/N [mm:ss<...]``, with every state a carriage return overwrote:
  differences of the elapsed time (1-s resolution, used when a step takes a second or more),
  else the bar's ``it/s`` or ``s/it``, tqdm's smoothed average since the start (a rate).
* ``plain``: one number per line (ms, or s when the median is under 10).
"""

from __future__ import annotations

import ast
import math
import re
import statistics
from array import array
from collections.abc import Callable, Iterable
from dataclasses import replace
from itertools import chain
from typing import Protocol

import numpy as np

from exemplar_tune.diagnose.steplog import (
    Line,
    LowestSource,
    NoTiming,
    Record,
    Records,
    Sample,
    Samples,
    Series,
    dedupe,
    events_of,
    is_work,
    line_range,
    lines_of,
    longest_run,
    number,
    one_source,
    stamp,
    stamp_samples,
    step_of,
)

MIN_PLAIN = 10  # a column of numbers is a step-time log only when it is this long
MAX_VALUE = 1e12  # milliseconds (or a rate); anything larger is not a reading
_FLOAT = r"(?:\d+(?:\.\d*)?|\.\d+)"
_NUM = f"({_FLOAT})"
_MEG_VALUE = re.compile(r"elapsed time per iteration \((ms|s)\):\s*" + _NUM)
# A pattern that starts with a word (``iteration(?<=\biteration)``) rather than ``\b`` is
# searched for by that word, several times faster on long lines; it matches the same.
_MEG_ITER = re.compile(r"iteration(?<=\biteration)\s+(\d+)\s*/\s*\d+")
_MEG_INTERVAL = re.compile(r"\blog[_-]interval\b[\s.:=]{1,80}(\d+)")
_NEMO = re.compile(r"train_step_timing(?: in s)?\s*[:=]\s*(" + _FLOAT + r"(?:[eE][-+]?\d+)?)?")
_GLOBAL_STEP = re.compile(r"\bglobal_step\s*[:=]\s*(\d+(?:\.\d+)?(?:[eE]\+?\d+)?)")
_STEP_TIME = re.compile(r"step_time(?<=\bstep_time)\s*[=:]\s*" + _NUM + r"\s*(ms|s)?\b")
_LITGPT = re.compile(r"\biter\s+(\d+)\b[^:\n]{0,40}:.*?\biter time:\s*" + _NUM + r"\s*(ms|s)\b")
_TITAN = re.compile(r"step:(?<=\bstep:)\s*(\d+)\s+loss:")
_TITAN_RATE = re.compile(r"\b(tps|wps):\s*(\d[\d,]*(?:\.\d+)?)")
_SEQ_LEN = re.compile(r"\bseq_len\b['\"]?\s*[:=]\s*(\d+)")
_LOCAL_BATCH = re.compile(r"\blocal_batch_size\b['\"]?\s*[:=]\s*(\d+)")
_DS_STEP = re.compile(r"\[Rank \d+\] step=(\d+), skipped=\d+")
_DS_TIMER = re.compile(r"\b\d+/(\d+), (?:RunningAvgSamplesPerSec=[\d.]+, CurrSamplesPerSec="
                       + _NUM + r"|SamplesPerSec=[\d.]+)")
_HF_DICT = re.compile(r"\{'[A-Za-z_]+': [^{}\n]*\}")
_HF_HEADER = re.compile(r"\*{5} Running training \*{5}")
# (?<!\d): a count starts where its digits do; tried at every digit of a long run of them,
# each start would read the rest of the run again (quadratic)
_BAR = re.compile(r"(?<!\d)(?P<n>\d+)(?:/(?P<total>\d+|\?)|it)\s*\[(?P<elapsed>(?:\d+:)?\d+:\d\d)"
                  r"(?P<rest>[^\]]*)")
_RATE = re.compile(_NUM + r"\s*(s/it|it/s)")
_OTHER_RATE = re.compile(r"[\d.?]\s*(?!s/it|it/s)[A-Za-z]+/s\b")  # examples/s, ba/s: not steps
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PLAIN = re.compile(r"^\s*(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*$")
_MARKERS = (  # (a literal that must be there, the family's mark): the literal is the fast gate
    ("elapsed time per iteration", re.compile(r"elapsed time per iteration \((?:ms|s)\)")),
    ("train_step_timing", re.compile("train_step_timing")),
    ("step_time", re.compile(r"\bstep_time\s*[=:]\s*\d")),
    ("iter time:", re.compile(r"\biter \d+\b.{0,40}\biter time:")),
    ("loss:", re.compile(r"\bstep:\s*\d+\s+loss:")),
    ("] step=", re.compile(r"\[Rank \d+\] step=\d+, skip")),
    ("SamplesPerSec=", re.compile("SamplesPerSec=")),
    ("{'", re.compile(r"\{'(?:loss|train_runtime)': ")),
    ("Running training", _HF_HEADER),
)
_BAR_ELAPSED = re.compile(r"\[(?:\d+:)?\d+:\d\d[<,]")  # the fast gate for progress bars
_TRAINING_BAR = re.compile(r"\bloss\b|\bEpoch\b|\btrain", re.IGNORECASE)
_BAR_TIME = re.compile(r"\[(?:\d+:)?\d+:\d\d")  # a bar's elapsed time: gates _BAR
# the literals of the family marks, and of the settings readers take (interval, seq_len ...)
_LITERALS = (*(literal for literal, _ in _MARKERS), "interval", "seq_len", "local_batch_size")


def wanted(text: str, raw: str) -> bool:
    """Whether a family could use this line (cleaned ``text``, as written ``raw``): a record
    of any family, a progress bar, a number alone, a setting a reader takes (log interval,
    sequence length, batch size) or non-training work logged (:func:`~.steplog.events`).
    Lines around a Megatron record and the first line of anything else are the caller's to
    keep (:class:`~.steptime.StepReader`). Literals are tried before patterns: it is a gate,
    read once per line of the log."""
    return (any(literal in text for literal in _LITERALS)
            or ("iteration" in text and bool(_MEG_ITER.search(text)))
            or ("[" in raw and bool(_BAR_TIME.search(raw))) or bool(_PLAIN.match(text))
            or is_work(text))


def wraps(text: str) -> bool:
    """A Megatron record whose fields may go on over the next lines (hard-wrapped)."""
    return bool(_MEG_ITER.search(text)) and not text.rstrip().endswith("|")


def read_series(text: str) -> Series:
    """The first family's series with samples; ``NoTiming`` naming why when there is none."""
    log = StepLines()
    for line in lines_of(text):
        log.feed(line)
    return log.series()


class Context:
    """What any family may need beyond its own records: the log interval, sequence length and
    batch size a log states (the first of each), and the non-training work it logs."""

    def __init__(self) -> None:
        self.interval: int | None = None
        self.seq_len: int | None = None
        self.batch: int | None = None
        self.events: list[tuple[int, str]] = []

    def feed(self, line: Line) -> None:
        text = line.text
        if self.interval is None and "interval" in text:
            m = _MEG_INTERVAL.search(text)
            self.interval = step_of(m.group(1)) or None if m else None
        if self.seq_len is None and "seq_len" in text and (m := _SEQ_LEN.search(text)):
            self.seq_len = step_of(m.group(1))
        if self.batch is None and "local_batch_size" in text and (
                m := _LOCAL_BATCH.search(text)):
            self.batch = step_of(m.group(1))
        self.events += events_of(line)

    def merge(self, other: Context, line_offset: int) -> None:
        """Fold ``other``, the context of the lines after these (numbered from 1 there,
        ``line_offset`` on here): the first setting of each kind kept, the events added."""
        self.interval = self.interval if self.interval is not None else other.interval
        self.seq_len = self.seq_len if self.seq_len is not None else other.seq_len
        self.batch = self.batch if self.batch is not None else other.batch
        self.events += [(n + line_offset, why) for n, why in other.events]


class Family(Protocol):
    """A framework family's reader: fed a log's lines in order, it keeps the records it
    matched (never the lines), then reads its series (``None`` when it saw none of its own).
    ``merge`` folds the reading of the lines that follow (numbered from 1 there, the offset
    on here) into what feeding them gives (see :meth:`StepLines.merge`)."""

    def feed(self, line: Line) -> None: ...

    def series(self, context: Context) -> Series | None: ...

    def merge(self, other: Family, line_offset: int) -> None: ...


class StepLines:
    """One stream of a log's lines read by every family at once (``feed`` each line in order,
    then ``series``); what it holds grows with the records matched, not with the lines."""

    def __init__(self) -> None:
        self.context = Context()
        self.families: list[Family] = [family() for family in FAMILIES]
        self.last = 0  # the number of the last line fed

    def feed(self, line: Line) -> None:
        for reader in (self.context, *self.families):
            try:
                reader.feed(line)
            except (ValueError, OverflowError):  # a number too long to be one: not a reading
                continue  # (over 4300 digits for int(), over 2**63 for an array of steps)
        self.last = line.n

    def later(self) -> None:
        """Read lines that follow others read apart: what they read of the state those leave
        is noted (a progress bar after the last timed HF Trainer dict) for :meth:`merge`."""
        for family in self.families:
            if isinstance(family, HfTrainer):
                family.lead = array("q", [-1])

    def carried(self) -> str | None:
        """What of this reading the next lines would read that a reading of them apart
        cannot take into account, if anything: a Megatron record that may go on."""
        for family in self.families:
            if isinstance(family, Megatron) and family._held:
                return "a Megatron record at the chunk's end may go on over the next lines"
        return None

    def merge(self, other: StepLines, line_offset: int) -> None:
        """Fold ``other``, the reading of the lines after these (numbered from 1 there,
        ``line_offset`` on here, read after :meth:`later`; nothing :meth:`carried`): what
        feeding this reading those lines too gives. ``other`` is used up."""
        self.context.merge(other.context, line_offset)
        for mine, theirs in zip(self.families, other.families, strict=True):
            mine.merge(theirs, line_offset)
        if other.last:
            self.last = other.last + line_offset

    def series(self) -> Series:
        """The first family's series with samples; ``NoTiming`` naming why when none has."""
        missing: Series | None = None
        for family in self.families:
            series = family.series(self.context)
            if series is not None and series.samples:
                return _readable(series)
            missing = missing or series
        if missing is not None:
            raise NoTiming(f"step-time log ({missing.fmt}): no per-step timing found "
                           f"({missing.missing or 'no samples'})")
        raise NoTiming("no step-time lines")


def _readable(series: Series) -> Series:
    """The series without values that cannot be a reading (not finite, negative, absurdly
    large); ``NoTiming`` when none is left."""
    values = np.frombuffer(series.samples.values, dtype=np.float64)
    good = np.isfinite(values) & (values >= 0) & (values <= MAX_VALUE)
    if good.all():
        return series
    if not good.any():
        raise NoTiming(f"step-time log ({series.fmt}): all {len(values)} values out of range "
                       f"(not finite, negative or over {MAX_VALUE:g})")
    series.notes.append(f"{int((~good).sum())} value(s) out of range left out")
    series.samples = series.samples.take(np.flatnonzero(good).tolist())
    return series


def recognised(text: str) -> bool:
    """Whether the text is a training log of a known family (with timing or not)."""
    if any(literal in text and rx.search(text) for literal, rx in _MARKERS):
        return True
    if _BAR_ELAPSED.search(text):
        bars = [line for line in text.split("\n") if _BAR.search(line)]
        if len(bars) >= 3 or any(_TRAINING_BAR.search(line) for line in bars):
            return True
    return _numbers_only(text) >= MIN_PLAIN


def _numbers_only(text: str) -> int:
    """How many lines hold one number, or 0 when a line holds anything else."""
    count = 0
    for line in text.split("\n"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not _PLAIN.match(line):
            return 0
        count += 1
    return count


def _scaled(values: array, scale: float) -> array:
    """``values`` times ``scale`` (the same column when ``scale`` is 1)."""
    if scale == 1.0:
        return values
    out = array("d")
    out.frombytes((np.frombuffer(values, dtype=np.float64) * scale).tobytes())
    return out


def _tidy(records: Records, notes: list[str]) -> Records:
    """One source's records, each step once, of one run (the longest where the step count
    restarts); what was left out goes to ``notes``."""
    for tidy in (one_source, dedupe, longest_run):
        records, note = tidy(records)
        notes += [note] if note else []
    return records


# --- megatron ------------------------------------------------------------------------------

class Megatron:
    """Megatron-LM records (ms or s), one sample per log interval. A record hard-wrapped over
    up to 3 lines is joined: its line is held until a line ending in ``|`` closes it, or a
    new record, a blank line or a third line shows it does not wrap."""

    def __init__(self) -> None:
        self.records = LowestSource()
        self.units: set[str] = set()
        self._held: list[Line] = []  # a record that may wrap, and the lines after it
        self._it: re.Match[str] | None = None  # the held record's iteration

    def __getstate__(self) -> dict:
        """The state without the held record's match (it does not pickle: found again)."""
        return {**self.__dict__, "_it": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self._held:
            self._it = _MEG_ITER.search(self._held[0].text)

    def merge(self, other: Megatron, line_offset: int) -> None:
        """Fold the reading of the lines after these (nothing held here at their start)."""
        self.records.merge(other.records, line_offset)
        self.units |= other.units
        self._held = [replace(line, n=line.n + line_offset) for line in other._held]
        self._it = other._it

    def feed(self, line: Line) -> None:
        held, text = self._held, line.text
        it = _MEG_ITER.search(text) if "iteration" in text else None
        if held:
            if it or not text.strip():
                self._release()
            else:
                held.append(line)
                if text.rstrip().endswith("|"):
                    self._scan(held[0], " ".join(h.text for h in held), self._it)
                    held.clear()
                elif len(held) == 3:
                    self._release()
                return
        if it and not text.rstrip().endswith("|"):
            held.append(line)
            self._it = it
        else:
            self._scan(line, text, it)

    def _release(self) -> None:
        """The held lines read one by one: the record did not wrap."""
        for i, line in enumerate(self._held):
            self._scan(line, line.text, None if i else self._it)
        self._held.clear()

    def _scan(self, line: Line, text: str, it: re.Match[str] | None) -> None:
        m = _MEG_VALUE.search(text) if "elapsed time per iteration" in text else None
        if m:
            self.units.add(m.group(1))
            scale = 1000.0 if m.group(1) == "s" else 1.0
            self.records.add(Record(line.n, line.source, int(it.group(1)) if it else None,
                                    float(m.group(2)) * scale))

    def series(self, context: Context) -> Series | None:
        self._release()
        if not self.records:
            return None
        notes: list[str] = []
        records = _tidy(self.records, notes)
        interval = context.interval or _usual_gap(records.steps)
        what = ("one iteration" if interval == 1 else
                f"the mean over the {interval} iterations of a log interval")
        return Series("megatron", "/".join(sorted(self.units)), "logged", what,
                      Samples.columns(records.lines, records.values, records.steps, interval),
                      wallclock=True, notes=notes, events=context.events)


def _usual_gap(steps: array) -> int:
    """The usual step between logged iterations (-1: none logged); 1 when there is none."""
    logged = np.frombuffer(steps, dtype=np.int64)
    gaps = np.diff(logged[logged >= 0])
    gaps = gaps[gaps > 0]
    return max(1, int(np.median(gaps))) if len(gaps) else 1


# --- per-step timers: nemo, step_time, litgpt ----------------------------------------------

class Nemo:
    """NeMo/Lightning ``train_step_timing`` (s); ``missing`` when every field is empty."""

    def __init__(self) -> None:
        self.records = Records()

    def merge(self, other: Nemo, line_offset: int) -> None:
        self.records.merge(other.records, line_offset)

    def feed(self, line: Line) -> None:
        m = _NEMO.search(line.text) if "train_step_timing" in line.text else None
        if m:
            step = _GLOBAL_STEP.search(line.text)
            self.records.add(Record(line.n, line.source,
                                    step_of(step.group(1)) if step else None,
                                    float(m.group(1)) * 1000.0 if m.group(1) else None))

    def series(self, context: Context) -> Series | None:
        records = self.records
        if not records:
            return None
        notes: list[str] = []
        timed = _tidy(records.take(i for i, v in enumerate(records.values)
                                   if not math.isnan(v)), notes)
        series = Series("nemo", "s", "logged", "one step (train_step_timing)",
                        Samples.columns(timed.lines, timed.values, timed.steps), notes=notes)
        if not timed:
            series.missing = ("the train_step_timing field is empty" if len(records) == 1 else
                              f"all {len(records)} train_step_timing fields are empty")
        return series


class StepTime:
    """``step_time=`` values (s, or ms when every one says so)."""

    def __init__(self) -> None:
        self.records = Records()  # the unit written, if any, as the tag

    def merge(self, other: StepTime, line_offset: int) -> None:
        self.records.merge(other.records, line_offset)

    def feed(self, line: Line) -> None:
        m = _STEP_TIME.search(line.text) if "step_time" in line.text else None
        if m:
            self.records.add(Record(line.n, line.source, None, float(m.group(1)),
                                    tag=m.group(2) or ""))

    def series(self, context: Context) -> Series | None:
        if not self.records:
            return None
        in_ms = all(tag == "ms" for tag in self.records.tags)
        scale = 1.0 if in_ms else 1000.0
        return Series("step_time_ms" if in_ms else "step_time", "ms" if in_ms else "s",
                      "logged", "one step (step_time)",
                      Samples.columns(self.records.lines, _scaled(self.records.values, scale)))


class Litgpt:
    """litgpt ``iter time`` per micro-iteration, optimizer-step iterations tagged."""

    def __init__(self) -> None:
        self.records = LowestSource()
        self.units: set[str] = set()

    def merge(self, other: Litgpt, line_offset: int) -> None:
        self.records.merge(other.records, line_offset)
        self.units |= other.units

    def feed(self, line: Line) -> None:
        m = _LITGPT.search(line.text) if "iter time:" in line.text else None
        if m:
            tag = "optimizer.step" if "(optimizer.step)" in line.text else ""
            self.units.add(m.group(3))
            scale = 1000.0 if m.group(3) == "s" else 1.0
            self.records.add(Record(line.n, line.source, int(m.group(1)),
                                    float(m.group(2)) * scale, tag=tag))

    def series(self, context: Context) -> Series | None:
        if not self.records:
            return None
        notes: list[str] = []
        records = _tidy(self.records, notes)
        what = "one micro-iteration (iter time)"
        if any(records.tags):
            what += "; the log marks the iterations that end an optimizer step"
        return Series("litgpt", "/".join(sorted(self.units)), "logged", what,
                      Samples.columns(records.lines, records.values, records.steps,
                                      tags=records.tags),
                      notes=notes)


# --- timestamped metric lines: torchtitan, deepspeed ---------------------------------------

class Torchtitan:
    """torchtitan metric lines: timestamps, else tokens per step / tps, else tps as a rate."""

    def __init__(self) -> None:
        self.records = LowestSource()
        self.rate_name = "tps"
        self.rated = False  # a metric line named its rate

    def merge(self, other: Torchtitan, line_offset: int) -> None:
        self.records.merge(other.records, line_offset)
        if other.rated:
            self.rate_name, self.rated = other.rate_name, True

    def feed(self, line: Line) -> None:
        m = _TITAN.search(line.text) if "loss:" in line.text else None
        if m:
            rate = _TITAN_RATE.search(line.text)
            if rate:
                self.rate_name, self.rated = rate.group(1), True
            self.records.add(Record(line.n, line.source, int(m.group(1)),
                                    number(rate.group(2)) if rate else None, stamp(line)))

    def series(self, context: Context) -> Series | None:
        if not self.records:
            return None
        notes: list[str] = []
        records = _tidy(self.records, notes)
        if not any(math.isnan(s) for s in records.stamps):
            return _stamped("torchtitan", records, notes, context)
        return self._from_rate(records, notes, context)

    def _from_rate(self, records: Records, notes: list[str], context: Context) -> Series:
        """Step times from tokens per step (the config) and tps, else the tps series."""
        rated = [r for r in records if r.value]
        name = self.rate_name
        if context.seq_len is not None and context.batch is not None:
            tokens = context.seq_len * context.batch
            return Series("torchtitan", "s", f"local_batch_size x seq_len ({tokens} tokens) / "
                          f"{name}", "one step's mean over its log interval (from throughput)",
                          (Sample(r.line, 1000.0 * tokens / (r.value or 1.0), r.step)
                           for r in rated), notes=notes)
        unit = "tokens/s" if name == "tps" else "words/s"
        series = Series("torchtitan", unit, f"{name} (no timestamps, no seq_len and "
                        "local_batch_size in the log)", f"the throughput over a log interval "
                        f"({name}), not a step time",
                        (Sample(r.line, r.value or 0.0, r.step) for r in rated), rate=True,
                        notes=notes)
        if not rated:
            series.missing = "the metric lines carry no timestamps and no tps"
        return series


def _stamped(fmt: str, records: Records, notes: list[str], context: Context) -> Series:
    """A series of timestamp differences over the steps between consecutive records."""
    samples = stamp_samples(records)
    spans = {s.span for s in samples}
    what = ("one step (timestamp difference)" if spans == {1} else
            "the mean over the steps between two logged steps (timestamp difference / steps)")
    series = Series(fmt, "s", "timestamps", what, samples, wallclock=True, notes=notes,
                    events=context.events)
    if not samples:
        series.missing = (f"{len(records)} timestamped step line(s), no two of them with "
                          "increasing steps: a step time needs two")
    return series


class Deepspeed:
    """DeepSpeed step and timer lines: timestamps, else ``CurrSamplesPerSec`` as a rate."""

    def __init__(self) -> None:
        self.steps, self.timers = LowestSource(), LowestSource()

    def merge(self, other: Deepspeed, line_offset: int) -> None:
        self.steps.merge(other.steps, line_offset)
        self.timers.merge(other.timers, line_offset)

    def feed(self, line: Line) -> None:
        text = line.text
        if "] step=" in text and (m := _DS_STEP.search(text)):
            self.steps.add(Record(line.n, line.source, int(m.group(1)), None, stamp(line)))
        elif "SamplesPerSec=" in text and (m := _DS_TIMER.search(text)):
            current = float(m.group(2)) if m.group(2) else None
            self.timers.add(Record(line.n, line.source, int(m.group(1)), current, stamp(line)))

    def series(self, context: Context) -> Series | None:
        if not self.steps and not self.timers:
            return None
        notes: list[str] = []
        steps, timers = _tidy(self.steps, notes), _tidy(self.timers, [])
        stamped = max((steps, timers), key=lambda rs: sum(not math.isnan(s) for s in rs.stamps))
        if sum(not math.isnan(s) for s in stamped.stamps) >= 2:
            return _stamped("deepspeed", stamped, notes, context)
        current = [r for r in timers if r.value is not None]
        if current:
            return Series("deepspeed", "samples/s", "CurrSamplesPerSec", "one step's "
                          "throughput (CurrSamplesPerSec), not a step time",
                          (Sample(r.line, r.value or 0.0, r.step) for r in current), rate=True,
                          notes=notes)
        logged = sorted({s for s in (*steps.steps, *timers.steps) if s >= 0})
        return Series("deepspeed", "s", "timestamps", "", notes=notes, missing=(
            f"steps logged: {', '.join(map(str, logged[:4])) or 'none'}, fewer than two with a "
            "timestamp; SamplesPerSec is DeepSpeed's running average since the start, "
            "not a step time"))


# --- hf-trainer ----------------------------------------------------------------------------

class HfTrainer:
    """HF Trainer loss dicts: cumulative ``train_runtime`` differences, or why there are none.
    A timed dict's step is the highest progress-bar count shown after it, before the next."""

    def __init__(self) -> None:
        self.timed = Records()  # loss dicts with a train_runtime (the stamp)
        self.dicts = 0  # loss dicts, timed or not
        self.summary: dict | None = None  # the first dict with a train_runtime
        self.header = False
        self.unreadable = 0  # loss dicts whose train_runtime is not a number
        # lines read after others (StepLines.later): the highest progress-bar count before
        # the first timed dict, which belongs to the timed dict before these lines
        self.lead: array | None = None

    def merge(self, other: HfTrainer, line_offset: int) -> None:
        if self.timed and other.lead is not None:
            self.timed.steps[-1] = max(self.timed.steps[-1], other.lead[0])
        self.timed.merge(other.timed, line_offset)
        self.dicts += other.dicts
        self.summary = self.summary or other.summary
        self.header = self.header or other.header
        self.unreadable += other.unreadable

    def feed(self, line: Line) -> None:
        text = line.text
        if "{'" in text:
            for m in _HF_DICT.finditer(text):
                self._dict(line, _literal(m.group(0)))
        if not self.header and "Running training" in text:
            self.header = bool(_HF_HEADER.search(text))
        timed = self.timed
        if timed and timed.lines[-1] < line.n and "[" in text:
            for m in _BAR.finditer(text):
                timed.steps[-1] = max(timed.steps[-1], int(m.group("n")))
        elif not timed and self.lead is not None and "[" in text:
            for m in _BAR.finditer(text):
                self.lead[0] = max(self.lead[0], int(m.group("n")))

    def _dict(self, line: Line, value: dict | None) -> None:
        if value is None or ("loss" not in value and "train_runtime" not in value):
            return
        self.dicts += 1
        if "train_runtime" in value:
            self.summary = self.summary or value
            if "loss" in value:
                runtime = _seconds(value["train_runtime"])
                self.unreadable += runtime is None
                self.timed.add(Record(line.n, line.source, None, None, runtime))

    def series(self, context: Context) -> Series | None:
        if not self.dicts and not self.header:
            return None
        series = Series("hf-trainer", "s", "train_runtime differences",
                        "one logging interval (the difference of the cumulative train_runtime "
                        "of consecutive loss dicts)", wallclock=True, events=context.events)
        if self.timed:
            series.samples = Samples(_runtime_samples(self.timed, series.notes))
            if self.unreadable:
                series.notes.append(f"{self.unreadable} train_runtime value(s) not a number: "
                                    "the intervals on either side left out")
                series.missing = "no two consecutive loss dicts with a train_runtime"
            return series
        series.missing = ("loss dicts carry no time (loss, learning_rate, epoch)" if self.dicts
                          else "no loss dicts")
        if self.summary is not None:
            series.missing += (f"; train_runtime {self.summary['train_runtime']} s is one "
                               "average over the run, not a series")
        return series


def _seconds(value: object) -> float | None:
    """A logged ``train_runtime`` as a finite number, or ``None`` when it is not one."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return seconds if math.isfinite(seconds) else None


def _literal(text: str) -> dict | None:
    """A Python dict literal, or ``None`` (never evaluated as code)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _runtime_samples(timed: Records, notes: list[str]) -> list[Sample]:
    """Runtime differences, from a start at 0 s and step 0 (one step per dict where no
    progress bar shows between them)."""
    records: Iterable[Record] = timed
    if any(step < 0 for step in timed.steps):
        records = (r._replace(step=i + 1) for i, r in enumerate(timed))
        notes.append("no progress bar between loss dicts: one step per dict assumed")
    start = Record(0, timed.sources[0], 0, None, 0.0)
    return stamp_samples(chain([start], records))


# --- tqdm ----------------------------------------------------------------------------------

class Tqdm:
    """Progress bars: elapsed differences when steps take a second or more, else the rate.
    Every bar state counts, the ones a carriage return overwrote too; bars counting anything
    else than iterations (``examples/s``: dataset preparation) are not training steps."""

    def __init__(self) -> None:
        self.states = Records()  # elapsed s as the stamp; the rate shown, its unit as the tag
        self.totals: list[str | None] = []

    def merge(self, other: Tqdm, line_offset: int) -> None:
        self.states.merge(other.states, line_offset)
        self.totals += other.totals

    def feed(self, line: Line) -> None:
        if "[" not in line.raw:
            return
        parts = line.raw.split("\r") if "\r" in line.raw else [line.text]
        for part in parts:
            for m in _BAR.finditer(_ANSI.sub("", part)):
                if _OTHER_RATE.search(m.group("rest")):  # a data-preparation bar (Map: ...)
                    continue
                e = [int(x) for x in m.group("elapsed").split(":")]
                elapsed = float(e[-1] + 60 * e[-2] + (3600 * e[-3] if len(e) > 2 else 0))
                rest = m.group("rest").split(",")
                rate = _RATE.fullmatch(rest[1].strip()) if len(rest) > 1 else None
                self.states.add(Record(line.n, line.source, int(m.group("n")),
                                       float(rate.group(1)) if rate else None, elapsed,
                                       rate.group(2) if rate else ""))
                self.totals.append(m.group("total"))

    def series(self, context: Context) -> Series | None:
        if not self.states:
            return None
        notes: list[str] = []
        records = self._longest(notes)
        samples = [replace(s, tag="") for s in stamp_samples(records)]
        if samples and statistics.median(s.value for s in samples) >= 1000.0:
            return Series("tqdm", "s", "progress-bar elapsed differences (1-s resolution)",
                          "one step (or the mean over the steps between two bar states)",
                          samples, wallclock=True, notes=notes, events=context.events)
        return _bar_rates(records, len(self.states), notes)

    def _longest(self, notes: list[str]) -> Records:
        """The longest bar run: a new one starts where the count falls or the total changes."""
        steps, totals = self.states.steps, self.totals
        starts = [0] + [i for i in range(1, len(steps))
                        if totals[i] != totals[i - 1] or steps[i] < steps[i - 1]]
        runs = list(zip(starts, [*starts[1:], len(steps)], strict=True))
        first, end = max(runs, key=lambda run: len(set(steps[run[0]:run[1]])))
        best = self.states.take(range(first, end))
        if len(runs) > 1:
            notes.append(f"{len(runs)} progress bars (the count restarts): the longest, "
                         f"{line_range(best)}, read")
        one, note = one_source(best)
        notes += [note] if note else []
        return dedupe(one)[0]


def _bar_rates(records: Records, states: int, notes: list[str]) -> Series:
    """The run's ``it/s`` or ``s/it`` column: tqdm's smoothed rate, a rate series."""
    samples, unit = [], "it/s"
    for r in records:
        if r.value is not None:
            unit = r.tag
            samples.append(Sample(r.line, r.value, r.step))
    series = Series("tqdm", unit, "progress-bar rate", f"tqdm's smoothed rate ({unit}), an "
                    "average since the start, not a step time", samples, rate=True,
                    smoothed=True, notes=notes)
    if not samples:
        series.missing = (f"{states} progress-bar state(s) without a rate and without "
                          "two elapsed times to take a difference of")
    return series


# --- plain ---------------------------------------------------------------------------------

class Plain:
    """A file of one number per line (comments and blank lines aside)."""

    def __init__(self) -> None:
        self.records = Records()
        self.other = False  # a written line that is not a number

    def merge(self, other: Plain, line_offset: int) -> None:
        if not self.other:  # numbers count up to the first line that is not one
            self.records.merge(other.records, line_offset)
        self.other = self.other or other.other

    def feed(self, line: Line) -> None:
        text = line.text
        if self.other or not text.strip() or text.lstrip().startswith("#"):
            return
        m = _PLAIN.match(text)
        if m:
            self.records.add(Record(line.n, None, None, float(m.group(1))))
        else:
            self.other = True

    def series(self, context: Context) -> Series | None:
        if self.other or not self.records:
            return None
        values = self.records.values
        seconds = statistics.median(values) < 10
        scale = 1000.0 if seconds else 1.0
        return Series("plain", "s (assumed: median under 10)" if seconds else "ms", "logged",
                      "one step (one number per line)",
                      Samples.columns(self.records.lines, _scaled(values, scale)))


FAMILIES: tuple[Callable[[], Family], ...] = (
    Megatron, Nemo, StepTime, Litgpt, Torchtitan, Deepspeed, HfTrainer, Tqdm, Plain)
