"""Benchmarks: the user's workload shapes, run from the controller and reduced to one number.

A benchmark file (YAML, ``schemas/benchmark.schema.json``) lists shapes::

    shapes:
      - name: allgather
        command: srun -N2 --ntasks-per-node=4 all_gather_perf -b 1M -e 16G -f 2
        parser: nccl-tests          # collective, sizes: [1G, 16G], metric: busbw | time
      - name: dense
        command: ["sbatch", "--wait", "train_dense.sbatch"]
        parser: megatron            # warmup: 10 (leading step-time lines dropped)
        timeout: 7200
        env: {NCCL_DEBUG: WARN}
        workdir: jobs/              # relative to the benchmark file

The command is run as given, from the controller: ``srun ...``, ``sbatch --wait ...``,
``torchrun ...`` or ``mpirun ...`` start the job on the cluster, and this module adds nothing to
it (no launcher, no host list, no shell). A string is split like a shell would split it
(``shlex``) but never run through one; write ``bash -c '...'`` for pipes and redirections. The
command runs in its own session; on timeout the whole process group gets SIGTERM (``srun``
then cancels its job step) and SIGKILL after a grace period, and whatever the command left
running is killed when it exits. stdout and stderr are parsed together (stdout first); the
``json`` parser reads stdout alone when it holds a document. Every other parser (``regex``
included) sees the lines as the program wrote them: launcher and log prefixes (``srun
--label``, OpenMPI tags, timestamps) and terminal noise are removed first
(:mod:`exemplar_tune.diagnose.normalize`).

With ``slurm:`` (``mode: srun|sbatch``, ``partition``, ``nodes``, ``nodelist: inventory|[names]``,
``time_limit``, ``container_image``, ``container_mounts``, ``export`` ...) the command is what
every rank runs and :mod:`exemplar_tune.slurm.jobs` launches it (``srun`` or ``sbatch --wait``),
collects each rank's output and maps the job's nodes back to inventory hosts; a job that
fails, is cancelled, hits its time limit or is preempted gives no measurement.

Each run gives a :class:`Measurement` or raises :class:`BenchmarkFailed` with a one-line
reason: command not found, exit status N (with the last stderr line), killed by signal, timed
out after N s, output unparsable (parser: why), no sample found (why), or wrong results
(nccl-tests rows with ``#wrong`` > 0: a fix that corrupts data is never faster). Output without
a parsable sample never yields a value.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO

import jsonschema
import yaml

from exemplar_tune.bounded_yaml import load_yaml
from exemplar_tune.diagnose import nccl_tests, steptime
from exemplar_tune.diagnose.normalize import normalize
from exemplar_tune.errors import UserError
from exemplar_tune.fleet import reaper
from exemplar_tune.inputs import one_line, read_input
from exemplar_tune.slurm.inventory import HostSource, InventoryError, host_nodes
from exemplar_tune.slurm.jobs import JobError, run_job
from exemplar_tune.slurm.shape import SlurmShape, check_slurm_command, slurm_shape

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "benchmark.schema.json"
DEFAULT_TIMEOUT_S = 3600.0
DEFAULT_WARMUP = 10
KILL_GRACE_S = 10.0
MAX_OUTPUT = 64 << 20  # bytes of a run's output that are parsed; more: no measurement
LOG_HEAD, LOG_TAIL = 1 << 20, 3 << 20  # bytes of each stream kept in a run's log
MAX_LINE = 64 << 10  # characters of one output line that are parsed; the rest is dropped
PARSER_KEYS = {"nccl-tests": {"collective", "sizes", "metric"}, "megatron": {"warmup"},
               "steptime": {"warmup"}, "regex": {"pattern"}, "json": {"path"}}
_SIZE_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class BenchmarkFileError(UserError):
    """A benchmark file that cannot be found, parsed or validated."""


class BenchmarkFailed(UserError):
    """A shape that gave no measurement: ``benchmark SHAPE: REASON`` (one line)."""

    def __init__(self, shape: str, reason: str, log_path: Path | None = None) -> None:
        super().__init__(f"benchmark {shape}: {reason}")
        self.shape, self.reason, self.log_path = shape, reason, log_path


@dataclass(frozen=True)
class BenchmarkSpec:
    """One workload shape of a benchmark file, with every default filled in."""

    name: str
    command: tuple[str, ...]
    parser: str
    timeout: float = DEFAULT_TIMEOUT_S
    higher_is_better: bool = False
    unit: str = ""
    collective: str | None = None
    sizes: tuple[int, ...] = ()
    metric: str = "busbw"
    warmup: int = DEFAULT_WARMUP
    pattern: str | None = None
    path: str | None = None
    env: Mapping[str, str] = field(default_factory=dict, hash=False)
    workdir: Path | None = None
    slurm: SlurmShape | None = None


@dataclass(frozen=True)
class Measurement:
    """One run of one shape: its value, the samples behind it and how long it took."""

    shape: str
    value: float
    samples: list[float] = field(hash=False)
    unit: str
    higher_is_better: bool
    seconds: float
    log_path: Path | None = None
    nodes: dict[str, str | None] = field(default_factory=dict, hash=False)  # Slurm node: host

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "higher_is_better": self.higher_is_better,
                "samples": list(self.samples), "seconds": round(self.seconds, 3),
                "log": str(self.log_path) if self.log_path else None, "nodes": dict(self.nodes)}


# --- the benchmark file -------------------------------------------------------------------

@cache
def benchmark_schema() -> dict[str, Any]:
    """The JSON schema every benchmark file must satisfy."""
    return json.loads(SCHEMA_PATH.read_text())


def load_benchmarks(path: str | Path) -> list[BenchmarkSpec]:
    """The shapes of the benchmark file at ``path``, validated, in file order (its YAML
    aliases bounded before any value is built: :mod:`exemplar_tune.bounded_yaml`)."""
    path = Path(path)
    try:
        data = load_yaml(read_input(path, "benchmark file"), f"benchmark file {path}")
    except UserError as exc:
        raise BenchmarkFileError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise BenchmarkFileError(f"benchmark file {path}: cannot read it: {_one_line(exc)}"
                                 ) from None
    validate_benchmarks(data, str(path))
    specs = [_spec(shape, path.parent) for shape in data["shapes"]]
    names = [s.name for s in specs]
    if dup := next((n for n in names if names.count(n) > 1), None):
        raise BenchmarkFileError(f"benchmark file {path}: shape {dup!r}: name: used twice")
    return specs


def validate_benchmarks(data: Any, where: str) -> None:
    """Raise ``BenchmarkFileError`` naming the first bad key (``shape 'dense': timeout: ...``)."""
    validator = jsonschema.Draft202012Validator(benchmark_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise BenchmarkFileError(f"benchmark file {where}: {_explain(errors[0], data)}")
    for i, shape in enumerate(data["shapes"]):
        try:
            _check_shape(shape)
        except ValueError as exc:
            raise BenchmarkFileError(f"benchmark file {where}: {_where(data, ['shapes', i])}"
                                     f"{exc}") from None


def _explain(error: jsonschema.ValidationError, data: Any) -> str:
    """``shape 'dense': timeout: <why>`` with unknown and missing keys named as keys."""
    path, instance, why = list(error.absolute_path), error.instance, one_line(error.message)
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        allowed = error.schema.get("properties", {})
        path.append(next(k for k in instance if k not in allowed))
        why = f"unknown key (allowed: {', '.join(allowed)})"
    elif error.validator == "required" and isinstance(instance, dict):
        path.append(next(k for k in error.validator_value if k not in instance))
        why = "missing (required" + (f" for parser {instance.get('parser')})"
                                     if "then" in error.schema_path else ")")
    return _where(data, path) + why


def _where(data: Any, path: list[Any]) -> str:
    """``shape 'dense': timeout: `` for a key inside a shape, else the dotted key."""
    if len(path) >= 2 and path[0] == "shapes" and isinstance(path[1], int):
        shape = data["shapes"][path[1]]
        name = shape.get("name") if isinstance(shape, dict) else None
        label = f"shape {name!r}" if isinstance(name, str) else f"shape #{path[1] + 1}"
        key = ".".join(map(str, path[2:]))
        return f"{label}: {key}: " if key else f"{label}: "
    return f"{'.'.join(map(str, path)) or '(top level)'}: "


def _check_shape(shape: dict[str, Any]) -> None:
    """What the schema cannot say: options of another parser, the regex, the command."""
    foreign = sorted(k for keys in PARSER_KEYS.values() for k in keys
                     if k in shape and k not in PARSER_KEYS[shape["parser"]])
    if foreign:
        raise ValueError(f"{foreign[0]}: not an option of parser {shape['parser']}")
    if "pattern" in shape:
        try:
            groups = re.compile(shape["pattern"]).groups
        except re.error as exc:
            raise ValueError(f"pattern: not a regular expression: {exc}") from None
        if groups != 1:
            raise ValueError(f"pattern: needs exactly one group (has {groups})")
    if isinstance(shape["command"], str):
        try:
            argv = shlex.split(shape["command"])
        except ValueError as exc:
            raise ValueError(f"command: cannot split it: {exc}") from None
        if not argv:
            raise ValueError("command: empty")
    if "slurm" in shape:
        command = shape["command"]
        check_slurm_command(shlex.split(command) if isinstance(command, str) else command)


def _spec(shape: dict[str, Any], base: Path) -> BenchmarkSpec:
    command = shape["command"]
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    parser, metric = shape["parser"], shape.get("metric", "busbw")
    busbw = parser == "nccl-tests" and metric == "busbw"
    unit = {"nccl-tests": "GB/s" if busbw else "us", "megatron": "ms", "steptime": "ms"}
    workdir = shape.get("workdir")
    return BenchmarkSpec(
        name=shape["name"], command=tuple(argv), parser=parser,
        timeout=float(shape.get("timeout", DEFAULT_TIMEOUT_S)),
        higher_is_better=shape.get("higher_is_better", busbw),
        unit=shape.get("unit", unit.get(parser, "")), collective=shape.get("collective"),
        sizes=tuple(_bytes(s) for s in shape.get("sizes", ())), metric=metric,
        warmup=shape.get("warmup", DEFAULT_WARMUP), pattern=shape.get("pattern"),
        path=shape.get("path"), env={k: str(v) for k, v in shape.get("env", {}).items()},
        workdir=base / workdir if workdir else None,
        slurm=slurm_shape(shape["slurm"], base) if "slurm" in shape else None)


def _bytes(size: int | str) -> int:
    """``1073741824`` from ``1073741824``, ``"1073741824"`` or ``"1G"``."""
    text = str(size)
    suffix = text[-1] if text[-1] in _SIZE_SUFFIX else ""
    return int(text[: len(text) - len(suffix)]) * _SIZE_SUFFIX[suffix]


# --- running ------------------------------------------------------------------------------

def run_benchmark(spec: BenchmarkSpec, *, env: Mapping[str, str] | None = None,
                  log_dir: Path | None = None, inventory: HostSource | None = None,
                  on_submit: Callable[[str], None] | None = None) -> Measurement:
    """Run ``spec``'s command once and parse its output.

    ``env`` is added to the controller's environment after ``spec.env`` (it wins). With
    ``log_dir``, stdout then stderr are saved as ``<log_dir>/<shape>.log``, failed runs too.
    The output goes to files as it comes, never into memory whole; at most
    :data:`MAX_OUTPUT` bytes are parsed. ``inventory`` (an ``AnsibleRun``: inventory and
    limit) gives a Slurm shape its hosts: ``nodelist: inventory`` and the host of each node;
    ``on_submit`` gets a Slurm job's name before it is submitted. Other shapes ignore both.
    """
    if spec.slurm is not None:
        return _run_on_slurm(spec, env or {}, log_dir, inventory, on_submit)
    with tempfile.TemporaryDirectory(prefix=f"exemplar-bench-{os.getpid()}-") as scratch:
        out_path, err_path = Path(scratch) / "stdout", Path(scratch) / "stderr"
        start = time.monotonic()
        rc, timed_out = _execute(spec, env or {}, out_path, err_path)
        seconds = time.monotonic() - start
        log_path = _save_log(Path(log_dir), spec.name, out_path, err_path) if log_dir else None
        if timed_out:
            raise BenchmarkFailed(spec.name, f"timed out after {spec.timeout:g} s", log_path)
        out, err = (_bounded_text(spec.name, path, log_path) for path in (out_path, err_path))
    if rc != 0:
        raise BenchmarkFailed(spec.name, _exit_reason(rc, err, out), log_path)
    samples, value = _parse_or_fail(spec, out, err, log_path)
    return Measurement(spec.name, value, samples, spec.unit, spec.higher_is_better, seconds,
                       log_path)


def _run_on_slurm(spec: BenchmarkSpec, env: Mapping[str, str], log_dir: Path | None,
                  inventory: HostSource | None,
                  on_submit: Callable[[str], None] | None) -> Measurement:
    """One run of a Slurm shape: the job's ranks' output parsed, its nodes recorded."""
    assert spec.slurm is not None
    try:
        hosts = host_nodes(inventory) if inventory is not None else None
        job = run_job(spec.name, spec.command, spec.slurm, {**spec.env, **env}, spec.timeout,
                      spec.workdir, hosts, on_submit)
    except (JobError, InventoryError) as exc:
        raise BenchmarkFailed(spec.name, str(exc)) from None
    log_path = None
    if log_dir:
        with _log_file(Path(log_dir), spec.name) as log, \
                tempfile.TemporaryFile() as text:  # a file: its size bounds the copy
            text.write(job.log.encode())
            text.seek(0)
            _copy_bounded(text, log)
        log_path = Path(log_dir) / f"{spec.name}.log"
    if job.failure:
        raise BenchmarkFailed(spec.name, job.failure, log_path)
    samples, value = _parse_or_fail(spec, job.stdout, job.stderr, log_path)
    return Measurement(spec.name, value, samples, spec.unit, spec.higher_is_better, job.seconds,
                       log_path, job.nodes)


def _execute(spec: BenchmarkSpec, env: Mapping[str, str], out_path: Path,
             err_path: Path) -> tuple[int, bool]:
    """Run the command with its output going to the two files: ``(exit status, timed out)``.

    The command runs supervised (:mod:`exemplar_tune.fleet.reaper`) in its own session: it ends
    when this controller ends, and its process group never outlives this call.
    """
    if spec.workdir and not spec.workdir.is_dir():
        raise BenchmarkFailed(spec.name, f"workdir {spec.workdir} is not a directory")
    environ = {**os.environ, **spec.env, **env}
    _check_program(spec.name, spec.command[0], environ.get("PATH"), spec.workdir)
    with out_path.open("wb") as out, err_path.open("wb") as err:
        try:
            proc = subprocess.Popen(reaper.command(spec.command), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, cwd=spec.workdir, env=environ,
                                    start_new_session=True)
        except OSError as exc:
            raise BenchmarkFailed(spec.name, f"cannot start {spec.command[0]}: "
                                  f"{exc.strerror or exc}") from None
        try:
            proc.wait(timeout=spec.timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _stop(proc)
            timed_out = True
        except BaseException:  # interrupted: the command must not run on alone
            _stop(proc)
            raise
        finally:
            _signal_group(proc.pid, signal.SIGKILL)  # what the command left behind
    return proc.wait(), timed_out


def _check_program(shape: str, program: str, path: str | None, workdir: Path | None) -> None:
    """``command not found`` / ``not executable`` before anything starts."""
    if os.sep in program:
        where = Path(program) if Path(program).is_absolute() else Path(workdir or ".") / program
        if not where.exists():
            raise BenchmarkFailed(shape, f"command not found: {program}")
        if where.is_dir() or not os.access(where, os.X_OK):
            raise BenchmarkFailed(shape, f"command not executable: {program}")
    elif shutil.which(program, path=path) is None:
        found = shutil.which(program, mode=os.F_OK, path=path)
        raise BenchmarkFailed(shape, f"command not executable: {program}" if found else
                              f"command not found: {program}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group, SIGKILL after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal_group(proc.pid, sig)
        try:
            proc.wait(timeout=KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _exit_reason(rc: int, err: str, out: str) -> str:
    if rc < 0:
        with contextlib.suppress(ValueError):
            return f"killed by signal {signal.Signals(-rc).name}"
        return f"killed by signal {-rc}"
    lines = [ln.strip() for ln in (err or out).splitlines() if ln.strip()]
    return f"exit status {rc}" + (f": {lines[-1][:200]}" if lines else " (no output)")


def _save_log(log_dir: Path, name: str, out_path: Path, err_path: Path) -> Path:
    """``<log_dir>/<name>.log`` (mode 0600): stdout, then stderr, each bounded (see
    :func:`_copy_bounded`; copied, never read whole)."""
    with _log_file(log_dir, name) as log:
        with out_path.open("rb") as source:
            _copy_bounded(source, log)
        if out_path.stat().st_size and err_path.stat().st_size and \
                _last_byte(out_path) != b"\n":
            log.write(b"\n")
        with err_path.open("rb") as source:
            _copy_bounded(source, log)
    return log_dir / f"{name}.log"


@contextlib.contextmanager
def _log_file(log_dir: Path, name: str) -> Iterator[BinaryIO]:
    """``<log_dir>/<name>.log`` opened for writing, readable by its owner only (benchmark
    output can hold what the job's environment held)."""
    log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(log_dir / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)  # a log kept from an earlier version
    with os.fdopen(fd, "wb") as log:
        yield log


def _copy_bounded(source: BinaryIO, log: BinaryIO) -> None:
    """Copy ``source`` into ``log``; past :data:`LOG_HEAD` + :data:`LOG_TAIL` bytes only its
    first and last bytes, with a line saying how much was left out (the results of most
    benchmarks are at the end)."""
    size = os.fstat(source.fileno()).st_size
    if size <= LOG_HEAD + LOG_TAIL:
        shutil.copyfileobj(source, log)
        return
    log.write(source.read(LOG_HEAD))
    log.write(f"\n[exemplar-tune: {size - LOG_HEAD - LOG_TAIL} bytes left out of this "
              "log; the whole output was parsed]\n".encode())
    source.seek(size - LOG_TAIL)
    shutil.copyfileobj(source, log)


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1)


