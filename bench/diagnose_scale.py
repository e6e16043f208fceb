#!/usr/bin/env python3
"""Throughput and peak memory of ``exemplar-tune diagnose`` on large logs, side by side with
``grep -c`` and a plain Python line loop over the same file.

Each input is a real log of the test corpus repeated to the size asked: an NCCL INFO log with
COLL lines (NVIDIA/nccl#1193, 128 ranks), a Megatron-DeepSpeed step log (bigscience) and an
nccl-tests run (xxrjun/nccl-tests-cluster, 80 ranks). In ``steplog`` each copy starts its
iterations again (diagnose reads the longest run); in ``steplog-run`` the copies go on
counting, so the log is one run and every one of its steps is judged; ``steplog-ranks`` is
a job of 1000 rank files, each such a run, read with ``diagnose --ranks`` (every rank
compared at every iteration). For each size the readers run in turn, ``--repeat``
interleaved rounds, median kept:

* ``grep -c PATTERN`` - the floor, one pass in C;
* a plain Python ``for line in file`` loop counting the lines;
* ``exemplar-tune diagnose FILE --format json`` - with its peak RSS (``wait4``) and the size
  of the JSON it wrote; a job of rank files once per ``--jobs`` value (``diagnose --ranks DIR
  --jobs N``), each with the peak RSS of its largest worker process (``VmHWM``, polled) and
  its speed-up over the first value, and the JSON of every value checked to be the same;
* with several ``--jobs`` values, the machine's own ceiling: a fixed Python busy loop alone,
  then as many copies at once as the most jobs (``N x alone / together``: what N processes
  of pure CPU work gain here, on shared or throttled cores less than N).

A diagnose run that exits 2 (the input refused) is reported as such. Progress goes to stderr,
the table to stdout.

    python bench/diagnose_scale.py                          # 10 and 100 MiB, 1 round
    python bench/diagnose_scale.py --sizes 10,100,1024 --repeat 3 --kinds nccl-log
    python bench/diagnose_scale.py --sizes 100 --gzip      # diagnose reads the .gz
    python bench/diagnose_scale.py --kinds steplog-ranks --sizes 100 --jobs 1,2 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "tests" / "fixtures" / "realworld"
# kind -> (real log, grep pattern)
LOGS = {
    "nccl-log": (REAL / "nccl-coll" / "nvidia-nccl-1193-ray-allreduce-128ranks.log", "NCCL"),
    "steplog": (REAL / "steptime"
                / "bigscience-workshop-bigscience-meg-ds-3d-n16-ds-off-per-iteration.log",
                "iteration"),
    "steplog-run": (REAL / "steptime"
                    / "bigscience-workshop-bigscience-meg-ds-3d-n16-ds-off-per-iteration.log",
                    "iteration"),
    "steplog-ranks": (REAL / "steptime"
                      / "bigscience-workshop-bigscience-meg-ds-3d-n16-ds-off-per-iteration.log",
                      "iteration"),
    "nccl-tests": (REAL / "nccl-tests"
                   / "xxrjun-nccl-tests-cluster-h100-10nodes-80ranks-five-collectives.log",
                   "float"),
}
POLL_S = 0.1  # seconds between two looks at a run's worker processes
RUNS = {"steplog-run", "steplog-ranks"}  # kinds whose copies go on counting iterations
RANK_FILES = {"steplog-ranks": 1000}  # kinds read as a job of this many rank files
_ITERATION = re.compile(rb"(iteration\s+)(\d+)/")
BUSY_LOOP = "s = 0\nfor i in range(30_000_000):\n    s += i * i\n"
LINE_LOOP = ("import os, sys\nn = 0\nroot = sys.argv[1]\n"
             "names = ([os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]\n"
             "         if os.path.isdir(root) else [root])\n"
             "for name in names:\n    for _ in open(name, 'rb'):\n        n += 1\nprint(n)\n")


def build(source: Path, size: int, target: Path, one_run: bool = False) -> Path:
    """``source`` repeated until ``target`` holds ``size`` bytes (whole lines); with
    ``one_run``, copy k's Megatron iterations are numbered on from copy k-1's."""
    text = source.read_bytes()
    last = max((int(m.group(2)) for m in _ITERATION.finditer(text)), default=0)
    with target.open("wb") as out:
        written, copy = 0, 0
        while written < size:
            if one_run and copy:
                offset = copy * last
                chunk = _ITERATION.sub(lambda m, by=offset: m.group(1) + str(
                    int(m.group(2)) + by).encode() + b"/", text)
            else:
                chunk = text
            if written + len(chunk) > size:
                chunk = chunk[: size - written]
                chunk = chunk[: chunk.rfind(b"\n") + 1] or chunk
                out.write(chunk)
                break
            out.write(chunk)
            written += len(chunk)
            copy += 1
    return target


def build_job(source: Path, size: int, target: Path, files: int) -> Path:
    """A directory ``target`` of ``files`` rank logs, each ``source`` as one run of
    ``size / files`` bytes (the same log in every file: no rank is slower)."""
    target.mkdir()
    first = build(source, size // files, target / "rank0000.log", one_run=True)
    for rank in range(1, files):
        shutil.copyfile(first, target / f"rank{rank:04d}.log")
    return target


def run(argv: list[str], output: Path) -> tuple[float, int, int, int, float]:
    """(wall seconds, peak RSS in KiB, exit status, peak RSS of its largest worker in KiB,
    CPU seconds of the process and its workers) of one run; stdout to ``output`` (a real
    file: GNU grep stops at the first match when its output is /dev/null)."""
    with open(output, "wb") as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.PIPE)
        watch = Workers(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        watch.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stderr.close()  # type: ignore[union-attr]
    cpu = usage.ru_utime + usage.ru_stime + sum(watch.cpu.values())
    return seconds, usage.ru_maxrss, proc.returncode, watch.peak, cpu


class Workers(threading.Thread):
    """The worker processes under ``pid`` (the children of its multiprocessing fork server),
    polled every :data:`POLL_S` until :meth:`stop`: the largest peak RSS (``VmHWM``, KiB)
    and the CPU seconds of each and of the fork server (at its last poll: a little short)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, threading.Event()
        self.cpu: dict[int, float] = {}
        self.server: psutil.Process | None = None
        self.start()

    def run(self) -> None:
        while not self.done.wait(POLL_S):
            try:
                if self.server is None:
                    self.server = next((p for p in psutil.Process(self.pid).children()
                                        if _is_fork_server(p)), None)
                workers = self.server.children() if self.server is not None else []
            except psutil.Error:
                continue
            for proc in [*workers, *([self.server] if self.server is not None else [])]:
                try:
                    times = proc.cpu_times()  # the fork server's too (its imports)
                    self.cpu[proc.pid] = times.user + times.system
                    if proc is not self.server:
                        self.peak = max(self.peak, _hwm(proc.pid))
                except (psutil.Error, OSError):
                    continue

    def stop(self) -> None:
        self.done.set()
        self.join()


