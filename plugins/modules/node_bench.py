#!/usr/bin/python
"""exemplar.tune.node_bench: one benchmark, run a few times on this host alone; changes nothing."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_bench
short_description: Run a single-node benchmark a few times on the host and return each run
description:
  - Runs one benchmark C(runs) times, one after the other, on the host it is called on, and
    returns each run's wall time and the tail of what it printed. The controller reads the
    value from that output (C(exemplar-tune slow-nodes) compares the hosts of a fleet with
    each other). Nothing on the host is changed.
  - "The benchmark, the first that applies: C(command) (the host variable
    C(exemplar_node_bench_command) gives it when the task leaves it out); nccl-tests
    C(all_reduce_perf) over every GPU of the host (C(-b 1G -e 1G -g N), N from
    C(/proc/driver/nvidia/gpus)) where the program is on C(PATH) or in C(/opt/nccl-tests/build)
    and the driver lists GPUs; else a fixed integer loop on one CPU core, timed in the module
    itself (what the core's frequency policy, turbo and idle states give it)."
  - A run that exits non-zero, is killed or takes longer than C(timeout) fails the task with
    one line naming the run.
  - "With C(facts: true) it first reads the facts of the layers C(layers) names, as
    C(exemplar.tune.facts) with C(as_json) does (C(exemplar_tune_json)): the state the runs
    ran in, in the same call (C(exemplar-tune slow-nodes) reads both in one pass)."
version_added: "0.2.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  runs:
    description: How many times to run the benchmark.
    type: int
    default: 5
  bench_command:
    description:
      - The benchmark as an argument list (never run through a shell), e.g.
        C(["/opt/bin/gemm", "--size", "8192"]). Empty means the default above.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds one run may take.
    type: float
    default: 600
  facts:
    description: Also return the host's facts (C(exemplar_tune_json)), read before the runs.
    type: bool
    default: false
  layers:
    description: With C(facts), the layers to read (default every layer).
    type: list
    elements: str
    choices: [gpu, vm, cpu, runtime, fabric, workload]
    default: [gpu, vm, cpu, runtime, fabric, workload]
extends_documentation_fragment:
  - exemplar.tune.attributes.reads
  - exemplar.tune.facts
  - exemplar.tune.bmc
"""

EXAMPLES = r"""
- name: Five runs of the default benchmark
  exemplar.tune.node_bench:
    runs: 5

- name: The site's own single-node benchmark
  exemplar.tune.node_bench:
    bench_command: ["/opt/bench/gemm", "--size", "8192"]
    runs: 8
"""

RETURN = r"""
exemplar_tune_json:
  description: With C(facts), the facts of the layers read, as one JSON text.
  returned: when facts is true
  type: str
kind:
  description: C(command), C(nccl-tests) or C(cpu-loop).
  returned: always
  type: str
argv:
  description: What was run (empty for C(cpu-loop)).
  returned: always
  type: list
  elements: str
runs:
  description: Each run's C(seconds) (wall time) and C(output) (the last 64 KiB of its stdout
    and stderr, stdout first).
  returned: always
  type: list
  elements: dict
"""

import glob
import json
import os
import shutil
import subprocess
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.exemplar.tune.plugins.module_utils.glue.facts_module import (
    facts_options,
    module_facts,
)

OUTPUT_TAIL = 64 << 10
NCCL_TESTS_DIRS = ("/opt/nccl-tests/build",)
LOOP_ROUNDS = 3_000_000


def nccl_tests_argv() -> list[str]:
    """``all_reduce_perf`` over every GPU of the host, or ``[]`` where either is missing."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *NCCL_TESTS_DIRS])
    program = shutil.which("all_reduce_perf", path=path)
    gpus = len(glob.glob("/proc/driver/nvidia/gpus/*"))
    if not program or not gpus:
        return []
    return [program, "-b", "1G", "-e", "1G", "-g", str(gpus), "-w", "5", "-n", "20"]


def cpu_loop() -> float:
    """Seconds a fixed integer recurrence takes on the calling core."""
    start = time.perf_counter()
    value = 1
    for _ in range(LOOP_ROUNDS):
        value = (value * 1103515245 + 12345) & 0x7FFFFFFF
    return time.perf_counter() - start


def run_once(argv: list[str], timeout: float) -> dict[str, Any]:
    """One run of ``argv``: its wall time and output; ``RuntimeError`` (one line) on failure."""
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise RuntimeError(f"{argv[0]}: no such program") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout:g} s") from None
    seconds = time.monotonic() - start
    output = (done.stdout + done.stderr)[-OUTPUT_TAIL:].decode("utf-8", errors="replace")
    if done.returncode != 0:
        last = next((line for line in reversed(done.stderr.decode(errors="replace")
                                                 .splitlines()) if line.strip()), "")
        raise RuntimeError(f"exit status {done.returncode}" + (f": {last.strip()}" if last
                                                                 else ""))
    return {"seconds": round(seconds, 6), "output": output}


def main() -> None:
    """Module entry point."""
    module = AnsibleModule(argument_spec={
        "runs": {"type": "int", "default": 5},
        "bench_command": {"type": "list", "elements": "str", "default": []},
        "timeout": {"type": "float", "default": 600.0},
        "facts": {"type": "bool", "default": False},
        **facts_options(),
    }, supports_check_mode=True)
    runs = module.params["runs"]
    if runs < 1:
        module.fail_json(msg=f"runs {runs}: at least 1")
    read = {"exemplar_tune_json": json.dumps(module_facts(module))} if module.params[
        "facts"] else {}
    argv = list(module.params["bench_command"]) or nccl_tests_argv()
    kind = "command" if module.params["bench_command"] else "nccl-tests" if argv else "cpu-loop"
    done = []
    for index in range(1, runs + 1):
        if kind == "cpu-loop":
            done.append({"seconds": round(cpu_loop(), 6), "output": ""})
            continue
        try:
            done.append(run_once(argv, module.params["timeout"]))
        except RuntimeError as exc:
            module.fail_json(msg=f"{kind} run {index} of {runs} ({argv[0]}): {exc}",
                             kind=kind, argv=argv, runs=done)
    module.exit_json(changed=False, kind=kind, argv=argv, runs=done, **read)


if __name__ == "__main__":
    main()
