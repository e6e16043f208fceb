"""``diagnose --ranks --jobs N``: one job's files read by worker processes into one report.

The job's files (natural order) are cut into at most N contiguous chunks of about the same
size on disk, each at least :data:`MIN_CHUNK` bytes: a smaller job is read in one process, as
with ``--jobs 1``. Each chunk is read by a worker process (``forkserver``, else ``spawn``: a
worker holds nothing of this process but its arguments) as one process reads a job: each file
cleaned by a :class:`~.stream.LineStream`, every line fed to the format's stream reader. A
worker numbers its chunk's lines from 1.

The workers start at once and hold their first lines (at most :data:`BUFFER` bytes) while
this process recognises the format on the job's first window, as one process does, and tells
them; a format read whole is read here, as with one process.

The workers' readers come back in chunk order and are folded into the first
(:class:`~.base.ChunkReader`: ``fits``, then ``merge``), each chunk's line numbers moved on by
the lines of the chunks before it, so that findings, counts, evidence lines and summary are
those one process gives. A chunk whose reading depends on the end of the chunk before in a
way its reader cannot fold (``fits`` says why: a Megatron record that may go on, an
nccl-tests table still open, a COLL call counted by both ...) is read again here, after the
chunks before it, as one process reads it: slower, never different.

Errors are those one process gives, first in file order: a worker that fails says how many
bytes it had read; a failure in an earlier chunk wins; one past ``--max-input`` (counted over
the chunks before) is the bound's error; content a later chunk's reader could not read (it
started from an assumed state) is read again here from the true one. Each worker checks the
bound on its own bytes and those the workers before it have read, so none reads much past it.
Ctrl-C (or any error here) ends the workers.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Iterator
from importlib.machinery import ModuleSpec
from itertools import chain
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from exemplar_tune.compressed import capture_lines
from exemplar_tune.diagnose import ANALYZERS, malformed, read_rest, recognised
from exemplar_tune.diagnose.base import ChunkReader, DiagnoseError, Report
from exemplar_tune.diagnose.stream import LineStream, bound_error, size_text
from exemplar_tune.errors import UserError
from exemplar_tune.progress import HEARTBEAT_S, say

__all__ = ["BUFFER", "MIN_CHUNK", "Chunk", "chunks", "diagnose_chunks"]

MIN_CHUNK = 8 << 20  # bytes of files a worker is given at least
BUFFER = 8 << 20  # bytes of lines a worker holds while it waits for the format
POLL_EVERY = 1024  # lines a worker reads between two looks for the format

Chunk = list[tuple[Path, str]]  # (file, its name in the job)
_UNKNOWN = object()
_log = logging.getLogger(__name__)


def chunks(files: list[Path], names: list[str], jobs: int) -> list[Chunk]:
    """``files`` with their ``names`` cut into at most ``jobs`` contiguous chunks, in order, of
    about the same size on disk and at least :data:`MIN_CHUNK` bytes each (one chunk: the job
    is read in one process). Standard input (``-``) is never shared out."""
    pairs = list(zip(files, names, strict=True))
    if jobs < 2 or any(str(path) == "-" for path in files):
        return [pairs]
    sizes = [_size(path) for path in files]
    total = sum(sizes)
    count = min(jobs, len(files), total // max(MIN_CHUNK, 1))
    if count < 2:
        return [pairs]
    out: list[Chunk] = [[] for _ in range(count)]
    done = 0
    for pair, size in zip(pairs, sizes, strict=True):
        # by the middle of each file, so that no chunk is left empty by a large file
        at = min(count - 1, int((done + size / 2) * count / total))
        out[at].append(pair)
        done += size
    return [chunk for chunk in out if chunk]


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # it is the reading's to fail, in its turn


def diagnose_chunks(parts: list[Chunk], source: str, what: str, max_bytes: int,
                    whole_bytes: int) -> Report:
    """The report of a job's files read in the chunks ``parts``, one worker process each:
    the report, or the error (``UserError``, ``DiagnoseError``), that reading the files in
    turn in one process gives (``source``: the job as named in the report, ``what``: as
    named in the bound's error; the bounds as :func:`~exemplar_tune.diagnose.diagnose_job`
    takes them)."""
    context = _context()
    counts = context.RawArray("q", len(parts))  # bytes each worker has read
    workers: list[tuple[BaseProcess, Connection]] = []
    # started from a thread: the first start waits for the fork server to import its modules,
    # while this one recognises the format
    starter = threading.Thread(target=_start_all, name="diagnose-workers", daemon=True,
                               args=(context, parts, source, what, max_bytes, counts, workers))
    starter.start()
    try:
        every = [pair for part in parts for pair in part]
        stream = LineStream(((name, capture_lines(path, "capture")) for path, name in every),
                            max_bytes, what)
        lines = iter(stream)
        found = recognised(stream, lines, source)
        analyzer = found[0]
        starter.join()
        if len(workers) < len(parts):  # a worker could not be started: one process reads
            return read_rest(stream, lines, found, source, None, whole_bytes)
        if not _chunked(analyzer.reader):  # read whole, or its reader cannot be split:
            _tell(workers, None)  # here, as one process reads it
            return read_rest(stream, lines, found, source, None, whole_bytes)
        del found, lines, stream
        _tell(workers, analyzer.kind)
        return _fold(workers, parts, source, what, max_bytes, counts, analyzer.kind)
    finally:
        starter.join()
        _stop(workers)


def _chunked(reader: Any) -> bool:
    """Whether a format's stream reader (``None``: none) reads a job in chunks."""
    return reader is not None and all(callable(getattr(reader, name, None)) for name in (
        "later", "seal", "reopen", "fits", "merge"))


