"""``slow-nodes``: which hosts are slower than the fleet, and the facts that set them apart
(the measuring and judging is ``exemplar_tune.orchestration.slow_nodes``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from exemplar_tune.commands import SUMMARIES
from exemplar_tune.commands.options import add_host_options, facts_runner
from exemplar_tune.commands.slow_fabric import run_fabric
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, UserError
from exemplar_tune.facts import collect_facts
from exemplar_tune.fleet.hostlist import compress
from exemplar_tune.fleet.majority import differences
from exemplar_tune.json_schemas import checked
from exemplar_tune.orchestration.benchmark import BenchmarkSpec, load_benchmarks
from exemplar_tune.orchestration.detect_power import detect_line, parse_slowdown
from exemplar_tune.orchestration.slow_nodes import (
    MIN_RUNS,
    MIN_SLOWDOWN,
    HostVerdict,
    explain,
    judge,
    lost_groups,
    measure,
    measure_on_hosts,
    noise,
    slow_groups,
    turned_slow,
    unanswered,
)
from exemplar_tune.orchestration.stats import CONFIDENCE
from exemplar_tune.progress import say
from exemplar_tune.reports.html import render as render_html
from exemplar_tune.reports.prometheus import slow_nodes_text, write_atomically
from exemplar_tune.terminal import join_lines
from exemplar_tune.verdict import Target, slow_verdict

SCHEMA_VERSION = 1  # of schemas/slow-nodes-result.schema.json
EPILOG = """examples:
  exemplar-tune slow-nodes -i hosts.yml                  the node benchmark, 5 runs per host
  exemplar-tune slow-nodes -i hosts.yml --runs 8 --format json
  exemplar-tune slow-nodes -i hosts.yml --format prometheus \\
      --output /var/lib/prometheus/node-exporter/slow.prom
  exemplar-tune slow-nodes -i hosts.yml --bench node-bench.yaml --shape gemm
  exemplar-tune slow-nodes -i hosts.yml --detect 2%      also: the --runs a 2 % slower host needs

Without --bench, every host runs the node benchmark on itself, all hosts at once (--forks),
in the same Ansible pass that reads its facts: the host's exemplar_node_bench_command (an
argument list in the inventory, e.g. your GEMM or single-node training step), else nccl-tests
all_reduce_perf over its GPUs where installed, else a timed loop on one CPU core. The value of
a run is the nccl-tests time of the largest row, the median step time of a training log it
printed, or else its wall time; the whole pass is bounded by --timeout (default 600 s: raise
it for long benchmarks). With --bench, a shape of a benchmark file runs from this machine once
per host per round, that host alone (EXEMPLAR_TUNE_HOSTS names it; a Slurm shape gets that one
node), the hosts in a rotating order.

Each host is compared with the pooled runs of the others not found slow: its slowdown and an
interval whose error is shared over all hosts. A host is slow when the whole interval lies
above zero and the slowdown is at least --min-slowdown. Each slow host is then joined with the
facts where it differs from the fleet's majority (facts --differ), no profile needed; slow
hosts that differ alike are folded into one hostlist. Exit 1 when a host is slow, and when a
host's benchmark failed, timed out (--timeout stops the whole pass) or gave no result: those
hosts are named with why, folded (JSON: "lost"), and nothing is compared.
With --fabric, the hosts that are fine alone but slow every collective they join (a bad NIC,
cable, switch port or NVLink) are found by bisection: the --bench shape, a multi-node
nccl-tests run whose command takes its hosts from EXEMPLAR_TUNE_HOSTS (a Slurm shape gets them
as its nodes), runs over the two halves of the fleet, side by side, --runs times; the slower
half is split again, down to two hosts, each of which then runs beside a known-good host. About
log2(N) rounds; where halves cannot be told apart, pairs. The hosts found are joined with the
link facts where they differ from the majority (port rates and states, error counters, link
downs, NVLinks down). The number of rounds and multi-node runs is reported.
Try it: exemplar-tune sim create /tmp/c --scenario healthy --hosts 8 \
            --fault node05=deep_cstate_disabled
        exemplar-tune slow-nodes -i /tmp/c/inventory.yml      (README "Slow nodes")
        exemplar-tune sim create /tmp/f --scenario healthy --hosts 16 --fault node07=nic_degraded
        exemplar-tune slow-nodes -i /tmp/f/inventory.yml --fabric --bench /tmp/f/nccl.yaml \
            --shape nccl-allgather
