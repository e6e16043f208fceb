"""``diagnose --ranks --jobs N``: a job's files read in chunks by worker processes give the
report one process gives, exactly: findings, counts, evidence line numbers (in the later
chunks too), summary, and the same one-line error for a file that cannot be read.

Real captures of the corpus are repeated across many rank files (their hosts renamed per rank
where the log names them). Chunks are as small as one file here (``MIN_CHUNK`` is 1), so that
a few files are several chunks."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

import exemplar_tune.diagnose as diagnose_module
from exemplar_tune import cli
from exemplar_tune.diagnose import DiagnoseError, diagnose_job, parallel, slow_ranks
from exemplar_tune.diagnose.stream import size_text
from exemplar_tune.errors import UserError
from tests.corpus import REALWORLD
from tests.helpers import cli_env

STEPTIME = REALWORLD / "steptime"
BIGSCIENCE = STEPTIME / "bigscience-workshop-bigscience-meg-ds-3d-n16-ds-off-per-iteration.log"
COMPLETION = (REALWORLD / "nccl-log"
              / "nvidia-nccl-1405-ib-plugin-completion-status12-vendor129-roce.log")
COLL = REALWORLD / "nccl-coll" / "nvidia-nccl-1193-ray-allreduce-128ranks.log"
TESTS80 = (REALWORLD / "nccl-tests"
           / "xxrjun-nccl-tests-cluster-h100-10nodes-80ranks-five-collectives.log")
INTERLEAVED = (REALWORLD / "nccl-tests"
               / "nvidia-nccl-tests-182-two-unsynchronised-runs-interleaved.txt")
_PREFIX = re.compile(r"(?<![\w.-])([A-Za-z][\w.-]*?):(\d+):(\d+) \[")
_ELAPSED = re.compile(r"(elapsed time per iteration \(ms\): )([\d.]+)")
_ITERATION = re.compile(r"(iteration\s+)(\d+)/")


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Every file may be a chunk of its own (a real job shares out 8 MiB or more a worker)."""
    monkeypatch.setattr(parallel, "MIN_CHUNK", 1)


@pytest.fixture
def read_again(monkeypatch) -> list[str]:
    """Why each chunk that did not fold was read again in this process, in order."""
    reasons: list[str] = []
    original = parallel._read_again

    def spy(reader, part, job, source, kind, why):
        reasons.append(why)
        return original(reader, part, job, source, kind, why)

    monkeypatch.setattr(parallel, "_read_again", spy)
    return reasons


def renamed(text: str, rank: int) -> str:
    """``text`` with every NCCL ``host:pid:tid [dev]`` prefix's host named after ``rank``."""
    return _PREFIX.sub(lambda m: f"{m.group(1)}-r{rank}:{m.group(2)}:{m.group(3)} [", text)


def write_job(root: Path, ranks: int, text: Callable[[int], str]) -> Path:
    """A job's directory: ``rank000.log`` ... holding ``text(rank)`` each."""
    root.mkdir(exist_ok=True)
    for rank in range(ranks):
        (root / f"rank{rank:03d}.log").write_text(text(rank))
    return root


def outcome(job: Path, jobs: int, **bounds) -> str:
    """The report as JSON text, or the one-line error, of ``diagnose --ranks JOB``."""
    try:
        return json.dumps(diagnose_job([str(job)], jobs=jobs, **bounds).to_dict())
    except (UserError, DiagnoseError) as exc:
        return f"{type(exc).__name__}: {exc}"


def same(job: Path, jobs: int = 3, **bounds) -> dict | str:
    """The outcome with ``jobs`` workers, asserted equal to one process's; the report."""
    serial, split = outcome(job, 1, **bounds), outcome(job, jobs, **bounds)
    assert split == serial
    return json.loads(serial) if serial.startswith("{") else serial


def one_run(copies: int, slower: float = 1.0) -> str:
    """The real Megatron-DeepSpeed log repeated, its iterations numbered on (one run), each
    step time times ``slower``."""
    text = BIGSCIENCE.read_text()
    last = max(int(m.group(2)) for m in _ITERATION.finditer(text))
    runs = "".join(_ITERATION.sub(lambda m, k=k: f"{m.group(1)}{int(m.group(2)) + k * last}/",
                                  text) for k in range(copies))
    return runs if slower == 1.0 else _ELAPSED.sub(
        lambda m: f"{m.group(1)}{float(m.group(2)) * slower:.1f}", runs)


