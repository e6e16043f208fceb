#!/usr/bin/python
"""exemplar.tune.node_bench: one benchmark, run a few times on this host alone; changes nothing."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_bench
short_description: Run a single-node benchmark a few times on the host and return each run
description:
  - Runs one benchmark C(runs) times, one after the other, on the host it is called on, and
    returns each run's wall time and what it printed (bounded, see below). The controller
    reads the value from that output (C(exemplar-tune slow-nodes) compares the hosts of a
    fleet with each other). Nothing on the host is changed.
  - "The benchmark, the first that applies: C(command) (the host variable
    C(exemplar_node_bench_command) gives it when the task leaves it out); nccl-tests
    C(all_reduce_perf) over every GPU of the host (C(-b 1G -e 1G -g N), N from
    C(/proc/driver/nvidia/gpus)) where the program is on C(PATH) or in C(/opt/nccl-tests/build)
    and the driver lists GPUs; else a fixed integer loop on one CPU core, timed in the module
    itself (what the core's frequency policy, turbo and idle states give it)."
  - A run that exits non-zero, is killed or takes longer than C(timeout) fails the task with
    one line naming the run.
  - "Of each run's stdout and stderr the first 16 KiB and the last 48 KiB are kept, with a
    line saying how many bytes between them were left out (as a benchmark's log keeps its
    first and last bytes): the result a host returns stays small whatever it printed."
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
  description: Each run's C(seconds) (wall time) and C(output), stdout then stderr, each
    stream read in bounded chunks and kept as its first 16 KiB and last 48 KiB around a line
    saying how many bytes were left out (a benchmark printing gigabytes costs no memory).
  returned: always
  type: list
  elements: dict
"""

import glob
import json
import os
import selectors
import shutil
import subprocess
import time
from typing import IO, Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.exemplar.tune.plugins.module_utils.glue.facts_module import (
    facts_options,
    module_facts,
)

OUTPUT_HEAD, OUTPUT_TAIL = 16 << 10, 48 << 10  # bytes of each stream of a run that are kept
CHUNK = 64 << 10  # bytes read at a time
MAX_REASON = 200  # characters of the stderr line that a failure names
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


class Kept:
    """The first :data:`OUTPUT_HEAD` and last :data:`OUTPUT_TAIL` bytes of a stream, and how
    many it had: memory stays bounded whatever the stream's length."""

    def __init__(self) -> None:
        self.head, self.tail, self.size = bytearray(), bytearray(), 0

    def add(self, chunk: bytes) -> None:
        """Take the next bytes of the stream."""
        self.size += len(chunk)
        room = OUTPUT_HEAD - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > 2 * OUTPUT_TAIL:
            del self.tail[:-OUTPUT_TAIL]

    def text(self) -> str:
        """What was kept, with a line naming how many bytes were left out between."""
        tail = bytes(self.tail[-OUTPUT_TAIL:])
        left_out = self.size - len(self.head) - len(tail)
        middle = (f"\n[exemplar-tune: {left_out} bytes left out of this output; its first "
                  f"{OUTPUT_HEAD >> 10} KiB and last {OUTPUT_TAIL >> 10} KiB are kept]\n"
                  ).encode() if left_out else b""
        return (bytes(self.head) + middle + tail).decode("utf-8", errors="replace")


def read_bounded(streams: list[IO[bytes]], deadline: float) -> list[Kept] | None:
    """Each stream read to its end in chunks of :data:`CHUNK` bytes, kept bounded
    (:class:`Kept`); ``None`` when ``deadline`` (``time.monotonic()``) passes first."""
    kept = {stream.fileno(): Kept() for stream in streams}
    with selectors.DefaultSelector() as selector:
        for stream in streams:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, CHUNK)
                if chunk:
                    kept[key.fd].add(chunk)
                else:
                    selector.unregister(key.fileobj)
    return [kept[stream.fileno()] for stream in streams]


def run_once(argv: list[str], timeout: float) -> dict[str, Any]:
    """One run of ``argv``: its wall time and output (:class:`Kept`, stdout then stderr);
    ``RuntimeError`` (one line) on failure."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise RuntimeError(f"{argv[0]}: no such program") from None
    except OSError as exc:
        raise RuntimeError(f"{argv[0]}: cannot run it: {exc.strerror or exc}") from None
    with proc:
        kept = read_bounded([proc.stdout, proc.stderr], start + timeout)
        try:
            if kept is None:
                raise subprocess.TimeoutExpired(argv, timeout)
            returncode = proc.wait(timeout=max(start + timeout - time.monotonic(), 0.001))
        except subprocess.TimeoutExpired:
            proc.kill()
            raise RuntimeError(f"timed out after {timeout:g} s") from None
    seconds = time.monotonic() - start
    out, err = kept
    if returncode != 0:
        last = next((line for line in reversed(err.text().splitlines()) if line.strip()), "")
        raise RuntimeError(f"exit status {returncode}" + (f": {last.strip()[:MAX_REASON]}"
                                                          if last else ""))
    return {"seconds": round(seconds, 6), "output": out.text() + err.text()}


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
