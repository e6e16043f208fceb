"""``exemplar-tune slurm undrain``: check the nodes exemplar-tune took out of service again,
and put back those that pass now.

The nodes are those drained (``State`` with ``DRAIN``: drained or draining) with a reason
that starts with ``exemplar:`` (the prolog gate, the health check, ``slurm drain``), and those
with an ``exemplar-<node>`` maintenance reservation. Nodes drained with another reason are
somebody else's record: listed as left alone, never checked nor resumed.

Each node is read again, one of two ways (a drained node takes no job, so ``srun`` cannot
reach it):

* ``--sysroot TEMPLATE``: in-process, ``%n`` standing for the node name, exactly as the prolog
  gate reads a node (captured or simulated trees; a shared mount of the nodes' roots);
* ``-i INVENTORY``: through Ansible, one ``exemplar.tune.facts`` call per node's host (the
  host whose ``exemplar_slurm_node``, else whose name, is the node), as ``preflight -i`` does.

The gate rule decides (:func:`exemplar_tune.slurm.gate.judge`): a node that has no failing
health check of ``--drain-at`` severity or worse any more and could be read is resumed
(``scontrol update NodeName=... State=RESUME``) and its reservation deleted; the others keep
their reason. A node whose reason changed while it was being checked is left alone.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from exemplar_tune.errors import UserError
from exemplar_tune.facts import facts_from_hosts
from exemplar_tune.fleet.ansible_run import AnsibleRun
from exemplar_tune.fleet.inventory import InventoryError, check_source
from exemplar_tune.preflight import preflight_hosts
from exemplar_tune.profile import host_profiles
from exemplar_tune.slurm import gate
from exemplar_tune.slurm.commands import SlurmError, run_client
from exemplar_tune.slurm.inventory import host_nodes
from exemplar_tune.slurm.nodecheck import NodeCheck, read_node, sysroot_of
from exemplar_tune.slurm.records import NodeRecord, parse_nodes
from exemplar_tune.verdict import Target, host_verdict, unreadable

RESUME, KEEP, LEFT_ALONE = "resume", "keep", "left_alone"


@dataclass(frozen=True)
class Reader:
    """How nodes are read again: a sysroot template, or an inventory through Ansible."""

    sysroot: str | None
    inventory: str | None
    profile: str
    layers: list[str]
    forks: int = 10
    timeout: float = 600

    def read(self, nodes: list[str]) -> dict[str, NodeCheck | str]:
        """Each node checked, or why it could not be (one line)."""
        if self.sysroot:
            return {n: read_node(n, sysroot_of(self.sysroot, n), self.profile, self.layers)
                    for n in nodes}
        return self._through_inventory(nodes)

    def _through_inventory(self, nodes: list[str]) -> dict[str, NodeCheck | str]:
        try:
            check_source(self.inventory or "")
            mapping = host_nodes(_Hosts(self.inventory or "", None))
        except InventoryError as exc:
            raise UserError(str(exc)) from None
        hosts = {node: host for host, node in reversed(mapping.items()) if node in nodes}
        found: dict[str, NodeCheck | str] = {
            n: "no inventory host is this node (exemplar_slurm_node or host name)"
            for n in nodes if n not in hosts}
        if not hosts:
            return found
        run = AnsibleRun(self.inventory or "", limit=",".join(sorted(hosts.values())),
                         forks=self.forks, timeout=self.timeout)
        facts, outcome = facts_from_hosts(run, self.layers)
        missing = {h: r.message for h, r in outcome.hosts.items() if h not in facts}
        target = Target(inventory=self.inventory, profile=self.profile)
        doc = preflight_hosts(facts, host_profiles(self.profile, facts), self.layers, False,
                              missing, target) if facts else None
        for node, host in hosts.items():
            found[node] = _host_check(node, host, facts, missing, doc, target)
        return found


@dataclass(frozen=True)
class _Hosts:
    inventory: str | dict
    limit: str | None


def _host_check(node: str, host: str, facts: dict[str, Any], missing: dict[str, str],
                doc: dict[str, Any] | None, target: Target) -> NodeCheck | str:
    if host in facts and doc is not None:
        return NodeCheck(node, doc, doc["hosts"][host]["results"], doc["verdicts"][host],
                         unreadable(facts[host]), 0.0)
    why = f"unreachable: {missing.get(host) or 'no answer'}"
    return NodeCheck(node, None, [], host_verdict([], target, host, why), why, 0.0)


@dataclass
class Entry:
    """One node exemplar-tune took out of service (or somebody else drained): its drain
    reason and reservation, what its check says now, the decision and its commands."""

    node: str
    state: str
    reason: str  # its drain reason ("" when not drained)
    reservation: str  # "exemplar-<node>" or ""
    decision: str = KEEP
    why: str = ""
    verdict: dict[str, Any] | None = None
    commands: list[list[str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON."""
        return {"node": self.node, "state": self.state, "reason": self.reason or None,
                "reservation": self.reservation or None, "decision": self.decision,
                "why": self.why, "verdict": self.verdict,
                "commands": [shlex.join(c) for c in self.commands]}