def _bounded_text(shape: str, path: Path, log_path: Path | None) -> str:
    """The file as text with every line cut at :data:`MAX_LINE` characters;
    ``BenchmarkFailed`` when the file is larger than :data:`MAX_OUTPUT`."""
    size = path.stat().st_size
    if size > MAX_OUTPUT:
        raise BenchmarkFailed(shape, f"no measurement: output too large ({size >> 20} MiB; at "
                              f"most {MAX_OUTPUT >> 20} MiB are parsed)", log_path)
    lines, skipping = [], False
    with path.open(encoding="utf-8", errors="replace", newline="\n") as handle:
        while chunk := handle.readline(MAX_LINE):
            ends = chunk.endswith("\n")
            if not skipping:
                lines.append(chunk if ends else chunk + "\n")
            skipping = not ends  # the rest of a cut line follows: dropped
    return "".join(lines)


def _parse_or_fail(spec: BenchmarkSpec, out: str, err: str, log_path: Path | None
                   ) -> tuple[list[float], float]:
    """:func:`_parse`, every failure a one-line :class:`BenchmarkFailed`."""
    try:
        return _parse(spec, out, err)
    except _NoValue as exc:
        raise BenchmarkFailed(spec.name, str(exc), log_path) from None
    except RecursionError:
        raise BenchmarkFailed(spec.name, f"output unparsable ({spec.parser}: too deeply "
                              "nested)", log_path) from None
    except (ValueError, ArithmeticError, MemoryError) as exc:
        raise BenchmarkFailed(spec.name, f"output unparsable ({spec.parser}: "
                              f"{_one_line(exc)[:200]})", log_path) from None


