"""Command-line glue: ``preflight --slurm-prolog|--slurm-health-check`` and the ``slurm
drain|resume|undrain`` group."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from exemplar_tune.checks.base import SEVERITIES
from exemplar_tune.commands import SUMMARIES
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, UserError
from exemplar_tune.fleet.lock import hold_hosts
from exemplar_tune.runs import state_dir
from exemplar_tune.slurm import nodes, undrain
from exemplar_tune.slurm.commands import SlurmError, expand_hostlist
from exemplar_tune.slurm.gate import ACTIONS
from exemplar_tune.slurm.inventory import InventoryError, host_nodes
from exemplar_tune.terminal import escape, join_lines

SLURM_EPILOG = """examples:
  exemplar-tune preflight -i hosts.yml --format json --output fleet.json
  exemplar-tune slurm drain --failing fleet.json -i hosts.yml --dry-run
  exemplar-tune slurm drain --failing fleet.json -i hosts.yml
  exemplar-tune slurm undrain -i hosts.yml --dry-run   check our drained nodes, say what passes
  exemplar-tune slurm undrain -i hosts.yml             ... and resume those
  exemplar-tune slurm resume                        every node drained with an exemplar: reason
  exemplar-tune slurm resume --nodes 'gpu[01-04]'   ... without checking them
  exemplar-tune preflight --slurm-prolog            the prolog gate (the slurm_prolog role)
  exemplar-tune preflight --slurm-health-check      slurm.conf HealthCheckProgram (in a wrapper
                                                    that sets SLURM_CONF and PATH)

Only what makes a node unfit drains it: a failing health check (a GPU missing, failing or
throttled, an Xid that needs action, a fabric port down) of --drain-at severity or worse
(default high). A failing tuning preference (governor, NUMA balancing, C-states ...) never
drains: preflight and audit report it, apply fixes it. A drained node's reason is
exemplar:health:<check id>, the first such check in preflight order (what the prolog gate and
the health check set too; exemplar:unknown:<why> when the gate could not read the node).
Nodes drained for another reason are left alone.
exit codes: 0 done, 1 a node could not be drained or resumed (undrain: one stays out of
service), 2 usage or input error.
"""

UNDRAIN_EPILOG = """examples:
  exemplar-tune slurm undrain -i hosts.yml --dry-run
  exemplar-tune slurm undrain -i hosts.yml --profile site.yaml --format json
  exemplar-tune slurm undrain --sysroot '/srv/roots/%n'     the trees the prolog gate reads

