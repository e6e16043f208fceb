"""``slow-nodes``: which hosts are slower than the fleet, and the facts that set them apart
(the measuring and judging is ``exemplar_tune.orchestration.slow_nodes``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from exemplar_tune.commands import SUMMARIES
from exemplar_tune.commands.options import add_host_options, facts_runner
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, UserError
from exemplar_tune.facts import collect_facts
from exemplar_tune.fleet.hostlist import compress
from exemplar_tune.fleet.majority import differences
from exemplar_tune.orchestration.benchmark import BenchmarkSpec, load_benchmarks
from exemplar_tune.orchestration.slow_nodes import (
    MIN_RUNS,
    MIN_SLOWDOWN,
    explain,
    judge,
    measure,
    noise,
)
from exemplar_tune.orchestration.stats import CONFIDENCE
from exemplar_tune.progress import say

EPILOG = """examples:
  exemplar-tune slow-nodes -i hosts.yml --bench node-bench.yaml
  exemplar-tune slow-nodes -i hosts.yml --bench bench.yaml --shape gemm --runs 8 --format json

Each host runs the benchmark shape alone (EXEMPLAR_TUNE_HOSTS names it; a Slurm shape gets
that one node), --runs rounds in a rotating order. Each host is compared with the pooled runs
of all the others: its slowdown and an interval whose error is shared over all hosts. A host
is slow when the whole interval lies above zero and the slowdown is at least --min-slowdown.
Each slow host is then joined with the facts where it differs from the fleet's majority
(facts --differ), no profile needed. Exit 1 when a host is slow.
Try it: exemplar-tune sim create /tmp/c --hosts 8; see README "Slow nodes".
"""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``slow-nodes``."""
    cmd = sub.add_parser("slow-nodes", help=SUMMARIES["slow-nodes"],
                         description="Run one benchmark on every host alone, repeated, and "
                         "name the hosts slower than the fleet beyond its noise, each with "
                         "the facts where it differs from the majority.", epilog=EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_host_options(cmd)
    cmd.add_argument("--bench", type=Path, required=True, metavar="FILE.yaml",
                     help="benchmark file; a shape that runs on one host (its command sees "
                     "EXEMPLAR_TUNE_HOSTS)")
    cmd.add_argument("--shape", metavar="NAME", help="the shape to run (default: the first)")
    cmd.add_argument("--runs", type=int, default=5, metavar="N",
                     help=f"runs per host (default 5, at least {MIN_RUNS})")
    cmd.add_argument("--confidence", type=float, default=CONFIDENCE, metavar="FRACTION",
                     help=f"shared over all hosts (default {CONFIDENCE})")
    cmd.add_argument("--min-slowdown", type=float, default=MIN_SLOWDOWN, metavar="FRACTION",
                     help=f"smallest slowdown worth naming (default {MIN_SLOWDOWN})")
    cmd.add_argument("--format", choices=("table", "json"), default="table")
    cmd.set_defaults(func=cmd_slow_nodes)


def cmd_slow_nodes(args: argparse.Namespace) -> int:
    """``exemplar-tune slow-nodes``."""
    if args.inventory is None:
        raise UserError("slow-nodes compares hosts with each other: give an inventory (-i)")
    if not 0 < args.confidence < 1:
        raise UserError(f"--confidence {args.confidence}: a fraction between 0 and 1, e.g. 0.9")
    if args.runs < MIN_RUNS:
        raise UserError(f"--runs {args.runs}: at least {MIN_RUNS} runs per host are needed "
                        "to know the noise")
    if not 0 <= args.min_slowdown < 1:
        raise UserError(f"--min-slowdown {args.min_slowdown}: a fraction from 0 to 1")
    spec = _shape(load_benchmarks(args.bench), args.shape, str(args.bench))
    run = facts_runner(args)
    hosts_facts, missing = collect_facts(None, run, None)
    if missing:
        raise UserError("hosts unreachable while reading their facts: "
                        + ", ".join(f"{h} ({why})" for h, why in sorted(missing.items())))
    values = measure(run, spec, sorted(hosts_facts), args.runs, None, say)
    verdicts = explain(judge(values, args.confidence, args.min_slowdown),
                       differences(hosts_facts))
    doc = {"shape": spec.name, "runs": args.runs, "confidence": args.confidence,
           "noise_cv": round(noise(values), 5), "hosts": [v.to_dict() for v in verdicts],
           "slow": compress(v.host for v in verdicts if v.slow)}
    _print(args, doc, verdicts)
    return EXIT_FINDINGS if doc["slow"] else EXIT_OK


def _shape(specs: list[BenchmarkSpec], name: str | None, source: str) -> BenchmarkSpec:
    if name is None:
        return specs[0]
    found = [s for s in specs if s.name == name]
    if not found:
        raise UserError(f"--shape {name}: {source} has {', '.join(s.name for s in specs)}")
    return found[0]


def _print(args: argparse.Namespace, doc: dict, verdicts: list) -> None:
    if args.format == "json":
        print(json.dumps(doc, indent=2))
        return
    print(f"slow-nodes: {len(verdicts)} hosts, {doc['shape']} x {doc['runs']} runs each "
          f"(run-to-run CV {doc['noise_cv']:.1%}), {doc['confidence']:.0%} confidence shared "
          "over the hosts")
    slow = [v for v in verdicts if v.slow]
    for verdict in slow:
        print(f"  SLOW {verdict.line()}")
        for text in verdict.differs or ("differs from the majority in no fact read (facts "
                                        "--differ): look outside the layers",):
            print(f"       {text}")
    rest = [v.host for v in verdicts if not v.slow]
    print(f"  {len(slow)} slow; within the fleet: {compress(rest) or 'none'}")
