"""Training-log families, each read into a :class:`~.steplog.Series` by its own reader.

Tried most specific first (``FAMILIES``); the first family with samples is the reading. A
family recognised without timing (``missing``) lets the later ones try, and names the reason
when none finds any.

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
from collections.abc import Callable
from dataclasses import replace

from exemplar_tune.diagnose.steplog import (
    Line,
    NoTiming,
    Record,
    Sample,
    Series,
    dedupe,
    events,
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
_MEG_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+")
_MEG_INTERVAL = re.compile(r"\blog[_-]interval\b[\s.:=]{1,80}(\d+)")
_NEMO = re.compile(r"train_step_timing(?: in s)?\s*[:=]\s*(" + _FLOAT + r"(?:[eE][-+]?\d+)?)?")
_GLOBAL_STEP = re.compile(r"\bglobal_step\s*[:=]\s*(\d+(?:\.\d+)?(?:[eE]\+?\d+)?)")
_STEP_TIME = re.compile(r"\bstep_time\s*[=:]\s*" + _NUM + r"\s*(ms|s)?\b")
_LITGPT = re.compile(r"\biter\s+(\d+)\b[^:\n]{0,40}:.*?\biter time:\s*" + _NUM + r"\s*(ms|s)\b")
_TITAN = re.compile(r"\bstep:\s*(\d+)\s+loss:")
_TITAN_RATE = re.compile(r"\b(tps|wps):\s*(\d[\d,]*(?:\.\d+)?)")
_SEQ_LEN = re.compile(r"\bseq_len\b['\"]?\s*[:=]\s*(\d+)")
_LOCAL_BATCH = re.compile(r"\blocal_batch_size\b['\"]?\s*[:=]\s*(\d+)")
_DS_STEP = re.compile(r"\[Rank \d+\] step=(\d+), skipped=\d+")
_DS_TIMER = re.compile(r"\b\d+/(\d+), (?:RunningAvgSamplesPerSec=[\d.]+, CurrSamplesPerSec="
                       + _NUM + r"|SamplesPerSec=[\d.]+)")
_HF_DICT = re.compile(r"\{'[A-Za-z_]+': [^{}\n]*\}")
_HF_HEADER = re.compile(r"\*{5} Running training \*{5}")
_BAR = re.compile(r"(?P<n>\d+)(?:/(?P<total>\d+|\?)|it)\s*\[(?P<elapsed>(?:\d+:)?\d+:\d\d)"
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
    return read_lines(lines_of(text))


def read_lines(lines: list[Line]) -> Series:
    """:func:`read_series` of lines already split (one source's, for instance)."""
    missing: Series | None = None
    for reader in FAMILIES:
        series = reader(lines)
        if series is not None and series.samples:
            return _readable(series)
        missing = missing or series
    if missing is not None:
        raise NoTiming(f"step-time log ({missing.fmt}): no per-step timing found "
                       f"({missing.missing or 'no samples'})")
    raise NoTiming("no step-time lines")


def _readable(series: Series) -> Series:
    """The series without values that cannot be a reading (not finite, absurdly large)."""
    keep = [s for s in series.samples if math.isfinite(s.value) and 0 <= s.value <= MAX_VALUE]
    if len(keep) < len(series.samples):
        series.notes.append(f"{len(series.samples) - len(keep)} value(s) out of range left out")
        series.samples = keep
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


def _tidy(records: list[Record], notes: list[str]) -> list[Record]:
    """One source's records, each step once, of one run (the longest where the step count
    restarts); what was left out goes to ``notes``."""
    for tidy in (one_source, dedupe, longest_run):
        records, note = tidy(records)
        notes += [note] if note else []
    return records


# --- megatron ------------------------------------------------------------------------------

def _megatron_lines(lines: list[Line]) -> list[tuple[Line, str]]:
    """Record lines, each with its hard-wrapped continuation (up to 2 lines) joined."""
    out, skip = [], 0
    for i, line in enumerate(lines):
        if i < skip:
            continue
        text = line.text
        if wraps(text):
            tail = []
            for nxt in lines[i + 1:i + 3]:
                if _MEG_ITER.search(nxt.text) or not nxt.text.strip():
                    break
                tail.append(nxt.text)
                if nxt.text.rstrip().endswith("|"):
                    text, skip = " ".join([text, *tail]), i + 1 + len(tail)
                    break
        out.append((line, text))
    return out


def read_megatron(lines: list[Line]) -> Series | None:
    """Megatron-LM records (ms or s), one sample per log interval; ``None`` without any."""
    records, units = [], set()
    for line, text in _megatron_lines(lines):
        m = _MEG_VALUE.search(text)
        if m:
            it = _MEG_ITER.search(text)
            units.add(m.group(1))
            scale = 1000.0 if m.group(1) == "s" else 1.0
            records.append(Record(line.n, line.source, int(it.group(1)) if it else None,
                                  float(m.group(2)) * scale))
    if not records:
        return None
    notes: list[str] = []
    records = _tidy(records, notes)
    interval = _log_interval(lines, [r.step for r in records if r.step is not None])
    what = ("one iteration" if interval == 1 else
            f"the mean over the {interval} iterations of a log interval")
    return Series("megatron", "/".join(sorted(units)), "logged", what,
                  [Sample(r.line, r.value or 0.0, r.step, interval) for r in records],
                  wallclock=True, notes=notes, events=events(lines))


def _log_interval(lines: list[Line], iterations: list[int]) -> int:
    """``--log-interval`` from the arguments dump, else the usual step between iterations."""
    for line in lines:
        m = _MEG_INTERVAL.search(line.text) if "interval" in line.text else None
        if m and int(m.group(1)) > 0:
            return int(m.group(1))
    gaps = [b - a for a, b in zip(iterations, iterations[1:], strict=False) if b > a]
    return max(1, int(statistics.median(gaps))) if gaps else 1


# --- per-step timers: nemo, step_time, litgpt ----------------------------------------------

def read_nemo(lines: list[Line]) -> Series | None:
    """NeMo/Lightning ``train_step_timing`` (s); ``missing`` when every field is empty."""
    records = []
    for line in lines:
        m = _NEMO.search(line.text)
        if m:
            step = _GLOBAL_STEP.search(line.text)
            records.append(Record(line.n, line.source, step_of(step.group(1)) if step else None,
                                  float(m.group(1)) * 1000.0 if m.group(1) else None))
    if not records:
        return None
    notes: list[str] = []
    timed = _tidy([r for r in records if r.value is not None], notes)
    series = Series("nemo", "s", "logged", "one step (train_step_timing)",
                    [Sample(r.line, r.value or 0.0, r.step) for r in timed], notes=notes)
    if not timed:
        series.missing = ("the train_step_timing field is empty" if len(records) == 1 else
                          f"all {len(records)} train_step_timing fields are empty")
    return series


def read_step_time(lines: list[Line]) -> Series | None:
    """``step_time=`` values (s, or ms when every one says so)."""
    found = [(line, m) for line in lines if (m := _STEP_TIME.search(line.text))]
    if not found:
        return None
    in_ms = all(m.group(2) == "ms" for _, m in found)
    scale = 1.0 if in_ms else 1000.0
    return Series("step_time_ms" if in_ms else "step_time", "ms" if in_ms else "s", "logged",
                  "one step (step_time)",
                  [Sample(line.n, float(m.group(1)) * scale) for line, m in found])


def read_litgpt(lines: list[Line]) -> Series | None:
    """litgpt ``iter time`` per micro-iteration, optimizer-step iterations tagged."""
    records, units = [], set()
    for line in lines:
        m = _LITGPT.search(line.text)
        if m:
            tag = "optimizer.step" if "(optimizer.step)" in line.text else ""
            units.add(m.group(3))
            scale = 1000.0 if m.group(3) == "s" else 1.0
            records.append(Record(line.n, line.source, int(m.group(1)),
                                  float(m.group(2)) * scale, tag=tag))
    if not records:
        return None
    notes: list[str] = []
    records = _tidy(records, notes)
    what = "one micro-iteration (iter time)"
    if any(r.tag for r in records):
        what += "; the log marks the iterations that end an optimizer step"
    return Series("litgpt", "/".join(sorted(units)), "logged", what,
                  [Sample(r.line, r.value or 0.0, r.step, tag=r.tag) for r in records],
                  notes=notes)


# --- timestamped metric lines: torchtitan, deepspeed ---------------------------------------

def read_torchtitan(lines: list[Line]) -> Series | None:
    """torchtitan metric lines: timestamps, else tokens per step / tps, else tps as a rate."""
    records, rate_name = [], "tps"
    for line in lines:
        m = _TITAN.search(line.text)
        if m:
            rate = _TITAN_RATE.search(line.text)
            rate_name = rate.group(1) if rate else rate_name
            records.append(Record(line.n, line.source, int(m.group(1)),
                                  number(rate.group(2)) if rate else None, stamp(line)))
    if not records:
        return None
    notes: list[str] = []
    records = _tidy(records, notes)
    if all(r.stamp is not None for r in records):
        return _stamped("torchtitan", records, notes, lines)
    return _titan_from_rate(records, rate_name, notes, lines)


def _stamped(fmt: str, records: list[Record], notes: list[str], lines: list[Line]) -> Series:
    """A series of timestamp differences over the steps between consecutive records."""
    samples = stamp_samples(records)
    spans = {s.span for s in samples}
    what = ("one step (timestamp difference)" if spans == {1} else
            "the mean over the steps between two logged steps (timestamp difference / steps)")
    series = Series(fmt, "s", "timestamps", what, samples, wallclock=True, notes=notes,
                    events=events(lines))
    if not samples:
        series.missing = (f"{len(records)} timestamped step line(s), no two of them with "
                          "increasing steps: a step time needs two")
    return series


def _titan_from_rate(records: list[Record], rate_name: str, notes: list[str],
                     lines: list[Line]) -> Series:
    """Step times from tokens per step (the config) and tps, else the tps series."""
    rated = [r for r in records if r.value]
    seq = next((m for line in lines if (m := _SEQ_LEN.search(line.text))), None)
    batch = next((m for line in lines if (m := _LOCAL_BATCH.search(line.text))), None)
    if seq and batch:
        tokens = int(seq.group(1)) * int(batch.group(1))
        return Series("torchtitan", "s", f"local_batch_size x seq_len ({tokens} tokens) / "
                      f"{rate_name}", "one step's mean over its log interval (from throughput)",
                      [Sample(r.line, 1000.0 * tokens / (r.value or 1.0), r.step)
                       for r in rated], notes=notes)
    unit = "tokens/s" if rate_name == "tps" else "words/s"
    series = Series("torchtitan", unit, f"{rate_name} (no timestamps, no seq_len and "
                    "local_batch_size in the log)", f"the throughput over a log interval "
                    f"({rate_name}), not a step time",
                    [Sample(r.line, r.value or 0.0, r.step) for r in rated], rate=True,
                    notes=notes)
    if not rated:
        series.missing = "the metric lines carry no timestamps and no tps"
    return series


def read_deepspeed(lines: list[Line]) -> Series | None:
    """DeepSpeed step and timer lines: timestamps, else ``CurrSamplesPerSec`` as a rate."""
    steps, timers = [], []
    for line in lines:
        if m := _DS_STEP.search(line.text):
            steps.append(Record(line.n, line.source, int(m.group(1)), None, stamp(line)))
        elif m := _DS_TIMER.search(line.text):
            current = float(m.group(2)) if m.group(2) else None
            timers.append(Record(line.n, line.source, int(m.group(1)), current, stamp(line)))
    if not steps and not timers:
        return None
    notes: list[str] = []
    steps, timers = _tidy(steps, notes), _tidy(timers, [])
    stamped = max((steps, timers), key=lambda rs: sum(r.stamp is not None for r in rs))
    if sum(r.stamp is not None for r in stamped) >= 2:
        return _stamped("deepspeed", stamped, notes, lines)
    current = [r for r in timers if r.value is not None]
    if current:
        return Series("deepspeed", "samples/s", "CurrSamplesPerSec", "one step's throughput "
                      "(CurrSamplesPerSec), not a step time",
                      [Sample(r.line, r.value or 0.0, r.step) for r in current], rate=True,
                      notes=notes)
    logged = sorted({r.step for r in steps + timers if r.step is not None})
    return Series("deepspeed", "s", "timestamps", "", notes=notes, missing=(
        f"steps logged: {', '.join(map(str, logged[:4])) or 'none'}, fewer than two with a "
        "timestamp; SamplesPerSec is DeepSpeed's running average since the start, "
        "not a step time"))


# --- hf-trainer ----------------------------------------------------------------------------

def read_hf(lines: list[Line]) -> Series | None:
    """HF Trainer loss dicts: cumulative ``train_runtime`` differences, or why there are none."""
    dicts, counts = [], []  # (line, dict); (line, progress-bar count)
    for line in lines:
        for m in _HF_DICT.finditer(line.text):
            value = _literal(m.group(0))
            if value is not None and ("loss" in value or "train_runtime" in value):
                dicts.append((line, value))
        counts += [(line.n, int(m.group("n"))) for m in _BAR.finditer(line.text)]
    if not dicts and not any(_HF_HEADER.search(line.text) for line in lines):
        return None
    timed = [(line, d) for line, d in dicts if "loss" in d and "train_runtime" in d]
    series = Series("hf-trainer", "s", "train_runtime differences",
                    "one logging interval (the difference of the cumulative train_runtime of "
                    "consecutive loss dicts)", wallclock=True, events=events(lines))
    if timed:
        series.samples = _runtime_samples(timed, counts, series.notes)
        return series
    summary = next((d for _, d in dicts if "train_runtime" in d), None)
    series.missing = ("loss dicts carry no time (loss, learning_rate, epoch)" if dicts else
                      "no loss dicts")
    if summary is not None:
        series.missing += (f"; train_runtime {summary['train_runtime']} s is one average over "
                           "the run, not a series")
    return series


def _literal(text: str) -> dict | None:
    """A Python dict literal, or ``None`` (never evaluated as code)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _runtime_samples(timed: list[tuple[Line, dict]], counts: list[tuple[int, int]],
                     notes: list[str]) -> list[Sample]:
    """Runtime differences; a dict's step is the progress count shown before the next dict."""
    ends = [line.n for line, _ in timed[1:]] + [10**12]
    records = []
    for (line, d), end in zip(timed, ends, strict=True):
        shown = [c for n, c in counts if line.n < n < end]
        records.append(Record(line.n, line.source, max(shown) if shown else None,
                              None, float(d["train_runtime"])))
    if any(r.step is None for r in records):
        records = [r._replace(step=i + 1) for i, r in enumerate(records)]
        notes.append("no progress bar between loss dicts: one step per dict assumed")
    first = records[0]
    start = Record(0, first.source, 0, None, 0.0)
    return stamp_samples([start, *records])


# --- tqdm ----------------------------------------------------------------------------------

def _bar_states(lines: list[Line]) -> list[tuple[Record, str | None]]:
    """Every progress-bar state: a record (elapsed seconds as its stamp, the text after the
    elapsed time as its tag) and the bar's total. Bars counting anything else than iterations
    (``examples/s``: dataset preparation) are not training steps and are left out."""
    out = []
    for line in lines:
        parts = line.raw.split("\r") if "\r" in line.raw else [line.text]
        for part in parts:
            for m in _BAR.finditer(_ANSI.sub("", part)):
                if _OTHER_RATE.search(m.group("rest")):  # a data-preparation bar (Map: ...)
                    continue
                e = [int(x) for x in m.group("elapsed").split(":")]
                elapsed = float(e[-1] + 60 * e[-2] + (3600 * e[-3] if len(e) > 2 else 0))
                out.append((Record(line.n, line.source, int(m.group("n")), None, elapsed,
                                   m.group("rest")), m.group("total")))
    return out


def read_tqdm(lines: list[Line]) -> Series | None:
    """Progress bars: elapsed differences when steps take a second or more, else the rate."""
    states = _bar_states(lines)
    if not states:
        return None
    notes: list[str] = []
    records = _bar_runs(states, notes)
    samples = [replace(s, tag="") for s in stamp_samples(records)]
    if samples and statistics.median(s.value for s in samples) >= 1000.0:
        return Series("tqdm", "s", "progress-bar elapsed differences (1-s resolution)",
                      "one step (or the mean over the steps between two bar states)", samples,
                      wallclock=True, notes=notes, events=events(lines))
    return _bar_rates(records, len(states), notes)


def _bar_runs(states: list[tuple[Record, str | None]], notes: list[str]) -> list[Record]:
    """The longest bar run: a new one starts where the count falls or the total changes."""
    runs: list[list[Record]] = []
    last_total: object = object()
    for record, total in states:
        if not runs or total != last_total or (record.step or 0) < (runs[-1][-1].step or 0):
            runs.append([])
        runs[-1].append(record)
        last_total = total
    best = max(runs, key=lambda run: len({r.step for r in run}))
    if len(runs) > 1:
        notes.append(f"{len(runs)} progress bars (the count restarts): the longest, "
                     f"{line_range(best)}, read")
    one, note = one_source(best)
    notes += [note] if note else []
    return dedupe(one)[0]


def _bar_rates(records: list[Record], states: int, notes: list[str]) -> Series:
    """The run's ``it/s`` or ``s/it`` column: tqdm's smoothed rate, a rate series."""
    samples, unit = [], "it/s"
    for r in records:
        parts = r.tag.split(",")
        m = _RATE.fullmatch(parts[1].strip()) if len(parts) > 1 else None
        if m:
            unit = m.group(2)
            samples.append(Sample(r.line, float(m.group(1)), r.step))
    series = Series("tqdm", unit, "progress-bar rate", f"tqdm's smoothed rate ({unit}), an "
                    "average since the start, not a step time", samples, rate=True,
                    smoothed=True, notes=notes)
    if not samples:
        series.missing = (f"{states} progress-bar state(s) without a rate and without "
                          "two elapsed times to take a difference of")
    return series


# --- plain ---------------------------------------------------------------------------------

def read_plain(lines: list[Line]) -> Series | None:
    """A file of one number per line (comments and blank lines aside); ``None`` otherwise."""
    body = [line for line in lines if line.text.strip() and not line.text.lstrip().startswith("#")]
    found = [(line, m) for line in body if (m := _PLAIN.match(line.text))]
    if not body or len(found) != len(body):
        return None
    values = [float(m.group(1)) for _, m in found]
    seconds = statistics.median(values) < 10
    scale = 1000.0 if seconds else 1.0
    return Series("plain", "s (assumed: median under 10)" if seconds else "ms", "logged",
                  "one step (one number per line)",
                  [Sample(line.n, v * scale) for (line, _), v in zip(found, values, strict=True)])


FAMILIES: tuple[Callable[[list[Line]], Series | None], ...] = (
    read_megatron, read_nemo, read_step_time, read_litgpt, read_torchtitan, read_deepspeed,
    read_hf, read_tqdm, read_plain)
