"""NCCL COLL debug lines (``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL``): the workload's message sizes.

NCCL prints one INFO line per collective or point-to-point call from ``ncclEnqueueCheck`` in
``NVIDIA/nccl:src/enqueue.cc``, with the same format from 2.4 to 2.30::

    <host>:<pid>:<tid> [<cudaDev>] NCCL INFO AllReduce: opCount 1a sendbuff 0x.. recvbuff 0x..
        count 262144 datatype 7 op 0 root 0 comm 0x.. [nranks=16] stream 0x..

(one line; ``count`` is ``%zi`` up to 2.21 and ``%zu`` from 2.22, ``opCount`` is hexadecimal).
The name is ``ncclFuncToString`` / the ``opName`` set in ``src/collectives.cc`` (in
``src/collectives/*.cc`` before 2.19): AllReduce, AllGather, ReduceScatter, Broadcast, Reduce,
Send, Recv, and from 2.28 AlltoAll, Gather, Scatter. RCCL (ROCm) prints the same line with
``acc <ptr>`` before ``count`` and ``task <n> globalrank <n>`` at the end; ``globalrank`` gives
the rank. ``datatype`` is ``ncclDataType_t`` (``src/nccl.h.in``): int8 0, uint8 1, int32 2,
uint32 3, int64 4, uint64 5, float16 6, float32 7, float64 8, bfloat16 9, and from 2.24
float8e4m3 10, float8e5m2 11. A line with another datatype number is skipped and counted.

Contract: :func:`parse_coll_calls` returns one :class:`CollCall` per such line; anything else
(other INFO lines, launcher noise) is ignored. Launcher prefixes and terminal noise before
the line are removed by :func:`~exemplar_tune.diagnose.normalize.clean_line`. ``rank`` is the
global rank when the line (``globalrank``) or the launcher (srun, OpenMPI) says it, else ``None``.

``bytes`` is the size as nccl-tests' ``size`` column counts it (``max(send, recv)`` bytes, see
``NVIDIA/nccl-tests:src/*.cu`` ``*GetCollByteCount``): ``count * typesize`` for all_reduce,
broadcast, reduce, send and recv; ``count * nranks * typesize`` for all_gather, reduce_scatter,
alltoall, gather and scatter, whose ``count`` is per rank (``None`` when the line lacks
``[nranks=]``).

Counting (:class:`CollCounter`, fed one line at a time): every rank of a communicator logs
the same call, each with its own ``comm`` pointer, so lines are grouped by emitter (host, pid,
device, rank, comm). A call is the tuple (collective, opCount, nranks, count, datatype, root);
it is counted as often as the emitter that logged it most often in one run of its opCount did,
so N ranks logging one op count once, while repeats within one rank (calls of one group share
an opCount; nranks=1 communicators never advance it) all count. Communicators of equal size
that issue the same op at the same opCount (parallel tensor-parallel groups) therefore count
once: the histogram is one group's view. The counter holds one entry per emitter and per
call of the last :data:`MAX_OPS` calls; a call logged again after that many others (ranks'
files read one after the other, each longer than that) is counted again, and the summary says
how many calls were forgotten so.

A job's files may be read in chunks, each by a counter of its own, and the counters folded
in order (:meth:`CollCounter.merge`): a chunk's calls already counted before it count only
where the chunk logged them more often. That is exact when no call was forgotten on the way
(the calls of the chunks together fit the window) and no emitter's run of one opCount goes on
from one chunk into the next; otherwise :meth:`CollCounter.fits` says why, and the chunk is
counted after the ones before it instead.
"""

from __future__ import annotations

import re
import string
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from exemplar_tune.diagnose.base import Occurrences, merge_folded, occurrences_merged
from exemplar_tune.diagnose.normalize import clean_line

MAX_OPS = 1 << 17  # calls matched across ranks at once (see the module docstring)
MERGE_CALLS = 1 << 18  # calls counted a later chunk notes for its merge (CollCounter.later)

