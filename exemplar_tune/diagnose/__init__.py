"""``exemplar-tune diagnose FILE...``: findings from captured signals, one analyzer per format.

The format is recognised from the content, never the file name: turbostat, numastat, perf
report/top, training step-time logs, nccl-tests results, NCCL debug logs, nvidia-smi ``-q``
text or ``-q -x`` XML, ``dcgmi diag`` results (JSON or table), kernel logs (GPU Xid incidents)
and Nsight Systems reports (``nsys stats`` tables, and the SQLite export, recognised by its file
header); gzip and zstd files are expanded first (:mod:`exemplar_tune.compressed`). Each finding
names
a layer and a check id, so a file's findings line up with the preflight checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from exemplar_tune.compressed import decompressed
from exemplar_tune.diagnose import (
    dcgm_diag,
    kernel_log,
    nccl_log,
    nccl_tests,
    nsys,
    nsys_sqlite,
    numastat,
    nvidia_smi,
    perf,
    steptime,
    turbostat,
)
from exemplar_tune.diagnose.base import (
    KINDS_TEXT,
    Analyzer,
    DiagnoseError,
    Finding,
    Report,
)
from exemplar_tune.diagnose.nccl_tests import compare_nccl_tests
from exemplar_tune.diagnose.normalize import join, natural, normalize, strip_ansi
from exemplar_tune.diagnose.nsys_judge import compare_nsys
from exemplar_tune.errors import UserError
from exemplar_tune.inputs import MAX_INPUT, read_input_bytes

__all__ = ["ANALYZERS", "Analyzer", "DiagnoseError", "Finding", "Report", "compare_nccl_tests",
           "compare_nsys", "compare_reports", "detect", "diagnose_job", "diagnose_paths",
           "diagnose_text", "file_labels"]

# Most specific first: an nccl-tests run or a training log may also carry NCCL INFO lines,
# and a plain column of numbers (step times) is the least specific format of all.
ANALYZERS: tuple[Analyzer, ...] = (
    nvidia_smi.ANALYZER, dcgm_diag.ANALYZER, kernel_log.ANALYZER, turbostat.ANALYZER,
    numastat.ANALYZER, nccl_tests.ANALYZER, perf.ANALYZER, nsys.ANALYZER,
    steptime.ANALYZER, nccl_log.ANALYZER,
)
COMPARERS = {nccl_tests.KIND: compare_nccl_tests, nsys.KIND: compare_nsys}


def _is_text(text: str) -> bool:
    """False for binary content: NUL bytes, or many undecodable or control characters."""
    if "\x00" in text:
        return False
    odd = sum(1 for c in text if c == "\ufffd" or (ord(c) < 32 and c not in "\t\n\r\f"))
    return odd <= len(text) // 100


def detect(text: str) -> Analyzer | None:
    """The analyzer for this content, or ``None`` when no format matches."""
    if not text.strip() or not _is_text(text):
        return None
    return next((a for a in ANALYZERS if a.sniff(text)), None)


def diagnose_text(text: str, source: str, expectations: dict[str, Any] | None = None) -> Report:
    """Detect the format of ``text`` and analyse it; ``DiagnoseError`` when that cannot be done.

    The text is first :func:`~exemplar_tune.diagnose.normalize.normalize`-d (launcher and log
    prefixes, terminal noise); the report's summary names what was removed under ``input``.
    ``expectations`` is optional and per format: nccl-tests take ``{size_bytes: busbw}`` (or
    ``{"busbw": {...}}``), turbostat ``turbo_mhz`` and ``busy_pct``, step-time logs
    ``warmup_steps``.
    """
    if not _is_text(strip_ansi(text)):  # colour codes are terminal noise, not binary
        raise DiagnoseError(f"{source}: binary content, not a text capture ({KINDS_TEXT})")
    clean = normalize(text)
    analyzer = detect(clean)
    if analyzer is None:
        raise DiagnoseError(f"{source}: not a recognised format ({KINDS_TEXT})")
    try:
        report = analyzer.analyze(clean, source, dict(expectations or {}))
    except DiagnoseError:
        raise
    except (ValueError, KeyError, IndexError, TypeError, ZeroDivisionError) as exc:
        why = " ".join(str(exc).split())
        raise DiagnoseError(f"{source}: malformed {analyzer.kind} output ({why})") from exc
    if clean.described():
        report.summary.setdefault("input", clean.described())
    return report


def diagnose_paths(paths: list[str], expectations: dict[str, Any] | None = None
                   ) -> tuple[list[Report], list[str]]:
    """Read and diagnose each file: the reports of the files that could be read, and one line
    per file that could not (unreadable, empty, binary, unknown or malformed). An SQLite file
    (its 16-byte header) is read in place as an Nsight Systems export."""
    reports, errors = [], []
    for path in paths:
        try:
            if nsys_sqlite.is_sqlite(path):
                reports.append(nsys_sqlite.diagnose_file(path, path))
                continue
            reports.append(diagnose_text(read_capture(path), path, expectations))
        except (UserError, DiagnoseError) as exc:
            errors.append(str(exc))
    return reports, errors


def diagnose_job(paths: list[str]) -> Report:
    """One report of one job's logs, one file per rank or per host (a directory stands for
    every regular file under it), read together as one interleaved log whose lines name
    their file (:func:`~exemplar_tune.diagnose.normalize.join`); ``UserError`` (one line)
    for a file that cannot be read, ``DiagnoseError`` for content that cannot be read."""
    files = job_files(paths)
    if len(files) < 2:
        raise UserError(f"--ranks: {len(files)} file(s) found in {' '.join(paths)}; give the "
                        "files of a job's ranks or hosts (or their directory)")
    names = file_labels(files)
    parts, total = [], 0
    for path, name in zip(files, names, strict=True):
        data = read_capture(path)
        total += len(data)
        if total > MAX_INPUT:
            raise UserError(f"--ranks: the files hold more than {MAX_INPUT >> 20} MiB together; "
                            "give fewer ranks or the part of each log that matters")
        parts.append((name, data))
    source = f"{' '.join(paths)} ({len(files)} files)"
    return diagnose_text(join(parts), source)


def read_capture(path: str | Path) -> str:
    """A capture's text, expanded when it is gzip or zstd; ``UserError`` (one line) when it
    cannot be read or holds more than the input limit once expanded."""
    raw = read_input_bytes(path, "capture")
    return decompressed(raw, path, "capture", MAX_INPUT).decode("utf-8", errors="replace")


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