def _start_all(context: BaseContext, parts: list[Chunk], source: str, what: str,
               max_bytes: int, counts: Any, workers: list[tuple[BaseProcess, Connection]]
               ) -> None:
    """Start a worker per chunk, each added to ``workers`` with this end of its pipe; stop at
    the first that cannot be started (too many processes or files: the job is then read in
    one process)."""
    try:
        for index, part in enumerate(parts):
            mine, theirs = context.Pipe()
            worker = context.Process(
                target=work, name=f"diagnose-chunk-{index}", daemon=True,
                args=(index, [(str(path), name) for path, name in part], source, what,
                      max_bytes, counts, theirs))
            try:
                _start(worker)
            finally:
                theirs.close()
            workers.append((worker, mine))
    except OSError:
        return


def _context() -> BaseContext:
    """``forkserver`` with this module preloaded (a worker starts as a fork of a process that
    imported it, and nothing else of this one), else ``spawn``."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        return context
    return multiprocessing.get_context("spawn")


def _start(worker: BaseProcess) -> None:
    """Start ``worker`` without this process's main module run again in it: the worker needs
    nothing of it (its target is here), and a script that starts its work unguarded (no
    ``if __name__ == "__main__"``) would start it again in every worker. The main module is
    swapped for a stand-in while the worker's start is prepared (a moment)."""
    main = sys.modules["__main__"]
    stand_in = types.ModuleType("__main__")
    stand_in.__spec__ = ModuleSpec(f"{__name__}.__main__", None)  # one a worker does not run
    sys.modules["__main__"] = stand_in
    try:
        worker.start()
    finally:
        sys.modules["__main__"] = main


def _tell(workers: list[tuple[BaseProcess, Connection]], kind: str | None) -> None:
    """Tell every worker the format to read (``None``: read nothing)."""
    for _, conn in workers:
        with contextlib.suppress(OSError):  # it failed and ended: its error waits in the pipe
            conn.send(kind)


def _stop(workers: list[tuple[BaseProcess, Connection]]) -> None:
    """End the workers still running (SIGTERM to each, by its process) and wait for them."""
    for worker, _ in workers:
        if worker.is_alive():
            worker.terminate()
    for worker, conn in workers:
        worker.join(5)
        if worker.is_alive():
            worker.kill()
            worker.join()
        conn.close()


def _fold(workers: list[tuple[BaseProcess, Connection]], parts: list[Chunk], source: str,
          what: str, max_bytes: int, counts: Any, kind: str) -> Report:
    """The workers' readers folded in chunk order into one report (module docstring)."""
    job = LineStream((), max_bytes, what)  # what the chunks so far read, lines numbered on
    reader: ChunkReader | None = None
    started = time.monotonic()
    for index, (worker, conn) in enumerate(workers):
        status, payload, where = _result(worker, conn, counts, what, started)
        read = where.bytes if status == "read" else where
        if job.read + read > max_bytes:
            raise bound_error(what, max_bytes)
        if status == "raise":
            if reader is None or isinstance(payload, UserError):
                raise payload  # a file that cannot be read, or the first chunk's content
            why = f"it failed, read from an assumed start ({payload})"
        elif reader is None:
            reader = payload
            job.add(where)
            continue
        elif (why := reader.fits(payload)) is None:
            reader.merge(payload, job.count)
            job.add(where)
            continue
        del payload  # read again here, after the chunks before it
        _log.debug("diagnose: chunk %d of %d read again in this process: %s", index + 1,
                   len(parts), why)
        _read_again(reader, parts[index], job, source, kind, why)
    assert reader is not None
    with malformed(source, kind):
        report = reader.report(tuple(job.files))
    if described := job.described():
        report.summary.setdefault("input", described)
    return report