DATATYPES = {  # ncclDataType_t number: (name, bytes per element)
    0: ("int8", 1), 1: ("uint8", 1), 2: ("int32", 4), 3: ("uint32", 4), 4: ("int64", 8),
    5: ("uint64", 8), 6: ("float16", 2), 7: ("float32", 4), 8: ("float64", 8),
    9: ("bfloat16", 2), 10: ("float8e4m3", 1), 11: ("float8e5m2", 1),
}
COLLECTIVES = {  # NCCL opName: nccl-tests name
    "AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast", "Reduce": "reduce", "AlltoAll": "alltoall", "Send": "send",
    "Recv": "recv", "Gather": "gather", "Scatter": "scatter",
}
PER_RANK_COUNT = frozenset({"all_gather", "reduce_scatter", "alltoall", "gather", "scatter"})

_CALL = re.compile(
    r"(?:(?:(?P<host>[^\s:\[\]()]+):(?P<pid>\d+):\d+ )?\[(?P<dev>\d+)\] NCCL INFO )?"
    r"\b(?P<name>[A-Z][A-Za-z]+): opCount (?P<opcount>[0-9a-fA-F]+) "
    r".*?\bcount (?P<count>\d+) datatype (?P<dtype>\d+) op \d+ root (?P<root>-?\d+) "
    r"comm (?P<comm>\S+)(?: \[nranks=(?P<nranks>\d+)\])?"
    r"(?:.*?\bglobalrank (?P<grank>\d+))?")
# NCCL's own prefix written backwards (" OFNI LCCN ]0[ 456:123:host"): read from the call's
# name back to the prefix's start, each part in one pass (see _search)
_PREFIX_BACKWARDS = re.compile(r" OFNI LCCN \]\d+\[(?: \d+:\d+:[^\s:\[\]()]+)?")
_OPCOUNT = ": opCount "
_VERSION = re.compile(r"\b[NR]CCL version :? ?(\d+\.\d+\.\d+[^\s,]*)")


class CollCall(NamedTuple):
    """One COLL line: a call as one rank logged it."""

    collective: str
    count: int
    datatype: str
    nranks: int | None
    bytes: int | None
    opcount: int
    root: int
    comm: str
    host: str | None = None
    pid: int | None = None
    device: int | None = None
    rank: int | None = None
    line: int = 0


@dataclass(frozen=True)
class CollLog:
    """Every COLL call of a log, the lines skipped for an unknown datatype, the version."""

    calls: list[CollCall]
    unknown_datatype: int = 0
    unknown_collective: int = 0
    version: str | None = None


@dataclass(frozen=True)
class SizeShare:
    """One message size of a collective: how many calls carry it, their share of the bytes."""

    size: int
    calls: int
    share: float
    lines: tuple[int, ...] = field(default=(), compare=False)


def _cleaned(line: str) -> tuple[str, int | None]:
    """The line as NCCL wrote it (:func:`normalize.clean_line`); the global rank its launcher
    named, if any."""
    text, source = clean_line(line)
    rank = re.search(r"(?<!local )rank (\d+)", source or "")
    return text, int(rank.group(1)) if rank else None


def call_bytes(collective: str, count: int, typesize: int, nranks: int | None) -> int | None:
    """The nccl-tests ``size`` of one call; ``None`` when it needs nranks and has none."""
    if collective in PER_RANK_COUNT:
        return count * nranks * typesize if nranks else None
    return count * typesize


def _call(m: re.Match[str], n: int, rank: int | None) -> CollCall:
    name, opcount, count, dtype, root, comm, nranks, grank, host, pid, dev = m.group(
        "name", "opcount", "count", "dtype", "root", "comm", "nranks", "grank", "host", "pid",
        "dev")
    collective = COLLECTIVES[name]
    datatype, size = DATATYPES[int(dtype)]
    nranks_n = int(nranks) if nranks else None
    return CollCall(collective, int(count), datatype, nranks_n,
                    call_bytes(collective, int(count), size, nranks_n), int(opcount, 16),
                    int(root), comm, host, int(pid) if pid else None,
                    int(dev) if dev else None, int(grank) if grank else rank, n)