def _joined(out: str, err: str) -> str:
    """stdout then stderr, normalised once (launcher prefixes, terminal noise), the text as
    printed and each line's rank kept for the step-time readers."""
    return normalize(out + ("\n" if out and not out.endswith("\n") and err else "") + err)


# --- parsing ------------------------------------------------------------------------------

class _NoValue(ValueError):
    """The output gave no value; the message is the one-line reason."""


def _unparsable(parser: str, why: str) -> _NoValue:
    return _NoValue(f"output unparsable ({parser}: {why})")


def _no_sample(why: str) -> _NoValue:
    return _NoValue(f"no sample found ({why})")


def value_of(spec: BenchmarkSpec, out: str) -> float:
    """The value ``spec``'s parser reads from a run's output; ``ValueError`` (one line) when it
    reads none."""
    return _parse(spec, out, "")[1]


def _parse(spec: BenchmarkSpec, out: str, err: str) -> tuple[list[float], float]:
    """``(samples, value)`` from the command's output, by the shape's parser."""
    if not (out + err).strip():
        raise _no_sample("the command printed nothing")
    samples, value = _PARSERS[spec.parser](spec, out, err)
    if not all(math.isfinite(v) for v in [*samples, value]):
        raise _unparsable(spec.parser, "a sample is not a finite number")
    return samples, value


