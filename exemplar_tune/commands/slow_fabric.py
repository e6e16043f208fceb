"""``slow-nodes --fabric``: the hosts that slow multi-node collectives, by bisection, with the
link facts where they differ from the majority (the search is
``exemplar_tune.orchestration.slow_fabric``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, UserError
from exemplar_tune.facts import collect_facts
from exemplar_tune.fleet.ansible_run import AnsibleRun
from exemplar_tune.fleet.hostlist import compress
from exemplar_tune.fleet.majority import differences, host_differences
from exemplar_tune.json_schemas import checked
from exemplar_tune.orchestration.benchmark import BenchmarkSpec
from exemplar_tune.orchestration.slow_fabric import (
    FabricSearch,
    benchmark_measure,
    link_facts,
    locate,
    max_tests,
)
from exemplar_tune.progress import say
from exemplar_tune.terminal import join_lines

SCHEMA_VERSION = 1  # of schemas/slow-nodes-fabric-result.schema.json
FORMATS = ("table", "json")


def run_fabric(args: argparse.Namespace, run: AnsibleRun, spec: BenchmarkSpec,
               measured: str) -> tuple[str, int]:
    """The search over the inventory's hosts with the multi-node shape ``spec``: the text to
    write and the exit status (1 when a host slows the collectives)."""
    if args.format not in FORMATS:
        raise UserError(f"--fabric writes {' or '.join(FORMATS)}, not {args.format}")
    if spec.parser != "nccl-tests" or spec.metric != "busbw":
        raise UserError(f"--fabric: shape {spec.name} must be nccl-tests with metric busbw "
                        "(bus bandwidth compares across group sizes; its time does not)")
    facts, missing = collect_facts(None, run, ["fabric", "gpu"])
    if missing:
        raise UserError(f"--fabric: {len(missing)} host(s) could not be read ("
                        + "; ".join(f"{h}: {why}" for h, why in sorted(missing.items())[:3])
                        + "): nothing compared")
    hosts = sorted(facts)
    search = locate(hosts, benchmark_measure(spec, args.runs, run.limited, say),
                    repeat=args.runs, confidence=args.confidence,
                    min_slowdown=args.min_slowdown, progress=say)
    found = differences({h: link_facts(f) for h, f in facts.items()})
    doc = document(args, measured, search, {h: host_differences(h, found)
                                            for h in search.suspects})
    text = json.dumps(checked(doc, "slow-nodes-fabric"), indent=2) + "\n" \
        if args.format == "json" else table(doc)
    return text, EXIT_FINDINGS if search.suspects else EXIT_OK


def document(args: argparse.Namespace, measured: str, search: FabricSearch,
             differs: dict[str, list[str]]) -> dict[str, Any]:
    """The JSON document (``schemas/slow-nodes-fabric-result.schema.json``)."""
    last = {t.group[0]: t for t in search.tests if len(t.group) == 2}
    return {"schema_version": SCHEMA_VERSION, "measured": measured,
            "runs_per_group": args.runs,
            "confidence": args.confidence, "min_slowdown": args.min_slowdown,
            "max_tests": max_tests(len(search.hosts)), **search.to_dict(),
            "slow": compress(search.suspects),
            "suspects": [{"host": h, "slowdown": round(last[h].slowdown, 5),
                          "interval": [round(last[h].low, 5), round(last[h].high, 5)],
                          "differs": differs.get(h, [])} for h in search.suspects]}


def table(doc: dict[str, Any]) -> str:
    """The search in lines: what ran, each host found with its slowdown and link facts."""
    lines = [f"slow-nodes --fabric: {doc['hosts']} hosts, {doc['measured']}: {doc['rounds']} "
             f"rounds, {doc['runs']} multi-node runs ({doc['method']}), {doc['confidence']:.0%} "
             f"confidence shared over up to {doc['max_tests']} tests"]
    for found in doc["suspects"]:
        low, high = found["interval"]
        lines.append(f"  SLOW {found['host']}: a pair with it is {found['slowdown']:.1%} slower "
                     f"than known-good hosts [{low:+.1%}, {high:+.1%}]")
        lines += [f"       {text}" for text in found["differs"]
                  or ("differs from the majority in no link fact read: look at the cable, "
                      "the switch port and the NIC's firmware",)]
    if not doc["suspects"]:
        lines.append("  no host slows the collectives beyond the noise")
    return join_lines(lines) + "\n"