def _search(line: str) -> re.Match[str] | None:
    """The call of ``line`` as ``_CALL.search`` finds it, in time linear in the line: matched
    where it starts (the collective's name before the first ``": opCount "``, or NCCL's prefix
    before that name), never tried at every position of the line (the prefix's host and the
    name are runs of characters: tried at every position, a long run is read again at each)."""
    at = line.find(_OPCOUNT)
    if at < 0:
        return None
    start = len(line[:at].rstrip(string.ascii_letters))
    prefix = _PREFIX_BACKWARDS.match(line[start - 1::-1]) if start else None
    return _CALL.match(line, start - prefix.end() if prefix else start)


def _match(line: str) -> tuple[re.Match[str], int | None] | None:
    """The COLL call of ``line`` and the global rank its launcher named, if it is one."""
    if _OPCOUNT not in line:
        return None
    m = _CALL.match(line)
    if m and m.group("host"):  # NCCL's own prefix first: no launcher prefix left to remove
        return m, None
    line, rank = _cleaned(line)
    m = _search(line)
    return (m, rank) if m else None


def _unknown(m: re.Match[str]) -> str | None:
    """``"collective"`` or ``"datatype"`` when the call names one this module does not know."""
    if m.group("name") not in COLLECTIVES:
        return "collective"
    return "datatype" if int(m.group("dtype")) not in DATATYPES else None


def read_call(n: int, line: str) -> CollCall | str | None:
    """Line ``n``'s call; ``"collective"`` or ``"datatype"`` for a call line with an unknown
    one; ``None`` for any other line."""
    found = _match(line)
    if found is None:
        return None
    m, rank = found
    return _unknown(m) or _call(m, n, rank)


def version_of(line: str) -> str | None:
    """The NCCL (or RCCL) version a line names, if it does."""
    v = _VERSION.search(line) if "CCL version" in line else None
    return v.group(1).rstrip(".") if v else None


def parse_coll_log(text: str) -> CollLog:
    """All COLL call lines of ``text`` (see the module docstring), with what was skipped."""
    calls: list[CollCall] = []
    skipped: Counter[str] = Counter()
    version = None
    for n, raw in enumerate(text.splitlines(), start=1):
        version = version or version_of(raw)
        call = read_call(n, raw)
        if isinstance(call, CollCall):
            calls.append(call)
        elif call:
            skipped[call] += 1
    return CollLog(calls, skipped["datatype"], skipped["collective"], version)


def parse_coll_calls(text: str) -> list[CollCall]:
    """One :class:`CollCall` per COLL call line of ``text``, in log order."""
    return parse_coll_log(text).calls


def _emitter(call: CollCall) -> tuple:
    return call.host, call.pid, call.device, call.rank, call.comm


def _op(call: CollCall) -> tuple:
    return (call.collective, call.opcount, call.nranks, call.count, call.datatype, call.root)


