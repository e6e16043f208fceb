"""Slow ranks: which of a job's ranks log slower steps than the others, by a robust rule.

A step-time log that carries several ranks' lines (launcher prefixes name them, see
:mod:`.normalize`) is read once per rank, as :mod:`.steptime` reads one. The ranks' samples are
lined up by iteration; at every iteration that at least ``MIN_RANKS`` ranks logged, a rank is
*behind* when its time is above the median of the ranks by more than ``K_MAD`` scaled median
absolute deviations and by more than ``MIN_REL`` of the median (the second keeps ranks that
agree to a few microseconds from being called slow). A rank is *slow* when it is behind in at
least ``REPEAT`` of the iterations it logged and in at least ``MIN_BEHIND`` of them: one bad
step is a stall (the stall rule's business), a repeated one is the rank. A rank a little
slower at every iteration, within the ranks' spread each time, is slow too when over all its
iterations it is above the median more often than chance allows (a sign test at
``SIGN_ALPHA`` shared over the ranks) by a median of at least ``MIN_REL``: more iterations
then find a smaller slowdown. Every rank's times
are held in columns (:class:`RankTimes`) and compared a chunk of whole iterations at a time.

A rank can also turn slow mid-job, too late to be behind in ``REPEAT`` of its iterations: each
rank's series of excess over the ranks' median (its time / the median - 1, iteration by
iteration) is split at its change points (:mod:`.change_point`: a rank-based CUSUM test with
binary segmentation, at ``CHANGE_ALPHA`` shared over the ranks). A rank is said to have
*turned slower* from the first change after which, for at least ``MIN_STEPS`` iterations, it is
slower than the median rank and at least ``MIN_REL`` slower than its level before (medians of
its excess); the finding names the iteration with an interval, the levels before and after,
and where it came back if it did. A rank slow again and again keeps that verdict, told since
when where it turned slow mid-job.

The data cannot tell when fewer than ``MIN_RANKS`` ranks or fewer than ``MIN_STEPS`` common
iterations were logged, or when the ranks disagree so much at a typical iteration that a rank
``MAX_HIDDEN`` slower would not stand out (``K_MAD`` scaled MADs). When every rank agrees,
the finding says so and why that may hide a straggler: with synchronous collectives every rank
waits for the slowest, so a rank's step time is the job's; a slow host then shows in a
benchmark run on each host alone.
"""

from __future__ import annotations

import copy
import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from exemplar_tune.diagnose.base import INFO, KEEP_LINES, PASS, WARN, Finding, cite, finding
from exemplar_tune.diagnose.change_point import change_points
from exemplar_tune.diagnose.normalize import place
from exemplar_tune.diagnose.steplog import Line, NoTiming, Samples
from exemplar_tune.diagnose.steplog_formats import StepLines

CHECK = "workload.slow-ranks"
MIN_RANKS = 3
MIN_STEPS = 5
K_MAD = 3.5
MAD_SCALE = 1.4826  # MAD x this estimates a normal standard deviation
MIN_REL = 0.02
REPEAT = 0.5
MIN_BEHIND = 3
MAX_HIDDEN = 0.10  # a rank this much slower could hide in the ranks' disagreement: cannot tell
MAX_RANKS = 4096  # ranks compared (the first seen); each one's series is read apart
CHUNK = 1 << 16  # entries (rank x iteration) compared at a time
CHANGE_ALPHA = 0.01  # chance, over all of a job's ranks, of a change named where none was
SIGN_ALPHA = 0.01  # chance, over all of a job's ranks, of one named consistently slower wrongly


@dataclass(frozen=True)
class RankVerdict:
    """One rank: iterations compared, how many it was behind in, its median excess."""

    rank: str
    steps: int
    behind: int
    excess: float  # median relative excess over the ranks' median where behind
    lines: tuple[int, ...]


class RankTimes:
    """Every rank's step times, one entry per sample in four columns: the rank (an index into
    ``names``), the iteration (counted from 1 where the log numbers none), the time and the
    line. A few dozen bytes an entry, whatever the log wrote around it."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.ranks, self.steps = array("i"), array("q")
        self.times, self.lines = array("d"), array("q")

    def add(self, name: str, samples: Samples) -> None:
        """One rank's samples, after the ranks added before it."""
        iterations = np.frombuffer(samples.iterations, dtype=np.int64)
        counted = np.where(iterations >= 0, iterations, np.arange(1, len(samples) + 1))
        self.ranks.extend(array("i", [len(self.names)]) * len(samples))
        self.steps.frombytes(counted.tobytes())
        self.times.extend(samples.values)
        self.lines.extend(samples.lines)
        self.names.append(name)

    def __len__(self) -> int:
        return len(self.names)


