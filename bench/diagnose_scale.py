#!/usr/bin/env python3
"""Throughput and peak memory of ``exemplar-tune diagnose`` on large logs, side by side with
``grep -c`` and a plain Python line loop over the same file.

Each input is a real log of the test corpus repeated to the size asked: an NCCL INFO log with
COLL lines (NVIDIA/nccl#1193, 128 ranks), a Megatron-DeepSpeed step log (bigscience) and an
nccl-tests run (xxrjun/nccl-tests-cluster, 80 ranks). In ``steplog`` each copy starts its
iterations again (diagnose reads the longest run); in ``steplog-run`` the copies go on
counting, so the log is one run and every one of its steps is judged; ``steplog-ranks`` is
a job of 1000 rank files, each such a run, read with ``diagnose --ranks`` (every rank
compared at every iteration). For each size the three readers run in turn, ``--repeat``
interleaved rounds, median kept:

* ``grep -c PATTERN`` - the floor, one pass in C;
* a plain Python ``for line in file`` loop counting the lines;
* ``exemplar-tune diagnose FILE --format json`` - with its peak RSS (``wait4``) and the size
  of the JSON it wrote.

A diagnose run that exits 2 (the input refused) is reported as such. Progress goes to stderr,
the table to stdout.

    python bench/diagnose_scale.py                          # 10 and 100 MiB, 1 round
    python bench/diagnose_scale.py --sizes 10,100,1024 --repeat 3 --kinds nccl-log
    python bench/diagnose_scale.py --sizes 100 --gzip      # diagnose reads the .gz
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
import time
from pathlib import Path

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
RUNS = {"steplog-run", "steplog-ranks"}  # kinds whose copies go on counting iterations
RANK_FILES = {"steplog-ranks": 1000}  # kinds read as a job of this many rank files
_ITERATION = re.compile(rb"(iteration\s+)(\d+)/")
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


def run(argv: list[str], output: Path) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in KiB, exit status) of one run; stdout to ``output`` (a real
    file: GNU grep stops at the first match when its output is /dev/null)."""
    with open(output, "wb") as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stderr.close()  # type: ignore[union-attr]
    return seconds, usage.ru_maxrss, proc.returncode


def packed(path: Path) -> Path:
    """``path`` compressed with ``gzip -1`` beside it (the plain file kept)."""
    target = path.with_name(path.name + ".gz")
    with open(target, "wb") as out:
        subprocess.run(["gzip", "-1", "-c", str(path)], stdout=out, check=True)
    return target


def measure(path: Path, given: Path, pattern: str,
            json_out: Path) -> dict[str, tuple[float, int, int]]:
    """One round: grep and the line loop on ``path``, diagnose on ``given`` (it or its .gz)."""
    job = ["--ranks"] if given.is_dir() else []
    cli = [sys.executable, "-m", "exemplar_tune.cli", "-q", "diagnose", *job, str(given),
           "--format", "json"]
    count = json_out.with_suffix(".count")
    return {"grep -c": run(["grep", "-rc" if job else "-c", pattern, str(path)], count),
            "python loop": run([sys.executable, "-c", LINE_LOOP, str(path)], count),
            "diagnose": run(cli, json_out)}


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
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    if unknown := sorted(set(kinds) - set(LOGS)):
        parser.error(f"--kinds: unknown {', '.join(unknown)}")
    print("| input | MiB | reader | wall s | MiB/s | x grep | peak MiB | JSON bytes |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
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
                    rounds.append(measure(path, given, pattern, json_out))
                floor = statistics.median(r["grep -c"][0] for r in rounds)
                for reader in ("grep -c", "python loop", "diagnose"):
                    wall = statistics.median(r[reader][0] for r in rounds)
                    peak = max(r[reader][1] for r in rounds) / 1024
                    status = rounds[-1][reader][2]
                    size = json_out.stat().st_size if reader == "diagnose" and status in (0, 1) \
                        else None
                    refused = reader == "diagnose" and status == 2
                    label = f"{kind}.gz" if args.gzip and reader == "diagnose" else kind
                    print(f"| {label} | {mib} | {reader} | {wall:.2f} | "
                          + ("refused (exit 2) | | " if refused else
                             f"{mib / wall:.1f} | {wall / floor:.0f} | ")
                          + f"{peak:.0f} | {size if size is not None else ''} |", flush=True)
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
                    given.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
