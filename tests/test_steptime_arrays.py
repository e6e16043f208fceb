"""Step-time logs are held as columns and judged on arrays (their memory is measured in
``test_diagnose_stream``): the columns give back what was added; the array judgements (the
best split, slow ranks) give what the rules written out one split or one iteration at a time
give; evidence folds millions of line numbers without a set of them; a log with many stalls
lists a bounded number of them; a line no family can convert spoils no reading; and a log of
one rank is read once."""

from __future__ import annotations

import statistics
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from exemplar_tune.diagnose import DiagnoseError, diagnose_text, slow_ranks
from exemplar_tune.diagnose.base import cite, read_all
from exemplar_tune.diagnose.normalize import normalize
from exemplar_tune.diagnose.steplog import Record, Records, Sample, Samples
from exemplar_tune.diagnose.steptime import (
    BLOCK,
    MAX_SPIKES_SHOWN,
    StepReader,
    best_split,
    two_clusters,
)


def _split_one_at_a_time(values: list[float], first: int, end: int, last: bool) -> int:
    """The split rule written out: every k scored in turn with Python floats."""
    n, total, best_k, best = len(values), 0.0, first, -1.0
    prefix = [0.0]
    for v in values:
        prefix.append(prefix[-1] + v)
    total = prefix[n]
    for k in range(first, end):
        score = k * (n - k) * (prefix[k] / k - (total - prefix[k]) / (n - k)) ** 2
        if score > best or (last and score == best):
            best_k, best = k, score
    return best_k


# values with ties (whole numbers) and without
values = st.one_of(st.lists(st.integers(0, 5).map(float), min_size=5, max_size=60),
                   st.lists(st.floats(1.0, 1e6), min_size=5, max_size=60))


@settings(max_examples=300, deadline=None)
@given(values, st.booleans())
def test_best_split_is_the_rule_one_split_at_a_time(xs, last):
    assert best_split(np.array(xs), 1, len(xs), last) == _split_one_at_a_time(xs, 1, len(xs),
                                                                              last)


def test_best_split_across_blocks_keeps_the_first_or_last_of_equals():
    """Equal scores in different blocks: the first (level shift) or the last (Otsu) wins."""
    xs = np.array([1.0, 2.0] * (BLOCK + 7))  # a periodic series: many splits score alike
    n = len(xs)
    for last in (False, True):
        assert best_split(xs, 1, n, last) == _split_one_at_a_time(xs.tolist(), 1, n, last)


def test_two_clusters_reads_sorted_and_unsorted_input_alike():
    rng = np.random.default_rng(7)
    xs = np.concatenate([rng.normal(94, 1, 300), rng.normal(205, 2, 100)])
    shuffled = rng.permutation(xs)
    assert two_clusters(shuffled) == two_clusters(np.sort(xs)) == two_clusters(xs.tolist())
    assert two_clusters(xs)["bimodal"] and two_clusters(xs)["cut_ms"] > 150


def test_columns_give_back_what_was_added():
    records = Records([Record(3, "rank1", None, 12.5), Record(9, None, 4, None, 7.25, "x")])
    assert list(records) == [Record(3, "rank1", None, 12.5, None, ""),
                             Record(9, None, 4, None, 7.25, "x")]
    assert list(records.take([1])) == [records[1]] and records[-1] == records[1]
    samples = Samples([Sample(5, 1.5), Sample(8, 2.5, 40, 10, "optimizer.step", 6)])
    assert list(samples) == [Sample(5, 1.5), Sample(8, 2.5, 40, 10, "optimizer.step", 6)]
    shared = Samples.columns(records.lines, records.values, records.steps, span=2)
    assert shared.lines is records.lines and shared[0] == Sample(3, 12.5, None, 2)


@given(st.lists(st.integers(1, 40), max_size=30))
def test_cite_folds_any_lines_as_ranges(lines):
    ordered = sorted(set(lines))
    ranges: list[list[int]] = []
    for n in ordered:
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    want = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:6])
    want += ",..." if len(ranges) > 6 else ""
    assert cite("log", lines) == f"log:{want}" == cite("log", np.array(lines, dtype=np.int64))


def test_cite_folds_a_million_lines():
    assert cite("log", np.arange(1, 1_000_001), "step time") == "log:1-1000000 [step time]"
    assert cite("log", np.arange(1, 3_000_000, 3)) == "log:1,4,7,10,13,16,..."


def test_many_stalls_list_a_bounded_number_of_them():
    lines = [f" iteration {i:6d}/ 100000 | elapsed time per iteration (ms): "
             f"{1000.0 + (400.0 if i % 20 == 0 else i % 3):.1f} | lm loss: 2.0 |"
             for i in range(1, 5001)]
    s = diagnose_text("\n".join(lines), "log").summary
    stalls = round(s["tail_fraction"] * s["steps"])
    assert stalls > MAX_SPIKES_SHOWN
    assert s["spike_steps"] == [i for i in range(260, 5001, 20)][:MAX_SPIKES_SHOWN]
    assert s["spike_steps_shown"] == f"the first {MAX_SPIKES_SHOWN} of {stalls}"