class RankLines:
    """A log's lines read once per source (launcher prefix, file) as they come: each of the
    first ``MAX_RANKS`` sources has its own :class:`~.steplog_formats.StepLines`, fed an empty
    line where other sources' lines stood between two of its own (a record is never joined
    across another source's line). While every line has come from one source, that source's
    reading is the whole log's (``whole``, fed after this): it is copied when another source
    or a line without one first comes, so a log of one rank is read once."""

    def __init__(self, whole: StepLines) -> None:
        self.whole: StepLines | None = whole
        self.ranks: dict[str, StepLines] = {}
        self.solo: str | None = None  # the source of every line so far, read as ``whole``

    def feed(self, line: Line) -> None:
        if self.whole is not None:
            if line.source is not None and (line.source == self.solo or not self.whole.last):
                self.solo = line.source
                return
            if self.solo is not None:
                self.ranks[self.solo] = copy.deepcopy(self.whole)
            self.whole = None
        if line.source is None:
            return
        rank = self.ranks.get(line.source)
        if rank is None:
            if len(self.ranks) >= MAX_RANKS:
                return
            rank = self.ranks[line.source] = StepLines()
        elif line.n != rank.last + 1:
            rank.feed(Line(line.n - 1, "", "", None))
        rank.feed(line)

    def times(self) -> RankTimes:
        """Each source's own series of step times (rates and unreadable sources left out);
        none for one source: nothing to compare."""
        out = RankTimes()
        self.whole = None
        if len(self.ranks) < 2:
            return out
        for source in sorted(self.ranks):
            try:
                series = self.ranks.pop(source).series()  # its records go once read
            except NoTiming:
                continue
            if not series.rate and series.samples:
                out.add(source, series.samples)
        return out


def verdicts(times: RankTimes) -> tuple[list[RankVerdict], int, float]:
    """Per rank, the iterations it was behind in; how many iterations were compared; and the
    ranks' typical disagreement (the median over those iterations of ``MAD_SCALE`` x MAD /
    median). Worked on arrays, about :data:`CHUNK` entries (whole iterations) at a time; a
    rank that logs an iteration twice counts its last time; ranks equally behind are in the
    order given."""
    found, steps, disagreement, _ = compare_ranks(times)
    return found, steps, disagreement


def compare_ranks(times: RankTimes) -> tuple[list[RankVerdict], int, float, tuple[np.ndarray, ...]]:
    """:func:`verdicts`, and the iterations compared (in order) with the ranks' median at each:
    one pair per iteration, whatever the ranks."""
    step = np.frombuffer(times.steps, dtype=np.int64)
    at = np.argsort(step, kind="stable")  # by iteration, then rank (added in rank order)
    seen = np.zeros(len(times), dtype=np.int64)
    hits: list[tuple[np.ndarray, ...]] = []
    ratios: list[np.ndarray] = []
    levels: list[tuple[np.ndarray, ...]] = []
    start = 0
    while start < len(at):
        end = _whole_iterations(step, at, start)
        found = _compare(times, at[start:end])
        if found is not None:
            counted, ratio, hit, level = found
            seen += counted
            ratios.append(ratio)
            hits.append(hit)
            levels.append(level)
        start = end
    if not ratios:
        return [], 0, 0.0, (np.zeros(0, dtype=np.int64), np.zeros(0))
    hit_rank, excess, line = (np.concatenate(column) for column in zip(*hits, strict=True))
    behind = np.bincount(hit_rank, minlength=len(times))
    slow = np.flatnonzero(behind)
    median_excess = _medians(excess, np.searchsorted(slow, hit_rank))
    cited = np.split(line[np.argsort(hit_rank, kind="stable")], np.cumsum(behind[slow]))
    found = [RankVerdict(times.names[r], int(seen[r]), int(behind[r]), float(median_excess[i]),
                         tuple(cited[i].tolist())) for i, r in enumerate(slow)]
    spread = np.concatenate(ratios)
    table = tuple(np.concatenate(column) for column in zip(*levels, strict=True))
    return (sorted(found, key=lambda v: (-v.behind, -v.excess)), len(spread),
            float(np.median(spread)), table)