def _parse_nccl(spec: BenchmarkSpec, out: str, err: str) -> tuple[list[float], float]:
    tests = nccl_tests.parse_tests(_joined(out, err))
    if not tests:
        raise _unparsable("nccl-tests", "no '# size count type ... busbw' table header")
    test = _pick_table(spec, [t for t in tests if t["rows"]])
    wrong = len(nccl_tests.wrong_rows(test))  # a row once, whichever half is wrong
    if wrong or test["out_of_bounds"]:
        raise _NoValue(f"wrong results ({test['collective']}: {wrong} row(s) with #wrong > 0, "
                       f"{test['out_of_bounds'] or 0} out-of-bounds values)")
    rows = {r["size"]: r for r in test["rows"]}
    samples = []
    for wanted in spec.sizes or (max(rows),):
        size = nccl_tests.row_size(rows, wanted)  # rounded to whole elements per rank
        if size is None:
            raise _no_sample(f"size {nccl_tests.human(wanted)} not in the "
                             f"{test['collective']} table ({nccl_tests.human(min(rows))} .. "
                             f"{nccl_tests.human(max(rows))})")
        group = rows[size]["out_of_place"]
        have = group.get("busbw") if spec.metric == "busbw" else \
            group.get("time_us", group.get("cputime_us"))
        if have is None:
            raise _unparsable("nccl-tests", f"no {spec.metric} at {nccl_tests.human(size)}")
        samples.append(have)
    return samples, _geomean(samples)