def _is_fork_server(proc: psutil.Process) -> bool:
    try:
        return any("forkserver" in part for part in proc.cmdline())
    except psutil.Error:
        return False


def _hwm(pid: int) -> int:
    """The peak RSS of process ``pid`` so far, in KiB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def packed(path: Path) -> Path:
    """``path`` compressed with ``gzip -1`` beside it (the plain file kept)."""
    target = path.with_name(path.name + ".gz")
    with open(target, "wb") as out:
        subprocess.run(["gzip", "-1", "-c", str(path)], stdout=out, check=True)
    return target


def measure(path: Path, given: Path, pattern: str, json_out: Path,
            jobs: list[int]) -> dict[str, tuple[float, int, int, int]]:
    """One round: grep and the line loop on ``path``, diagnose on ``given`` (it or its .gz;
    a job's directory once per ``jobs`` value, its JSON in ``json_out`` suffixed by it)."""
    job = ["--ranks"] if given.is_dir() else []
    cli = [sys.executable, "-m", "exemplar_tune.cli", "-q", "diagnose", *job, str(given),
           "--format", "json"]
    count = json_out.with_suffix(".count")
    out = {"grep -c": run(["grep", "-rc" if job else "-c", pattern, str(path)], count),
           "python loop": run([sys.executable, "-c", LINE_LOOP, str(path)], count)}
    if not job:
        out["diagnose"] = run(cli, json_out)
        return out
    for n in jobs:
        out[f"diagnose --jobs {n}"] = run([*cli, "--jobs", str(n)], _json_of(json_out, n))
    if max(jobs) > 1:
        out["busy loop alone"] = busy(1)
        out[f"busy loop x{max(jobs)} at once"] = busy(max(jobs))
    return out


def busy(copies: int) -> tuple[float, int, int, int, float]:
    """(wall seconds until the last of ``copies`` busy loops ends, 0, 0, 0, 0): pure CPU work
    side by side, the machine's ceiling for as many worker processes."""
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(copies)]
    for proc in procs:
        proc.wait()
    return time.perf_counter() - start, 0, 0, 0, 0.0


def _json_of(json_out: Path, jobs: int) -> Path:
    return json_out.with_name(f"{json_out.stem}-jobs{jobs}.json")


