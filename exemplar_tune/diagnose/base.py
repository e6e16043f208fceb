"""What a diagnosis returns: findings on one captured file, and the error for unusable input.

A :class:`Finding` names the layer and the check it bears on: a preflight check's id, or one of
:data:`SIGNAL_CHECKS` where only a captured signal can judge (there is no host fact). It has a
status, a one-line message, the evidence (file and line numbers, and the column when the value
came from a table) and the numbers behind it. A :class:`Report` is one file: its kind, a
summary of what was parsed and its findings.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYER_NAMES

from exemplar_tune.checks import CHECKS

PASS, WARN, FAIL, INFO = "pass", "warn", "fail", "info"
STATUSES = (PASS, WARN, FAIL, INFO)
SIGNAL_CHECKS = {  # judged from captured signals only; the other ids are preflight checks
    "fabric.nccl-validation": "nccl-tests reports no wrong results (its #wrong column)",
    "fabric.nccl-errors": "NCCL logs no failures (WARN lines, error returns, raised errors)",
    "fabric.nccl-interfaces": "NCCL's bootstrap and socket interfaces are physical NICs, not "
                              "container bridges, veth pairs, overlays or tunnels",
    "workload.step-time-stability": "Step times are steady: not bimodal, low CV and p99",
    "workload.slow-ranks": "No rank of the job logs slower steps than the others again and "
                           "again, a little slower throughout, or from some iteration on "
                           "(median and MAD across ranks, sign test, change points)",
    "workload.nccl-message-sizes": "The message sizes the workload's NCCL calls carry "
                                   "(NCCL_DEBUG_SUBSYS=COLL), to benchmark nccl-tests at",
    "fabric.nccl-kernel-time": "Share of GPU kernel time in NCCL kernels per collective, and "
                               "their mean duration (Nsight Systems)",
    "workload.kernel-launch-rate": "Kernels are not many and tiny (median under 10 us with "
                                   "1000+ per step, or launched slower than they run): "
                                   "launch-bound (Nsight Systems)",
    "workload.gpu-idle-gaps": "The GPU is not idle between kernels for long: gaps of 1 ms or "
                              "more stay under 10 % of the timeline (Nsight Systems SQLite)",
}


# signal checks whose failure means something is broken (wrong results, errors, a slow rank)
SIGNAL_HEALTH = frozenset({"fabric.nccl-validation", "fabric.nccl-errors",
                           "workload.slow-ranks"})


class DiagnoseError(ValueError):
    """A file that cannot be diagnosed (unreadable, empty, binary, unknown format); one line."""


@dataclass(frozen=True)
class Finding:
    """One judgement on a captured file, tied to a layer and a check id."""

    layer: str
    check_id: str
    status: str
    message: str
    evidence: tuple[str, ...] = ()
    values: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.layer not in LAYER_NAMES or not self.check_id.startswith(f"{self.layer}."):
            raise ValueError(f"finding {self.check_id}: bad layer {self.layer!r}")
        if self.check_id not in SIGNAL_CHECKS and all(c.id != self.check_id for c in CHECKS):
            raise ValueError(f"finding {self.check_id}: not a preflight check nor a signal check")
        if self.status not in STATUSES:
            raise ValueError(f"finding {self.check_id}: bad status {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        """The finding in JSON, with the verdict model's ``class`` (health or tuning, the
        check's own) and ``actions`` (the check's action kinds when it warns or fails)."""
        klass, actions = verdict_of(self.check_id)
        return {"layer": self.layer, "check_id": self.check_id, "status": self.status,
                "class": klass, "actions": list(actions) if self.status in (WARN, FAIL) else [],
                "message": self.message, "evidence": list(self.evidence),
                "values": dict(self.values)}


def verdict_of(check_id: str) -> tuple[str, tuple[str, ...]]:
    """``(class, action kinds)`` of a check id: a preflight check's own declaration; a signal
    check is health when it finds something broken (:data:`SIGNAL_HEALTH`), else tuning."""
    declared = next((c for c in CHECKS if c.id == check_id), None)
    if declared is not None:
        return ("health" if declared.health else "tuning"), declared.actions
    if check_id in SIGNAL_HEALTH:
        return "health", ("drain", "investigate")
    return "tuning", ("investigate",)


@dataclass(frozen=True)
class Report:
    """The diagnosis of one file."""

    source: str
    kind: str
    summary: dict[str, Any]
    findings: list[Finding]

    @property
    def status(self) -> str:
        """``fail`` or ``warn`` when any finding is, else ``pass`` (``info`` never lowers it)."""
        seen = {f.status for f in self.findings}
        return next((s for s in (FAIL, WARN) if s in seen), PASS)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "status": self.status,
                "summary": self.summary, "findings": [f.to_dict() for f in self.findings]}


class LineReader(Protocol):
    """A format read as a stream: fed every line once, in order, holding state per rank, host
    and finding (never per line), then asked for the report."""

    def feed(self, n: int, line: str, source: str | None, raw: str) -> None:
        """Line ``n`` (from 1): cleaned, where it came from (launcher prefix, file), as written."""

    def report(self, files: tuple[tuple[str, int], ...]) -> Report:
        """The report of every line fed; ``files``: each file's name and first line number."""


