"""Command-line glue: ``preflight --slurm-prolog`` and the ``slurm drain|resume`` group."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from exemplar_tune.checks.base import SEVERITIES
from exemplar_tune.commands import SUMMARIES
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, UserError
from exemplar_tune.fleet.lock import hold_hosts
from exemplar_tune.runs import state_dir
from exemplar_tune.slurm import nodes
from exemplar_tune.slurm.commands import SlurmError, expand_hostlist
from exemplar_tune.slurm.inventory import InventoryError, host_nodes
from exemplar_tune.slurm.prolog import run_prolog

SLURM_EPILOG = """examples:
  exemplar-tune preflight -i hosts.yml --format json --output fleet.json
  exemplar-tune slurm drain --failing fleet.json -i hosts.yml --dry-run
  exemplar-tune slurm drain --failing fleet.json -i hosts.yml
  exemplar-tune slurm resume                        every node drained with an exemplar: reason
  exemplar-tune slurm resume --nodes 'gpu[01-04]'

Only what makes a node unfit drains it: a failing health check (a GPU missing, failing or
throttled, an Xid that needs action, a fabric port down) of --drain-at severity or worse
(default high). A failing tuning preference (governor, NUMA balancing, C-states ...) never
drains: preflight and audit report it, apply fixes it. A drained node's reason is
exemplar:<check id>, the first such check in preflight order (also what the prolog gate
sets). Nodes drained for another reason are left alone.
exit codes: 0 done, 1 a node could not be drained or resumed, 2 usage or input error.
"""


NODE_STATES = "slurm:node-states"  # what drain and resume hold (see exemplar_tune.fleet.lock)


@dataclass(frozen=True)
class _Hosts:
    inventory: str | dict
    limit: str | None


def add_prolog_option(cmd: argparse.ArgumentParser) -> None:
    """Add ``--slurm-prolog`` to the preflight parser ``cmd`` (after its ``func`` is set)."""
    cmd.add_argument("--slurm-prolog", action="store_true",
                     help="run as a Slurm prolog on the allocated node: this node's checks "
                     "without Ansible; on a failing health check (a GPU missing or failing, "
                     "a fabric port down; see --drain-at) drain the node with "
                     "Reason=exemplar:<check id> and exit 1; a failing tuning preference "
                     "(governor, NUMA balancing ...) is printed and never drains "
                     "(--sysroot may use %%n for the node name)")
    add_drain_at(cmd)
    preflight = cmd.get_default("func")
    cmd.set_defaults(func=_prolog_or(preflight))


def add_drain_at(cmd: argparse.ArgumentParser) -> None:
    """Add ``--drain-at SEVERITY``: the least severe failing health check that drains."""
    cmd.add_argument("--drain-at", choices=SEVERITIES, default="high", metavar="SEVERITY",
                     help="drain on failing health checks of this severity or worse: high "
                     "(the default), medium or low; tuning preferences never drain")


def _prolog_or(preflight: Callable[[argparse.Namespace], int]
               ) -> Callable[[argparse.Namespace], int]:
    def dispatch(args: argparse.Namespace) -> int:
        return run_prolog(args) if args.slurm_prolog else preflight(args)

    return dispatch


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``exemplar-tune slurm drain|resume``."""
    group = sub.add_parser("slurm", help=SUMMARIES["slurm"],
                           description="Act on the Slurm nodes of a fleet: drain the hosts "
                           "whose preflight failed, resume the ones drained by exemplar-tune.",
                           epilog=SLURM_EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = group.add_subparsers(dest="slurm_command", metavar="ACTION", required=True)
    drain = actions.add_parser("drain", help="drain each host with a failing check",
                               epilog=SLURM_EPILOG,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    drain.add_argument("--failing", required=True, type=Path, metavar="RESULT.json",
                       help="an 'exemplar-tune preflight --format json' result")
    drain.add_argument("-i", "--inventory", metavar="INVENTORY",
                       help="map hosts to nodes (host var exemplar_slurm_node); default: the "
                       "host name is the node name")
    drain.add_argument("--limit", metavar="PATTERN", help="Ansible host pattern within -i")
    drain.add_argument("--dry-run", action="store_true", help="print the scontrol commands")
    add_drain_at(drain)
    drain.set_defaults(func=cmd_drain)
    resume = actions.add_parser("resume", help="resume the nodes exemplar-tune drained",
                                epilog=SLURM_EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    resume.add_argument("--nodes", metavar="HOSTLIST",
                        help="only these nodes (Slurm hostlist: 'gpu[01-04],gpu09')")
    resume.add_argument("--dry-run", action="store_true", help="print the scontrol commands")
    resume.set_defaults(func=cmd_resume)


def cmd_drain(args: argparse.Namespace) -> int:
    """``exemplar-tune slurm drain --failing RESULT.json``."""
    failing = nodes.read_failing(args.failing, args.drain_at)
    try:
        mapping = host_nodes(_Hosts(args.inventory, args.limit)) if args.inventory else {}
    except InventoryError as exc:
        raise UserError(str(exc)) from None
    try:
        current = nodes.current_nodes()
    except SlurmError as exc:
        if not args.dry_run:
            return _unreachable(exc)
        print(f"node states unknown ({exc}): planning as if every node were in service")
        current = None
    plan = nodes.plan_drain(failing, mapping, current)
    return _execute(plan, args.dry_run, "slurm drain")


def cmd_resume(args: argparse.Namespace) -> int:
    """``exemplar-tune slurm resume [--nodes HOSTLIST]``."""
    try:
        current = nodes.current_nodes()
        only = expand_hostlist(args.nodes) if args.nodes else None
    except SlurmError as exc:
        return _unreachable(exc)
    plan = nodes.plan_resume(current, only)
    return _execute(plan, args.dry_run, "slurm resume")


def _execute(plan: nodes.Plan, dry_run: bool, command: str) -> int:
    """Run the plan; one drain or resume at a time (they change the same node states)."""
    if dry_run:
        return EXIT_FINDINGS if nodes.execute(plan, True) else EXIT_OK
    with hold_hosts(state_dir(), [NODE_STATES], command):
        return EXIT_FINDINGS if nodes.execute(plan, False) else EXIT_OK


def _unreachable(exc: SlurmError) -> int:
    """Slurm could not be asked (no client, no controller): like an unreachable host, exit 1."""
    print(f"exemplar-tune: error: cannot reach Slurm: {exc}", file=sys.stderr)
    return EXIT_FINDINGS
