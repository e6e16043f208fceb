"""A benchmark command for simulated hosts: prints Megatron-LM style iteration lines.

    python -m exemplar_tune.sim.bench --sysroot HOST_DIR [--sysroot ...] --workload moe \\
        --run-counter FILE

With several hosts the step time of a data-parallel job is the slowest host's at each step.
``--run-counter`` names a file holding the run index (incremented on every call), so that
repeated runs get independent noise while the whole sequence stays reproducible.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from exemplar_tune.sim.model import host_state, load_scenario, step_times


def next_run(counter: Path) -> int:
    """Read, increment and store the run counter."""
    run = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(f"{run + 1}\n")
    return run


def main(argv: list[str] | None = None) -> int:
    """Print one benchmark run's iterations."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sysroot", action="append", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--scenario", type=Path)
    parser.add_argument("--run-counter", type=Path, required=True)
    args = parser.parse_args(argv)
    scenario = load_scenario(args.scenario)
    run = next_run(args.run_counter)
    per_host = [step_times(host_state(root), scenario, args.workload, os.path.basename(root),
                           run, args.steps) for root in args.sysroot]
    for index, values in enumerate(zip(*per_host, strict=True), start=1):
        ms = max(values) * 1000.0
        print(f" [2026-11-29 10:00:00] iteration {index:8d}/{args.steps:8d} | consumed samples:"
              f" {index * 1024:12d} | elapsed time per iteration (ms): {ms:.1f} | "
              f"learning rate: 1.000E-04 | global batch size:  1024 | lm loss: 2.345678E+00 |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