def findings(report: dict, check: str) -> list[dict]:
    return [f for f in report["findings"] if f["check_id"] == check]


# --- step-time logs --------------------------------------------------------------------------

def test_a_slow_rank_is_named_across_chunks_with_its_own_lines(tmp_path, read_again):
    """31 ranks of a real Megatron-DeepSpeed run in 3 chunks, rank 29 (the last chunk) 6 %
    slower: the ranks of every chunk are compared, and the evidence cites rank 29's file."""
    job = write_job(tmp_path / "job", 31, lambda r: one_run(2, 1.06 if r == 29 else 1.0))
    report = same(job, jobs=3)
    [slow] = findings(report, "workload.slow-ranks")
    assert slow["status"] == "warn" and slow["values"]["ranks"] == 31
    assert [s["rank"] for s in slow["values"]["slow"]] == ["rank029"]
    assert any(e.startswith("rank029:") for e in slow["evidence"])
    assert read_again == []


@pytest.mark.parametrize("name", [
    "pytorch-torchtitan-364-wps-log-freq10.log",  # several launcher prefixes per line
    "orangingq-torchtitan-h200-4gpu-llama8b-1f1b-rank-prefix.log",  # ranks in one file
    "deepspeedai-deepspeed-2629-stdout-prefix-timer.log",
    "malaysia-ai-jupyter-gpu-ray-trainworker-aks-hf-trainer-tqdm-loss-dicts.log",  # bars
    "lightning-ai-pytorch-lightning-4225-tqdm-lines-two-runs.log",
    "nvidia-nemo-framework-launcher-55-progress-bar.log",
    "lightning-ai-litgpt-834-fabric-ddp-iter-time-accumulation.log",
    "nvidia-nccl-743-megatron-bert-interval10.log",
    "nvidia-bionemo-recipes-740-train-step-timing.log",  # records that may wrap, at the end
])
def test_step_logs_of_a_job_give_one_report(tmp_path, read_again, name):
    job = write_job(tmp_path / "job", 7, lambda r: (STEPTIME / name).read_text())
    same(job, jobs=3)
    assert read_again == []


def test_plain_step_times_of_a_job_give_one_report(tmp_path, read_again):
    """A column of numbers per rank (no line of anything else anywhere), rank 5 slower."""
    job = write_job(tmp_path / "job", 8, lambda r: "".join(
        f"{1000 + (i % 5) + (40 if r == 5 else 0)}\n" for i in range(40)))
    report = same(job, jobs=3)
    [slow] = findings(report, "workload.slow-ranks")
    assert [s["rank"] for s in slow["values"]["slow"]] == ["rank005"]
    assert read_again == []


def test_the_ranks_compared_stay_capped_after_the_merge(tmp_path, monkeypatch):
    """Only the first sources seen are compared (MAX_RANKS, here 5 of 9): the same ones."""
    monkeypatch.setattr(slow_ranks, "MAX_RANKS", 5)
    job = write_job(tmp_path / "job", 9, lambda r: one_run(1, 1.05 if r == 7 else 1.0))
    report = same(job, jobs=3)
    assert findings(report, "workload.slow-ranks")[0]["values"]["ranks"] == 5


# --- NCCL logs ---------------------------------------------------------------------------------

def test_nccl_failures_of_many_ranks_fold_with_lines_in_the_later_chunks(tmp_path, read_again):
    """A real failing rank's log as each of 30 ranks' (its host renamed): one finding per kind
    of failure, counted 30 times, its last line in the last chunk."""
    text = COMPLETION.read_text()
    job = write_job(tmp_path / "job", 30, lambda r: text.replace("kp-ddp-worker-0",
                                                                 f"kp-ddp-worker-{r}"))
    report = same(job, jobs=3)
    [completion] = [f for f in findings(report, "fabric.nccl-errors")
                    if f["values"]["pattern"].startswith("IB completion error 12")]
    assert completion["values"]["hostlist"] == "kp-ddp-worker-[0-29]"
    lines = text.count("\n") + 1
    assert completion["values"]["last"] > 20 * lines  # numbered across the whole job
    assert len(completion["values"]["lines"]) <= 32
    assert read_again == []


@pytest.mark.parametrize("name", [
    "datacrunch-research-nccl-ebpf-gb300-nvl72-2trays-mnnvl-init-2.29.7.log",  # INFO, GDR
    "lightning-ai-lit-llama-380-slurm-async-port-error-redacted-hosts.log",
    "nvidia-nccl-230-timestamp-openmpi-prefix-async-catastrophic.log",
    "nvidia-nccl-529-bootstrap-and-socket-on-ip6tnl0-veth0.log",  # interfaces
])
def test_nccl_logs_of_a_job_give_one_report(tmp_path, read_again, name):
    text = (REALWORLD / "nccl-log" / name).read_text()
    same(write_job(tmp_path / "job", 7, lambda r: renamed(text, r)), jobs=3)
    assert read_again == []


def test_coll_calls_logged_by_every_rank_count_once(tmp_path, read_again):
    """Every rank logs the same calls: counted once across the chunks, as in one process."""
    text = COLL.read_text()
    report = same(write_job(tmp_path / "job", 9, lambda r: renamed(text, r)), jobs=3)
    once = diagnose_job([str(write_job(tmp_path / "one", 2, lambda r: renamed(text, r)))])
    assert report["summary"]["coll"]["calls"] == once.summary["coll"]["calls"]
    assert read_again == []


def test_coll_runs_that_go_on_into_the_next_chunk_are_read_again(tmp_path, read_again):
    """The same file as every rank's: one emitter's run of an opCount goes on from one file
    into the next, so those chunks are counted after the ones before, here."""
    text = COLL.read_text()
    same(write_job(tmp_path / "job", 6, lambda r: text), jobs=3)
    assert read_again and all("goes on" in why for why in read_again)


# --- nccl-tests --------------------------------------------------------------------------------

def test_nccl_tests_runs_of_every_rank_fold(tmp_path, read_again):
    """Each rank file one real 80-rank run of five collectives: their runs fold per test."""
    report = same(write_job(tmp_path / "job", 6, lambda r: TESTS80.read_text()), jobs=3)
    assert all(t["runs"] == 6 for t in report["summary"]["tests"])
    assert read_again == []


def test_a_table_open_at_a_files_end_is_read_on_with_the_next(tmp_path, read_again):
    """Runs interleaved without a footer: the next file's rows go on the open table in one
    process; so do they here (the chunk read again after the one before)."""
    same(write_job(tmp_path / "job", 4, lambda r: INTERLEAVED.read_text()), jobs=2)
    assert read_again


# --- errors ------------------------------------------------------------------------------------

def _failing_job(root: Path, bad: dict[int, str]) -> Path:
    """Eight ranks of a real NCCL log; ranks in ``bad`` damaged: ``gzip`` (cut short) or
    ``malformed`` (an error return code of 5000 digits, which no reader reads)."""
    text = COMPLETION.read_text()
    write_job(root, 8, lambda r: renamed(text, r))
    for rank, how in bad.items():
        path = root / f"rank{rank:03d}.log"
        if how == "gzip":
            data = gzip.compress(path.read_bytes())
            path.write_bytes(data[: len(data) // 2] + b"\0" * 64)
        else:
            with path.open("a") as out:
                out.write(f"h{rank}:1:2 [0] NCCL INFO init.cc:5 -> {'7' * 5000}\n")
    return root


@pytest.fixture
def small_window(monkeypatch):
    """The format recognised on the first KiB (the job's files are read after it, in turn:
    a small job's files would all be read for the window, their read errors first)."""
    monkeypatch.setattr(diagnose_module, "DETECT_WINDOW", 1 << 10)


@pytest.mark.parametrize("bad", [{6: "gzip"}, {6: "malformed"}, {2: "malformed", 6: "gzip"},
                                 {2: "gzip", 6: "malformed"}], ids=str)
def test_a_bad_file_gives_the_error_one_process_gives(tmp_path, small_window, bad):
    """A damaged file in a later chunk: the same one-line error; with two, the first's."""
    error = same(_failing_job(tmp_path / "job", bad), jobs=4)
    assert isinstance(error, str) and "\n" not in error
    first = bad[min(bad)]
    assert ("gzip data" if first == "gzip" else "malformed nccl-log output") in error


def test_the_input_bound_counts_every_chunk(tmp_path, small_window):
    """--max-input bounds the job's bytes in all, the chunks' together: past it, the bound's
    one-line error."""
    job = write_job(tmp_path / "job", 8, lambda r: renamed(COMPLETION.read_text(), r))
    size = sum(p.stat().st_size for p in job.iterdir())
    assert isinstance(same(job, jobs=3, max_bytes=size), dict)
    assert same(job, jobs=3, max_bytes=size - 100) == (
        f"UserError: --ranks: the 8 files: more than {size_text(size - 100)} to read; "
        "--max-input raises the bound")


def test_the_command_says_a_workers_error_in_one_line(tmp_path, capsys):
    job = _failing_job(tmp_path / "job", {5: "malformed"})
    code = cli.main(["diagnose", "--ranks", str(job), "--jobs", "3"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{job} (8 files): malformed nccl-log output" in err


def test_jobs_is_validated_and_documented():
    with pytest.raises(SystemExit):
        cli.main(["diagnose", "--ranks", ".", "--jobs", "0"])
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "diagnose", "--help"],
                         capture_output=True, text=True, env=cli_env(), check=True)
    assert "--jobs N" in " ".join(out.stdout.split())


def test_ctrl_c_ends_the_workers(tmp_path):
    """SIGINT to the command's process group (a terminal's Ctrl-C) while its workers read: it
    ends with 'interrupted', and no worker is left."""
    job = write_job(tmp_path / "job", 40, lambda r: one_run(10))  # 40 x 530 KiB: 2 chunks
    proc = subprocess.Popen([sys.executable, "-m", "exemplar_tune.cli", "diagnose", "--ranks",
                             str(job), "--jobs", "2", "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env(), start_new_session=True)
    workers: list[psutil.Process] = []
    deadline = time.monotonic() + 60
    while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
        workers = _workers(proc.pid)
        time.sleep(0.05)
    assert len(workers) == 2, "the workers did not start"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip() == "exemplar-tune: error: interrupted"
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert alive == []


def _workers(pid: int) -> list[psutil.Process]:
    """The worker processes under ``pid``: the children of its multiprocessing fork server."""
    found = []
    try:
        tree = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return found
    for proc in tree:
        try:
            parent = proc.parent()
            if parent is not None and "forkserver" in " ".join(parent.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


# --- the merges themselves -------------------------------------------------------------------

def _coll_line(host: str, pid: int, op: int, name: str, count: int) -> str:
    return (f"{host}:{pid}:{pid + 1} [0] NCCL INFO {name}: opCount {op:x} sendbuff 0x1 "
            f"recvbuff 0x2 count {count} datatype 7 op 0 root 0 comm 0x{pid:x} [nranks=4] "
            "stream 0x3")


def test_coll_counts_fold_across_any_cut():
    """Random COLL logs of four ranks (calls of a group sharing an opCount, sizes repeated)
    cut where one rank's lines end (as files are) or anywhere: where the counters fit (always
    at a rank's end), the merge holds what one counter fed every line holds."""
    import random

    from exemplar_tune.diagnose.nccl_coll import CollCounter

    def state(counter: CollCounter) -> tuple:
        def folded(seen):
            return (seen.count, seen.first, seen.last, seen.lines)
        return (counter.lines, counter.calls, counter.forgotten,
                {k: folded(v) for k, v in counter.seen.items()},
                {k: {s: folded(v) for s, v in sizes.items()}
                 for k, sizes in counter.sizes.items()},
                dict(counter._most), list(counter.seen), list(counter.sizes))

    rng = random.Random(7)
    merged = 0
    for _ in range(200):
        ops = [(rng.choice(["AllReduce", "AllGather"]), rng.choice([256, 4096, 65536]))
               for _ in range(rng.randint(1, 12))]
        repeats = [rng.randint(1, 3) for _ in ops]
        lines, ends = [], []
        for rank in range(4):  # each rank logs every call, a group's calls under one opCount
            lines += [_coll_line(f"h{rank}", 100 + rank, op // 2, *call)
                      for op, (call, times) in enumerate(zip(ops, repeats, strict=True))
                      for _ in range(times)]
            ends.append(len(lines))
        at_end = rng.random() < 0.5
        cut = rng.choice(ends[:-1]) if at_end else rng.randint(1, len(lines) - 1)
        whole, first, second = CollCounter(), CollCounter(), CollCounter()
        second.later()
        for n, line in enumerate(lines, 1):
            whole.feed(n, line)
            (first if n <= cut else second).feed(n if n <= cut else n - cut, line)
        assert first.fits(second) is None or not at_end
        if first.fits(second) is None:
            first.merge(second, cut)
            assert state(first) == state(whole)
            merged += 1
    assert merged > 100
