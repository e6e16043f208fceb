"""Slow ranks across one job's ranks (``workload.slow-ranks``): on a real 4-rank capture, on
logs the simulated cluster writes per rank, and where the data cannot tell."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from exemplar_tune.diagnose import diagnose_job, diagnose_text, file_labels
from exemplar_tune.sim.cluster import create_cluster
from tests.corpus import REALWORLD
from tests.test_cli import cli

RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:")
TITAN_H200 = REALWORLD / "steptime" / "orangingq-torchtitan-h200-4gpu-llama8b-1f1b-rank-prefix.log"


def slow_ranks(report) -> dict:
    (found,) = [f for f in report.findings if f.check_id == "workload.slow-ranks"]
    return found


def megatron(per_host: dict[str, list[float]]) -> str:
    """Megatron iteration lines of several hosts, each prefixed with its name."""
    lines = []
    steps = len(next(iter(per_host.values())))
    for index in range(steps):
        for host, times in per_host.items():
            if index < len(times):
                lines.append(f"{host}: iteration {index + 1:8d}/{steps:8d} | elapsed time per "
                             f"iteration (ms): {times[index]:.1f} | lm loss: 2.3E+00 |")
    return "\n".join(lines) + "\n"


def test_four_real_ranks_of_one_job_agree():
    """torchtitan, pipeline-parallel 1F1B on 4 x H200 (orangingq/torchtitan): every rank logs
    each step within milliseconds of the others; no rank stands out, and the finding says
    why a straggler could still hide in step times."""
    report = diagnose_text(TITAN_H200.read_text(), TITAN_H200.name)
    found = slow_ranks(report)
    assert found.status == "pass"
    assert found.values["ranks"] == 4 and found.values["steps"] == 20
    assert "benchmark each host alone" in found.message


def test_a_host_made_slow_by_a_fact_is_named_from_the_simulated_ranks_logs(tmp_path):
    """Eight simulated hosts; node05's deepest idle state is disabled (about 4 % slower): its
    own per-rank lines name it, and a healthy cluster's do not."""
    create_cluster(tmp_path / "c", "h100-qps-incumbent", hosts=8)
    healthy = cli("sim", "bench", str(tmp_path / "c"), "--workload", "dense", "--per-rank")
    assert healthy.returncode == 0, healthy.stderr
    assert slow_ranks(diagnose_text(healthy.stdout, "healthy")).status == "pass"
    create_cluster(tmp_path / "f", "h100-qps-incumbent", hosts=8,
                   host_faults={"node05": ["deep_cstate_disabled"]})
    out = cli("sim", "bench", str(tmp_path / "f"), "--workload", "dense", "--per-rank")
    (tmp_path / "ranks.log").write_text(out.stdout)
    found = slow_ranks(diagnose_text(out.stdout, "ranks.log"))
    assert found.status == "warn", found.message
    assert [s["rank"] for s in found.values["slow"]] == ["node05"]
    assert found.values["slow"][0]["excess"] == pytest.approx(0.04, abs=0.01)
    assert "node05 +" in found.message and found.evidence
    shown = cli("diagnose", str(tmp_path / "ranks.log"), "--format", "json")
    assert shown.returncode == 0  # a warning, not a failure: exit 0
    (report,) = json.loads(shown.stdout)["reports"]
    assert any(f["check_id"] == "workload.slow-ranks" and f["status"] == "warn"
               for f in report["findings"])


def test_one_slow_step_is_a_stall_not_a_slow_rank():
    times = {f"node{i:02d}": [1000.0 + i] * 10 for i in range(1, 7)}
    times["node03"][4] = 1300.0
    assert slow_ranks(diagnose_text(megatron(times), "x")).status == "pass"
    times["node03"] = [1060.0] * 10
    found = slow_ranks(diagnose_text(megatron(times), "x"))
    assert found.status == "warn" and found.values["slow"][0]["behind"] == 10


@pytest.mark.parametrize(("hosts", "steps", "message"), [
    (2, 10, "2 ranks log step times: too few to tell a slow one (at least 3 needed)"),
    (4, 4, "4 ranks, 4 iterations logged by 3 or more of them: too few to tell"),
])
def test_the_data_cannot_tell(hosts, steps, message):
    times = {f"node{i:02d}": [1000.0] * steps for i in range(1, hosts + 1)}
    times["node01"] = [1200.0] * steps
    found = slow_ranks(diagnose_text(megatron(times), "x"))
    assert found.status == "info" and found.message.startswith(message)


def test_a_single_rank_log_has_no_such_finding():
    report = diagnose_text(megatron({"node01": [1000.0] * 10}), "x")
    assert not [f for f in report.findings if f.check_id == "workload.slow-ranks"]


def split_by_rank(text: str, directory: Path) -> list[str]:
    """A torchrun log written as one file per rank, its ``[rankN]:`` prefixes removed (as
    torchrun --log-dir keeps them); lines of no rank go to the first file."""
    by_rank: dict[str, list[str]] = {}
    for line in text.splitlines():
        found = RANK_PREFIX.match(line)
        by_rank.setdefault(found[1] if found else "", []).append(line[found.end():] if found
                                                                   else line)
    unnamed = by_rank.pop("", [])
    directory.mkdir()
    paths = []
    for index, (rank, lines) in enumerate(sorted(by_rank.items())):
        path = directory / f"rank{rank}.log"
        path.write_text("\n".join((unnamed if index == 0 else []) + lines) + "\n")
        paths.append(str(path))
    return paths