def _whole_iterations(step: np.ndarray, at: np.ndarray, start: int) -> int:
    """Where the chunk from ``start`` ends: about :data:`CHUNK` entries, at the start of an
    iteration (or the end of one longer than that)."""
    end = start + CHUNK
    if end >= len(at):
        return len(at)
    steps = step[at[start:end + 1]]
    cut = int(np.searchsorted(steps, steps[-1]))
    if cut > 0:
        return start + cut
    rest = step[at[start:]]
    return start + int(np.searchsorted(rest, rest[0], side="right"))


def _compare(times: RankTimes, at: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """One chunk of whole iterations (entries ``at``, by iteration then rank): per rank, the
    iterations compared; per iteration compared, the ranks' spread (``MAD_SCALE`` x MAD /
    median); the entries behind (rank, relative excess, line); and the iterations compared
    with the ranks' median at each. ``None``: no iteration logged by ``MIN_RANKS`` ranks."""
    rank = np.frombuffer(times.ranks, dtype=np.int32)[at]
    step = np.frombuffer(times.steps, dtype=np.int64)[at]
    last = np.ones(len(at), dtype=bool)  # a rank's last entry of an iteration
    last[:-1] = (step[1:] != step[:-1]) | (rank[1:] != rank[:-1])
    at, rank, step = at[last], rank[last], step[last]
    starts = np.flatnonzero(np.diff(step, prepend=step[0] - 1) != 0)
    sizes = np.diff(starts, append=len(step))
    keep = sizes >= MIN_RANKS
    if not keep.any():
        return None
    compared = np.repeat(keep, sizes)
    at, rank = at[compared], rank[compared]
    group = np.repeat(np.arange(int(keep.sum())), sizes[keep])
    time = np.frombuffer(times.times, dtype=np.float64)[at]
    medians = _medians(time, group)
    spreads = MAD_SCALE * _medians(np.abs(time - medians[group]), group)
    median = medians[group]
    late = np.flatnonzero((median > 0) & (time - median > np.maximum(K_MAD * spreads[group],
                                                                     MIN_REL * median)))
    ratio = np.where(medians > 0, spreads / np.where(medians > 0, medians, 1.0), 0.0)
    line = np.frombuffer(times.lines, dtype=np.int64)[at[late]]
    return (np.bincount(rank, minlength=len(times)), ratio,
            (rank[late], (time[late] - median[late]) / median[late], line),
            (step[starts[keep]], medians))


def _medians(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """The median of ``values`` in each group (``group``: 0, 1, ... with none empty), as
    ``statistics.median`` takes it: the middle value, or the mean of the two middle ones."""
    ordered = values[np.lexsort((values, group))]
    sizes = np.bincount(group)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return (ordered[starts + (sizes - 1) // 2] + ordered[starts + sizes // 2]) / 2


@dataclass(frozen=True)
class Onset:
    """A rank that turned slower mid-job: from ``iteration`` (interval ``[low, high]``, in
    iterations) its median excess over the ranks' median went from ``before`` to ``after``
    (relative to the median rank), until ``until`` where it came back (``None``: it did not);
    ``line`` is its first line at the change, ``previous`` its last before."""

    rank: str
    iteration: int
    low: int
    high: int
    before: float
    after: float
    p_value: float
    until: int | None
    line: int
    previous: int

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "iteration": self.iteration,
                "interval": [self.low, self.high], "before": round(self.before, 4),
                "after": round(self.after, 4), "until": self.until,
                "p_value": float(f"{self.p_value:.3g}")}

    def text(self) -> str:
        """``rank7 8.0% slower from iteration 600 [597, 603] (+0.1% -> +8.1% against the
        median rank)``, with ``until 800`` where it came back."""
        until = f" until {self.until}" if self.until is not None else ""
        return (f"{self.rank} {self.after - self.before:.1%} slower from iteration "
                f"{self.iteration} [{self.low}, {self.high}]{until} ({_signed(self.before)} -> "
                f"{_signed(self.after)} against the median rank)")


def onsets(times: RankTimes, table: tuple[np.ndarray, ...]) -> dict[str, Onset]:
    """Per rank, where it turned slower mid-job, if it did: its series of excess over the
    ranks' median (:func:`excesses`, ``table`` as :func:`compare_ranks` gives it) split at its
    change points
    (:func:`~.change_point.change_points`, ranks, at ``CHANGE_ALPHA`` shared over the ranks,
    each side at least ``MIN_STEPS`` iterations, levels at least ``MIN_REL`` apart). The
    onset is the first change after which the rank is slower than the median rank and at
    least ``MIN_REL`` slower than its level before; it lasts until a change brings it back
    within ``MIN_REL`` of that level. One rank's series is held at a time."""
    found: dict[str, Onset] = {}
    if len(table[0]) < 2 * MIN_STEPS:
        return found
    alpha = CHANGE_ALPHA / len(times)
    for name, step, excess, line in excesses(times, table):
        changes = change_points(excess, alpha=alpha, min_size=MIN_STEPS, min_shift=MIN_REL)
        onset = next((c for c in changes if c.after > 0 and c.after - c.before >= MIN_REL),
                     None)
        if onset is None:
            continue
        back = next((c for c in changes if c.index > onset.index
                     and c.after - onset.before < MIN_REL), None)
        found[name] = Onset(name, int(step[onset.index]), int(step[onset.low]),
                            int(step[onset.high]), onset.before, onset.after, onset.p_value,
                            None if back is None else int(step[back.index]),
                            int(line[onset.index]), int(line[onset.index - 1]))
    return found


def excesses(times: RankTimes, table: tuple[np.ndarray, ...]
             ) -> Iterator[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """Each rank's series of excess over the ranks' median, one rank at a time: its name, the
    iterations (in order, of those in ``table``: the iterations compared and the ranks'
    median at each, as :func:`compare_ranks` gives them), its ``time / median - 1`` at each and
    its line there. An iteration the rank logged twice counts its last time."""
    compared, medians = table
    rank = np.frombuffer(times.ranks, dtype=np.int32)
    bounds = np.searchsorted(rank, np.arange(len(times) + 1))  # ranks are added one by one
    for index, name in enumerate(times.names):
        part = slice(int(bounds[index]), int(bounds[index + 1]))
        step = np.frombuffer(times.steps, dtype=np.int64)[part]
        time = np.frombuffer(times.times, dtype=np.float64)[part]
        line = np.frombuffer(times.lines, dtype=np.int64)[part]
        if not (step[1:] > step[:-1]).all():  # a restart, a repeated iteration
            order = np.argsort(step, kind="stable")
            last = np.append(step[order][1:] != step[order][:-1], True)
            step, time, line = step[order][last], time[order][last], line[order][last]
        if not len(compared):
            continue
        at = np.minimum(np.searchsorted(compared, step), len(compared) - 1)
        kept = (compared[at] == step) & (medians[at] > 0) & np.isfinite(time)
        yield name, step[kept], time[kept] / medians[at[kept]] - 1.0, line[kept]


def consistently_slower(times: RankTimes, table: tuple[np.ndarray, ...],
                        named: set[str]) -> list[RankVerdict]:
    """The ranks (not in ``named``) slower than the ranks' median in more of their iterations
    than chance allows (a one-sided sign test, normal approximation, at :data:`SIGN_ALPHA`
    shared over the ranks) by a median excess of at least ``MIN_REL``: a rank a few percent
    slower at every iteration, each time within the ranks' spread and so never ``K_MAD`` MADs
    behind, is found over many iterations. ``behind`` counts its iterations above the
    median."""
    z = NormalDist().inv_cdf(1.0 - SIGN_ALPHA / len(times))
    found = []
    for name, _, excess, line in excesses(times, table):
        steps = len(excess)
        if name in named or steps < MIN_STEPS:
            continue
        above = excess > 0
        over = int(above.sum())
        median = float(np.median(excess))
        if median >= MIN_REL and (over - 0.5 - steps / 2) / (math.sqrt(steps) / 2) > z:
            found.append(RankVerdict(name, steps, over, median,
                                     tuple(line[above][:KEEP_LINES].tolist())))
    return sorted(found, key=lambda v: -v.excess)


def judge(source: str, times: RankTimes,
          files: tuple[tuple[str, int], ...] = ()) -> Finding | None:
    """The slow-ranks finding of a log with several ranks (None for one rank): the ranks
    slow again and again (``slow``, each with ``since`` where it turned slow mid-job) and the
    ranks that are not but turned slower mid-job (``became_slow``, :func:`onsets`); the
    evidence names each one's own file and lines where the log is several files joined
    (``files``, see :func:`~exemplar_tune.diagnose.normalize.join`)."""
    if len(times) < 2:
        return None
    ranks = len(times)
    if ranks < MIN_RANKS:
        return finding(CHECK, INFO, f"{ranks} ranks log step times: too few to tell a slow one "
                       f"(at least {MIN_RANKS} needed)", ranks=ranks)
    found, steps, disagreement, table = compare_ranks(times)
    if steps < MIN_STEPS:
        return finding(CHECK, INFO, f"{ranks} ranks, {steps} iterations logged by {MIN_RANKS} "
                       f"or more of them: too few to tell a slow rank (at least {MIN_STEPS} "
                       "needed)", ranks=ranks, steps=steps)
    slow = [v for v in found if v.behind >= max(MIN_BEHIND, REPEAT * v.steps)]
    slow += consistently_slower(times, table, {v.rank for v in slow})
    turned = onsets(times, table)
    named = {v.rank for v in slow}
    became = sorted((o for o in turned.values() if o.rank not in named),
                    key=lambda o: (-(o.after - o.before), o.iteration))
    values = {"ranks": ranks, "steps": steps,
              "slow": [{"rank": v.rank, "behind": v.behind, "steps": v.steps,
                        "excess": round(v.excess, 4),
                        "since": turned[v.rank].to_dict() if v.rank in turned else None}
                       for v in slow],
              "became_slow": [o.to_dict() for o in became]}
    if not slow and not became and K_MAD * disagreement > MAX_HIDDEN:
        return finding(CHECK, INFO, f"{ranks} ranks over {steps} iterations disagree by "
                       f"{disagreement:.1%} at a typical iteration: too noisy to tell a slow rank "
                       f"(one {K_MAD * disagreement:.0%} slower would not stand out)",
                       **values, disagreement=round(disagreement, 4))
    if not slow and not became:
        return finding(CHECK, PASS, f"no rank stands out over {steps} iterations of {ranks} "
                       "ranks (with synchronous collectives every rank waits for the slowest: "
                       "a slow host may still hide here; benchmark each host alone to find "
                       "it)", **values)
    parts = []
    if slow:
        shown = "; ".join(_slow_text(v, turned.get(v.rank)) for v in slow[:8]) + (
            f"; {len(slow) - 8} more" if len(slow) > 8 else "")
        parts.append(f"{len(slow)} of {ranks} ranks slower than the median rank, again and "
                     f"again: {shown}")
    if became:
        shown = "; ".join(o.text() for o in became[:8]) + (
            f"; {len(became) - 8} more" if len(became) > 8 else "")
        parts.append(f"{len(became)} {'more' if slow else f'of {ranks}'} ranks turned slower "
                     f"mid-job: {shown}")
    evidence = [*_evidence(source, slow, files)] if slow else []
    evidence += _lines(source, [(o.rank, [o.previous, o.line]) for o in became[:8]], files)
    return finding(CHECK, WARN, " | ".join(parts), evidence, **values)


def _signed(fraction: float) -> str:
    """``+1.9%``; ``+0.0%`` for what rounds to nothing, either side of it."""
    return f"{fraction if abs(fraction) >= 0.0005 else 0.0:+.1%}"


def _slow_text(verdict: RankVerdict, onset: Onset | None) -> str:
    """``node05 +4.0% in 40 of 40 iterations``, and since when where it turned slow."""
    text = f"{verdict.rank} {verdict.excess:+.1%} in {verdict.behind} of {verdict.steps} iterations"
    if onset is None:
        return text
    return f"{text} (from iteration {onset.iteration} [{onset.low}, {onset.high}])"


def _evidence(source: str, slow: list[RankVerdict], files: tuple[tuple[str, int], ...]
              ) -> list[str]:
    if not files:
        return [cite(source, [n for v in slow for n in v.lines])]
    return _lines(source, [(v.rank, list(v.lines)) for v in slow[:8]], files)


def _lines(source: str, cited: list[tuple[str, list[int]]],
           files: tuple[tuple[str, int], ...]) -> list[str]:
    """The lines of each rank cited: one citation of ``source`` per rank, the rank named after
    it, or of each rank's own file where the log is several files joined."""
    if not files:
        return [cite(source, lines, rank) for rank, lines in cited]
    out: dict[str, list[int]] = {}
    for _, lines in cited:
        for n in lines:
            name, local = place(files, n)
            out.setdefault(name, []).append(local)
    return [cite(name, found) for name, found in out.items()]
