"""What squeue/scontrol print and what ``srun --label`` prints, parsed (table-driven).

The job lines are in the exact ``squeue --noheader -O JOB_FIELDS`` form the test cluster
prints (``exit_code`` is the raw wait status); the node lines are ``scontrol show node
--oneliner`` lines of Slurm 22.05, shortened in the middle.
"""

from __future__ import annotations

import pytest

from exemplar_tune.slurm.ranks import joined, log_text, place_ranks, split_ranks
from exemplar_tune.slurm.records import JobRecord, failure, parse_jobs, parse_nodes


def job(state, reason="None", status=0, limit="1:00"):
    return JobRecord("12", state, reason, status, limit, "node[1-2]")


@pytest.mark.parametrize("name, text, want", [
    ("empty", "", []),
    ("garbage", "squeue: error: x\n|||\n", []),
    ("completed", "3|COMPLETED|None|0|UNLIMITED|node[1-2]|\n",
     [JobRecord("3", "COMPLETED", "None", 0, "UNLIMITED", "node[1-2]")]),
    ("exit-3", "7|FAILED|NonZeroExitCode|768|UNLIMITED|node1|\n",
     [JobRecord("7", "FAILED", "NonZeroExitCode", 3, "UNLIMITED", "node1")]),
    ("signal-15", "5|TIMEOUT|TimeLimit|15|1:00|node1|\n",
     [JobRecord("5", "TIMEOUT", "TimeLimit", -15, "1:00", "node1")]),
    ("held", "1|PENDING|launch failed requeued held|0|UNLIMITED||\n",
     [JobRecord("1", "PENDING", "launch failed requeued held", 0, "UNLIMITED", "")]),
])
def test_parse_jobs(name, text, want):
    assert parse_jobs(text) == want, name


def test_held_and_active():
    held = parse_jobs("1|PENDING|launch failed requeued held|0|UNLIMITED||\n")[0]
    assert held.held and held.active
    assert not job("PENDING", "Resources").held
    assert job("COMPLETING").active and not job("COMPLETED").active


@pytest.mark.parametrize("record, want", [
    (job("COMPLETED"), None),
    (job("TIMEOUT", "TimeLimit", -15), "slurm job 12 reached its time limit (1:00)"),
    (job("CANCELLED"), "slurm job 12 was cancelled"),
    (job("PREEMPTED"), "slurm job 12 was preempted"),
    (job("NODE_FAIL"), "slurm job 12 lost a node (NODE_FAIL)"),
    (job("OUT_OF_MEMORY", status=-9), "slurm job 12 ran out of memory: signal 9"),
    (job("FAILED", "NonZeroExitCode", 3), "slurm job 12 failed: exit code 3"),
    (job("FAILED", "NonZeroExitCode", -11), "slurm job 12 failed: signal 11"),
    (job("BOOT_FAIL"), "slurm job 12 could not boot its nodes"),
    (job("SPECIAL_EXIT", "BadConstraints"), "slurm job 12 ended SPECIAL_EXIT (BadConstraints)"),
])
def test_failure_reason(record, want):
    assert failure(record) == want


NODE = ("NodeName=node2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 OS=Linux 6.1 #1 SMP "
        "PREEMPT_DYNAMIC @0 RealMemory=1000 State={state} ThreadsPerCore=1 Partitions=debug "
        "ExtSensorsTemp=n/s Reason={reason}")


@pytest.mark.parametrize("state, reason, draining, want_reason", [
    ("IDLE+DRAIN", "some thing=1 [x] [root@2026-11-29T18:42:12]", True, "some thing=1 [x]"),
    ("MIXED+DRAIN", "exemplar:gpu.xids [slurm@2026-11-29T18:42:12]", True, "exemplar:gpu.xids"),
    ("IDLE", "(null)", False, ""),
    ("DOWN+DRAIN+NOT_RESPONDING", "Prolog error [root@2026-11-29T18:42:12]", True,
     "Prolog error"),
])
def test_parse_nodes(state, reason, draining, want_reason):
    nodes = parse_nodes(NODE.format(state=state, reason=reason) + "\n\ngarbage\n")
    assert list(nodes) == ["node2"]
    assert (nodes["node2"].state, nodes["node2"].reason) == (state, want_reason)
    assert nodes["node2"].draining is draining


def test_parse_node_without_reason():
    line = NODE.format(state="IDLE", reason="x").split(" Reason=")[0]
    assert parse_nodes(line)["node2"].reason == ""


def test_split_ranks_by_label():
    out = " 0: step=1\n 1: step=2\n10: step=3\nsrun: warning: x\n 0: 7: not a label\n"
    err = " 1: oops\nsrun: error: node2: task 1: Exited with exit code 3\n"
    ranks, other = split_ranks(out, err)
    assert list(ranks) == [0, 1, 10]
    assert ranks[0].stdout == ["step=1", "7: not a label"]
    assert ranks[1].stderr == ["oops"]
    assert other == ["srun: warning: x", "srun: error: node2: task 1: Exited with exit code 3"]
    assert joined(ranks, "stdout") == "step=1\n7: not a label\nstep=2\nstep=3\n"
    assert joined({}, "stdout") == ""


@pytest.mark.parametrize("per_node, want", [
    (1, {0: "n1", 1: "n2", 2: "n3", 3: None}),
    (2, {0: "n1", 1: "n1", 2: "n2", 3: "n2"}),
])
def test_block_placement(per_node, want):
    ranks, _ = split_ranks("0: a\n1: b\n2: c\n3: d\n", "")
    place_ranks(ranks, ["n1", "n2", "n3"], per_node, {"n1": "gpu01"})
    assert {r: rank.node for r, rank in ranks.items()} == want
    assert ranks[0].host == "gpu01" and ranks[2].host is None


def test_log_text_heads_each_rank():
    ranks, other = split_ranks("0: a\n", "0: e\nsrun: x\n")
    place_ranks(ranks, ["n1"], 1, {"n1": "gpu01"})
    assert log_text("# job", ranks, other) == (
        "# job\n==> rank 0 on n1 (host gpu01) <==\na\n[stderr] e\n"
        "==> srun / batch script <==\nsrun: x\n")