def main() -> None:
    """Parse arguments, build the inputs, run the rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100", help="MiB, comma-separated (10,100)")
    parser.add_argument("--kinds", default=",".join(LOGS),
                        help=f"comma-separated, of {', '.join(LOGS)}")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds")
    parser.add_argument("--gzip", action="store_true",
                        help="compress each input (gzip -1) and give diagnose the .gz; grep "
                        "and the line loop still read the plain file")
    parser.add_argument("--jobs", default="1",
                        help="comma-separated diagnose --jobs values for a job of rank files "
                        "(1,2: one process, then two workers, side by side)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    jobs = [int(n) for n in args.jobs.split(",")]
    if unknown := sorted(set(kinds) - set(LOGS)):
        parser.error(f"--kinds: unknown {', '.join(unknown)}")
    print("| input | MiB | reader | wall s | CPU s | MiB/s | x grep | peak MiB | worker MiB | "
          "speed-up | JSON bytes |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="bench-diagnose-") as tmp:
        for kind in kinds:
            source, pattern = LOGS[kind]
            if args.gzip and kind in RANK_FILES:
                print(f"{kind}: left out with --gzip", file=sys.stderr)
                continue
            for mib in sizes:
                target = Path(tmp) / f"{kind}-{mib}.log"
                path = (build_job(source, mib << 20, target, RANK_FILES[kind])
                        if kind in RANK_FILES else build(source, mib << 20, target, kind in RUNS))
                given = packed(path) if args.gzip else path
                json_out = Path(tmp) / "out.json"
                rounds = []
                for number in range(args.repeat):
                    print(f"{kind} {mib} MiB: round {number + 1}/{args.repeat}",
                          file=sys.stderr, flush=True)
                    rounds.append(measure(path, given, pattern, json_out, jobs))
                    print("  " + ", ".join(f"{reader} {times[0]:.2f} s"
                                           for reader, times in rounds[-1].items()),
                          file=sys.stderr, flush=True)
                floor = statistics.median(r["grep -c"][0] for r in rounds)
                readers = list(rounds[0])
                runs = [r for r in readers if r.startswith("diagnose --jobs")]
                base = statistics.median(r[runs[0]][0] for r in rounds) if len(runs) > 1 \
                    else None  # the speed-up over the first --jobs value
                outputs = {r: _json_of(json_out, int(r.rsplit(" ", 1)[1]))
                           if r.startswith("diagnose --jobs") else json_out for r in readers}
                for reader in readers:
                    if reader.startswith("busy loop"):
                        continue
                    print(_row(kind, mib, reader, rounds, floor, base, outputs[reader],
                               args.gzip), flush=True)
                if max(jobs) > 1:
                    print(_ceiling(kind, mib, rounds, max(jobs)), flush=True)
                _check_same([outputs[r] for r in readers if r.startswith("diagnose --jobs")])
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
                    given.unlink(missing_ok=True)


def _row(kind: str, mib: int, reader: str, rounds: list[dict], floor: float,
         base: float | None, output: Path, gzipped: bool) -> str:
    """One line of the table: median wall time, the largest peak RSS of the process and of
    its largest worker over the rounds, the speed-up over the first diagnose run."""
    wall = statistics.median(r[reader][0] for r in rounds)
    cpu = statistics.median(r[reader][4] for r in rounds)
    peak = max(r[reader][1] for r in rounds) / 1024
    worker = max(r[reader][3] for r in rounds) / 1024
    status = rounds[-1][reader][2]
    is_diagnose = reader.startswith("diagnose")
    size = output.stat().st_size if is_diagnose and status in (0, 1) else None
    refused = is_diagnose and status == 2
    label = f"{kind}.gz" if gzipped and is_diagnose else kind
    speed = f"{base / wall:.2f}x" if is_diagnose and base else ""
    return (f"| {label} | {mib} | {reader} | {wall:.2f} | {cpu:.2f} | "
            + ("refused (exit 2) | | " if refused else f"{mib / wall:.1f} | {wall / floor:.0f} | ")
            + f"{peak:.0f} | {f'{worker:.0f}' if worker else ''} | {speed} | "
            + f"{size if size is not None else ''} |")


def _ceiling(kind: str, mib: int, rounds: list[dict], copies: int) -> str:
    """The busy-loop row: median wall time of ``copies`` loops at once, and the speed-up they
    gain over one alone (``copies x alone / together``)."""
    alone = statistics.median(r["busy loop alone"][0] for r in rounds)
    together = statistics.median(r[f"busy loop x{copies} at once"][0] for r in rounds)
    return (f"| {kind} | {mib} | ceiling: {copies} busy loops at once (alone {alone:.2f} s) | "
            f"{together:.2f} | | | | | | {copies * alone / together:.2f}x | |")


def _check_same(outputs: list[Path]) -> None:
    """Say on stderr when the JSON of the --jobs values differ (they must not)."""
    texts = {path.read_bytes() for path in outputs if path.exists()}
    if len(texts) > 1:
        print(f"DIFFERENT JSON across --jobs: {', '.join(map(str, outputs))}", file=sys.stderr)


if __name__ == "__main__":
    main()