Lists the nodes drained (drained or draining) with a reason that starts with exemplar: (the
prolog gate, the health check, slurm drain) and the nodes with an exemplar-<node>
maintenance reservation, and checks each again: with --sysroot in-process, %n standing for
the node name (as 'preflight --slurm-prolog --sysroot' reads it); with -i through Ansible over
SSH, each node's inventory host (exemplar_slurm_node, else the host name), as 'preflight -i'
(a drained node takes no job, so srun cannot reach it). A node that could be read and has no
failing health check of --drain-at severity or worse is resumed (scontrol update
NodeName=N State=RESUME) and its reservation deleted; the others keep their reason. Nodes
drained for another reason ("bad fan") are listed as left alone and never touched.
exit codes: 0 every node of ours was resumed (or none was out), 1 one stays out of service,
2 usage or input error.
"""


NODE_STATES = "slurm:node-states"  # what drain and resume hold (see exemplar_tune.fleet.lock)


@dataclass(frozen=True)
class _Hosts:
    inventory: str | dict
    limit: str | None


def add_prolog_option(cmd: argparse.ArgumentParser) -> None:
    """Add ``--slurm-prolog``, ``--slurm-health-check``, ``--slurm-action`` and
    ``--drain-at`` to the preflight parser ``cmd`` (after its ``func`` is set)."""
    mode = cmd.add_mutually_exclusive_group()
    mode.add_argument("--slurm-prolog", action="store_true",
                      help="run as a Slurm prolog on the allocated node: this node's checks "
                      "without Ansible; on a failing health check (a GPU missing or failing, "
                      "a fabric port down; see --drain-at) drain the node with "
                      "Reason=exemplar:health:<check id> and exit 1; a node that cannot be "
                      "read is drained with Reason=exemplar:unknown:<why> (exit 2); a failing "
                      "tuning preference (governor, NUMA balancing ...) is printed and never "
                      "drains (--sysroot may use %%n for the node name)")
    mode.add_argument("--slurm-health-check", action="store_true",
                      help="run as slurm.conf's HealthCheckProgram (no job; node from "
                      "SLURMD_NODENAME, else the short host name): drain (or reserve) like "
                      "the prolog, and resume the node when exemplar-tune took it out and it "
                      "passes now; reads only the layers with health checks and finishes "
                      "within 50 s (Slurm kills it at 60)")
    cmd.add_argument("--slurm-action", choices=ACTIONS, default=None,
                     help="with --slurm-prolog or --slurm-health-check: take an unfit node out "
                     "of service with a drain (the default) or a maintenance reservation "
                     "exemplar-<node> (MAINT, root only; the prolog requeues or cancels the "
                     "job and exits 0, since a failed prolog drains the node anyway)")
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
        if args.slurm_prolog:
            from exemplar_tune.slurm.prolog import run_prolog

            return run_prolog(args)
        if args.slurm_health_check:
            from exemplar_tune.slurm.healthcheck import run_health_check

            return run_health_check(args)
        if args.slurm_action:
            raise UserError("--slurm-action needs --slurm-prolog or --slurm-health-check")
        return preflight(args)

    return dispatch


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``exemplar-tune slurm drain|resume``."""
    group = sub.add_parser("slurm", help=SUMMARIES["slurm"],
                           description="Act on the Slurm nodes of a fleet: drain the hosts "
                           "whose preflight failed, resume the ones drained by exemplar-tune, "
                           "or check those again and resume the ones that pass (undrain).",
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
    _add_undrain(actions)


def _add_undrain(actions: argparse._SubParsersAction) -> None:
    cmd = actions.add_parser("undrain", help="check the nodes exemplar-tune took out of "
                             "service again; resume those that pass",
                             description="Check every node drained (or reserved) by "
                             "exemplar-tune again and resume those that pass now.",
                             epilog=UNDRAIN_EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    source = cmd.add_mutually_exclusive_group(required=True)
    source.add_argument("-i", "--inventory", metavar="INVENTORY",
                        help="read each node through Ansible: its host in this inventory "
                        "(exemplar_slurm_node, else the host name)")
    source.add_argument("--sysroot", metavar="TEMPLATE",
                        help="read each node's tree in-process: %%n is the node name "
                        "('/srv/roots/%%n')")
    cmd.add_argument("--profile", default="auto", metavar="NAME|FILE",
                     help="expectations (default auto: each node the profile of its hardware)")
    cmd.add_argument("--layer", action="append", metavar="LAYER",
                     help="only this layer's checks (repeatable; default every host layer)")
    cmd.add_argument("--forks", type=int, default=10, metavar="N",
                     help="-i: hosts read at once (default 10)")
    cmd.add_argument("--timeout", type=float, default=600, metavar="SECONDS",
                     help="-i: give up on the Ansible run after this long (default 600)")
    cmd.add_argument("--dry-run", action="store_true",
                     help="check and print the scontrol commands, run none")
    cmd.add_argument("--format", choices=("table", "json"), default="table",
                     help="output format (default table)")
    add_drain_at(cmd)
    cmd.set_defaults(func=cmd_undrain)


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
        print(escape(f"node states unknown ({exc}): planning as if every node were in service"))
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


def cmd_undrain(args: argparse.Namespace) -> int:
    """``exemplar-tune slurm undrain``."""
    from exemplar_tune.slurm.prolog import HOST_LAYERS

    reader = undrain.Reader(args.sysroot, args.inventory, args.profile,
                            args.layer or HOST_LAYERS, args.forks, args.timeout)
    try:
        found = undrain.entries(*undrain.current())
    except SlurmError as exc:
        return _unreachable(exc)
    undrain.decide(found, reader, args.drain_at)
    if args.dry_run:
        return _undrain_report(found, [], args)
    with hold_hosts(state_dir(), [NODE_STATES], "slurm undrain"):
        try:
            undrain.recheck_records(found, undrain.read_records())
        except SlurmError as exc:
            return _unreachable(exc)
        failed = undrain.execute(found, False)
    return _undrain_report(found, failed, args)


def _undrain_report(found: list[undrain.Entry], failed: list[str],
                    args: argparse.Namespace) -> int:
    if args.format == "json":
        print(json.dumps(undrain.as_json(found, failed, args.dry_run), indent=2))
    else:
        print(join_lines(undrain.lines(found, failed, args.dry_run)))
    return EXIT_FINDINGS if undrain.stay(found) else EXIT_OK


def _execute(plan: nodes.Plan, dry_run: bool, command: str) -> int:
    """Run the plan; one drain or resume at a time (they change the same node states)."""
    if dry_run:
        return EXIT_FINDINGS if nodes.execute(plan, True) else EXIT_OK
    with hold_hosts(state_dir(), [NODE_STATES], command):
        return EXIT_FINDINGS if nodes.execute(plan, False) else EXIT_OK


def _unreachable(exc: SlurmError) -> int:
    """Slurm could not be asked (no client, no controller): like an unreachable host, exit 1."""
    print(escape(f"exemplar-tune: error: cannot reach Slurm: {exc}"), file=sys.stderr)
    return EXIT_FINDINGS
