"""``diagnose`` reads its inputs as streams: lines numbered as ``str.split`` numbers them, a
log repeated many times reads as the log once with its counts multiplied (the JSON does not
grow), a job of a thousand rank files is one report whose findings fold the ranks into
hostlists, memory does not grow with the input (a step log's, by bytes per step judged), and
the bounds (``--max-input``, the recognition window, long lines) are one-line refusals."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exemplar_tune.compressed import MAX_LINE
from exemplar_tune.diagnose import (
    DETECT_WINDOW,
    KINDS_TEXT,
    DiagnoseError,
    diagnose_job,
    diagnose_paths,
    diagnose_text,
    stream as stream_module,
)
from exemplar_tune.diagnose.stream import LineStream, size_text
from tests.corpus import REALWORLD
from tests.helpers import cli_env

COLL = REALWORLD / "nccl-coll" / "nvidia-nccl-1193-ray-allreduce-128ranks.log"
NCCL_LOG = REALWORLD / "nccl-log"
COMPLETION = NCCL_LOG / "nvidia-nccl-1405-ib-plugin-completion-status12-vendor129-roce.log"
GB300 = NCCL_LOG / "datacrunch-research-nccl-ebpf-gb300-nvl72-2trays-mnnvl-init-2.29.7.log"
BIGSCIENCE = (REALWORLD / "steptime"
              / "bigscience-workshop-bigscience-meg-ds-3d-n16-ds-off-per-iteration.log")
_ITERATION = re.compile(r"(iteration\s+)(\d+)/")
TESTS80 = (REALWORLD / "nccl-tests"
           / "xxrjun-nccl-tests-cluster-h100-10nodes-80ranks-five-collectives.log")


def findings(report) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in report.to_dict()["findings"]:
        out.setdefault(f["check_id"], []).append(f)
    return out


@pytest.mark.parametrize("text", ["", "a", "a\n", "a\nb", "a\r\nb\n\n", "\n\n"])
def test_lines_are_numbered_as_split_numbers_them(text):
    as_bytes = [part.encode() + b"\n" for part in text.split("\n")]
    as_bytes[-1] = as_bytes[-1][:-1]
    stream = LineStream([(None, [b for b in as_bytes if b])], 1 << 20)
    assert [(n, raw) for n, _, _, raw in stream] == list(enumerate(text.split("\n"), 1))


def test_files_of_a_job_are_numbered_on_and_named():
    stream = LineStream([("r0", [b"[default0]: a\n"]), ("r1", [b"b\n", b"c"])], 1 << 20)
    got = [(n, line, source) for n, line, source, _ in stream]
    assert got == [(1, "a", "r0 local rank 0"), (2, "", "r0"), (3, "b", "r1"), (4, "c", "r1")]
    assert stream.files == [("r0", 1), ("r1", 3)]


@pytest.mark.parametrize("capture", [COLL, COMPLETION, TESTS80], ids=lambda p: p.parent.name)
def test_a_repeated_log_folds_into_the_same_findings(capture):
    """Fifty copies of a real log: the same findings, counted fifty times where they count
    lines; the JSON grows with the distinct findings, not with the input."""
    text = capture.read_text()
    once, many = diagnose_text(text, "log"), diagnose_text(text * 50, "log")
    assert [(f.check_id, f.status) for f in once.findings] == \
        [(f.check_id, f.status) for f in many.findings]
    size_once, size_many = (len(json.dumps(r.to_dict())) for r in (once, many))
    assert size_many < size_once * 1.3, (size_once, size_many)
    for a, b in zip(once.findings, many.findings, strict=True):
        if "count" in a.values:
            assert b.values["count"] == 50 * a.values["count"]
            assert b.values["last"] > a.values["last"] and b.values["first"] == a.values["first"]


def test_runs_of_one_test_fold_with_their_spread():
    text = TESTS80.read_text()
    report = diagnose_text(text * 3, "tests")
    assert all(t["runs"] == 3 for t in report.summary["tests"])
    assert len(report.summary["tests"]) == len(diagnose_text(text, "t").summary["tests"])


def test_a_thousand_rank_files_are_one_report_with_hostlists(tmp_path):
    """One real failing rank's log as the log of each of 1000 ranks (its host renamed per
    rank): one finding per kind of failure, its hosts folded into one hostlist."""
    text = COMPLETION.read_text()
    for rank in range(1000):
        (tmp_path / f"rank{rank:04d}.log").write_text(
            text.replace("kp-ddp-worker-0", f"kp-ddp-worker-{rank}"))
    report = diagnose_job([str(tmp_path)])
    assert report.source == f"{tmp_path} (1000 files)"
    [completion] = [f for f in findings(report)["fabric.nccl-errors"]
                    if f["values"]["pattern"].startswith("IB completion error 12")]
    single = [f for f in findings(diagnose_text(text, "one"))["fabric.nccl-errors"]
              if f["values"]["pattern"].startswith("IB completion error 12")][0]
    assert completion["values"]["count"] == 1000 * single["values"]["count"]
    assert completion["values"]["hostlist"] == "kp-ddp-worker-[0-999]"
    assert "on kp-ddp-worker-[0-999]" in completion["message"]
    assert len(completion["values"]["lines"]) <= 32
    assert report.summary["input"]["sources"] == 1000


def test_a_thousand_rank_step_logs_name_the_slow_rank(tmp_path):
    steps = 30
    for rank in range(1000):
        ms = 1000.0 + rank % 7 + (60.0 if rank == 637 else 0.0)
        lines = [f" iteration {i:8d}/{steps:8d} | elapsed time per iteration (ms): "
                 f"{ms + (i % 3):.1f} | lm loss: 2.3E+00 |" for i in range(1, steps + 1)]
        (tmp_path / f"rank{rank:04d}.log").write_text("\n".join(lines) + "\n")
    report = diagnose_job([str(tmp_path)])
    [slow] = findings(report)["workload.slow-ranks"]
    assert slow["status"] == "warn" and slow["values"]["ranks"] == 1000
    assert [s["rank"] for s in slow["values"]["slow"]] == ["rank0637"]
    assert any("rank0637" in e for e in slow["evidence"])


def _peak_kib(path: Path) -> tuple[int, dict]:
    """Peak resident memory of ``diagnose FILE`` in a child process (KiB), and the summary of
    its report."""
    out = subprocess.run([sys.executable, "-c", (
        "import json, resource, sys\n"
        "from exemplar_tune.diagnose import diagnose_paths\n"
        "reports, errors = diagnose_paths([sys.argv[1]])\n"
        "assert reports and not errors, errors\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        "print(json.dumps(reports[0].summary))\n"), str(path)],
        capture_output=True, text=True, env=cli_env(), check=True, timeout=300)
    peak, summary = out.stdout.split("\n", 1)
    return int(peak), json.loads(summary)


def test_memory_does_not_grow_with_the_input(tmp_path):
    """An NCCL INFO log with COLL lines at 4 MiB and at 10 times that: the peak memory of the
    larger is within a few MiB of the smaller (a whole-text reader held 5 to 7 times its
    input)."""
    text = COLL.read_bytes()
    small, large = tmp_path / "small.log", tmp_path / "large.log"
    small.write_bytes(text * (4 * 2**20 // len(text)))
    large.write_bytes(text * (40 * 2**20 // len(text)))
    grown = _peak_kib(large)[0] - _peak_kib(small)[0]
    assert grown < 12 * 1024, f"peak grew by {grown >> 10} MiB for 36 MiB more input"


def _one_run(copies: int) -> str:
    """The real Megatron-DeepSpeed log repeated, each copy's iterations numbered on from the
    last copy's: one run of ``62 x copies`` logged steps."""
    text = BIGSCIENCE.read_text()
    last = max(int(m.group(2)) for m in _ITERATION.finditer(text))
    return "".join(_ITERATION.sub(lambda m, k=k: f"{m.group(1)}{int(m.group(2)) + k * last}/",
                                  text) for k in range(copies))


