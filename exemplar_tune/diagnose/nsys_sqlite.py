"""Nsight Systems SQLite export (``nsys export --type sqlite``): kernels, steps and idle gaps.

Tables (NVIDIA, "SQLite Export Schema Reference", Nsight Systems exporter docs; the columns
read here are listed in tests/fixtures/realworld/nsys/SQLITE_SCHEMA.md):

* ``CUPTI_ACTIVITY_KIND_KERNEL``: one row per kernel run: ``start``, ``end`` (ns),
  ``deviceId``, ``streamId``, the name as ``shortName`` / ``demangledName`` (``StringIds``
  ids; ``name`` in older exports), ``correlationId`` and ``globalPid``;
* ``StringIds`` (``id``, ``value``);
* ``NVTX_EVENTS``: ranges (``eventType`` 59 push/pop, 60 start/end) with ``start``, ``end``,
  ``text`` or ``textId`` and ``globalTid``;
* ``CUPTI_ACTIVITY_KIND_RUNTIME``: the CUDA API call that launched a kernel (same
  ``correlationId``), whose ``start`` is on the CPU timeline the NVTX ranges are on.

The file is opened read-only (``file:...?mode=ro``). A kernel belongs to a step when the call
that launched it started inside the step range of its own process (``globalTid`` and
``globalPid`` agree above the low 24 bits); without the runtime table, when the kernel started
inside it. Idle gaps: per device, the kernels' busy intervals are merged (streams overlap) and
gaps of :data:`GAP_NS` or more with no kernel running are summed, as a share of the time from
the device's first kernel to its last (memory copies are not counted as busy).
"""

# ruff: noqa: S608 - queries are built from this module's table and column names only (column
# names checked against PRAGMA table_info); values from the file travel as parameters

from __future__ import annotations

import heapq
import os
import sqlite3
import statistics
from array import array
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from exemplar_tune.diagnose import nsys_judge
from exemplar_tune.diagnose.base import DiagnoseError, Report

MAGIC = b"SQLite format 3\x00"
LABEL = "nsys SQLite export"  # the format in a refusal's list
KERNELS, STRINGS = "CUPTI_ACTIVITY_KIND_KERNEL", "StringIds"
NVTX, RUNTIME = "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME"
GAP_NS = 1_000_000
NAME_COLUMNS = ("shortName", "demangledName", "name")
PID = 0x1000000  # globalPid / globalTid: the low 24 bits are the thread id


def is_sqlite(path: str) -> bool:
    """Whether ``path`` is a regular file that starts with the 16-byte SQLite header (``False``
    when unreadable; a pipe is never read here, so its first bytes are not lost)."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as handle:
            return handle.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def connect(path: str) -> sqlite3.Connection:
    """A read-only connection (the export is never written, not even a journal)."""
    return sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)


def table_names(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f'PRAGMA table_info("{table}")')]


def diagnose_file(path: str, source: str) -> Report:
    """The report on an nsys SQLite export; ``DiagnoseError`` (one line) when it is not one."""
    try:
        with closing(connect(path)) as db:
            return analyze_db(db, source)
    except DiagnoseError:
        raise
    except sqlite3.Error as exc:
        raise DiagnoseError(f"{source}: unreadable SQLite file ({one_line(exc)})") from None
    except (ValueError, TypeError, KeyError, IndexError, ZeroDivisionError) as exc:
        raise DiagnoseError(f"{source}: malformed nsys SQLite export ({one_line(exc)})") from exc


def one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def kernel_columns(db: sqlite3.Connection, source: str) -> tuple[set[str], str]:
    """The kernel table's columns and its name column; ``DiagnoseError`` naming what lacks."""
    missing = sorted({KERNELS, STRINGS} - table_names(db))
    if missing:
        raise DiagnoseError(f"{source}: SQLite file without {', '.join(missing)}: not an "
                            "Nsight Systems export with CUDA kernels (nsys profile -t cuda, "
                            "then nsys export --type sqlite)")
    have = set(columns(db, KERNELS))
    name = next((c for c in NAME_COLUMNS if c in have), None)
    lacking = sorted({"start", "end", "deviceId"} - have) + ([] if name else ["shortName"])
    if lacking:
        raise DiagnoseError(f"{source}: {KERNELS} without column(s) {', '.join(lacking)}")
    return have, name or ""


