"""The simulated cluster's benchmark: one run of a workload on every host, in a real format.

Training workloads print Megatron-LM iteration lines (``elapsed time per iteration (ms)``);
with several hosts a data-parallel step lasts as long as the slowest host's. Collectives print
an nccl-tests table (``all_gather_perf`` / ``reduce_scatter_perf``: sizes 1 MiB to 16 GiB,
time, algbw and busbw, out-of-place and in-place), timed by the slowest host. Each call
increments the cluster's run counter, so repeated runs get independent, reproducible noise.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from exemplar_tune.sim.model import collective_time, host_state, is_collective, step_times

LATENCY_US = 30.0
SIZES = [2**20 * 2**i for i in range(15)]  # 1 MiB .. 16 GiB
SIZE_SUFFIX = {"K": 2**10, "M": 2**20, "G": 2**30}


def next_run(counter: Path) -> int:
    """Read, increment and store the run counter (safe against concurrent runs)."""
    counter.parent.mkdir(parents=True, exist_ok=True)
    with counter.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        text = handle.read().strip()
        run = int(text) if text else 0
        handle.seek(0)
        handle.truncate()
        handle.write(f"{run + 1}\n")
    return run


def bench_lines(directory: Path, scenario: dict[str, Any], hosts: list[str], workload: str,
                steps: int) -> Iterator[str]:
    """The output of one benchmark run of ``workload`` over ``hosts``."""
    if workload not in scenario["workloads"]:
        raise ValueError(f"workload {workload!r}: the scenario has "
                         f"{', '.join(scenario['workloads'])}")
    run = next_run(directory / "state" / "bench-runs")
    states = {host: host_state(str(directory / "hosts" / host)) for host in hosts}
    if is_collective(scenario["workloads"][workload]):
        times = [collective_time(s, scenario, workload, h, run) for h, s in states.items()]
        yield from nccl_table(scenario, workload, max(times), len(hosts))
        return
    per_host = [step_times(s, scenario, workload, h, run, steps) for h, s in states.items()]
    for index, values in enumerate(zip(*per_host, strict=True), start=1):
        yield (f" [2026-11-29 10:00:00] iteration {index:8d}/{steps:8d} | consumed samples:"
               f" {index * 1024:12d} | elapsed time per iteration (ms): {max(values) * 1000:.1f}"
               f" | learning rate: 1.000E-04 | global batch size:  1024 | "
               f"lm loss: 2.345678E+00 | loss scale: 1.0 |")


def nccl_table(scenario: dict[str, Any], workload: str, time_ms: float,
               hosts: int) -> Iterator[str]:
    """An nccl-tests report whose time at the workload's size is ``time_ms``."""
    shape = scenario["workloads"][workload]
    ranks = hosts * scenario["gpus_per_host"]
    name = f"{shape['collective']}_perf"
    ref_size = int(shape["size"][:-1]) * SIZE_SUFFIX[shape["size"][-1]]
    per_byte_us = (time_ms * 1000.0 - LATENCY_US) / ref_size
    yield "# nccl-tests version 2.17.6 nccl-headers=22809 nccl-library=22809"
    yield f"# Collective test starting: {name}"
    yield (f"# nThread 1 nGpus 1 minBytes {SIZES[0]} maxBytes {SIZES[-1]} step: 2(factor) "
           "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0")
    yield "#"
    yield "#" + " " * 62 + "out-of-place                       in-place"
    yield ("#       size         count      type   redop    root     time   algbw   busbw "
           "#wrong     time   algbw   busbw #wrong")
    yield ("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)  "
           "          (us)  (GB/s)  (GB/s)")
    total_bus = 0.0
    for size in SIZES:
        time_us = LATENCY_US + per_byte_us * size
        algbw = size / time_us / 1000.0
        busbw = algbw * (ranks - 1) / ranks
        total_bus += busbw
        group = f"{time_us:9.2f}  {algbw:6.2f}  {busbw:6.2f}       0"
        yield (f"{size:12d}  {size // 4 // ranks:12d}     float    none      -1  {group}  "
               f"{group}")
    yield "# Out of bounds values : 0 OK"
    yield f"# Avg bus bandwidth    : {total_bus / len(SIZES):.3f}"
    yield "#"
    yield f"# Collective test concluded: {name}"