class CollCounter:
    """Calls counted once across ranks (module docstring), fed one line or call at a time,
    folded per collective and size: state per emitter and per recent call, never per line."""

    def __init__(self) -> None:
        self.lines = 0  # call lines read
        self.calls = 0  # distinct calls counted
        self.skipped: Counter[str] = Counter()
        self.version: str | None = None
        self.forgotten = 0
        self._runs: dict[tuple, tuple[object, Counter[tuple]]] = {}  # emitter: opCount, counts
        self._most: dict[tuple, int] = {}  # call: the most lines one emitter's run logged
        self.sizes: dict[str, dict[int, Occurrences]] = defaultdict(dict)
        self.seen: dict[str, Occurrences] = defaultdict(Occurrences)  # per collective
        self._later: _Noted | None = None  # a later chunk's calls, for its merge

    def feed(self, n: int, line: str) -> None:
        """Read line ``n``: its version, and its call if it is a COLL line. The call is keyed
        by the text of its fields; only a call counted is converted (:func:`_call`)."""
        if self.version is None:
            self.version = version_of(line)
        found = _match(line)
        if found is None:
            return
        m, rank = found
        if unknown := _unknown(m):
            self.skipped[unknown] += 1
            return
        name, opcount, count, dtype, root, comm, nranks, grank, host, pid, dev = m.group(
            "name", "opcount", "count", "dtype", "root", "comm", "nranks", "grank", "host",
            "pid", "dev")
        op = (name, opcount, nranks, count, dtype, root)
        if self._count((host, pid, dev, grank or rank, comm), op, opcount):
            call = _call(m, n, rank)
            self._record(call)
            if self._later is not None:
                self._later.note(op, call, self._most[op])

    def add(self, call: CollCall) -> bool:
        """Count ``call``; True when it is a call not counted before (not another rank's line
        of one already counted)."""
        if not self._count(_emitter(call), _op(call), call.opcount):
            return False
        self._record(call)
        return True

    def _count(self, emitter: tuple, op: tuple, opcount: object) -> bool:
        self.lines += 1
        run = self._runs.get(emitter)
        if run is None and self._later is not None:
            self._later.opened[emitter] = opcount
        if run is None or run[0] != opcount:
            run = self._runs[emitter] = (opcount, Counter())
        counts = run[1]
        counts[op] += 1
        if counts[op] <= self._most.get(op, 0):
            return False
        if op not in self._most and len(self._most) >= MAX_OPS:
            del self._most[next(iter(self._most))]
            self.forgotten += 1
        self._most[op] = counts[op]
        return True

    def _record(self, call: CollCall) -> None:
        self.calls += 1
        self.seen[call.collective].add(call.line)
        if call.bytes is not None:
            self.sizes[call.collective].setdefault(call.bytes, Occurrences()).add(call.line)

    def later(self) -> None:
        """Count a chunk of a job that is not its first: note each emitter's first opCount
        and each call counted (its line, call and how many times one emitter's run had logged
        it), at most :data:`MERGE_CALLS`, for :meth:`merge`."""
        self._later = _Noted()

    def fits(self, other: CollCounter) -> str | None:
        """``None`` when ``other``, the next chunk counted after :meth:`later`, folds into
        this counter exactly (:meth:`merge`); else why not."""
        noted = other._later
        if noted is None or noted.full:
            return "the chunk counted more calls than it notes for a merge"
        if other.forgotten:
            return f"the chunk's calls overflowed the window of {MAX_OPS} calls"
        for emitter, opcount in noted.opened.items():
            run = self._runs.get(emitter)
            if run is not None and run[0] == opcount:
                return "an emitter's run of one opCount goes on into the chunk"
        new = sum(1 for op in other._most if op not in self._most)
        if len(self._most) + new > MAX_OPS:
            return f"the calls of the chunks together overflow the window of {MAX_OPS} calls"
        return None

    def merge(self, other: CollCounter, line_offset: int) -> None:
        """Fold ``other``, the next chunk counted after :meth:`later` (it :meth:`fits`),
        whose line 1 is line ``line_offset + 1`` here: its calls this counter counted already
        count only where the chunk logged them more often (a call counted at the k-th time one
        emitter's run logged it counts when this counter saw it fewer than k times)."""
        noted = other._later
        assert noted is not None
        self.lines += other.lines
        self.skipped.update(other.skipped)
        self.version = self.version or other.version
        self.forgotten += other.forgotten
        most = self._most
        if not any(op in most for op in noted.ops):  # nothing counted twice: as counted
            self.calls += other.calls
            for name, seen in other.seen.items():
                occurrences_merged(self.seen[name], seen, line_offset)
            for name, sizes in other.sizes.items():
                merge_folded(self.sizes[name], sizes, line_offset)
        else:
            known = [most.get(op, 0) for op in noted.ops]
            for n, index, nth in zip(noted.lines, noted.which, noted.nth, strict=True):
                if nth > known[index]:
                    collective, size = noted.kinds[index]
                    self.calls += 1
                    self.seen[collective].add(n + line_offset)
                    if size is not None:
                        self.sizes[collective].setdefault(size, Occurrences()).add(
                            n + line_offset)
        for op, times in other._most.items():
            if times > most.get(op, 0):
                most[op] = times
        self._runs.update(other._runs)

    def message_sizes(self, share: float = 0.9, limit: int = 8) -> dict[str, list[SizeShare]]:
        """Per collective, the sizes that carry ``share`` of its bytes: the fewest, at most
        ``limit``. A size's bytes are calls x size; sizes are ordered by those bytes, largest
        first (ties: larger size first). Calls without a size (no nranks where one is needed)
        are left out; a collective whose calls all carry 0 bytes lists its most frequent
        size."""
        if not 0 < share <= 1 or limit < 1:
            raise ValueError(f"share must be in (0, 1] and limit >= 1, not {share}, {limit}")
        return {coll: _top(sizes, share, limit) for coll, sizes in self.sizes.items()}