def _verdicts_one_at_a_time(ranks: dict[str, list[tuple[int, float, int]]]):
    """The slow-rank rule written out: per iteration, per rank, with Python floats."""
    by_step: dict[int, dict[str, tuple[float, int]]] = {}
    for name, samples in ranks.items():
        for step, value, line in samples:
            by_step.setdefault(step, {})[name] = (value, line)
    compared = [v for v in by_step.values() if len(v) >= slow_ranks.MIN_RANKS]
    seen: dict[str, int] = {}
    behind: dict[str, list[tuple[float, int]]] = {}
    spreads = []
    for values in compared:
        times = [t for t, _ in values.values()]
        median = statistics.median(times)
        spread = slow_ranks.MAD_SCALE * statistics.median(abs(t - median) for t in times)
        spreads.append(spread / median if median > 0 else 0.0)
        for name, (time, line) in values.items():
            seen[name] = seen.get(name, 0) + 1
            if median > 0 and time - median > max(slow_ranks.K_MAD * spread,
                                                  slow_ranks.MIN_REL * median):
                behind.setdefault(name, []).append(((time - median) / median, line))
    found = {name: (seen[name], len(hits), statistics.median(e for e, _ in hits),
                    sorted(n for _, n in hits)) for name, hits in behind.items()}
    return found, len(compared), statistics.median(spreads) if spreads else 0.0


rank_logs = st.dictionaries(
    st.sampled_from([f"rank{i}" for i in range(8)]),
    st.lists(st.tuples(st.integers(1, 12), st.sampled_from([100.0, 101.0, 104.0, 150.0, 0.0])),
             min_size=1, max_size=15),
    min_size=3, max_size=8)


@settings(max_examples=300, deadline=None)
@given(rank_logs)
def test_slow_ranks_on_arrays_are_the_rule_one_iteration_at_a_time(logs):
    ranks, times = {}, slow_ranks.RankTimes()
    for r, (name, pairs) in enumerate(sorted(logs.items())):
        samples = [Sample(1000 * r + i, value, step) for i, (step, value) in enumerate(pairs)]
        times.add(name, Samples(samples))
        ranks[name] = [(s.iteration, s.value, s.line) for s in samples]
    want, want_compared, want_disagreement = _verdicts_one_at_a_time(ranks)
    for chunk in (slow_ranks.CHUNK, 5, 1):  # whole iterations at a time, however few
        with patch.object(slow_ranks, "CHUNK", chunk):
            found, compared, disagreement = slow_ranks.verdicts(times)
        assert (compared, disagreement) == (want_compared, want_disagreement)
        assert {v.rank: (v.steps, v.behind, v.excess, sorted(v.lines)) for v in found} == want
        assert [(v.behind, v.excess) for v in found] == sorted(
            ((v.behind, v.excess) for v in found), key=lambda b: (-b[0], -b[1]))


MEGATRON = "\n".join(f" iteration {i:6d}/ 100 | elapsed time per iteration (ms): "
                     f"{1000 + i % 3:.1f} | lm loss: 2.0 |" for i in range(1, 40))


def test_a_train_runtime_that_is_no_number_leaves_its_intervals_out():
    dicts = [f"{{'loss': 1.0, 'train_runtime': {r}}}" for r in (5, 10, None, 20, 25, 30)]
    s = diagnose_text("\n".join(["***** Running training *****", *dicts]), "hf").summary
    assert s["samples"] == 4 and s["read"]["max_ms"] == 5000.0  # 0-5, 5-10, 20-25, 25-30
    assert "1 train_runtime value(s) not a number" in " ".join(s["notes"])


def test_a_number_too_long_to_convert_spoils_no_reading():
    """Another family's line with a 5000-digit count (past Python's int conversion limit) is
    not a reading of that family, and the Megatron records around it are read."""
    text = (MEGATRON + "\nids " + "9" * 5000 + "/10 [00:01<00:02, 1.0it/s]\niter "
            + "9" * 5000 + " step 1: loss 1, iter time: 5 ms")
    s = diagnose_text(text, "log").summary
    assert (s["format"], s["samples"]) == ("megatron", 39)


def test_values_all_out_of_range_are_a_one_line_refusal():
    with pytest.raises(DiagnoseError, match=r"all 12 values out of range"):
        diagnose_text("\n".join(["1e400"] * 12), "steps.txt")


def test_a_log_of_one_rank_is_read_once_and_a_second_rank_gets_its_own_reading():
    one = StepReader("log", {})
    text = normalize("\n".join(f"[default7]:{line}" for line in MEGATRON.split("\n")))
    assert set(text.sources) == {"local rank 7"}
    read_all(one, text)
    assert one.ranks.ranks == {}  # the whole log's reading is the rank's
    two = StepReader("log", {})
    lines = [f"[default{r}]:{line}" for r in (7, 3, 5) for line in MEGATRON.split("\n")]
    report = read_all(two, normalize("\n".join(lines)))
    [slow] = [f for f in report.findings if f.check_id == "workload.slow-ranks"]
    assert slow.values["ranks"] == 3 and slow.values["steps"] == 39