def _pick_table(spec: BenchmarkSpec, tests: list[dict[str, Any]]) -> dict[str, Any]:
    """The last table of ``spec.collective`` (or of the only collective measured)."""
    if not tests:
        raise _no_sample("nccl-tests table without result rows")
    found = list(dict.fromkeys(t["collective"] for t in tests))
    want = nccl_tests.collective(spec.collective) if spec.collective else found[0]
    if not spec.collective and len(found) > 1:
        raise _unparsable("nccl-tests", f"several collectives ({', '.join(found)}); "
                          "set collective")
    if want not in found:
        raise _no_sample(f"no {want} table; found {', '.join(found)}")
    return [t for t in tests if t["collective"] == want][-1]


def _geomean(values: list[float]) -> float:
    if len(values) == 1:
        return values[0]
    if any(v <= 0 for v in values):
        return 0.0
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _parse_steps(spec: BenchmarkSpec, out: str, err: str) -> tuple[list[float], float]:
    fmt, _, steps = steptime.parse_steps(_joined(out, err))
    if spec.parser == "megatron" and fmt != "megatron":
        raise _unparsable("megatron", "no 'elapsed time per iteration (ms):' lines")
    if not steps:
        raise _unparsable("steptime", "no Megatron, NeMo, step_time= or one-number-per-line "
                          "step times")
    samples = [ms for _, ms, _ in steps[spec.warmup:]]
    if not samples:
        raise _no_sample(f"{len(steps)} step time(s), all within the {spec.warmup} "
                         "warm-up steps")
    return samples, statistics.median(samples)


