"""The simulated cluster's benchmark: one run of a workload on every host, in a real format.

Training workloads print Megatron-LM iteration lines (``elapsed time per iteration (ms)``);
with several hosts a data-parallel step lasts as long as the slowest host's. ``per_rank``
prints each host's own time instead, one line per host and iteration prefixed ``HOST: `` (what
a per-rank timer logs of the host's own work, before it waits for the others). Collectives print
an nccl-tests table (``all_gather_perf`` / ``reduce_scatter_perf``: sizes from ``minbytes`` to
``maxbytes`` by ``stepfactor``, 1 MiB to 16 GiB by 2 unless asked otherwise; time, algbw and
busbw, out-of-place and in-place), each size timed by the slowest host. Each call increments
the cluster's run counter, so repeated runs get independent, reproducible noise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.bounded_lock import lock_exclusive

from exemplar_tune.sim.model import collective_times, host_state, is_collective, step_times

DEFAULT_SIZES = (2**20, 16 * 2**30, 2)  # nccl-tests' -b 1M -e 16G -f 2
MAX_ROWS = 64
WORD = 4  # the table's datatype: float


def table_sizes(minbytes: int, maxbytes: int, stepfactor: int, ranks: int) -> list[int]:
    """The sizes nccl-tests prints for ``-b minbytes -e maxbytes -f stepfactor``.

    Like nccl-tests: from ``minbytes`` while not above ``maxbytes``, times ``stepfactor``; each
    size rounded down to whole elements per rank (``ranks`` x 4 bytes), and at least one
    element per rank. ``ValueError`` for a range nccl-tests would refuse.
    """
    if minbytes < 1 or maxbytes < minbytes:
        raise ValueError(f"-b {minbytes} -e {maxbytes}: need 0 < minbytes <= maxbytes")
    if stepfactor < 2:
        raise ValueError(f"-f {stepfactor}: the step factor must be at least 2")
    sizes, size = [], minbytes
    while size <= maxbytes and len(sizes) < MAX_ROWS:
        sizes.append(max(WORD * ranks, size // (WORD * ranks) * WORD * ranks))
        size *= stepfactor
    return sizes


def next_run(counter: Path) -> int:
    """Read, increment and store the run counter (safe against concurrent runs)."""
    counter.parent.mkdir(parents=True, exist_ok=True)
    with counter.open("a+") as handle:
        lock_exclusive(handle.fileno(), f"benchmark run counter {counter}")
        handle.seek(0)
        text = handle.read().strip()
        run = int(text) if text else 0
        handle.seek(0)
        handle.truncate()
        handle.write(f"{run + 1}\n")
    return run


def bench_lines(directory: Path, scenario: dict[str, Any], hosts: list[str], workload: str,
                steps: int, sizes: tuple[int, int, int] = DEFAULT_SIZES, *,
                per_rank: bool = False) -> Iterator[str]:
    """The output of one benchmark run of ``workload`` over ``hosts``.

    ``sizes`` (minbytes, maxbytes, stepfactor) is the range of a collective's table.
    """
    if workload not in scenario["workloads"]:
        raise ValueError(f"workload {workload!r}: the scenario has "
                         f"{', '.join(scenario['workloads'])}")
    shape = scenario["workloads"][workload]
    table = table_sizes(*sizes, len(hosts) * scenario["gpus_per_host"]) \
        if is_collective(shape) else []
    run = next_run(directory / "state" / "bench-runs")
    states = {host: host_state(str(directory / "hosts" / host)) for host in hosts}
    if is_collective(shape):
        per_host = [collective_times(s, scenario, workload, h, run, table, len(hosts))
                    for h, s in states.items()]
        times = [max(values) for values in zip(*per_host, strict=True)]
        yield from nccl_table(scenario, workload, dict(zip(table, times, strict=True)),
                              len(hosts), sizes)
        return
    per_host = [step_times(s, scenario, workload, h, run, steps, len(hosts))
                for h, s in states.items()]
    for index, values in enumerate(zip(*per_host, strict=True), start=1):
        shown = zip(states, values, strict=True) if per_rank else [("", max(values))]
        for host, seconds in shown:
            yield (f"{host + ': ' if host else ''} [2026-11-29 10:00:00] iteration {index:8d}/"
                   f"{steps:8d} | consumed samples: {index * 1024:12d} | elapsed time per "
                   f"iteration (ms): {seconds * 1000:.1f} | learning rate: 1.000E-04 | global "
                   "batch size:  1024 | lm loss: 2.345678E+00 | loss scale: 1.0 |")


def nccl_table(scenario: dict[str, Any], workload: str, times_us: dict[int, float], hosts: int,
               sizes: tuple[int, int, int] = DEFAULT_SIZES) -> Iterator[str]:
    """An nccl-tests report with ``times_us[size]`` microseconds per collective at each size.

    algbw = size / time (GB/s), busbw = algbw x (ranks - 1) / ranks, as nccl-tests computes
    them for all_gather and reduce_scatter; count is elements per rank.
    """
    shape = scenario["workloads"][workload]
    ranks = hosts * scenario["gpus_per_host"]
    name = f"{shape['collective']}_perf"
    yield "# nccl-tests version 2.17.6 nccl-headers=22809 nccl-library=22809"
    yield f"# Collective test starting: {name}"
    yield (f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[1]} step: {sizes[2]}"
           "(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0")
    yield "#"
    yield "#" + " " * 62 + "out-of-place                       in-place"
    yield ("#       size         count      type   redop    root     time   algbw   busbw "
           "#wrong     time   algbw   busbw #wrong")
    yield ("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)  "
           "          (us)  (GB/s)  (GB/s)")
    total_bus = 0.0
    for size, time_us in times_us.items():
        algbw = size / time_us / 1000.0
        busbw = algbw * (ranks - 1) / ranks
        total_bus += busbw
        group = f"{time_us:9.2f}  {algbw:6.2f}  {busbw:6.2f}       0"
        yield (f"{size:12d}  {size // WORD // ranks:12d}     float    none      -1  {group}  "
               f"{group}")
    yield "# Out of bounds values : 0 OK"
    yield f"# Avg bus bandwidth    : {total_bus / max(1, len(times_us)):.3f}"
    yield "#"
    yield f"# Collective test concluded: {name}"