def _read_again(reader: ChunkReader, part: Chunk, job: LineStream, source: str, kind: str,
                why: str) -> None:
    """Feed ``reader`` (the chunks before, folded) the lines of ``part`` itself, numbered on
    from ``job``'s, as one process does; ``job`` counts them (``why``: the reader's reason
    that the chunk read apart did not fold, for whoever watches this)."""
    stream = LineStream(((name, capture_lines(path, "capture")) for path, name in part),
                        job.max_bytes, job.what, start_line=job.count, start_bytes=job.read)
    reader.reopen()
    with malformed(source, kind):
        for n, line, origin, raw in stream:
            reader.feed(n, line, origin, raw)
    reader.seal()
    job.add(stream.tally())


def _result(worker: BaseProcess, conn: Connection, counts: Any, what: str,
            started: float) -> tuple[str, Any, Any]:
    """A worker's result, waited for (a progress line every heartbeat meanwhile):
    ``("read", reader, tally)`` or ``("raise", exception, bytes read then)``."""
    said = started
    while True:
        ready = wait([conn, worker.sentinel], timeout=1.0)
        if conn in ready or (ready and conn.poll()):
            try:
                return conn.recv()
            except EOFError:
                break
        elif ready:  # it ended without a word
            break
        now = time.monotonic()
        if now - said >= HEARTBEAT_S:
            said = now
            read = sum(counts)
            say(f"diagnose: {what}: {size_text(read)} read "
                f"({read / (now - started) / (1 << 20):.0f} MiB/s)")
    worker.join(5)
    raise RuntimeError(f"diagnose: worker {worker.name} ended without a result (exit status "
                       f"{worker.exitcode})")


# --- in the worker ---------------------------------------------------------------------------

def work(index: int, part: list[tuple[str, str]], source: str, what: str, max_bytes: int,
         counts: Any, conn: Connection) -> None:
    """A worker: read chunk ``index`` (its files and their names) once told the format, and
    send back ``("read", reader, tally)`` or ``("raise", exception, bytes read then)``;
    nothing when told ``None``. Ctrl-C is left to the parent, which ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result = _read_chunk(index, part, source, what, max_bytes, counts, conn)
    except BaseException as exc:  # a bug: the parent raises it
        result = ("raise", _portable(exc), 0)
    if result is None:
        return
    try:
        conn.send(result)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        conn.send(("raise", _portable(exc), 0))
    except OSError:
        pass  # the parent went away
    conn.close()


def _read_chunk(index: int, part: list[tuple[str, str]], source: str, what: str,
                max_bytes: int, counts: Any, conn: Connection) -> tuple[str, Any, Any] | None:
    stream = LineStream(((name, capture_lines(path, "capture")) for path, name in part),
                        max_bytes, what)

    def checked(read: int) -> None:
        counts[index] = read
        if sum(counts[:index]) + read > max_bytes:  # the chunks before read at least that
            raise bound_error(what, max_bytes)

    stream.checked = checked
    lines = iter(stream)
    held, kind, failure = _hold(lines, conn)
    if kind is _UNKNOWN:
        kind = conn.recv()
    if kind is None:
        return None
    analyzer = next(a for a in ANALYZERS if a.kind == kind)
    assert analyzer.reader is not None
    try:
        with malformed(source, kind):
            if failure is not None:
                raise failure
            reader: ChunkReader = analyzer.reader(source, {})  # type: ignore[assignment]
            if index:
                reader.later()
            for n, line, origin, raw in chain(_drain(held), lines):
                reader.feed(n, line, origin, raw)
            reader.seal()
    except Exception as exc:
        return "raise", _portable(exc), stream.read
    counts[index] = stream.read
    return "read", reader, stream.tally()


def _hold(lines: Iterator, conn: Connection) -> tuple[list, Any, Exception | None]:
    """The first lines read while the format is not known (at most :data:`BUFFER` bytes, or
    until it comes), the format if it came, and the error reading them raised, if any."""
    held: list = []
    size = 0
    try:
        for line in lines:
            held.append(line)
            size += len(line[3]) + 1
            if len(held) % POLL_EVERY == 0 and conn.poll():
                return held, conn.recv(), None
            if size >= BUFFER:
                break
    except Exception as exc:
        return held, _UNKNOWN, exc
    return held, _UNKNOWN, None


def _drain(held: list) -> Iterator:
    """The held lines in order, each let go once given."""
    held.reverse()
    while held:
        yield held.pop()


def _portable(exc: BaseException) -> BaseException:
    """``exc`` as the parent can receive and raise it: itself when it pickles, else a
    ``RuntimeError`` naming it; anything but a one-line error (a bug) carries its traceback in
    this process as a note."""
    if not isinstance(exc, UserError | DiagnoseError):
        exc.add_note(f"in diagnose worker process {os.getpid()}:\n"
                     + "".join(traceback.format_exception(exc)))
    try:
        pickle.loads(pickle.dumps(exc))  # noqa: S301 - our own bytes, just written
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc
