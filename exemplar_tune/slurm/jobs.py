"""Run one benchmark shape as a Slurm job: submit, wait, collect each rank's output, judge.

:func:`run_job` starts ``srun`` (srun mode) or ``sbatch --wait`` (sbatch mode, the batch
script in a private temporary directory, ``--output``/``--error`` per job there) with a unique
job name, as argv lists (:mod:`.shape`). While it waits it looks the job up every
:data:`POLL_S` seconds (``squeue --states=all --name``): a job held after a failed prolog, or
pending on a drained or down node it requested, is cancelled at once; at the shape's timeout
the job is cancelled (``scancel --name``) and the launcher's process group ends. The job's
final record decides: COMPLETED is a measurement; FAILED, CANCELLED, TIMEOUT, PREEMPTED,
NODE_FAIL ... are not, and :attr:`JobRun.failure` says why in one line. Each rank's output is
split from the ``--label`` prefixes and placed on its node, and each node on its inventory host.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from exemplar_tune.fleet import reaper
from exemplar_tune.slurm import ranks as rank_output
from exemplar_tune.slurm.commands import SlurmError, expand_hostlist, last_line, program
from exemplar_tune.slurm.records import JOB_FIELDS, JobRecord, failure, parse_jobs
from exemplar_tune.slurm.shape import SlurmShape, batch_script, sbatch_argv, srun_argv

POLL_S = 5.0
FINAL_WAIT_S = 15.0
KILL_GRACE_S = 10.0
STUCK_REASONS = ("ReqNodeNotAvail",)
JOB_PREFIX = "exemplar-"
SUBMITTED = "slurm job {} submitted"  # the ledger event that names a job of an experiment


class JobError(RuntimeError):
    """The job could not be submitted at all (no launcher, no node list): one line."""


@dataclass
class JobRun:
    """One finished (or abandoned) job: its output by rank, its nodes, and why it failed."""

    job_id: str | None
    failure: str | None
    stdout: str
    stderr: str
    log: str
    nodes: dict[str, str | None] = field(default_factory=dict)  # node -> inventory host
    seconds: float = 0.0


@dataclass
class _Launch:
    """What was started and what came back."""

    argv: list[str]
    job_name: str
    rc: int = 0
    out: str = ""
    err: str = ""
    stopped: str | None = None  # why we cancelled it, if we did
    job_id: str | None = None


def run_job(name: str, command: Sequence[str], shape: SlurmShape, env: Mapping[str, str],
            timeout: float, workdir: Path | None = None,
            hosts: Mapping[str, str] | None = None,
            on_submit: Callable[[str], None] | None = None) -> JobRun:
    """Run shape ``name`` (``command`` on every rank) as a Slurm job and collect it.

    ``env`` is added to the launcher's environment and its names to ``--export``; ``hosts``
    maps inventory hosts to Slurm nodes (needed by ``nodelist: inventory``; used to name the
    host of each node). ``on_submit`` receives the job's unique name before it is submitted
    (the loop records it, so that a job of a controller that died can be cancelled). Raises
    :class:`JobError` only when nothing could be submitted.
    """
    start = time.monotonic()
    nodes = _requested_nodes(shape, hosts)
    job_name = f"{JOB_PREFIX}{name}-{secrets.token_hex(4)}"
    if on_submit is not None:
        on_submit(job_name)
    try:
        if shape.mode == "srun":
            launch = _run_srun(shape, command, job_name, nodes, env, timeout, workdir)
        else:
            launch = _run_sbatch(shape, command, job_name, nodes, env, timeout, workdir)
    except SlurmError as exc:
        raise JobError(str(exc)) from None
    record = _final_record(job_name)
    return _collect(launch, record, shape, hosts or {}, time.monotonic() - start)


def _requested_nodes(shape: SlurmShape, hosts: Mapping[str, str] | None) -> list[str]:
    if shape.needs_inventory:
        if not hosts:
            raise JobError("slurm.nodelist: inventory needs the inventory's hosts (run it "
                           "through 'tune' or 'apply --bench' with -i)")
        return list(dict.fromkeys(hosts.values()))
    return list(shape.nodelist or ())


def _run_srun(shape: SlurmShape, command: Sequence[str], job_name: str, nodes: list[str],
              env: Mapping[str, str], timeout: float, workdir: Path | None) -> _Launch:
    argv = srun_argv(program("srun"), shape, command, job_name, nodes, list(env))
    return _launch(_Launch(argv, job_name), env, timeout, workdir)


def _run_sbatch(shape: SlurmShape, command: Sequence[str], job_name: str, nodes: list[str],
                env: Mapping[str, str], timeout: float, workdir: Path | None) -> _Launch:
    try:
        directory = Path(tempfile.mkdtemp(prefix=f"exemplar-slurm-{os.getpid()}-",
                                             dir=shape.output_dir))
    except OSError as exc:
        raise SlurmError(f"slurm.output_dir {shape.output_dir}: {exc.strerror or exc}") from None
    try:
        script = directory / "job.sh"
        script.write_text(batch_script(program("srun"), shape, command))
        script.chmod(0o700)
        argv = sbatch_argv(program("sbatch"), shape, str(script), job_name, nodes, list(env),
                           str(directory / "%j.out"), str(directory / "%j.err"))
        launch = _launch(_Launch(argv, job_name), env, timeout, workdir)
        launch.job_id = launch.out.strip().split(";")[0] or None
        if launch.job_id:
            launch.out = _read(directory / f"{launch.job_id}.out")
            launch.err = _read(directory / f"{launch.job_id}.err") + launch.err
        return launch
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _launch(launch: _Launch, env: Mapping[str, str], timeout: float,
            workdir: Path | None) -> _Launch:
    """Start the launcher and wait for it, watching the job (see the module docstring)."""
    if workdir and not workdir.is_dir():
        raise SlurmError(f"workdir {workdir} is not a directory")
    try:  # supervised: the launcher ends with this controller (exemplar_tune.fleet.reaper)
        proc = subprocess.Popen(reaper.command(launch.argv), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir,
                                env={**os.environ, **env}, start_new_session=True)
    except OSError as exc:
        raise SlurmError(f"cannot start {launch.argv[0]}: {exc.strerror or exc}") from None
    deadline = time.monotonic() + timeout
    while True:
        try:
            out, err = proc.communicate(timeout=max(0.1, min(POLL_S, deadline - time.monotonic())))
            break
        except subprocess.TimeoutExpired:
            launch.stopped = _why_stop(launch.job_name, deadline, timeout)
            if launch.stopped:
                out, err = _stop(proc, launch.job_name)
                break
        except BaseException:  # interrupted: the job must not run on without its controller
            _stop(proc, launch.job_name)
            raise
    launch.rc, launch.out, launch.err = proc.returncode, _text(out), _text(err)
    return launch


def _why_stop(job_name: str, deadline: float, timeout: float) -> str | None:
    """Why the job must be given up now: the deadline passed, or it can never start."""
    if time.monotonic() >= deadline:
        return f"timed out after {timeout:g} s"
    record = find_job(job_name)
    if record and record.held:
        return (f"slurm job {record.job_id} was held ({record.reason}): a prolog failed on "
                "one of its nodes, which is drained")
    if record and record.state == "PENDING" and record.reason.startswith(STUCK_REASONS):
        return f"slurm job {record.job_id} cannot start ({record.reason})"
    return None


def _stop(proc: subprocess.Popen[bytes], job_name: str) -> tuple[bytes, bytes]:
    """Cancel the job, then SIGTERM / SIGKILL the launcher's process group; its output."""
    with contextlib.suppress(SlurmError, OSError, subprocess.SubprocessError):
        subprocess.run([program("scancel"), f"--name={job_name}"], capture_output=True,
                       timeout=30, check=False)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            return proc.communicate(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            continue
    proc.wait()
    return b"", b""


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def cancel_jobs(names: Iterable[str]) -> list[str]:
    """Cancel the jobs named ``names`` that Slurm still runs or queues; their ids.

    Nothing happens (``[]``) when none is active or Slurm cannot be asked: the jobs of a
    finished run have ended long ago, and a host without a Slurm client ran none.
    """
    names = sorted({n for n in names if n.startswith(JOB_PREFIX)})
    if not names:
        return []
    try:
        listed = subprocess.run([program("squeue"), "--noheader", f"--name={','.join(names)}",
                                 "-o", "%i"], capture_output=True, text=True, timeout=30,
                                check=False)
        ids = listed.stdout.split() if listed.returncode == 0 else []
        if ids:
            subprocess.run([program("scancel"), *ids], capture_output=True, timeout=30,
                           check=False)
    except (SlurmError, OSError, subprocess.SubprocessError):
        return []
    return ids


def submitted_jobs(events: Iterable[dict]) -> list[str]:
    """The names of the jobs an experiment's ledger events say it submitted."""
    head, _, tail = SUBMITTED.partition("{}")
    return [e["message"][len(head):len(e["message"]) - len(tail)] for e in events
            if e["message"].startswith(head) and e["message"].endswith(tail)]


def find_job(job_name: str) -> JobRecord | None:
    """The job named ``job_name`` in any state slurmctld still remembers, or None."""
    try:
        text = _squeue(job_name)
    except SlurmError:
        return None
    jobs = parse_jobs(text)
    return jobs[0] if jobs else None


def _squeue(job_name: str) -> str:
    done = subprocess.run([program("squeue"), "--noheader", "--states=all",
                           f"--name={job_name}", "-O", JOB_FIELDS],
                          capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise SlurmError(f"squeue: exit {done.returncode}{last_line(done.stderr)}")
    return done.stdout


def _final_record(job_name: str) -> JobRecord | None:
    """The job's record once its state is final (COMPLETING passes); None if unknown."""
    deadline = time.monotonic() + FINAL_WAIT_S
    record = find_job(job_name)
    while record is not None and record.active and time.monotonic() < deadline:
        time.sleep(0.2)
        record = find_job(job_name)
    return record


def _collect(launch: _Launch, record: JobRecord | None, shape: SlurmShape,
             hosts: Mapping[str, str], seconds: float) -> JobRun:
    """Split the output by rank, place the ranks, and decide whether it is a measurement."""
    by_rank, other = rank_output.split_ranks(launch.out, launch.err)
    try:
        nodes = expand_hostlist(record.nodelist) if record else []
    except SlurmError:
        nodes = []
    node_hosts = {node: host for host, node in hosts.items()}
    rank_output.place_ranks(by_rank, nodes, shape.ntasks_per_node, node_hosts)
    job_id = record.job_id if record else launch.job_id
    why = _failure(launch, record, other)
    header = (f"# slurm job {job_id or '?'} ({launch.job_name}) "
              f"{record.state if record else 'state unknown'} on {','.join(nodes) or '?'}"
              + (f": {why}" if why else ""))
    stderr = rank_output.joined(by_rank, "stderr") + "".join(f"{line}\n" for line in other)
    return JobRun(job_id, why, rank_output.joined(by_rank, "stdout"), stderr,
                  rank_output.log_text(header, by_rank, other),
                  {node: node_hosts.get(node) for node in nodes}, seconds)


def _failure(launch: _Launch, record: JobRecord | None, other: list[str]) -> str | None:
    """Why this is no measurement (one line), or None. A failed job's reason ends with
    srun's own error line (it names the node and the task), else the last line on stderr."""
    if launch.stopped:
        cancelled = f" (slurm job {record.job_id} cancelled)" if record else ""
        return launch.stopped + ("" if launch.stopped.startswith("slurm job") else cancelled)
    if record is not None and (why := failure(record)):
        if record.state != "FAILED":
            return why
        errors = [line for line in other if line.startswith("srun: error:")]
        return why + (last_line(errors[-1]) if errors else last_line(launch.err))
    if launch.rc != 0:
        return f"{launch.argv[0].rsplit('/', 1)[-1]} exit status {launch.rc}" + last_line(
            launch.err or launch.out)
    return None