def test_one_file_per_rank_reads_as_the_interleaved_log_does(tmp_path):
    """The real 4-rank torchtitan capture, split into one file per rank: the same ranks,
    iterations and verdict as the interleaved file, each rank named by its file."""
    paths = split_by_rank(TITAN_H200.read_text(), tmp_path / "ranks")
    assert len(paths) == 4
    found = slow_ranks(diagnose_job([str(tmp_path / "ranks")]))
    interleaved = slow_ranks(diagnose_text(TITAN_H200.read_text(), TITAN_H200.name))
    assert found.status == interleaved.status == "pass"
    assert found.values["ranks"] == 4 and found.values["steps"] == 20
    assert diagnose_job(paths).summary["input"]["source_names"] == [
        "rank0", "rank1", "rank2", "rank3"]


def test_the_slow_rank_of_per_host_files_is_named_with_its_own_file_and_lines(tmp_path):
    """Simulated per-rank output of a cluster whose node05 is slowed by a fact, one file per
    host: node05 is named and its evidence is node05's own lines."""
    create_cluster(tmp_path / "f", "h100-qps-incumbent", hosts=8,
                   host_faults={"node05": ["deep_cstate_disabled"]})
    out = cli("sim", "bench", str(tmp_path / "f"), "--workload", "dense", "--per-rank")
    files = tmp_path / "logs"
    files.mkdir()
    for host in [f"node{i:02d}" for i in range(1, 9)]:
        (files / f"{host}.out").write_text("".join(
            line.split(": ", 1)[1] + "\n" for line in out.stdout.splitlines()
            if line.startswith(f"{host}: ")))
    shown = cli("diagnose", "--ranks", str(files), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    (report,) = json.loads(shown.stdout)["reports"]
    (found,) = [f for f in report["findings"] if f["check_id"] == "workload.slow-ranks"]
    assert found["status"] == "warn" and [s["rank"] for s in found["values"]["slow"]] == [
        "node05"]
    (cited,) = found["evidence"]  # node05's own lines: numbers within its 40-line file
    assert cited.startswith("node05:")
    assert all(int(n) <= 40 for n in re.findall(r"\d+", cited.removeprefix("node05:")))
    assert report["source"] == f"{files} (8 files)"


def test_ranks_that_disagree_too_much_cannot_tell():
    """Ranks whose step times scatter by about 8 % at every iteration: a rank 10 % slower
    could hide there, so the finding says the data cannot tell rather than pass."""
    rng = random.Random(3)
    times = {f"node{i:02d}": [1000.0 * (1 + rng.gauss(0, 0.08)) for _ in range(20)]
             for i in range(1, 9)}
    found = slow_ranks(diagnose_text(megatron(times), "x"))
    assert found.status == "info" and "too noisy to tell a slow rank" in found.message


def test_a_rank_a_little_slower_at_every_iteration_is_found_over_many():
    """8 ranks at 3 % per-iteration noise, node05 3 % slower throughout: never 3.5 MADs behind
    the others at one iteration, but above the median rank far more often than chance allows
    over 200 iterations; the same fleet without it names nobody, nor do 64 healthy ranks."""
    rng = random.Random(11)

    def job(ranks: int, slow: dict[str, float]) -> str:
        return megatron({f"node{i:02d}": [1000.0 * (1 + slow.get(f"node{i:02d}", 0.0))
                                          * (1 + rng.gauss(0, 0.03)) for _ in range(200)]
                         for i in range(1, ranks + 1)})
    found = slow_ranks(diagnose_text(job(8, {"node05": 0.03}), "x"))
    assert found.status == "warn" and [r["rank"] for r in found.values["slow"]] == ["node05"]
    (rank,) = found.values["slow"]
    assert rank["excess"] == pytest.approx(0.03, abs=0.01) and rank["behind"] > 140
    for ranks in (8, 64):
        healthy = slow_ranks(diagnose_text(job(ranks, {}), "x"))
        assert healthy.values["slow"] == [] and healthy.values["became_slow"] == []


@pytest.mark.parametrize(("files", "labels"), [
    (["logs/attempt_0/0/stdout.log", "logs/attempt_0/1/stdout.log"], ["0", "1"]),
    (["out/job-77-node03.out", "out/job-77-node10.out"], ["job-77-node03", "job-77-node10"]),
    (["a/rank0.log", "b/rank0.log"], ["a", "b"]),
])
def test_each_file_of_a_job_gets_a_short_unique_name(files, labels):
    assert file_labels([Path(f) for f in files]) == labels


def test_ranks_bad_input_is_one_line(tmp_path):
    one = tmp_path / "one.log"
    one.write_text(megatron({"node01": [1000.0] * 10}))
    for args, message in ((["--ranks", str(one)], "--ranks: 1 file(s) found"),
                          (["--ranks", str(one), str(one), "--compare"],
                           "--ranks reads one job's files together"),
                          (["--ranks", str(one), str(tmp_path / "missing.log")],
                           "missing.log not found")):
        out = cli("diagnose", *args)
        assert out.returncode == 2, out.stdout + out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr
