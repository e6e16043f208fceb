"""The ``exemplar-tune`` command line: parsing, dispatch, errors and exit codes.

Exit codes (stable, for scripts, Slurm prologs and CI gates):
  0  success, nothing to report
  1  findings: failing checks, drift, or hosts that could not be reached
  2  usage or input error (bad option, unknown layer, unreadable bundle ...)
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYER_NAMES,
    LAYERS,
    UnknownLayer,
)

from exemplar_tune import __version__
from exemplar_tune.ansible_run import AnsibleRun, local_inventory
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, UserError
from exemplar_tune.facts import facts_from_hosts, facts_from_sysroot
from exemplar_tune.render import facts_table
from exemplar_tune.snapshot import take_snapshot

LAYER_HELP = "; ".join(f"{layer.name} = {layer.title}" for layer in LAYERS)

FACTS_EPILOG = """examples:
  exemplar-tune facts                          all layers of this host, as a table
  exemplar-tune facts --layer cpu --layer gpu --format json
  exemplar-tune facts --sysroot node07.tar.gz  a host captured with 'exemplar-tune snapshot'
  exemplar-tune facts -i inventory.yml --limit 'gpu[01:16]' --format json

JSON output: one top-level key per layer; each layer also has 'sources' (the file or command
every fact came from) and 'errors' (facts that could not be read). With -i the output is
{"hosts": {HOST: {LAYER: ...}}, "unreachable": {HOST: REASON}}.
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="exemplar-tune",
        description="Find and close the performance gap of AI-training GPU clusters, one layer "
        f"at a time. Layers, in preflight order: {LAYER_HELP}.",
        epilog="exit codes: 0 ok, 1 findings or unreachable hosts, 2 usage or input error",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_facts(sub)
    _add_snapshot(sub)
    return parser


def _add_facts(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("facts", help="print the facts of each layer",
                         description="Gather the per-layer facts of this host, of a captured "
                         "host (--sysroot) or of an inventory (-i).", epilog=FACTS_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_target_options(cmd)
    cmd.add_argument("--layer", action="append", metavar="LAYER",
                     help=f"only this layer (repeatable): {', '.join(LAYER_NAMES)}")
    cmd.add_argument("--format", choices=("table", "json"), default="table")
    cmd.add_argument("--sources", action="store_true",
                     help="table format: also show where each fact came from")
    cmd.set_defaults(func=cmd_facts)


def _add_snapshot(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("snapshot", help="capture this host into one archive",
                         description="Capture what the fact readers need from this host into "
                         "one .tar.gz, to be read later with --sysroot.", epilog=SNAPSHOT_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("-o", "--output", required=True, type=Path, metavar="FILE.tar.gz")
    cmd.set_defaults(func=cmd_snapshot)


def _add_target_options(cmd: argparse.ArgumentParser) -> None:
    target = cmd.add_mutually_exclusive_group()
    target.add_argument("--sysroot", metavar="PATH",
                        help="read a captured host: a directory mirroring / or a snapshot archive")
    target.add_argument("-i", "--inventory", metavar="INVENTORY",
                        help="Ansible inventory (file, directory or host list); default: this host")
    cmd.add_argument("--limit", metavar="PATTERN", help="Ansible host pattern within -i")
    cmd.add_argument("--forks", type=int, default=10, metavar="N",
                     help="hosts worked on in parallel (default 10)")
    cmd.add_argument("--timeout", type=float, default=600, metavar="SECONDS",
                     help="give up on the whole Ansible run after this long (default 600)")


def cmd_facts(args: argparse.Namespace) -> int:
    """``exemplar-tune facts``."""
    for name in args.layer or []:
        if name not in LAYER_NAMES:
            raise UnknownLayer(f"unknown layer {name!r}; choose from {', '.join(LAYER_NAMES)}")
    if args.sysroot:
        facts = facts_from_sysroot(args.sysroot, args.layer)
        print(json.dumps(facts, indent=2) if args.format == "json" else facts_table(
            facts, args.sources))
        return EXIT_OK
    run = AnsibleRun(args.inventory or local_inventory(), limit=args.limit, forks=args.forks,
                     timeout=args.timeout)
    hosts, outcome = facts_from_hosts(run, args.layer)
    missing = {h: r.message for h, r in outcome.hosts.items() if h not in hosts}
    if not hosts and not missing:
        raise UserError(f"no host matched (ansible-runner status {outcome.status})")
    if args.format == "json":
        single = args.inventory is None and len(hosts) == 1 and not missing
        doc = next(iter(hosts.values())) if single else {"hosts": hosts, "unreachable": missing}
        print(json.dumps(doc, indent=2))
    else:
        for host, facts in hosts.items():
            print(f"### {host}\n{facts_table(facts, args.sources)}")
        for host, reason in missing.items():
            print(f"### {host}: NOT GATHERED: {reason}")
    return EXIT_FINDINGS if missing else EXIT_OK


def cmd_snapshot(args: argparse.Namespace) -> int:
    """``exemplar-tune snapshot``."""
    manifest = take_snapshot(args.output)
    skipped = [name for name, c in manifest["commands"].items() if not c["captured"]]
    print(f"wrote {args.output}: {manifest['entries']} entries, "
          f"{len(manifest['commands']) - len(skipped)} command outputs"
          + (f" (not captured: {', '.join(skipped)})" if skipped else ""))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``exemplar-tune`` script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (UserError, UnknownLayer) as exc:
        print(f"exemplar-tune: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("exemplar-tune: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