def kernel_totals(db: sqlite3.Connection, name: str) -> list[dict[str, Any]]:
    """Per kernel name: instances and total ns (the stats report's rows, from the timeline)."""
    query = (f'SELECT coalesce(s.value, k."{name}"), count(*), sum(k.end - k.start) '
             f'FROM {KERNELS} AS k LEFT JOIN {STRINGS} AS s ON s.id = k."{name}" '
             f'GROUP BY k."{name}"')
    return [{"name": str(value) if value is not None else "?", "instances": n, "total_ns": total}
            for value, n, total in db.execute(query)]


def duration_stats(db: sqlite3.Connection) -> dict[str, Any]:
    count, tiny = db.execute(f"SELECT count(*), sum(end - start < {nsys_judge.TINY_NS}) "
                             f"FROM {KERNELS}").fetchone()
    median = db.execute(f"SELECT end - start AS d FROM {KERNELS} ORDER BY d LIMIT 1 "
                        "OFFSET ?", ((count - 1) // 2,)).fetchone()
    return {"instances": count, "median_ns": median[0] if median else None,
            "under_10us_pct": round(100.0 * (tiny or 0) / count, 1) if count else None,
            "estimated": False}


def launch_ns(db: sqlite3.Connection) -> float | None:
    """Mean CPU time of the kernel launch calls in the runtime table, if it is there."""
    if RUNTIME not in table_names(db):
        return None
    if not {"start", "end", "nameId"} <= set(columns(db, RUNTIME)):
        return None
    rows = db.execute(f"SELECT s.value, count(*), sum(r.end - r.start) FROM {RUNTIME} AS r "
                      f"JOIN {STRINGS} AS s ON s.id = r.nameId WHERE s.value LIKE 'cu%Launch%' "
                      "GROUP BY r.nameId").fetchall()
    return nsys_judge.launch_mean_ns(
        {"name": name, "instances": n, "total_ns": total} for name, n, total in rows)


def idle_gaps(db: sqlite3.Connection) -> dict[str, Any]:
    """Gaps of :data:`GAP_NS` or more between merged kernel intervals, per device: a kernel's
    gap is its start minus the latest end of the device's kernels that started before it
    (a window function, SQLite 3.25 or later)."""
    spans = {device: (first, last) for device, first, last in db.execute(
        f"SELECT deviceId, min(start), max(end) FROM {KERNELS} GROUP BY deviceId")}
    found = db.execute(
        f"SELECT gap, busy, device FROM (SELECT deviceId AS device, start - busy AS gap, busy "
        f"FROM (SELECT deviceId, start, max(end) OVER (PARTITION BY deviceId ORDER BY start "
        f"ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy FROM {KERNELS})) "
        "WHERE gap >= ?", (GAP_NS,)).fetchall()
    first = min((f for f, _ in spans.values()), default=0)
    idle = {device: [0, 0] for device in spans}
    for gap, _, device in found:
        idle[device][0] += gap
        idle[device][1] += 1
    span = sum(last - start for start, last in spans.values()) or 1
    return {"threshold_ns": GAP_NS, "idle_ns": sum(i for i, _ in idle.values()),
            "span_ns": span, "count": len(found),
            "idle_pct": round(100.0 * sum(i for i, _ in idle.values()) / span, 2),
            "longest": [{"ns": gap, "at_ns": busy - first, "device": device}
                        for gap, busy, device in heapq.nlargest(3, found)],
            "devices": [{"device": d, "gaps": idle[d][1], "idle_pct": round(
                100.0 * idle[d][0] / max(last - start, 1), 2)}
                for d, (start, last) in spans.items()]}


def step_ranges(db: sqlite3.Connection) -> tuple[str, list[tuple[int, int, int | None]]] | None:
    """The step range name and its ``(start, end, pid)`` ranges, or ``None`` without any."""
    have = set(columns(db, NVTX))
    if not {"start", "end", "eventType"} <= have or not {"text", "textId"} & have:
        return None
    if {"text", "textId"} <= have:
        text = "coalesce(n.text, s.value)"
    else:
        text = "n.text" if "text" in have else "s.value"
    join = f"LEFT JOIN {STRINGS} AS s ON s.id = n.textId" if "textId" in have else ""
    tid = "n.globalTid" if "globalTid" in have else "NULL"
    query = (f"SELECT n.start, n.end, {text}, {tid} FROM {NVTX} AS n {join} "
             "WHERE n.eventType IN (59, 60) AND n.end > n.start "
             f"AND ({text} LIKE '%step%' OR {text} LIKE '%iter%')")
    rows = db.execute(query).fetchall()
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for start, end, name, _ in rows:
        totals[name][0] += 1
        totals[name][1] += end - start
    step = nsys_judge.step_name({k: (int(v[0]), v[1]) for k, v in totals.items()})
    if step is None:
        return None
    return step, [(s, e, t // PID if t is not None else None) for s, e, name, t in rows
                  if nsys_judge.is_step(name, step)]


Timeline = tuple[Sequence[int], Sequence[int]]  # launch ns (sorted) and kernel durations


def launches(db: sqlite3.Connection, have: set[str]) -> tuple[dict[Any, Timeline], str]:
    """Per process (``None`` without pid columns), the kernels by launch time; and what
    "launch" is."""
    pid = "k.globalPid / 16777216" if "globalPid" in have else "NULL"
    by_call = (RUNTIME in table_names(db) and "correlationId" in have
               and {"correlationId", "start"} <= set(columns(db, RUNTIME)))
    if by_call:
        same = ("AND r.globalTid / 16777216 = k.globalPid / 16777216"
                if "globalPid" in have and "globalTid" in columns(db, RUNTIME) else "")
        query = (f"SELECT coalesce(r.start, k.start) AS t, k.end - k.start, {pid} "
                 f"FROM {KERNELS} AS k LEFT JOIN {RUNTIME} AS r "
                 f"ON r.correlationId = k.correlationId {same} ORDER BY t")
    else:
        query = f"SELECT k.start AS t, k.end - k.start, {pid} FROM {KERNELS} AS k ORDER BY t"
    per_pid: dict[Any, tuple[array, array]] = defaultdict(lambda: (array("q"), array("q")))
    for t, duration, owner in db.execute(query):  # 16 bytes a kernel: millions fit
        times, lengths = per_pid[owner]
        times.append(t)
        lengths.append(duration)
    return dict(per_pid), "the launching CUDA call" if by_call else "the kernel start"


def merged(per_pid: dict[Any, Timeline]) -> Timeline:
    """Every process's kernels in one timeline, by launch time."""
    pairs = sorted(pair for times, lengths in per_pid.values()
                   for pair in zip(times, lengths, strict=True))
    return [t for t, _ in pairs], [d for _, d in pairs]


def steps_summary(db: sqlite3.Connection, have: set[str]) -> dict[str, Any] | None:
    """Kernels per step range (median, min, max) and the median kernel inside steps."""
    found = step_ranges(db)
    if found is None:
        return None
    name, ranges = found
    per_pid, by = launches(db, have)
    counts, durations, everyone = [], [], None
    for start, end, owner in ranges:
        if owner in per_pid:
            times, lengths = per_pid[owner]
        else:  # a range of a process that launched no kernel, or no pid columns
            everyone = everyone or merged(per_pid)
            times, lengths = everyone
        lo, hi = bisect_left(times, start), bisect_left(times, end)
        counts.append(hi - lo)
        durations += lengths[lo:hi]
    return {"name": name, "count": len(ranges), "by": by,
            "kernels_per_step": statistics.median(counts),
            "kernels_per_step_min": min(counts), "kernels_per_step_max": max(counts),
            "median_kernel_ns": statistics.median(durations) if durations else None}


def analyze_db(db: sqlite3.Connection, source: str) -> Report:
    have, name = kernel_columns(db, source)
    kernels = {**duration_stats(db), "launch_ns": launch_ns(db)}
    if not kernels["instances"]:
        raise DiagnoseError(f"{source}: {KERNELS} has no rows: no kernel ran in the capture")
    steps = steps_summary(db, have) if NVTX in table_names(db) else None
    kernels["median_of"] = "all kernels"
    if steps and steps["median_kernel_ns"] is not None:
        kernels.update(median_ns=steps["median_kernel_ns"], median_of="kernels in steps")
    nccl = nsys_judge.nccl_summary(kernel_totals(db, name))
    gaps = idle_gaps(db)
    where = [f"{source}: {KERNELS} ({kernels['instances']:,} kernels)"]
    step_ev = [f"{source}: {NVTX} '{steps['name']}' ({steps['count']} ranges)"] if steps else []
    findings = [nsys_judge.nccl_finding(nccl, where),
                nsys_judge.launch_finding(kernels, steps, where + step_ev),
                nsys_judge.idle_finding(gaps, where)]
    summary = {"format": "sqlite", "kernels": kernels, "nccl": nccl, "steps": steps,
               "gaps": gaps, "devices": len(gaps["devices"]), "skipped": []}
    return Report(source, nsys_judge.KIND, summary, findings)
