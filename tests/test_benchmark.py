"""Benchmark files and runs: real subprocesses printing real-format output, every failure mode."""

from __future__ import annotations

import math
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from exemplar_tune.errors import UserError
from exemplar_tune.orchestration.benchmark import (
    BenchmarkFailed,
    BenchmarkFileError,
    BenchmarkSpec,
    load_benchmarks,
    run_benchmark,
)
from tests.conftest import SAMPLES

GB300_ALLGATHER = SAMPLES / "nccl_tests_all_gather_perf_gcp_a4xmax_gb300.txt"
MEGATRON_LOG = SAMPLES / "steptime_megatron_composed.txt"
PY = sys.executable


def write(tmp_path: Path, data: Any, name: str = "bench.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def one(tmp_path: Path, **shape: Any) -> BenchmarkSpec:
    """The single spec of a benchmark file holding ``shape`` (name defaults to ``s``)."""
    (spec,) = load_benchmarks(write(tmp_path, {"shapes": [{"name": "s", **shape}]}))
    return spec


def python(script: str) -> list[str]:
    return [PY, "-c", script]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def gone_soon(pid: int, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def failure(spec: BenchmarkSpec, **kwargs: Any) -> BenchmarkFailed:
    with pytest.raises(BenchmarkFailed) as info:
        run_benchmark(spec, **kwargs)
    return info.value


# --- the benchmark file -------------------------------------------------------------------

def test_load_fills_defaults_in_file_order(tmp_path: Path) -> None:
    specs = load_benchmarks(write(tmp_path, """\
shapes:
  - name: allgather
    command: cat "tests/fixtures/samples/x y.txt"
    parser: nccl-tests
  - name: dense
    command: [sbatch, --wait, train.sbatch]
    parser: megatron
    timeout: 7200
    env: {NCCL_DEBUG: WARN, OMP_NUM_THREADS: 8}
    workdir: jobs
  - name: moe
    command: torchrun --nproc-per-node 8 moe.py
    parser: json
    path: result.tokens_per_s
    higher_is_better: true
    unit: tokens/s
"""))
    want = [("allgather", ("cat", "tests/fixtures/samples/x y.txt"), 3600.0, True, "GB/s"),
            ("dense", ("sbatch", "--wait", "train.sbatch"), 7200.0, False, "ms"),
            ("moe", ("torchrun", "--nproc-per-node", "8", "moe.py"), 3600.0, True, "tokens/s")]
    have = [(s.name, s.command, s.timeout, s.higher_is_better, s.unit) for s in specs]
    assert have == want
    assert specs[1].warmup == 10
    assert specs[1].env == {"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "8"}
    assert specs[1].workdir == tmp_path / "jobs"
    assert specs[0].sizes == () and specs[0].metric == "busbw" and specs[0].workdir is None


def test_sizes_accept_suffixes_and_time_metric_defaults(tmp_path: Path) -> None:
    spec = one(tmp_path, command="x", parser="nccl-tests", sizes=[1024, "64M", "1G"],
               metric="time")
    assert spec.sizes == (1024, 64 << 20, 1 << 30)
    assert (spec.unit, spec.higher_is_better) == ("us", False)


@pytest.mark.parametrize(("shape", "want"), [
    ({"command": "x", "parser": "steptime", "colective": "a"},
     r"shape 's': colective: unknown key \(allowed: name, .*\)$"),
    ({"command": "x", "parser": "steptime", "timeout": "long"},
     r"shape 's': timeout: 'long' is not of type 'number'$"),
    ({"command": "x", "parser": "steptime", "timeout": 0},
     r"shape 's': timeout: 0 is less than or equal to the minimum of 0$"),
    ({"parser": "steptime"}, r"shape 's': command: missing \(required\)$"),
    ({"command": [], "parser": "steptime"}, r"shape 's': command: \[\] should be non-empty$"),
    ({"command": 5, "parser": "steptime"}, r"shape 's': command: 5 is not of type"),
    ({"command": "x", "parser": "csv"}, r"shape 's': parser: 'csv' is not one of"),
    ({"command": "x", "parser": "regex", "higher_is_better": True},
     r"shape 's': pattern: missing \(required for parser regex\)$"),
    ({"command": "x", "parser": "json", "path": "a"},
     r"shape 's': higher_is_better: missing \(required for parser json\)$"),
    ({"command": "x", "parser": "megatron", "sizes": [1]},
     r"shape 's': sizes: not an option of parser megatron$"),
    ({"command": "x", "parser": "nccl-tests", "sizes": ["1X"]},
     r"shape 's': sizes.0: '1X' does not match"),
    ({"command": "x", "parser": "regex", "pattern": "value", "higher_is_better": True},
     r"shape 's': pattern: needs exactly one group \(has 0\)$"),
    ({"command": "x", "parser": "regex", "pattern": "(", "higher_is_better": True},
     r"shape 's': pattern: not a regular expression: "),
    ({"command": "echo 'open", "parser": "steptime"},
     r"shape 's': command: cannot split it: No closing quotation$"),
    ({"command": "x", "parser": "steptime", "env": {"A-B": "1"}},
     r"shape 's': env: 'A-B' does not match"),
])
def test_schema_errors_name_the_key_in_one_line(tmp_path: Path, shape: dict[str, Any],
                                                want: str) -> None:
    with pytest.raises(UserError) as info:
        load_benchmarks(write(tmp_path, {"shapes": [{"name": "s", **shape}]}))
    message = str(info.value)
    assert "\n" not in message and message.startswith("benchmark file ")
    assert re.search(want, message), message


@pytest.mark.parametrize(("text", "want"), [
    ("shapes: []\n", r": shapes: \[\] should be non-empty$"),
    ("shape: []\n", r": shape: unknown key \(allowed: description, shapes\)$"),
    ("", r": \(top level\): None is not of type 'object'$"),
    ("shapes: [x]\n", r": shape #1: 'x' is not of type 'object'$"),
    ("shapes:\n  - {name: a, command: x, parser: steptime}\n"
     "  - {name: a, command: y, parser: steptime}\n", r": shape 'a': name: used twice$"),
    ("shapes: [\n", r": cannot read it: "),
])
def test_file_level_errors(tmp_path: Path, text: str, want: str) -> None:
    with pytest.raises(BenchmarkFileError) as info:
        load_benchmarks(write(tmp_path, text))
    assert "\n" not in str(info.value)
    assert re.search(want, str(info.value)), str(info.value)


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"benchmark file .*nope.yaml not found$"):
        load_benchmarks(tmp_path / "nope.yaml")


# --- parsers on real-format output --------------------------------------------------------

@pytest.mark.parametrize(("sample", "size", "busbw"), [
    (GB300_ALLGATHER, 17179869184, 357.13),
    (SAMPLES / "nccl_tests_all_reduce_perf_2x8xH100_gcp_a3mega.txt", 8589934592, 338.82),
    (SAMPLES / "nccl_tests_reduce_scatter_perf_format_rtx5090.txt", 134217728, 2.73),
])
def test_nccl_tests_default_is_busbw_at_largest_size(tmp_path: Path, sample: Path, size: int,
                                                     busbw: float) -> None:
    have = run_benchmark(one(tmp_path, command=["cat", str(sample)], parser="nccl-tests"))
    assert (have.shape, have.value, have.samples) == ("s", busbw, [busbw])
    assert (have.unit, have.higher_is_better, have.log_path) == ("GB/s", True, None)
    assert 0 < have.seconds < 5


def test_nccl_tests_geometric_mean_over_sizes(tmp_path: Path) -> None:
    spec = one(tmp_path, command=f"cat {GB300_ALLGATHER}", parser="nccl-tests",
               collective="all_gather_perf", sizes=["1G", 17179869184])
    have = run_benchmark(spec)
    assert have.samples == [337.55, 357.13]
    assert have.value == pytest.approx(math.sqrt(337.55 * 357.13))


def test_nccl_tests_time_metric(tmp_path: Path) -> None:
    have = run_benchmark(one(tmp_path, command=["cat", str(GB300_ALLGATHER)],
                             parser="nccl-tests", sizes=["1G"], metric="time"))
    assert (have.value, have.unit, have.higher_is_better) == (2783.37, "us", False)


def test_megatron_median_after_warmup(tmp_path: Path) -> None:
    ms = [float(v) for v in re.findall(r"elapsed time per iteration \(ms\): ([\d.]+)",
                                       MEGATRON_LOG.read_text())]
    for warmup in (10, 50):
        have = run_benchmark(one(tmp_path, command=["cat", str(MEGATRON_LOG)],
                                 parser="megatron", warmup=warmup))
        assert have.samples == ms[warmup:]
        assert have.value == statistics.median(ms[warmup:])
        assert (have.unit, have.higher_is_better) == ("ms", False)
    assert 1800 < have.value < 1900


def test_steptime_reads_logs_printed_on_stderr(tmp_path: Path) -> None:
    script = ("import sys\nfor i in range(14):\n"
              "    print(f'epoch 0 step {i} step_time=1.{i % 3}', file=sys.stderr)")
    have = run_benchmark(one(tmp_path, command=python(script), parser="steptime", warmup=2))
    assert have.samples == [1000.0 + 100 * (i % 3) for i in range(2, 14)]
    assert have.value == 1100.0


def test_regex_median_of_all_matches(tmp_path: Path) -> None:
    script = "for v in (1.23, 1.5, 0.9, 2.0): print(f'iter ok value: {v}')"
    have = run_benchmark(one(tmp_path, command=python(script), parser="regex",
                             pattern=r"value: ([\d.]+)", higher_is_better=False, unit="s"))
    assert have.samples == [1.23, 1.5, 0.9, 2.0]
    assert (have.value, have.unit) == (statistics.median([1.23, 1.5, 0.9, 2.0]), "s")


@pytest.mark.parametrize(("script", "path", "samples"), [
    ("import json; print(json.dumps({'result': {'tokens_per_s': 5120.5}}, indent=2))",
     "result.tokens_per_s", [5120.5]),
    ("import json; print('loading...'); print(json.dumps({'runs': [{'t': 3}, {'t': [1, 2]}]}))",
     "runs.1.t", [1.0, 2.0]),
])
def test_json_path_to_a_number_or_list(tmp_path: Path, script: str, path: str,
                                       samples: list[float]) -> None:
    have = run_benchmark(one(tmp_path, command=python(script), parser="json", path=path,
                             higher_is_better=True))
    assert have.samples == samples and have.value == statistics.median(samples)


def test_string_command_is_not_run_through_a_shell(tmp_path: Path) -> None:
    have = run_benchmark(one(tmp_path, command="echo 'value: 4' && exit 3 $HOME",
                             parser="regex", pattern=r"value: (\d+) && exit 3 \$HOME$",
                             higher_is_better=True))
    assert have.value == 4.0


def test_env_and_workdir_are_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "marker").write_text("")
    monkeypatch.setenv("BENCH_INHERITED", "7")
    script = ("import os; print('value:', os.environ['BENCH_A'], os.environ['BENCH_B'], "
              "os.environ['BENCH_INHERITED'], int(os.path.exists('marker')))")
    spec = one(tmp_path, command=python(script), parser="regex", higher_is_better=True,
               pattern=r"value: (.*)", env={"BENCH_A": 1, "BENCH_B": "from-file"},
               workdir="jobs")
    err = failure(spec, env={"BENCH_B": "from-caller"})
    assert err.reason == "output unparsable (regex: match '1 from-caller 7 1' is not a number)"


def test_log_dir_keeps_stdout_and_stderr(tmp_path: Path) -> None:
    script = "import sys; print('value: 2'); print('warning: slow', file=sys.stderr)"
    spec = one(tmp_path, command=python(script), parser="regex", pattern=r"value: (\d)",
               higher_is_better=True)
    have = run_benchmark(spec, log_dir=tmp_path / "logs" / "before")
    assert have.log_path == tmp_path / "logs" / "before" / "s.log"
    assert have.log_path.read_text() == "value: 2\nwarning: slow\n"
    assert have.to_dict()["value"] == 2.0


# --- failures -----------------------------------------------------------------------------

def test_missing_executable(tmp_path: Path) -> None:
    err = failure(one(tmp_path, command="no-such-benchmark-xyz --fast", parser="steptime"))
    assert (err.shape, err.reason) == ("s", "command not found: no-such-benchmark-xyz")
    assert str(err) == "benchmark s: command not found: no-such-benchmark-xyz"


def test_missing_workdir(tmp_path: Path) -> None:
    err = failure(one(tmp_path, command="true", parser="steptime", workdir="absent"))
    assert err.reason == f"workdir {tmp_path / 'absent'} is not a directory"


def test_exit_status_with_last_stderr_line(tmp_path: Path) -> None:
    script = ("import sys; print('value: 1'); print('NCCL WARN init', file=sys.stderr); "
              "print('RuntimeError: NCCL error', file=sys.stderr); sys.exit(3)")
    spec = one(tmp_path, command=python(script), parser="regex", pattern=r"value: (\d)",
               higher_is_better=True)
    err = failure(spec, log_dir=tmp_path / "logs")
    assert err.reason == "exit status 3: RuntimeError: NCCL error"
    assert err.log_path and "NCCL WARN init" in err.log_path.read_text()


def test_killed_by_signal(tmp_path: Path) -> None:
    err = failure(one(tmp_path, command=python("import os; os.kill(os.getpid(), 9)"),
                      parser="steptime"))
    assert err.reason == "killed by signal SIGKILL"


def test_timeout_stops_the_command_quickly(tmp_path: Path) -> None:
    start = time.monotonic()
    err = failure(one(tmp_path, command="sleep 30", parser="steptime", timeout=1))
    assert time.monotonic() - start < 5
    assert err.reason == "timed out after 1 s"


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    spec = one(tmp_path, command=["sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"],
               parser="steptime", timeout=1)
    start = time.monotonic()
    err = failure(spec)
    assert time.monotonic() - start < 5 and err.reason == "timed out after 1 s"
    assert gone_soon(int(pidfile.read_text()))


def test_nothing_outlives_a_successful_run(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    script = f"sleep 30 >/dev/null 2>&1 & echo $! > {pidfile}; echo 'value: 1'"
    spec = one(tmp_path, command=["sh", "-c", script], parser="regex", pattern=r"value: (\d)",
               higher_is_better=True)
    assert run_benchmark(spec).value == 1.0
    assert gone_soon(int(pidfile.read_text()))


GARBAGE = "import random; print('\\n'.join('%x' % random.getrandbits(64) for _ in range(50)))"


@pytest.mark.parametrize(("shape", "reason"), [
    ({"parser": "nccl-tests"},
     "output unparsable (nccl-tests: no '# size count type ... busbw' table header)"),
    ({"parser": "megatron"}, "output unparsable (megatron: no 'elapsed time per iteration (ms):' "
                             "lines)"),
    ({"parser": "steptime"}, "output unparsable (steptime: no Megatron, NeMo, step_time= or "
                             "one-number-per-line step times)"),
    ({"parser": "regex", "pattern": r"value: ([\d.]+)", "higher_is_better": True},
     r"no sample found (pattern 'value: ([\\d.]+)' matched nothing)"),
    ({"parser": "regex", "pattern": r"^(\w+)$", "higher_is_better": True},
     "output unparsable (regex: match "),
    ({"parser": "json", "path": "a", "higher_is_better": True},
     "output unparsable (json: no JSON document (whole output or one line))"),
])
def test_garbage_output_never_gives_a_value(tmp_path: Path, shape: dict[str, Any],
                                            reason: str) -> None:
    err = failure(one(tmp_path, command=python(GARBAGE), **shape))
    assert err.reason.startswith(reason), err.reason


@pytest.mark.parametrize("shape", [
    {"parser": "nccl-tests"}, {"parser": "megatron"}, {"parser": "steptime"},
    {"parser": "regex", "pattern": "(.*)", "higher_is_better": True},
    {"parser": "json", "path": "a", "higher_is_better": True},
])
def test_empty_output_never_gives_a_value(tmp_path: Path, shape: dict[str, Any]) -> None:
    err = failure(one(tmp_path, command="true", **shape))
    assert err.reason == "no sample found (the command printed nothing)"


@pytest.mark.parametrize(("script", "shape", "reason"), [
    ("print('# nccl-tests\\n# size count type redop root time algbw busbw #wrong')",
     {"parser": "nccl-tests"}, "no sample found (nccl-tests table without result rows)"),
    (f"print(open({str(GB300_ALLGATHER)!r}).read())",
     {"parser": "nccl-tests", "collective": "all_reduce"},
     "no sample found (no all_reduce table; found all_gather)"),
    (f"print(open({str(GB300_ALLGATHER)!r}).read())",
     {"parser": "nccl-tests", "sizes": [3000]},
     "no sample found (size 3000 B not in the all_gather table (4 KiB .. 16 GiB))"),
    (f"print(open({str(GB300_ALLGATHER)!r}).read().replace('357.13 0 ', '357.13 2 '))",
     {"parser": "nccl-tests"}, "wrong results (all_gather: 1 row(s) with #wrong > 0, "),
    (f"print(open({str(GB300_ALLGATHER)!r}).read().replace('357.13 0 ', '357.13 2 ')"
     ".replace('373.54 0', '373.54 4'))",  # both halves of one row: one wrong row
     {"parser": "nccl-tests"}, "wrong results (all_gather: 1 row(s) with #wrong > 0, "),
    (f"print(open({str(MEGATRON_LOG)!r}).read())", {"parser": "megatron", "warmup": 400},
     "no sample found (300 step time(s), all within the 400 warm-up steps)"),
    ("print('{\"a\": {\"b\": 1}}')", {"parser": "json", "path": "a.c", "higher_is_better": True},
     "output unparsable (json: no 'c' on the path 'a.c')"),
    ("print('{\"a\": [1, \"x\"]}')", {"parser": "json", "path": "a", "higher_is_better": True},
     "output unparsable (json: 'a' is not a number or a list of numbers)"),
    ("print('{\"a\": true}')", {"parser": "json", "path": "a", "higher_is_better": True},
     "output unparsable (json: 'a' is not a number or a list of numbers)"),
    ("print('{\"a\": []}')", {"parser": "json", "path": "a", "higher_is_better": True},
     "no sample found ('a' is an empty list)"),
    ("print('{\"a\": NaN}')", {"parser": "json", "path": "a", "higher_is_better": True},
     "output unparsable (json: a sample is not a finite number)"),
])
def test_recognised_output_without_a_usable_sample(tmp_path: Path, script: str,
                                                   shape: dict[str, Any], reason: str) -> None:
    err = failure(one(tmp_path, command=python(script), **shape))
    assert err.reason.startswith(reason), err.reason


def test_several_collectives_need_a_choice(tmp_path: Path) -> None:
    files = [str(GB300_ALLGATHER),
             str(SAMPLES / "nccl_tests_reduce_scatter_perf_format_rtx5090.txt")]
    err = failure(one(tmp_path, command=["cat", *files], parser="nccl-tests"))
    assert err.reason == ("output unparsable (nccl-tests: several collectives (all_gather, "
                          "reduce_scatter); set collective)")
    have = run_benchmark(one(tmp_path, command=["cat", *files], parser="nccl-tests",
                             collective="reduce_scatter"))
    assert have.value == 2.73


def test_benchmark_failed_is_a_one_line_user_error() -> None:
    err = BenchmarkFailed("dense", "timed out after 60 s")
    assert isinstance(err, UserError) and err.exit_code == 2
    assert str(err) == "benchmark dense: timed out after 60 s" and os.linesep not in str(err)


# --- bounded output ---------------------------------------------------------------------------

def test_output_larger_than_the_limit_gives_no_measurement(tmp_path: Path, monkeypatch) -> None:
    """The output is streamed to the log, never held whole; too much of it: one line."""
    monkeypatch.setattr("exemplar_tune.orchestration.benchmark.MAX_OUTPUT", 1 << 20)
    spec = one(tmp_path, command=python("import sys; sys.stdout.write('value: 1\\n' * 400000)"),
               parser="regex", pattern=r"value: (\d+)", higher_is_better=False)
    err = failure(spec, log_dir=tmp_path / "logs")
    assert err.reason == "no measurement: output too large (3 MiB; at most 1 MiB are parsed)"
    assert err.log_path is not None and err.log_path.stat().st_size == 3600000


def test_the_kept_log_is_bounded_and_private_the_whole_output_parsed(tmp_path: Path) -> None:
    """Before, a run printing 200 MiB left 200 MiB in the controller's state, mode 0644."""
    spec = one(tmp_path, command=python(
        "import sys; sys.stdout.write('start\\n' + 'noise line\\n' * 2000000); "
        "print('value: 5')"), parser="regex", pattern=r"^value: (\d+)$", higher_is_better=False)
    measured = run_benchmark(spec, log_dir=tmp_path / "logs")
    assert measured.value == 5  # the whole 22 MB were parsed (6 + 22,000,000 + 9 bytes)
    log = measured.log_path.read_bytes()
    assert len(log) < (4 << 20) + 200 and log.startswith(b"start\n")
    assert log.endswith(b"noise line\nvalue: 5\n")
    assert b"[exemplar-tune: 17805711 bytes left out of this log; the whole output was parsed]" \
        in log
    assert measured.log_path.stat().st_mode & 0o777 == 0o600


def test_a_huge_line_is_cut_and_the_rest_still_parses(tmp_path: Path) -> None:
    spec = one(tmp_path, command=python("print('x' * 300000); print('value: 7')"),
               parser="regex", pattern=r"^value: (\d+)$", higher_is_better=False)
    assert run_benchmark(spec).value == 7


@pytest.mark.parametrize("script, why", [
    ("print('[' * 100000)", "output unparsable (json: too deeply nested)"),
    ("print('{\"a\": ' * 50000 + '1' + '}' * 50000)", "output unparsable (json: too deeply"),
])
def test_deeply_nested_json_is_refused_in_one_line(tmp_path: Path, script: str, why: str
                                                   ) -> None:
    err = failure(one(tmp_path, command=python(script), parser="json", path="a",
                      higher_is_better=False))
    assert err.reason.startswith(why), err.reason


def test_a_size_with_thousands_of_digits_is_unparsable_not_a_crash(tmp_path: Path) -> None:
    table = GB300_ALLGATHER.read_text().splitlines()
    row = next(i for i, line in enumerate(table) if line.strip()[:1].isdigit())
    fields = table[row].split()
    table[row] = table[row].replace(fields[0], "9" * 5000, 1)
    capture = tmp_path / "nccl.txt"
    capture.write_text("\n".join(table) + "\n")
    spec = one(tmp_path, command=["cat", str(capture)], parser="nccl-tests")
    err = failure(spec)
    assert err.reason.startswith("output unparsable (nccl-tests: "), err.reason
    assert "\n" not in err.reason


# --- nccl-tests sizes at any rank count ------------------------------------------------------

@pytest.mark.parametrize("hosts", [3, 6, 9, 18])
@pytest.mark.parametrize("gpus", [4, 8])
def test_a_requested_size_finds_its_row_at_any_rank_count(tmp_path: Path, hosts: int,
                                                        gpus: int) -> None:
    """nccl-tests rounds each size down to whole elements per rank: at 72 ranks the row for
    128 MiB is 134217504 B. Before, such a size was 'not in the table' and the sweep stopped
    before measuring anything."""
    from exemplar_tune.diagnose.nccl_tests import row_size
    from exemplar_tune.sim.bench import DEFAULT_SIZES, nccl_table, table_sizes

    ranks = hosts * gpus
    sizes = table_sizes(*DEFAULT_SIZES, ranks)
    requested = [DEFAULT_SIZES[0] * 2 ** i for i in range(len(sizes))]
    assert [row_size(sizes, r) for r in requested] == sizes  # each request, its own row
    assert any(s != r for s, r in zip(sizes, requested, strict=True)) or ranks & (ranks - 1) == 0
    scenario = {"gpus_per_host": gpus, "workloads": {"ag": {"collective": "all_gather"}}}
    times = {size: 10.0 + index for index, size in enumerate(sizes)}  # us
    table = tmp_path / "table.txt"
    table.write_text("\n".join(nccl_table(scenario, "ag", times, hosts)) + "\n")
    spec = one(tmp_path, command=python(f"print(open({str(table)!r}).read())"),
               parser="nccl-tests", collective="all_gather", sizes=["128M", "1G"])
    measured = run_benchmark(spec)
    rows = [row_size(sizes, r) for r in (128 << 20, 1 << 30)]
    assert measured.samples == [round(row / times[row] / 1000 * (ranks - 1) / ranks, 2)
                                for row in rows]  # busbw of each request's own row


def test_a_size_the_table_does_not_have_is_still_refused(tmp_path: Path) -> None:
    from exemplar_tune.diagnose.nccl_tests import row_size
    from exemplar_tune.sim.bench import DEFAULT_SIZES, table_sizes

    sizes = table_sizes(*DEFAULT_SIZES, 72)
    assert row_size(sizes, 100 << 20) is None  # between 64 and 128 MiB: not measured
    assert row_size(sizes, 512) is None  # below the first row
    assert row_size([134217600], 128 << 20) == 134217600  # the figure, 72 ranks