@dataclass(frozen=True)
class Analyzer:
    """One input format: its kind, a content sniffer and the analysis of a whole text; a
    format read as a stream also has ``reader(source, expectations)``, and its ``analyze`` is
    that reader fed every line of the text (:func:`read_all`)."""

    kind: str
    sniff: Callable[[str], bool]
    analyze: Callable[[str, str, dict[str, Any]], Report]
    reader: Callable[[str, dict[str, Any]], LineReader] | None = None
    label: str = ""  # the format in an operator's words, when ``kind`` says too little


def read_all(reader: LineReader, text: str) -> Report:
    """``reader``'s report of ``text``, every line fed (its ``sources``, ``raw`` and ``files``
    too when it is a :class:`~.normalize.CleanText`)."""
    lines = text.split("\n")
    sources = getattr(text, "sources", ())
    raw = getattr(text, "raw", text).split("\n")
    if len(raw) != len(lines):
        raw = lines
    for i, line in enumerate(lines):
        reader.feed(i + 1, line, sources[i] if i < len(sources) else None, raw[i])
    return reader.report(getattr(text, "files", ()))


KEEP_LINES = 32  # line numbers a folded occurrence keeps for its evidence


@dataclass
class Occurrences:
    """Where one thing was seen, folded: how often, the first and last line, and the first
    :data:`KEEP_LINES` line numbers (evidence cites a few); constant size however often."""

    count: int = 0
    first: int = 0
    last: int = 0
    lines: list[int] = field(default_factory=list)

    def add(self, n: int) -> None:
        self.count += 1
        self.first = self.first or n
        self.last = n
        if len(self.lines) < KEEP_LINES:
            self.lines.append(n)

    def cited(self) -> list[int]:
        """The kept line numbers and the last one."""
        return self.lines if self.last in self.lines else [*self.lines, self.last]

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "first": self.first, "last": self.last}

    def cite(self, source: str, column: str | None = None) -> str:
        """:func:`cite` of the kept lines and the last, with how many there were in all
        when some are not shown."""
        text = cite(source, self.cited(), column)
        return text if self.count <= len(self.cited()) else f"{text} ({self.count} lines)"


def finding(check_id: str, status: str, message: str, evidence: Iterable[str] = (),
            **values: Any) -> Finding:
    """A :class:`Finding` whose layer is the check id's prefix."""
    return Finding(check_id.split(".", 1)[0], check_id, status, message, tuple(evidence), values)


