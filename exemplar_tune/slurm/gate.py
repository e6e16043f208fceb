"""What the Slurm gates decide about a node, and the ``scontrol`` calls that act on it.

The prolog (``preflight --slurm-prolog``), the HealthCheckProgram (``preflight
--slurm-health-check``) and ``slurm undrain`` judge a node alike (:func:`judge`):

* **health**: a failing health check of ``--drain-at`` severity or worse
  (``checks.base.makes_unfit``) makes the node unfit: ``Reason=exemplar:health:<check id>``;
* **unknown**: the node itself could not be read (``verdict.unreadable``: an empty or foreign
  tree, most facts unreadable, unreachable, the health check's deadline passed): a gate fails
  closed, ``Reason=exemplar:unknown:<short reason>``;
* anything else passes: tuning findings, health findings below ``--drain-at``, single checks
  that could not be judged are printed and never take a node out of service.

A node is taken out of service by a drain or, with ``--slurm-action reserve``, by a
maintenance reservation ``exemplar-<node>`` (``Flags=MAINT,IGNORE_JOBS``, root only: no job
lands there). Nodes drained with a reason without the ``exemplar:`` prefix are somebody else's
and are never drained again, resumed or reworded. Every call is an argv list with a deadline.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exemplar_tune.checks.base import HEALTH, UNKNOWN, makes_unfit
from exemplar_tune.slurm.commands import SlurmError, program, run_client
from exemplar_tune.slurm.records import NodeRecord, parse_nodes

REASON_PREFIX = "exemplar:"
RESERVATION_PREFIX = "exemplar-"
ACTIONS = ("drain", "reserve")
SCONTROL_TIMEOUT_S = 10.0  # slurm.conf MessageTimeout's default
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Judgement:
    """A gate's decision on one node: ``klass`` health or unknown (the node must leave
    service, ``reason`` is its Slurm reason) or ``""`` (it passes); ``why`` says it in words."""

    klass: str
    reason: str
    why: str

    @property
    def unfit(self) -> bool:
        """The node must leave service."""
        return bool(self.klass)


def judge(results: list[Mapping[str, Any]], unreadable_reason: str,
          drain_at: str) -> Judgement:
    """The gate rule over one host's check results (JSON) and ``verdict.unreadable`` of its
    facts: unknown when unreadable, else health on the first result that makes it unfit."""
    if unreadable_reason:
        return Judgement(UNKNOWN, f"{REASON_PREFIX}{UNKNOWN}:{short(unreadable_reason)}",
                         unreadable_reason)
    unfit = [r for r in results if makes_unfit(r, drain_at)]
    if unfit:
        first = unfit[0]
        return Judgement(HEALTH, f"{REASON_PREFIX}{HEALTH}:{short(first['id'])}",
                         f"{first['id']}: {first['detail']}")
    return Judgement("", "", "")


def short(text: str, limit: int = 40) -> str:
    """``text`` as a reason part Slurm keeps as it is: its words before the first ``:`` or
    ``(``, lower case, characters other than ``A-Za-z0-9._-`` as ``-``, at most ``limit``."""
    head = re.split(r"[:(]", text, maxsplit=1)[0] if " " in text else text
    return _UNSAFE.sub("-", head.strip().lower()).strip("-")[:limit].rstrip("-") or "unreadable"


def describe(action: Mapping[str, str] | None) -> str:
    """One action on one line: ``kind: command`` (else ``kind: detail``, else ``kind``)."""
    if not action:
        return "none"
    rest = " ".join((action.get("command") or action.get("detail") or "").split())
    return f"{action['kind']}: {rest}" if rest else action["kind"]


def verdict_line(verdict: Mapping[str, Any]) -> str:
    """``verdict: <class and reason>; first action: <action>`` of a host verdict."""
    klass, reason = verdict["class"], " ".join((verdict.get("reason") or "").split())
    said = f"{klass}: {reason}" if reason else klass
    first = verdict["actions"][0] if verdict.get("actions") else None
    return f"verdict: {said}; first action: {describe(first)}"


# -- Slurm ------------------------------------------------------------------------------------


def client(name: str) -> str:
    """The path of Slurm client ``name`` (a prolog or health check has a bare PATH), else
    the name (``run_client`` then reports it as not found)."""
    try:
        return program(name)
    except SlurmError:
        return name


def scontrol() -> str:
    """:func:`client` ``scontrol``."""
    return client("scontrol")


def ours(reason: str) -> bool:
    """A drain reason exemplar-tune wrote (the gates, ``slurm drain``)."""
    return reason.startswith(REASON_PREFIX)


def reservation_name(node: str) -> str:
    """``exemplar-<node>``: the maintenance reservation of ``node``."""
    return f"{RESERVATION_PREFIX}{node}"


def node_record(node: str, timeout: float = SCONTROL_TIMEOUT_S) -> NodeRecord | None:
    """``node``'s state and reason (None: no such node); :class:`SlurmError` when Slurm
    cannot be asked."""
    try:
        out = run_client([scontrol(), "show", "node", node, "--oneliner"], timeout=timeout)
    except SlurmError as exc:
        if f"Node {node} not found" in str(exc):
            return None
        raise
    return parse_nodes(out).get(node)


def reservations(timeout: float = SCONTROL_TIMEOUT_S) -> dict[str, str]:
    """``{node: reservation}`` of every ``exemplar-<node>`` reservation on exactly that node."""
    out = run_client([scontrol(), "show", "reservation", "--oneliner"], timeout=timeout)
    found = {}
    for line in out.splitlines():
        name = re.match(r"ReservationName=(\S+)", line)
        nodes = re.search(r"\sNodes=(\S+)", line)
        if name and nodes and name.group(1) == reservation_name(nodes.group(1)):
            found[nodes.group(1)] = name.group(1)
    return found


def has_reservation(node: str, timeout: float = SCONTROL_TIMEOUT_S) -> bool:
    """``exemplar-<node>`` exists."""
    try:
        out = run_client([scontrol(), "show", "reservation", reservation_name(node),
                          "--oneliner"], timeout=timeout)
    except SlurmError as exc:
        if f"Reservation {reservation_name(node)} not found" in str(exc):
            return False
        raise
    return f"ReservationName={reservation_name(node)} " in out


# The argv below name the client; :func:`run` finds it (a prolog has a bare PATH).


def drain_argv(node: str, reason: str) -> list[str]:
    """``scontrol update NodeName=<node> State=DRAIN Reason=<reason>``."""
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]


def resume_argv(nodes: list[str]) -> list[str]:
    """``scontrol update NodeName=<n1,n2> State=RESUME``."""
    return ["scontrol", "update", f"NodeName={','.join(nodes)}", "State=RESUME"]


def reserve_argv(node: str) -> list[str]:
    """Create ``exemplar-<node>``: from now on, for ever, root only, jobs already running on
    the node kept (MAINT: the node shows as ``maint``; IGNORE_JOBS: it is created while a job
    is there)."""
    return ["scontrol", "create", "reservation", f"ReservationName={reservation_name(node)}",
            f"Nodes={node}", "StartTime=now", "Duration=UNLIMITED", "Users=root",
            "Flags=MAINT,IGNORE_JOBS"]


def unreserve_argv(node: str) -> list[str]:
    """``scontrol delete ReservationName=exemplar-<node>``."""
    return ["scontrol", "delete", f"ReservationName={reservation_name(node)}"]


def reserve(node: str, timeout: float = SCONTROL_TIMEOUT_S) -> str:
    """Make sure ``exemplar-<node>`` exists: ``"reserved"`` or ``"already reserved"``;
    :class:`SlurmError` when it can be neither created nor found."""
    if has_reservation(node, timeout):
        return "already reserved"
    try:
        run_client(resolved(reserve_argv(node)), timeout=timeout)
    except SlurmError:
        if has_reservation(node, timeout):  # created by a concurrent gate meanwhile
            return "already reserved"
        raise
    return "reserved"


def keep_job_off(job: str, timeout: float = SCONTROL_TIMEOUT_S) -> str:
    """Requeue job ``job`` (a batch job), else cancel it (an interactive one, which Slurm does
    not requeue): ``"requeued"``, ``"cancelled"`` or ``""`` when neither worked. scancel exits
    0 even for a job it did not cancel, so the job's state says (CANCELLED, or COMPLETING
    while its processes end)."""
    if not run(["scontrol", "requeue", job], timeout):
        return "requeued"
    run(["scancel", job], timeout)
    try:
        shown = run_client([scontrol(), "show", "job", job, "--oneliner"], timeout=timeout)
    except SlurmError:
        return ""
    return "cancelled" if re.search(r"\bJobState=(CANCELLED|COMPLETING)\b", shown) else ""


def resolved(argv: list[str]) -> list[str]:
    """``argv`` with its Slurm client by its path (:func:`client`)."""
    return [client(argv[0]), *argv[1:]]


def run(argv: list[str], timeout: float = SCONTROL_TIMEOUT_S) -> str:
    """Run one Slurm client argv (:func:`resolved`): ``""`` when it worked, else the
    one-line error."""
    try:
        run_client(resolved(argv), timeout=timeout)
    except SlurmError as exc:
        return str(exc)
    return ""