def test_memory_grows_by_bytes_per_step_not_by_lines(tmp_path):
    """One run of about 5,000 and of 47,000 logged steps: the larger holds under 200 bytes
    more per step judged (a reader that kept the record lines took several hundred)."""
    small, large = tmp_path / "small.log", tmp_path / "large.log"
    small.write_text(_one_run(80))
    large.write_text(_one_run(800))
    (peak_small, small_summary), (peak_large, large_summary) = _peak_kib(small), _peak_kib(large)
    steps_small, steps_large = small_summary["steps"], large_summary["steps"]
    per_step = 1024 * (peak_large - peak_small) / (steps_large - steps_small)
    assert steps_large > 10 * steps_small - 1000
    assert per_step < 200, f"{per_step:.0f} bytes more per step judged"


def test_a_long_line_is_read_in_pieces(tmp_path):
    path = tmp_path / "long.log"
    path.write_bytes(GB300.read_bytes() + b"x" * (3 * MAX_LINE) + b"\n" + GB300.read_bytes())
    (report,), errors = diagnose_paths([str(path)])
    assert errors == [] and report.kind == "nccl-log"


def test_a_format_is_recognised_on_the_first_window_only(tmp_path):
    path = tmp_path / "late.log"
    filler = b"nothing to see here\n" * (DETECT_WINDOW // 20 + 1)
    path.write_bytes(filler + GB300.read_bytes())
    assert diagnose_paths([str(path)])[1] == [
        f"{path}: not a recognised format in its first {DETECT_WINDOW >> 20} MiB "
        f"({KINDS_TEXT})"]
    with pytest.raises(DiagnoseError, match="not a recognised format \\("):
        diagnose_text("nothing to see here\n", "short")


def test_max_input_bounds_a_job_and_is_validated(tmp_path):
    for rank in range(3):
        (tmp_path / f"rank{rank}.log").write_bytes(GB300.read_bytes())
    size = GB300.stat().st_size
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "diagnose", "--ranks",
                          str(tmp_path), "--max-input", f"{(2 * size) >> 10}K"],
                         capture_output=True, text=True, env=cli_env(), check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert f"--ranks: the 3 files: more than {(2 * size) >> 10} KiB to read" in out.stderr
    bad = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "diagnose", str(GB300),
                          "--max-input", "lots"], capture_output=True, text=True,
                         env=cli_env(), check=False)
    assert bad.returncode == 2 and "--max-input: 'lots' is not a size" in bad.stderr