def cite(source: str, lines: Iterable[int], column: str | None = None, limit: int = 6) -> str:
    """``source:3-5,9 [column]``: line numbers (1-based) folded into ranges, at most ``limit``.
    Millions of lines cost a sort of 8-byte integers (an array of them is read in place)."""
    given = lines if isinstance(lines, np.ndarray | array) else list(lines)
    ordered = np.asarray(given, dtype=np.int64)
    steps = np.diff(ordered)
    if not (steps > 0).all():  # not in order already (evidence mostly is)
        ordered = np.unique(ordered)
        steps = np.diff(ordered)
    breaks = np.flatnonzero(steps != 1)[:limit]  # where a range ends and another starts
    starts = [*ordered[:1], *ordered[breaks + 1]]
    ends = [*ordered[breaks], *ordered[-1:]]
    parts = [f"{a}" if a == b else f"{a}-{b}"
             for a, b in zip(starts[:limit], ends[:limit], strict=False)]
    text = f"{source}:{','.join(parts)}" + (",..." if len(starts) > limit else "")
    return f"{text} [{column}]" if column else text


def to_float(token: str) -> float | None:
    """A number, or ``None`` for ``-``, ``N/A`` and anything else that is not one."""
    try:
        return float(token)
    except ValueError:
        return None


def numbered(text: str) -> list[tuple[int, str]]:
    """``(line_number, line)`` for every line, numbered from 1."""
    return list(enumerate(text.splitlines(), start=1))


# --- one job's chunks read apart, then merged (exemplar_tune.diagnose.parallel) -------------

def occurrences_merged(mine: Occurrences, theirs: Occurrences, line_offset: int) -> None:
    """Fold ``theirs`` into ``mine``: where the same thing was seen in the lines that follow,
    numbered from 1 there and ``line_offset`` on here. The result is what :meth:`Occurrences.
    add` gives for ``mine``'s lines then ``theirs``': the counts added, the first line kept,
    the last taken, at most :data:`KEEP_LINES` line numbers kept."""
    if not theirs.count:
        return
    mine.count += theirs.count
    mine.first = mine.first or theirs.first + line_offset
    mine.last = theirs.last + line_offset
    room = KEEP_LINES - len(mine.lines)
    if room > 0:
        mine.lines += [n + line_offset for n in theirs.lines[:room]]


def shifted_occurrences(seen: Occurrences, line_offset: int) -> Occurrences:
    """A copy of ``seen`` with its line numbers ``line_offset`` on."""
    out = Occurrences()
    occurrences_merged(out, seen, line_offset)
    return out


def merge_folded(mine: dict[Any, Occurrences], theirs: dict[Any, Occurrences],
                 line_offset: int) -> None:
    """Fold ``theirs`` into ``mine`` key by key (:func:`occurrences_merged`); keys first seen
    in ``theirs`` come after ``mine``'s, in their order, as feeding the lines in turn does."""
    for key, seen in theirs.items():
        if key in mine:
            occurrences_merged(mine[key], seen, line_offset)
        else:
            mine[key] = shifted_occurrences(seen, line_offset)


class ChunkReader(LineReader, Protocol):
    """A :class:`LineReader` whose reading of a job can be split: its files are cut into
    chunks in order, each chunk read by a reader of its own (the first as usual, the others
    after :meth:`later`), and the readers folded into the first in order (:meth:`fits`,
    :meth:`merge`), which then reports as if it had been fed every line itself. Line numbers
    are each chunk's own, from 1: :meth:`merge` moves them on by the lines before."""

    def later(self) -> None:
        """Read a chunk that is not the job's first: the state a line before it could leave
        is assumed (and, where it matters, what the chunk's lines read of it is noted)."""

    def seal(self) -> None:
        """The chunk is read: state made ready to travel (to another process) and fold."""

    def reopen(self) -> None:
        """Before this reader (the chunks so far, folded) is fed a chunk's lines itself."""

    def fits(self, other: Any) -> str | None:
        """``None`` when ``other`` (the next chunk, read after :meth:`later`) folds into this
        reader exactly; else why not (the chunk must then be fed to this reader itself)."""

    def merge(self, other: Any, line_offset: int) -> None:
        """Fold ``other``, the next chunk (it :meth:`fits`), whose line 1 is line
        ``line_offset + 1`` here."""
