"""``exemplar-tune diagnose FILE...``: findings from captured signals, one analyzer per format.

The format is recognised from the content, never the file name: turbostat, numastat, perf
report/top, training step-time logs, nccl-tests results, NCCL debug logs, nvidia-smi ``-q``
text or ``-q -x`` XML, ``dcgmi diag`` results (JSON or table), kernel logs (GPU Xid incidents)
and Nsight Systems reports (``nsys stats`` tables, and the SQLite export, recognised by its file
header). Files are read as streams (:mod:`.stream`), gzip and zstd expanded on the way
(:mod:`exemplar_tune.compressed`). Each finding names a layer and a check id, so a file's
findings line up with the preflight checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any

from exemplar_tune.compressed import capture_lines
from exemplar_tune.diagnose import (
    bug_report,
    dcgm_diag,
    dcgmi_nvlink,
    fabric_manager_log,
    gpu_topology,
    ibdev2netdev,
    ibstat,
    ibstatus,
    imex_log,
    kernel_log,
    nccl_log,
    nccl_tests,
    nccl_topology,
    nsys,
    nsys_sqlite,
    numactl,
    numastat,
    nvidia_smi,
    nvidia_smi_fabric,
    peermem,
    perf,
    perfquery,
    steptime,
    turbostat,
)
from exemplar_tune.diagnose.base import (
    Analyzer,
    DiagnoseError,
    Finding,
    Report,
)
from exemplar_tune.diagnose.nccl_tests import compare_nccl_tests
from exemplar_tune.diagnose.normalize import CleanText, natural, strip_ansi
from exemplar_tune.diagnose.nsys_judge import compare_nsys
from exemplar_tune.diagnose.stream import LineStream, size_text
from exemplar_tune.errors import UserError
from exemplar_tune.inputs import MAX_INPUT

__all__ = ["ANALYZERS", "KINDS_TEXT", "Analyzer", "DiagnoseError", "Finding", "Report",
           "compare_nccl_tests", "compare_nsys", "compare_reports", "detect", "diagnose_job",
           "diagnose_paths", "diagnose_stream", "diagnose_text", "file_labels"]

# Most specific first: an nccl-tests run or a training log may also carry NCCL INFO lines,
# and a plain column of numbers (step times) is the least specific format of all.
ANALYZERS: tuple[Analyzer, ...] = (
    bug_report.ANALYZER, nvidia_smi.ANALYZER, nvidia_smi_fabric.ANALYZER, dcgm_diag.ANALYZER,
    dcgmi_nvlink.ANALYZER, peermem.ANALYZER, kernel_log.ANALYZER, fabric_manager_log.ANALYZER,
    imex_log.ANALYZER,
    ibstat.ANALYZER, ibstatus.ANALYZER, ibdev2netdev.ANALYZER, perfquery.ANALYZER,
    turbostat.ANALYZER,
    numastat.ANALYZER, numactl.ANALYZER, nccl_tests.ANALYZER, perf.ANALYZER, nsys.ANALYZER,
    gpu_topology.ANALYZER, nccl_topology.ANALYZER,
    steptime.ANALYZER, nccl_log.ANALYZER,
)
# the formats named in a refusal, from the registry (an nsys SQLite export is told by its header)
KINDS_TEXT = ", ".join([a.label or a.kind for a in ANALYZERS] + [nsys_sqlite.LABEL])
COMPARERS = {nccl_tests.KIND: compare_nccl_tests, nsys.KIND: compare_nsys}
DETECT_WINDOW = 4 << 20  # bytes of cleaned text a format is recognised on
MAX_READ = 64 << 30  # bytes read (expanded) per file, or per job with --ranks: --max-input


_ODD = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\ufffd]")  # NUL, control characters, undecodable


def _is_text(text: str) -> bool:
    """False for binary content: NUL bytes, or many undecodable or control characters."""
    return "\x00" not in text and len(_ODD.findall(text)) <= len(text) // 100


def detect(text: str) -> Analyzer | None:
    """The analyzer for this content, or ``None`` when no format matches."""
    if not text.strip() or not _is_text(text):
        return None
    return next((a for a in ANALYZERS if a.sniff(text)), None)


def diagnose_text(text: str, source: str, expectations: dict[str, Any] | None = None) -> Report:
    """Detect the format of ``text`` and analyse it; ``DiagnoseError`` when that cannot be done.

    The text is read as :func:`diagnose_stream` reads a file. ``expectations`` is optional and
    per format: nccl-tests take ``{size_bytes: busbw}`` (or ``{"busbw": {...}}``), turbostat
    ``turbo_mhz`` and ``busy_pct``, step-time logs ``warmup_steps``.
    """
    return diagnose_stream(LineStream([(None, text.split("\n"))], len(text) + 1), source,
                           expectations)


def diagnose_stream(stream: LineStream, source: str,
                    expectations: dict[str, Any] | None = None,
                    whole_bytes: int = MAX_INPUT) -> Report:
    """The report of every line of ``stream``; ``DiagnoseError`` when it cannot be made.

    The lines are cleaned as they are read (:class:`~.stream.LineStream`: launcher and log
    prefixes, terminal noise; the report's summary names what was removed under ``input``).
    The format is recognised on the first :data:`DETECT_WINDOW` bytes. A format read as a
    stream (``Analyzer.reader``: NCCL logs, nccl-tests, step-time logs) is then fed every line
    and holds state per rank, host and finding; any other is read whole, up to
    ``whole_bytes`` (``UserError`` past that).
    """
    lines = iter(stream)
    return read_rest(stream, lines, recognised(stream, lines, source), source, expectations,
                     whole_bytes)


def read_rest(stream: LineStream, lines: Iterator, found: tuple[Analyzer, list], source: str,
              expectations: dict[str, Any] | None = None,
              whole_bytes: int = MAX_INPUT) -> Report:
    """The report of ``stream`` whose format was recognised on its first lines (``found``:
    the analyzer and those lines, :func:`recognised`; ``lines``: the stream's iterator, at
    the rest), as :func:`diagnose_stream` makes it."""
    analyzer, window = found
    del found
    with malformed(source, analyzer.kind):
        if analyzer.reader is not None:
            reader = analyzer.reader(source, dict(expectations or {}))
            rest = chain(window, lines)
            del window  # the window's lines go once they are read again
            for n, line, origin, raw in rest:
                reader.feed(n, line, origin, raw)
            report = reader.report(tuple(stream.files))
        else:
            report = analyzer.analyze(_whole(stream, window, lines, analyzer.kind,
                                             whole_bytes), source, dict(expectations or {}))
    if described := stream.described():
        report.summary.setdefault("input", described)
    return report


def recognised(stream: LineStream, lines: Iterator, source: str) -> tuple[Analyzer, list]:
    """The analyzer of the stream's first :data:`DETECT_WINDOW` bytes (read from ``lines``,
    its iterator), and those lines; ``DiagnoseError`` for binary content or no format."""
    window, size = _window(lines)
    head = stream.text(window)
    if not _is_text(strip_ansi(head.raw)):  # colour codes are terminal noise, not binary
        raise DiagnoseError(f"{source}: binary content, not a text capture ({KINDS_TEXT})")
    analyzer = detect(head)
    if analyzer is None:
        where = f" in its first {DETECT_WINDOW >> 20} MiB" if size >= DETECT_WINDOW else ""
        raise DiagnoseError(f"{source}: not a recognised format{where} ({KINDS_TEXT})")
    return analyzer, window


@contextmanager
def malformed(source: str, kind: str) -> Iterator[None]:
    """Within the block, content a reader cannot read (``ValueError``, ``KeyError`` ...,
    nested deeper than it follows) is a one-line ``DiagnoseError`` naming ``source`` and the
    format ``kind``."""
    try:
        yield
    except DiagnoseError:
        raise
    except (ValueError, KeyError, IndexError, TypeError, ArithmeticError) as exc:
        why = " ".join(str(exc).split())
        raise DiagnoseError(f"{source}: malformed {kind} output ({why})") from exc
    except RecursionError:  # input nested deeper than a reader follows
        raise DiagnoseError(f"{source}: malformed {kind} output (nested deeper than "
                            "it is read)") from None


def _window(lines: Iterator) -> tuple[list, int]:
    """The first lines of a stream, :data:`DETECT_WINDOW` bytes or all, and their size."""
    window, size = [], 0
    for line in lines:
        window.append(line)
        size += len(line[3]) + 1
        if size >= DETECT_WINDOW:
            break
    return window, size


def _whole(stream: LineStream, window: list, lines: Iterator, kind: str,
           limit: int) -> CleanText:
    """The whole text of a format that is not read as a stream, at most ``limit`` bytes."""
    size = sum(len(raw) + 1 for *_, raw in window) - 1  # the last line has no newline
    for line in lines:
        if size > limit:
            break
        window.append(line)
        size += len(line[3]) + 1
    if size > limit:
        raise UserError(f"{kind} captures are read whole, and this one holds more than "
                        f"{size_text(limit)}: give the part that matters, or raise "
                        "--max-input to read it (it is held in memory)")
    return stream.text(window)


def diagnose_paths(paths: list[str], expectations: dict[str, Any] | None = None,
                   max_bytes: int = MAX_READ, whole_bytes: int = MAX_INPUT
                   ) -> tuple[list[Report], list[str]]:
    """Read and diagnose each file: the reports of the files that could be read, and one line
    per file that could not (unreadable, empty, binary, unknown or malformed, more than
    ``max_bytes`` once expanded, or more than ``whole_bytes`` of a format read whole). An
    SQLite file (its 16-byte header) is read in place as an Nsight Systems export."""
    reports, errors = [], []
    for path in paths:
        try:
            if nsys_sqlite.is_sqlite(path):
                reports.append(nsys_sqlite.diagnose_file(path, path))
                continue
            stream = LineStream([(None, capture_lines(path, "capture"))], max_bytes,
                                "standard input" if path == "-" else f"capture {path}")
            reports.append(diagnose_stream(stream, path, expectations, whole_bytes))
        except (UserError, DiagnoseError) as exc:
            errors.append(str(exc))
    return reports, errors


def diagnose_job(paths: list[str], max_bytes: int = MAX_READ,
                 whole_bytes: int = MAX_INPUT, jobs: int = 1) -> Report:
    """One report of one job's logs, one file per rank or per host (a directory stands for
    every regular file under it), read in turn as one stream whose lines name their file
    (:class:`~.stream.LineStream`); ``UserError`` (one line) for a file that cannot be read
    or more than ``max_bytes`` in all, ``DiagnoseError`` for content that cannot be read.

    With ``jobs`` above 1 the files are read in up to that many contiguous chunks, each by a
    worker process, and the readers merged into the same report, errors and all
    (:mod:`.parallel`); a job too small to share out is read here as with 1."""
    files = job_files(paths)
    if len(files) < 2:
        raise UserError(f"--ranks: {len(files)} file(s) found in {' '.join(paths)}; give the "
                        "files of a job's ranks or hosts (or their directory)")
    names = file_labels(files)
    source = f"{' '.join(paths)} ({len(files)} files)"
    what = f"--ranks: the {len(files)} files"
    if jobs > 1:
        from exemplar_tune.diagnose import parallel  # it imports this package: not at its top

        chunks = parallel.chunks(files, names, jobs)
        if len(chunks) > 1:
            return parallel.diagnose_chunks(chunks, source, what, max_bytes, whole_bytes)
    inputs = ((name, capture_lines(path, "capture")) for path, name in zip(files, names,
                                                                           strict=True))
    return diagnose_stream(LineStream(inputs, max_bytes, what), source,
                           whole_bytes=whole_bytes)


def job_files(paths: list[str]) -> list[Path]:
    """The files ``paths`` name, each directory replaced by the regular files under it
    (hidden ones left out), in natural order (``rank2`` before ``rank10``)."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found += sorted((p for p in path.rglob("*") if p.is_file() and not any(
                part.startswith(".") for part in p.relative_to(path).parts)),
                key=lambda p: natural(str(p)))
        else:
            found.append(path)
    return found


def file_labels(files: list[Path]) -> list[str]:
    """Short unique names of a job's files: their paths without the parts all of them share
    at the start or the end, and without suffixes (``logs/0/stdout.log`` -> ``0``)."""
    parts = [list(p.with_name(p.name.split(".")[0] or p.name).parts) for p in files]
    while all(len(p) > 1 for p in parts) and len({p[0] for p in parts}) == 1:
        parts = [p[1:] for p in parts]
    while all(len(p) > 1 for p in parts) and len({p[-1] for p in parts}) == 1:
        parts = [p[:-1] for p in parts]
    labels = ["/".join(p) for p in parts]
    return labels if len(set(labels)) == len(labels) else [str(p) for p in files]


def compare_reports(reports: list[Report]) -> dict[str, Any]:
    """Two reports of one kind side by side (nccl-tests: busbw per size; nsys: NCCL kernel
    time per collective); ``DiagnoseError`` for any other pair."""
    kinds = [r.kind for r in reports]
    if len(reports) != 2 or kinds[0] != kinds[1] or kinds[0] not in COMPARERS:
        raise DiagnoseError("--compare takes exactly two nccl-tests files or two nsys reports "
                            f"(got: {', '.join(kinds)})")
    return COMPARERS[kinds[0]](*reports)