"""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``slow-nodes``."""
    cmd = sub.add_parser("slow-nodes", help=SUMMARIES["slow-nodes"],
                         description="Run one benchmark on every host alone, repeated, and "
                         "name the hosts slower than the fleet beyond its noise, each with "
                         "the facts where it differs from the majority.", epilog=EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_host_options(cmd)
    cmd.add_argument("--bench", type=Path, metavar="FILE.yaml",
                     help="benchmark file whose shape runs from here, one host at a time (its "
                     "command sees EXEMPLAR_TUNE_HOSTS); default: the node benchmark on every "
                     "host at once")
    cmd.add_argument("--shape", metavar="NAME", help="with --bench: the shape to run (default: "
                     "the first)")
    cmd.add_argument("--fabric", action="store_true",
                     help="find the hosts that slow collectives across hosts (a bad NIC, "
                     "cable, port or NVLink), fine alone: the --bench shape (nccl-tests, "
                     "busbw) runs over halves of the fleet, bisected, then over pairs with "
                     "known-good hosts; --runs per group")
    cmd.add_argument("--runs", type=int, default=5, metavar="N",
                     help=f"runs per host, or per group with --fabric (default 5, at least "
                     f"{MIN_RUNS})")
    cmd.add_argument("--detect", metavar="SLOWDOWN",
                     help="also say how many --runs per host name a host this much slower "
                     "(e.g. 2%%) with 95%% power at the run-to-run noise measured, and what the "
                     "runs made gave (exemplar_tune.orchestration.detect_power)")
    cmd.add_argument("--confidence", type=float, default=CONFIDENCE, metavar="FRACTION",
                     help=f"shared over all hosts (default {CONFIDENCE})")
    cmd.add_argument("--min-slowdown", type=float, default=MIN_SLOWDOWN, metavar="FRACTION",
                     help=f"smallest slowdown worth naming (default {MIN_SLOWDOWN})")
    cmd.add_argument("--format", choices=("table", "json", "prometheus", "html"),
                     default="table", help="prometheus: gauges for node_exporter's textfile "
                     "collector; html: a page (default table)")
    cmd.add_argument("--output", type=Path, metavar="FILE",
                     help="write there (atomically) instead of standard output")
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
    if args.shape and not args.bench:
        raise UserError("--shape names a shape of a --bench file")
    detect = parse_slowdown(args.detect) if args.detect else None
    if detect is not None and args.fabric:
        raise UserError("--detect sizes slow-nodes' runs per host; the --fabric search is not "
                        "modelled (bench/slow_power.py measures it)")
    if args.fabric and not args.bench:
        raise UserError("--fabric runs a multi-node collective: give its shape with --bench "
                        "FILE.yaml --shape NAME (nccl-tests, metric busbw; its command runs "
                        "over the hosts in EXEMPLAR_TUNE_HOSTS)")
    run = facts_runner(args)
    if args.fabric:
        spec = _shape(load_benchmarks(args.bench), args.shape, str(args.bench))
        text, status = run_fabric(args, run, spec, f"{spec.name} ({args.bench})")
        _write(args, text)
        return status
    if args.bench:
        spec = _shape(load_benchmarks(args.bench), args.shape, str(args.bench))
        measured, what = f"{spec.name} ({args.bench})", "benchmark"
        hosts_facts, missing = collect_facts(None, run, None)
        missing.update(unanswered(run, [*hosts_facts, *missing]))
        if missing:
            return _report_lost(args, measured, missing, "reading their facts")
        values, missing = measure(run, spec, sorted(hosts_facts), args.runs, None, say)
    else:
        say(f"slow-nodes: facts and {args.runs} node benchmark runs on every host ...")
        done = measure_on_hosts(run, args.runs)
        hosts_facts, values, missing = done.facts, done.values, done.missing
        measured, what = f"node benchmark, {done.measured}", "node benchmark"
    if missing:
        return _report_lost(args, measured, missing, f"running the {what}", len(values))
    verdicts = turned_slow(explain(judge(values, args.confidence, args.min_slowdown),
                                   differences(hosts_facts)), args.confidence)
    doc = _document(args, measured, [v.to_dict() for v in verdicts], round(noise(values), 5))
    if detect is not None:
        doc["detect"] = detect_line(detect, noise(values), len(values), args.runs,
                                    args.confidence, min_slowdown=args.min_slowdown)
        if args.format in ("prometheus", "html"):
            say(doc["detect"])
    _write(args, render(doc, verdicts, args.format))
    return EXIT_FINDINGS if doc["slow"] or any(v.turned for v in verdicts) else EXIT_OK


def _write(args: argparse.Namespace, text: str) -> None:
    if args.output:
        write_atomically(args.output, text)
    else:
        print(text, end="")


def _report_lost(args: argparse.Namespace, measured: str, missing: dict[str, str],
                 doing: str, measured_hosts: int = 0) -> int:
    """Hosts lost on the way stop the comparison (it would leave them out silently): they
    are named, folded by why, in the table or JSON (``lost``: ``[{hosts, count, reason}]``,
    no verdicts); exit 1. A Prometheus or HTML output is not written: the lines go to
    standard error."""
    lost = lost_groups(missing)
    total = len(missing) + measured_hosts
    head = (f"slow-nodes: nothing compared: {len(missing)} of {total} host(s) failed or "
            f"timed out while {doing} (--limit leaves hosts out)")
    lines = [head] + [f"  FAILED {g['hosts']}: {g['reason']}" for g in lost]
    if args.format == "json":
        doc = _document(args, measured, [], None, missing, lost)
        _write(args, json.dumps(checked(doc, "slow-nodes"), indent=2) + "\n")
    elif args.format == "table":
        _write(args, join_lines(lines) + "\n")
    else:
        print(join_lines(lines), file=sys.stderr)
    return EXIT_FINDINGS


def _document(args: argparse.Namespace, measured: str, hosts: list[dict], noise_cv: float | None,
              missing: dict[str, str] | None = None, lost: list[dict] | None = None) -> dict:
    """The JSON document (``schemas/slow-nodes-result.schema.json``), with every host's
    verdict (``verdict.slow_verdict``)."""
    target = Target(args.inventory, None, None)
    verdicts = {h["host"]: slow_verdict(h, target, h["host"]) for h in hosts}
    verdicts.update({host: slow_verdict(None, target, host, why)
                     for host, why in (missing or {}).items()})
    return {"schema_version": SCHEMA_VERSION, "measured": measured, "runs": args.runs,
            "confidence": args.confidence, "min_slowdown": args.min_slowdown,
            "noise_cv": noise_cv, "hosts": hosts,
            "slow": compress(h["host"] for h in hosts if h["slow"]), "lost": lost or [],
            "verdicts": verdicts}


def _shape(specs: list[BenchmarkSpec], name: str | None, source: str) -> BenchmarkSpec:
    if name is None:
        return specs[0]
    found = [s for s in specs if s.name == name]
    if not found:
        raise UserError(f"--shape {name}: {source} has {', '.join(s.name for s in specs)}")
    return found[0]


def render(doc: dict, verdicts: list[HostVerdict], fmt: str) -> str:
    """The result in ``fmt``: table, json, prometheus or html."""
    if fmt == "json":
        return json.dumps(checked(doc, "slow-nodes"), indent=2) + "\n"
    if fmt == "prometheus":
        return slow_nodes_text(doc)
    if fmt == "html":
        return render_html("slow_nodes.html.j2", doc=doc, groups=slow_groups(verdicts))
    return _table(doc, verdicts)


def _table(doc: dict, verdicts: list[HostVerdict]) -> str:
    lines = [f"slow-nodes: {len(verdicts)} hosts, {doc['measured']} x {doc['runs']} runs each "
             f"(run-to-run CV {doc['noise_cv']:.1%}), {doc['confidence']:.0%} confidence "
             "shared over the hosts"]
    for group in slow_groups(verdicts):
        lines.append(f"  SLOW {group.line()}")
        lines += [f"       {text}" for text in group.differs
                  or ("differs from the majority in no fact read (facts --differ): look "
                      "outside the layers",)]
    lines += [f"  TURNED SLOW {v.turned_line()}" for v in verdicts if v.turned]
    rest = [v.host for v in verdicts if not v.slow and not v.turned]
    slow = sum(v.slow for v in verdicts)
    lines.append(f"  {slow} slow; within the fleet: {compress(rest) or 'none'}")
    if doc.get("detect"):
        lines.append(f"  {doc['detect']}")
    return join_lines(lines) + "\n"
