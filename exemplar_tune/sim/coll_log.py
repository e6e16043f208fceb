"""What ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL`` prints for a simulated training job.

One line per collective call per rank, in NCCL 2.2x's format (``src/debug.cc`` prefix
``host:pid:tid [cudaDev] NCCL INFO``, then ``src/enqueue.cc``'s ``ncclEnqueueCheck`` line)::

    node01:24817:24817 [0] NCCL INFO AllGather: opCount 1f sendbuff 0x7f2a40000000 recvbuff
    0x7f2a80000000 count 2097152 datatype 9 op 0 root 0 comm 0x55c3a1e0d2c0 [nranks=16]
    stream 0x55c3a1f3a8e0

(on one line). The calls of a step are the workload's ``comm_sizes``: for each collective, each
message size, its calls per step, in file order. Sizes are nccl-tests' sizes (the whole
buffer); ``count`` is what NCCL counts: elements per rank for AllGather (sendcount) and
ReduceScatter (recvcount), all elements for AllReduce. Datatype 9 is ``ncclBfloat16``, op 0
``ncclSum``. Pointers and process ids are seeded by (seed, host, rank): the same every time.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from exemplar_tune.sim.model import comm_calls, is_collective, seed_of

OP_NAMES = {"all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
            "all_reduce": "AllReduce"}
BF16 = 9  # ncclBfloat16
BF16_BYTES = 2
SUM = 0  # ncclSum


def nccl_count(op: str, size: int, nranks: int) -> int:
    """The ``count`` NCCL logs for a bf16 ``op`` whose nccl-tests size is ``size`` bytes."""
    elements = size // BF16_BYTES
    return elements if op == "all_reduce" else elements // nranks


def coll_log_lines(scenario: dict[str, Any], hosts: list[str], workload: str,
                   steps: int) -> Iterator[str]:
    """The COLL lines of ``steps`` training steps of ``workload`` over ``hosts``, every rank."""
    shape = scenario["workloads"].get(workload)
    if shape is None or is_collective(shape):
        training = [n for n, s in scenario["workloads"].items() if not is_collective(s)]
        raise ValueError(f"workload {workload!r}: the COLL log is a training job's "
                         f"({', '.join(training)})")
    if steps < 1:
        raise ValueError(f"--steps {steps}: at least 1")
    calls = comm_calls(shape)
    ranks = [_rank(scenario["seed"], host, dev, len(hosts) * scenario["gpus_per_host"])
             for host in hosts for dev in range(scenario["gpus_per_host"])]
    op_count = 0
    for _ in range(steps):
        for op, size, repeat in calls:
            for _ in range(repeat):
                for rank in ranks:
                    yield _line(rank, op, size, op_count)
                op_count += 1


def _rank(seed: int, host: str, dev: int, nranks: int) -> dict[str, Any]:
    rng = random.Random(seed_of(seed, host, dev, "coll-log"))  # noqa: S311 - not secret
    pid = rng.randrange(2000, 400000)
    heap = 0x55000000_0000 + rng.randrange(0, 0xFFFF_FFFF) * 16
    return {"prefix": f"{host}:{pid}:{pid} [{dev}]", "nranks": nranks,
            "buffer": 0x7F0000000000 + rng.randrange(0, 0xFFFF) * 2**24,
            "comm": heap, "stream": heap + 0x12C620}


def _line(rank: dict[str, Any], op: str, size: int, op_count: int) -> str:
    count = nccl_count(op, size, rank["nranks"])
    send = rank["buffer"]
    recv = send + 2**30
    return (f"{rank['prefix']} NCCL INFO {OP_NAMES[op]}: opCount {op_count:x} "
            f"sendbuff {send:#x} recvbuff {recv:#x} count {count} datatype {BF16} op {SUM} "
            f"root 0 comm {rank['comm']:#x} [nranks={rank['nranks']}] stream {rank['stream']:#x}")