def _parse_regex(spec: BenchmarkSpec, out: str, err: str) -> tuple[list[float], float]:
    assert spec.pattern is not None  # required by the schema
    found = [m.group(1) for m in re.finditer(spec.pattern, _joined(out, err), re.MULTILINE)]
    if not found:
        raise _no_sample(f"pattern {spec.pattern!r} matched nothing")
    samples = []
    for token in found:
        try:
            samples.append(float(token))
        except (TypeError, ValueError):
            raise _unparsable("regex", f"match {token!r} is not a number") from None
    return samples, statistics.median(samples)


def _parse_json(spec: BenchmarkSpec, out: str, err: str) -> tuple[list[float], float]:
    assert spec.path is not None  # required by the schema
    doc = next((d for d in map(_json_document, (out, err)) if d is not None), None)
    if doc is None:
        raise _unparsable("json", "no JSON document (whole output or one line)")
    node = doc
    for key in spec.path.split("."):
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            raise _unparsable("json", f"no {key!r} on the path {spec.path!r}")
    values = node if isinstance(node, list) else [node]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise _unparsable("json", f"{spec.path!r} is not a number or a list of numbers")
    if not values:
        raise _no_sample(f"{spec.path!r} is an empty list")
    samples = [float(v) for v in values]
    return samples, statistics.median(samples)


def _json_document(text: str) -> Any:
    """The whole text as JSON, else the last line that is a JSON object or array."""
    candidates = [text] + [ln for ln in reversed(text.splitlines())
                           if ln.strip().startswith(("{", "["))]
    for candidate in candidates:
        with contextlib.suppress(ValueError):
            if candidate.strip():
                return json.loads(candidate)
    return None


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split())


_PARSERS: dict[str, Callable[[BenchmarkSpec, str, str], tuple[list[float], float]]] = {
    "nccl-tests": _parse_nccl, "megatron": _parse_steps, "steptime": _parse_steps,
    "regex": _parse_regex, "json": _parse_json}
