"""Fleet-wide drain and resume from a preflight result.

``exemplar-tune slurm drain --failing RESULT.json`` drains the Slurm node of every host whose
preflight failed, with ``Reason=exemplar:health:<its first failing check id>`` (the first in
preflight order, as the prolog gate words it); ``exemplar-tune slurm resume`` resumes the nodes
drained with an ``exemplar:`` reason (by this command, the prolog gate or the health check)
without checking them (``slurm undrain`` checks them first), optionally only some
(``--nodes``). A node drained
for another reason is left alone: its reason is somebody else's record. Hosts map to nodes
through the inventory (``exemplar_slurm_node``, default the host name). Nodes that share a
reason are updated in one ``scontrol update`` (argv). ``--dry-run`` prints the commands.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from exemplar_tune.checks.base import HEALTH, makes_unfit
from exemplar_tune.errors import UserError
from exemplar_tune.inputs import read_input
from exemplar_tune.slurm.commands import SlurmError, run_client
from exemplar_tune.slurm.gate import REASON_PREFIX
from exemplar_tune.slurm.records import NodeRecord, parse_nodes
from exemplar_tune.terminal import escape


@dataclass
class Plan:
    """What to run, and what to say about each host or node."""

    commands: list[list[str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    problems: int = 0


def read_failing(path: Path, threshold: str = "high") -> dict[str, str]:
    """``{host: first check id that makes it unfit}`` of a preflight result (JSON) file: a
    failing health check of severity ``threshold`` or worse (``checks.base.makes_unfit``)."""
    try:
        doc = json.loads(read_input(path, "preflight result"))
    except ValueError as exc:
        raise UserError(f"preflight result {path}: cannot read it: {exc}") from None
    hosts = doc.get("hosts") if isinstance(doc, dict) else None
    if not isinstance(hosts, dict) or not all(
            isinstance(h, dict) and isinstance(h.get("results"), list) for h in hosts.values()):
        raise UserError(f"preflight result {path}: not an 'exemplar-tune preflight --format "
                        "json' document (no hosts with results)")
    failing = {}
    for host, data in hosts.items():
        first = next((r.get("id") for r in data["results"]
                      if isinstance(r, dict) and makes_unfit(r, threshold)), None)
        if first:
            failing[host] = str(first)
    return failing


def current_nodes() -> dict[str, NodeRecord]:
    """Every node's state and reason, from ``scontrol show node --oneliner``."""
    return parse_nodes(run_client(["scontrol", "show", "node", "--oneliner"]))


def plan_drain(failing: Mapping[str, str], host_nodes: Mapping[str, str],
               nodes: Mapping[str, NodeRecord] | None) -> Plan:
    """Drain commands for the failing hosts; ``nodes`` None: states unknown (dry run)."""
    plan, by_reason = Plan(), {}
    for host, check_id in sorted(failing.items()):
        node, reason = host_nodes.get(host, host), f"{REASON_PREFIX}{HEALTH}:{check_id}"
        where = node if node == host else f"{node} (host {host})"
        record = None if nodes is None else nodes.get(node)
        if nodes is not None and record is None:
            plan.lines.append(f"not drained {where}: no such Slurm node")
            plan.problems += 1
        elif record and record.draining and not record.reason.startswith(REASON_PREFIX):
            plan.lines.append(f"left alone {where}: already drained: {record.reason}")
        elif record and record.draining and record.reason == reason:
            plan.lines.append(f"unchanged {where}: already drained, Reason={reason}")
        else:
            plan.lines.append(f"drain {where}: Reason={reason}")
            by_reason.setdefault(reason, []).append(node)
    plan.commands = [["scontrol", "update", f"NodeName={','.join(names)}", "State=DRAIN",
                      f"Reason={reason}"] for reason, names in by_reason.items()]
    return plan


def plan_resume(nodes: Mapping[str, NodeRecord], only: list[str] | None) -> Plan:
    """Resume the nodes drained with an ``exemplar:`` reason (only those in ``only``)."""
    plan, chosen = Plan(), []
    for name in only if only is not None else sorted(nodes):
        record = nodes.get(name)
        if record is None:
            plan.lines.append(f"not resumed {name}: no such Slurm node")
            plan.problems += 1
        elif record.draining and record.reason.startswith(REASON_PREFIX):
            plan.lines.append(f"resume {name}: was {record.reason}")
            chosen.append(name)
        elif only is not None:
            why = f"drained by someone else: {record.reason}" if record.draining else \
                f"not drained ({record.state})"
            plan.lines.append(f"left alone {name}: {why}")
    if chosen:
        plan.commands.append(["scontrol", "update", f"NodeName={','.join(chosen)}",
                              "State=RESUME"])
    return plan


def execute(plan: Plan, dry_run: bool) -> int:
    """Print the plan, run its commands unless ``dry_run``; the number of problems."""
    for line in plan.lines:
        print(escape(line))
    problems = plan.problems
    for argv in plan.commands:
        print(("would run: " if dry_run else "") + shlex.join(argv))
        if dry_run:
            continue
        try:
            run_client(argv)
        except SlurmError as exc:
            print(escape(f"failed: {exc}"))
            problems += 1
    if not plan.commands:
        print("nothing to do")
    return problems