def test_a_format_read_whole_is_bounded_and_the_bound_can_be_raised(tmp_path):
    """turbostat is read whole: past the bound it is one line naming --max-input, and with
    the bound raised the same file reads."""
    capture = next((REALWORLD / "turbostat").glob("*.txt"))
    path = tmp_path / "turbostat.txt"
    path.write_bytes(capture.read_bytes())
    limit = capture.stat().st_size // 2
    assert diagnose_paths([str(path)], whole_bytes=limit) == ([], [
        f"turbostat captures are read whole, and this one holds more than {size_text(limit)}: "
        "give the part that matters, or raise --max-input to read it (it is held in memory)"])
    (report,), [] = diagnose_paths([str(path)], whole_bytes=2 * limit + 2)
    assert report.kind == "turbostat"


def test_a_long_read_says_how_far_it_got(tmp_path, monkeypatch, capsys):
    """A progress line on stderr every heartbeat (here: at every check, each MiB), none on
    stdout; the report is the same."""
    monkeypatch.setattr(stream_module, "HEARTBEAT_S", 0.0)
    monkeypatch.setattr(stream_module, "CHECK_EVERY", 1 << 20)
    path = tmp_path / "coll.log"
    text = COLL.read_bytes()
    path.write_bytes(text * (3 * 2**20 // len(text)))
    (report,), [] = diagnose_paths([str(path)])
    out, err = capsys.readouterr()
    assert out == "" and report.kind == "nccl-log"
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"diagnose: capture {path}: ")
                                   and " MiB read (" in line for line in lines)
