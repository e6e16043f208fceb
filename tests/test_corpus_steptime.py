"""The step-time corpus: real training logs read as a correct parser reads them.

Every file of ``tests/fixtures/realworld/steptime`` is diagnosed the way the CLI does
(bytes decoded, then normalised) and its JSON compared with the entry's ``check``
(``tests/corpus.py``). The other tests exercise one rule each on the same real captures.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exemplar_tune.diagnose import diagnose_paths, diagnose_text
from exemplar_tune.diagnose.steptime import MIN_JUDGE, two_clusters
from tests.corpus import REALWORLD, cases, mismatches

STEPTIME = REALWORLD / "steptime"
NOISE = ["bigscience-workshop-bigscience-meg-ds-3d-n16-ds-off-per-iteration.log",
         "bigscience-workshop-bigscience-meg-ds-3d-n16-ds-on-per-iteration.log"]
LITGPT = "lightning-ai-litgpt-834-fabric-ddp-iter-time-accumulation.log"
TITAN = "pytorch-torchtitan-3393-rank0-prefix.log"
MEGATRON = "bigscience-workshop-bigscience-meg-ds-3d-n16-ds-off-per-iteration.log"


def read(name: str) -> str:
    return (STEPTIME / name).read_bytes().decode("utf-8", errors="replace")


@pytest.mark.parametrize(("path", "entry"), cases("steptime"))
def test_corpus_reading(path: Path, entry: dict) -> None:
    reports, errors = diagnose_paths([str(path)])
    doc = reports[0].to_dict() if reports else None
    error = errors[0] if errors else None
    assert error is None or "\n" not in error
    assert mismatches(doc, error, entry["check"]) == []


def test_every_corpus_file_has_a_check() -> None:
    names = {p.name for p in STEPTIME.glob("*.log")}
    assert names == {p.values[0].name for p in cases("steptime")}


@pytest.mark.parametrize("name", NOISE)
def test_noise_is_not_bimodal(name: str) -> None:
    """Long real runs with only noise: the best split fails the gap or the separation."""
    report = diagnose_text(read(name), name)
    assert report.summary["steps"] >= MIN_JUDGE
    clusters = report.summary["clusters"]
    assert not clusters["bimodal"]
    assert clusters["gap_pct"] < 3.0 or clusters["ashman_d"] < 3.5


def test_gradient_accumulation_is_bimodal_and_a_small_gap_is_not() -> None:
    """litgpt's micro-iterations (~94 ms, ~210 ms with the optimizer step) are two modes;
    the same series pulled to within 2 % of its median keeps its separation (D) but not the
    relative gap, and is not called bimodal."""
    text = read(LITGPT)
    report = diagnose_text(text, LITGPT)
    shape = report.findings[1]
    assert shape.status == "warn" and shape.values["bimodal"]
    assert "optimizer step" in shape.message
    ms = [float(m) for m in re.findall(r"iter time: ([\d.]+)ms", text)][report.summary["warmup"]:]
    clusters = two_clusters(ms)
    assert clusters["bimodal"]
    med = sorted(ms)[len(ms) // 2]
    squeezed = [med + (v - med) * 0.02 * med / (clusters["high_ms"] - clusters["low_ms"])
                for v in ms]
    pulled = two_clusters(squeezed)
    assert pulled["ashman_d"] >= 3.5 and pulled["gap_pct"] < 3.0 and not pulled["bimodal"]


def test_interleaved_ranks_are_not_merged() -> None:
    """Two srun ranks print the same iterations (composed from a real Megatron capture: each
    record line once as rank 0 and once, 1.5 times slower, as rank 8): rank 0's series is read
    and the summary says so."""
    records = [ln for ln in read(MEGATRON).splitlines() if "elapsed time per iteration" in ln]
    slower = [re.sub(r"(elapsed time per iteration \(ms\): )([\d.]+)",
                     lambda m: f"{m.group(1)}{float(m.group(2)) * 1.5:.1f}", ln) for ln in records]
    text = "\n".join(f"{rank}: {ln}" for a, b in zip(records, slower, strict=True)
                     for rank, ln in (("8", b), ("0", a)))
    alone = diagnose_text("\n".join(records), "alone")
    both = diagnose_text(text, "both")
    assert both.summary["samples"] == alone.summary["samples"] == len(records)
    assert both.summary["read"] == alone.summary["read"]
    assert any("rank 0's series read" in note for note in both.summary["notes"])


def test_torchtitan_time_from_throughput_and_tokens_per_step() -> None:
    """Without timestamps, torchtitan's tps is a throughput series; with the batch and sequence
    length in the log, tokens / tps is the step time. Composed from a real capture (its
    timestamps removed; 2 x 4096 tokens per step assumed): the step times from tps agree with
    the ones the timestamps gave."""
    stamped = diagnose_text(read(TITAN), TITAN)
    bare = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - ", "", read(TITAN))
    rates = diagnose_text(bare, "bare")
    assert (rates.summary["unit"], rates.summary["samples"]) == ("tokens/s", 8)
    assert [f.status for f in rates.findings] == ["info", "info"]
    config = "local_batch_size = 2\nseq_len = 4096\n" + bare
    timed = diagnose_text(config, "config")
    assert timed.summary["unit"] == "s" and timed.summary["samples"] == 8
    assert timed.summary["read"]["median_ms"] == pytest.approx(
        stamped.summary["read"]["median_ms"], rel=0.01)
