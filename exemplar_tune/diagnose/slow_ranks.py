"""Slow ranks: which of a job's ranks log slower steps than the others, by a robust rule.

A step-time log that carries several ranks' lines (launcher prefixes name them, see
:mod:`.normalize`) is read once per rank, as :mod:`.steptime` reads one. The ranks' samples are
lined up by iteration; at every iteration that at least ``MIN_RANKS`` ranks logged, a rank is
*behind* when its time is above the median of the ranks by more than ``K_MAD`` scaled median
absolute deviations and by more than ``MIN_REL`` of the median (the second keeps ranks that
agree to a few microseconds from being called slow). A rank is *slow* when it is behind in at
least ``REPEAT`` of the iterations it logged and in at least ``MIN_BEHIND`` of them: one bad
step is a stall (the stall rule's business), a repeated one is the rank.

The data cannot tell when fewer than ``MIN_RANKS`` ranks or fewer than ``MIN_STEPS`` common
iterations were logged, or when the ranks disagree so much at a typical iteration that a rank
``MAX_HIDDEN`` slower would not stand out (``K_MAD`` scaled MADs). When every rank agrees,
the finding says so and why that may hide a straggler: with synchronous collectives every rank
waits for the slowest, so a rank's step time is the job's; a slow host then shows in a
benchmark run on each host alone.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from exemplar_tune.diagnose.base import INFO, PASS, WARN, Finding, cite, finding
from exemplar_tune.diagnose.normalize import place
from exemplar_tune.diagnose.steplog import Line, NoTiming, Series
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


@dataclass(frozen=True)
class RankVerdict:
    """One rank: iterations compared, how many it was behind in, its median excess."""

    rank: str
    steps: int
    behind: int
    excess: float  # median relative excess over the ranks' median where behind
    lines: tuple[int, ...]


class RankLines:
    """A log's lines read once per source (launcher prefix, file) as they come: each of the
    first ``MAX_RANKS`` sources has its own :class:`~.steplog_formats.StepLines`, fed an empty
    line where other sources' lines stood between two of its own (a record is never joined
    across another source's line)."""

    def __init__(self) -> None:
        self.ranks: dict[str, StepLines] = {}

    def feed(self, line: Line) -> None:
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

    def series(self) -> dict[str, Series]:
        """Each source's own series of step times (rates and unreadable sources left out);
        none for one source: nothing to compare."""
        if len(self.ranks) < 2:
            return {}
        out = {}
        for source in sorted(self.ranks):
            try:
                series = self.ranks[source].series()
            except NoTiming:
                continue
            if not series.rate and series.samples:
                out[source] = series
        return out


def verdicts(series: dict[str, Series]) -> tuple[list[RankVerdict], int, float]:
    """Per rank, the iterations it was behind in; how many iterations were compared; and the
    ranks' typical disagreement (the median over those iterations of ``MAD_SCALE`` x MAD /
    median)."""
    by_step: dict[int, dict[str, tuple[float, int]]] = {}
    for rank, one in series.items():
        for index, sample in enumerate(one.samples):
            step = sample.iteration if sample.iteration is not None else index + 1
            by_step.setdefault(step, {})[rank] = (sample.value, sample.line)
    compared = {s: v for s, v in by_step.items() if len(v) >= MIN_RANKS}
    seen: dict[str, int] = {}
    behind: dict[str, list[tuple[float, int]]] = {}
    spreads = []
    for values in compared.values():
        times = [t for t, _ in values.values()]
        median = statistics.median(times)
        spread = MAD_SCALE * statistics.median(abs(t - median) for t in times)
        spreads.append(spread / median if median > 0 else 0.0)
        for rank, (time, line) in values.items():
            seen[rank] = seen.get(rank, 0) + 1
            if median > 0 and time - median > max(K_MAD * spread, MIN_REL * median):
                behind.setdefault(rank, []).append(((time - median) / median, line))
    found = [RankVerdict(rank, seen[rank], len(hits), statistics.median(e for e, _ in hits),
                         tuple(line for _, line in hits))
             for rank, hits in behind.items()]
    return (sorted(found, key=lambda v: (-v.behind, -v.excess)), len(compared),
            statistics.median(spreads) if spreads else 0.0)


def judge(source: str, series: dict[str, Series],
          files: tuple[tuple[str, int], ...] = ()) -> Finding | None:
    """The slow-ranks finding of a log with several ranks (None for one rank); the evidence
    names each slow rank's own file and lines where the log is several files joined
    (``files``, see :func:`~exemplar_tune.diagnose.normalize.join`)."""
    if len(series) < 2:
        return None
    ranks = len(series)
    if ranks < MIN_RANKS:
        return finding(CHECK, INFO, f"{ranks} ranks log step times: too few to tell a slow one "
                       f"(at least {MIN_RANKS} needed)", ranks=ranks)
    found, steps, disagreement = verdicts(series)
    if steps < MIN_STEPS:
        return finding(CHECK, INFO, f"{ranks} ranks, {steps} iterations logged by {MIN_RANKS} "
                       f"or more of them: too few to tell a slow rank (at least {MIN_STEPS} "
                       "needed)", ranks=ranks, steps=steps)
    slow = [v for v in found if v.behind >= max(MIN_BEHIND, REPEAT * v.steps)]
    values = {"ranks": ranks, "steps": steps,
              "slow": [{"rank": v.rank, "behind": v.behind, "steps": v.steps,
                        "excess": round(v.excess, 4)} for v in slow]}
    if not slow and K_MAD * disagreement > MAX_HIDDEN:
        return finding(CHECK, INFO, f"{ranks} ranks over {steps} iterations disagree by "
                       f"{disagreement:.1%} at a typical iteration: too noisy to tell a slow rank "
                       f"(one {K_MAD * disagreement:.0%} slower would not stand out)",
                       **values, disagreement=round(disagreement, 4))
    if not slow:
        return finding(CHECK, PASS, f"no rank stands out over {steps} iterations of {ranks} "
                       "ranks (with synchronous collectives every rank waits for the slowest: "
                       "a slow host may still hide here; benchmark each host alone to find "
                       "it)", **values)
    shown = "; ".join(f"{v.rank} {v.excess:+.1%} in {v.behind} of {v.steps} iterations"
                      for v in slow[:8]) + (f"; {len(slow) - 8} more" if len(slow) > 8 else "")
    return finding(CHECK, WARN, f"{len(slow)} of {ranks} ranks slower than the median rank, "
                   f"again and again: {shown}", _evidence(source, slow, files), **values)


def _evidence(source: str, slow: list[RankVerdict], files: tuple[tuple[str, int], ...]
              ) -> list[str]:
    if not files:
        return [cite(source, [n for v in slow for n in v.lines])]
    lines: dict[str, list[int]] = {}
    for verdict in slow[:8]:
        for n in verdict.lines:
            name, local = place(files, n)
            lines.setdefault(name, []).append(local)
    return [cite(name, found) for name, found in lines.items()]