class _Noted:
    """What a later chunk's counter notes for its merge: each emitter's first opCount, and
    per call counted its line, its call (an index into ``ops``; ``kinds``: its collective and
    size) and how many times one emitter's run had logged it then; at most
    :data:`MERGE_CALLS` calls (``full`` past that)."""

    def __init__(self) -> None:
        self.opened: dict[tuple, object] = {}
        self.ops: dict[tuple, int] = {}
        self.kinds: list[tuple[str, int | None]] = []
        self.lines, self.which, self.nth = array("q"), array("q"), array("q")
        self.full = False

    def note(self, op: tuple, call: CollCall, nth: int) -> None:
        if self.full or len(self.lines) >= MERGE_CALLS:
            self.full = True
            return
        index = self.ops.get(op)
        if index is None:
            index = self.ops[op] = len(self.kinds)
            self.kinds.append((call.collective, call.bytes))
        self.lines.append(call.line)
        self.which.append(index)
        self.nth.append(nth)


def distinct_calls(calls: Iterable[CollCall]) -> list[CollCall]:
    """One entry per collective call, however many ranks logged it (module docstring)."""
    counter = CollCounter()
    return [call for call in calls if counter.add(call)]


def message_sizes(calls: Iterable[CollCall], share: float = 0.9,
                  limit: int = 8) -> dict[str, list[SizeShare]]:
    """:meth:`CollCounter.message_sizes` of ``calls``."""
    counter = CollCounter()
    for call in calls:
        counter.add(call)
    return counter.message_sizes(share, limit)


def _top(sizes: dict[int, Occurrences], share: float, limit: int) -> list[SizeShare]:
    total = sum(size * seen.count for size, seen in sizes.items())
    ranked = sorted(sizes.items(), key=lambda kv: (kv[0] * kv[1].count, kv[0], kv[1].count),
                    reverse=True)
    if not total:
        ranked.sort(key=lambda kv: kv[1].count, reverse=True)
    out: list[SizeShare] = []
    carried = 0
    for size, seen in ranked[:limit]:
        carried += size * seen.count
        out.append(SizeShare(size, seen.count, size * seen.count / total if total else 0.0,
                             tuple(seen.lines)))
        if not total or carried >= share * total:
            break
    return out


def is_call_line(line: str) -> bool:
    """True for a COLL call line, whatever prefix it has."""
    return _OPCOUNT in line and bool(_search(clean_line(line)[0]))