def current() -> tuple[dict[str, NodeRecord], dict[str, str]]:
    """Every node's record and every ``exemplar-<node>`` reservation; :class:`SlurmError`."""
    return read_records(), gate.reservations(timeout=60)


def read_records() -> dict[str, NodeRecord]:
    """Every node's state and reason; :class:`SlurmError`."""
    return parse_nodes(run_client([gate.scontrol(), "show", "node", "--oneliner"]))


def entries(records: dict[str, NodeRecord], reserved: dict[str, str]) -> list[Entry]:
    """Our drained or reserved nodes, and the nodes drained by someone else (left alone,
    our reservation on such a node included: the node is theirs now), by name."""
    found = []
    for name in sorted(set(records) | set(reserved)):
        record = records.get(name)
        drained = bool(record and record.draining)
        reason = record.reason if record and drained else ""
        if not (drained or name in reserved):
            continue
        entry = Entry(name, record.state if record else "(no such node)", reason,
                      reserved.get(name, ""))
        if drained and not gate.ours(reason):
            entry.decision, entry.why = LEFT_ALONE, f"drained by someone else: {reason}"
        found.append(entry)
    return found


def decide(found: list[Entry], reader: Reader, drain_at: str) -> None:
    """Check our nodes again; each passing one gets its resume and reservation delete."""
    todo = [e for e in found if e.decision != LEFT_ALONE]
    checks = reader.read([e.node for e in todo]) if todo else {}
    for entry in todo:
        check = checks[entry.node]
        if isinstance(check, str):
            entry.why = check
            continue
        entry.verdict = check.verdict
        judgement = gate.judge(check.results, check.unreadable, drain_at)
        if judgement.unfit:
            entry.why = f"still out of service: {judgement.reason}"
            continue
        entry.decision, entry.why = RESUME, "passes now"
        if entry.reason:
            entry.commands.append(gate.resume_argv([entry.node]))
        if entry.reservation:
            entry.commands.append(gate.unreserve_argv(entry.node))


def recheck_records(found: list[Entry], records: dict[str, NodeRecord]) -> None:
    """Leave alone a node to resume whose drain reason changed while it was checked
    (``records``: read again just now)."""
    for entry in found:
        record = records.get(entry.node)
        now = record.reason if record and record.draining else ""
        if entry.decision == RESUME and entry.reason and now != entry.reason:
            entry.decision, entry.commands = LEFT_ALONE, []
            entry.why = f"its reason changed while it was checked: {now or '(not drained)'}"


def execute(found: list[Entry], dry_run: bool) -> list[str]:
    """Run every entry's commands unless ``dry_run``; the failures (one line each). A node
    whose command failed stays (decision keep)."""
    failed = []
    for entry in found:
        for argv in [] if dry_run else entry.commands:
            try:
                run_client(gate.resolved(argv), timeout=60)
            except SlurmError as exc:
                failed.append(str(exc))
                entry.decision, entry.why = KEEP, f"failed: {exc}"
                break
    return failed


def stay(found: list[Entry]) -> list[str]:
    """Our nodes that stay out of service."""
    return [e.node for e in found if e.decision == KEEP]


def as_json(found: list[Entry], failed: list[str], dry_run: bool) -> dict[str, Any]:
    """The outcome as JSON (``schema_version`` 1)."""
    return {"schema_version": 1, "dry_run": dry_run, "nodes": [e.to_dict() for e in found],
            "resumed": [e.node for e in found if e.decision == RESUME], "kept": stay(found),
            "left_alone": [e.node for e in found if e.decision == LEFT_ALONE],
            "failed": failed}


def lines(found: list[Entry], failed: list[str], dry_run: bool) -> list[str]:
    """The table: one line per node, then the commands (``would run:`` in a dry run)."""
    out = []
    for e in found:
        held = ", ".join(x for x in (f"Reason={e.reason}" if e.reason else "",
                                     f"ReservationName={e.reservation}" if e.reservation
                                     else "") if x)
        head = {RESUME: "resume", KEEP: "keep", LEFT_ALONE: "left alone"}[e.decision]
        verdict = f"; {gate.verdict_line(e.verdict)}" if e.verdict else ""
        out.append(f"{head} {e.node} ({held}): {e.why}{verdict}")
    out += [("would run: " if dry_run else "") + shlex.join(argv)
            for e in found for argv in e.commands]
    out += [f"failed: {line}" for line in failed]
    if not found:
        out.append("no node drained or reserved by exemplar-tune")
    return out
