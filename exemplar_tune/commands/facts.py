"""``facts`` and ``snapshot``: a host's facts, read live, from a capture or over an inventory."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYER_NAMES

from exemplar_tune.commands import SUMMARIES
from exemplar_tune.commands.options import add_host_options, check_layers, facts_runner
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, UserError
from exemplar_tune.facts import collect_facts
from exemplar_tune.fleet.majority import differences
from exemplar_tune.reports.facts_table import facts_table
from exemplar_tune.snapshot import take_snapshot
from exemplar_tune.terminal import escape, join_lines


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``facts``, ``snapshot``."""
    _add_facts(sub)
    _add_snapshot(sub)


FACTS_EPILOG = """examples:
  exemplar-tune facts                          all layers of this host, as a table
  exemplar-tune facts --layer cpu --layer gpu --format json
  exemplar-tune facts --sysroot node07.tar.gz  a host captured with 'exemplar-tune snapshot'
  exemplar-tune facts -i inventory.yml --limit 'gpu[01-16]' --format json
  exemplar-tune facts -i inventory.yml --differ   what differs from the majority, no profile

JSON output: one top-level key per layer; each layer also has 'sources' (the file or command
every fact came from) and 'errors' (facts that could not be read). With -i the output is
{"hosts": {HOST: {LAYER: ...}}, "unreachable": {HOST: REASON}}.

--differ compares the hosts with each other: for every fact, the value most hosts have is the
majority and every other value is named with its hosts (folded: gpu[03,17]), rarest first.
Facts that identify a host or a moment (serials, UUIDs, addresses, times, temperatures, power
draw, log lines) are not compared. JSON: {"hosts": N, "differences": [{"fact", "majority":
{"value", "hosts", "count"}, "others": [...]}], "unreachable": {...}}.
"""


SNAPSHOT_EPILOG = """examples:
  exemplar-tune snapshot -o node07.tar.gz
  exemplar-tune facts --sysroot node07.tar.gz

The archive holds only the files the fact readers read (sysfs/procfs entries, NCCL, enroot and
tuned configuration ...), the outputs of nvidia-smi -q -x, the kernel log and systemctl show
for the housekeeping slices (under .exemplar/commands/), the NCCL_/ENROOT_ environment
variables and a manifest (.exemplar/manifest.json). Run it as root to include the kernel log
and /dev/cpu_dma_latency.
"""


def _add_facts(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("facts", help=SUMMARIES["facts"],
                         description="Gather the per-layer facts of this host, of a captured "
                         "host (--sysroot) or of an inventory (-i).", epilog=FACTS_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_host_options(cmd)
    cmd.add_argument("--layer", action="append", metavar="LAYER",
                     help=f"only this layer (repeatable): {', '.join(LAYER_NAMES)}")
    cmd.add_argument("--format", choices=("table", "json"), default="table",
                     help="output format (default table)")
    cmd.add_argument("--sources", action="store_true",
                     help="table format: also show where each fact came from")
    cmd.add_argument("--differ", action="store_true",
                     help="with -i: only what differs from the majority of the hosts (no "
                     "profile needed)")
    cmd.set_defaults(func=cmd_facts)


def _add_snapshot(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("snapshot", help=SUMMARIES["snapshot"],
                         description="Capture what the fact readers need from this host into "
                         "one .tar.gz, to be read later with --sysroot.", epilog=SNAPSHOT_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("-o", "--output", required=True, type=Path, metavar="FILE.tar.gz",
                     help="the archive to write")
    cmd.set_defaults(func=cmd_snapshot)


def cmd_facts(args: argparse.Namespace) -> int:
    """``exemplar-tune facts``."""
    check_layers(args.layer)
    if args.differ and args.inventory is None:
        raise UserError("--differ compares hosts with each other: give an inventory (-i)")
    hosts, missing = collect_facts(args.sysroot, facts_runner(args), args.layer)
    if args.differ:
        _print_differences(args, hosts, missing)
    elif args.format == "json":
        single = args.inventory is None and len(hosts) == 1 and not missing
        doc = next(iter(hosts.values())) if single else {"hosts": hosts, "unreachable": missing}
        print(json.dumps(doc, indent=2))
    else:
        for host, facts in hosts.items():
            print(f"### {escape(host)}\n{facts_table(facts, args.sources)}")
        for host, reason in missing.items():
            print(escape(f"### {host}: NOT GATHERED: {reason}"))
    return EXIT_FINDINGS if missing else EXIT_OK


def _print_differences(args: argparse.Namespace, hosts: dict[str, dict],
                       missing: dict[str, str]) -> None:
    found = differences(hosts)
    if args.format == "json":
        print(json.dumps({"hosts": len(hosts), "differences": [d.to_dict() for d in found],
                          "unreachable": missing}, indent=2))
        return
    print(join_lines([f"{len(hosts)} hosts compared with each other: "
                      + (f"{len(found)} fact(s) differ, rarest first" if found
                         else "no fact differs"),
                      *(f"  {difference.line()}" for difference in found),
                      *(f"  {host}: NOT GATHERED: {reason}" for host, reason in missing.items())]))


def cmd_snapshot(args: argparse.Namespace) -> int:
    """``exemplar-tune snapshot``."""
    manifest = take_snapshot(args.output)
    skipped = [name for name, c in manifest["commands"].items() if not c["captured"]]
    print(escape(f"wrote {args.output}: {manifest['entries']} entries, "
                 f"{len(manifest['commands']) - len(skipped)} command outputs"
                 + (f" (not captured: {', '.join(skipped)})" if skipped else "")))
    return EXIT_OK
