"""``exemplar-tune preflight --slurm-health-check``: slurm.conf's HealthCheckProgram.

slurmd runs the HealthCheckProgram as root at start and every ``HealthCheckInterval``
seconds, outside any job, with ``SLURMD_NODENAME`` and little else in its environment (no
``SLURM_CONF``, no ``PATH``: a wrapper script sets them where slurm.conf is not at its default
place), and kills it after 60 s. This mode checks the node named ``SLURMD_NODENAME`` (else this
machine's short host name) as the prolog gate does (:mod:`exemplar_tune.slurm.gate`), and:

* unfit (health) or unreadable (unknown): drains it (``--slurm-action drain``, the default)
  with ``Reason=exemplar:health:<check id>`` / ``exemplar:unknown:<short reason>``, or
  reserves it (``reserve``: ``exemplar-<node>``); a node already drained with that reason is
  left as it is; exit 1 (health) or 2 (unknown);
* it passes: a drain exemplar-tune set (reason ``exemplar:``) is resumed and the
  ``exemplar-<node>`` reservation deleted, as NHC resumes the nodes it took offline; exit 0;
* a node drained by someone else (another reason) is left alone, whatever the checks say.

It stays well inside Slurm's 60 s: only the layers with health checks are read
(:data:`HEALTH_LAYERS`, ``vm`` for the host's identity), the commands only tuning checks read
are not run, no slow optional probe runs (no DCGM diagnostic, no counter window, no BMC), the
reading has :data:`READ_DEADLINE_S` seconds (after that the node is unknown: ``deadline
passed``) and each ``scontrol`` call the time left of :data:`TOTAL_DEADLINE_S`. The last line
says how long the whole run took.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYER_NAMES,
    UnknownLayer,
)

from exemplar_tune.checks.base import CHECKS, UNKNOWN
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, UserError
from exemplar_tune.slurm import gate
from exemplar_tune.slurm.commands import SlurmError
from exemplar_tune.slurm.prolog import (
    REASON_PREFIX,
    JobContext,
    action_of,
    check_node,
    refuse_fleet_options,
    report,
    write_doc,
)
from exemplar_tune.slurm.records import NodeRecord

HEALTH_LAYERS = [name for name in LAYER_NAMES
                 if name == "vm" or any(c.health and c.layer == name for c in CHECKS)]
READ_DEADLINE_S = 30.0  # reading and checking the node
TOTAL_DEADLINE_S = 50.0  # everything, scontrol included; slurmd kills it at 60 s
ERROR_REASON = f"{REASON_PREFIX}healthcheck-error"


def process_start() -> float:
    """When this process started, on the ``time.monotonic()`` clock (its interpreter start-up
    counts against Slurm's 60 s too); now when that cannot be read."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - min(max(age, 0.0), 30.0)


@dataclass
class Clock:
    """The run's deadline, from the process start: :meth:`left` seconds for the next
    ``scontrol`` call."""

    start: float = field(default_factory=process_start)

    def left(self) -> float:
        """Seconds left of :data:`TOTAL_DEADLINE_S` (at most the usual scontrol timeout, at
        least one)."""
        return max(1.0, min(gate.SCONTROL_TIMEOUT_S,
                            self.start + TOTAL_DEADLINE_S - time.monotonic()))

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.start


def node_name(environ: Mapping[str, str]) -> str:
    """``SLURMD_NODENAME``, else this machine's short host name."""
    return environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def run_health_check(args: argparse.Namespace) -> int:
    """The HealthCheckProgram: check this node; take it out of service when it is unfit or
    unreadable, put it back when exemplar-tune took it out and it passes now."""
    clock = Clock()
    context = JobContext(node_name(os.environ), None, None, None, None, mode="health-check")
    try:
        refuse_fleet_options(args, "--slurm-health-check")
        checked = check_node(context.node or "localhost", args, HEALTH_LAYERS,
                             clock.start + READ_DEADLINE_S)
    except (UserError, UnknownLayer) as exc:
        context.say(f"error: {exc}")
        _act(context, gate.Judgement(UNKNOWN, ERROR_REASON, str(exc)), "drain", clock)
        context.say(f"done in {clock.elapsed():.2f} s")
        return EXIT_USAGE
    if args.output and checked.doc is not None:
        write_doc(args.output, checked.doc)
    judgement = report(context, checked, args.drain_at)
    status = _act(context, judgement, action_of(args), clock)
    context.say(f"done in {clock.elapsed():.2f} s")
    return status


def _act(context: JobContext, judgement: gate.Judgement, action: str, clock: Clock) -> int:
    """Apply ``judgement`` to the node as its Slurm record stands; the exit status."""
    node = context.node or ""
    try:
        record = gate.node_record(node, clock.left())
    except SlurmError as exc:
        context.say(f"cannot read the node from Slurm: {exc}")
        return EXIT_FINDINGS
    if record is None:
        context.say("no such Slurm node")
        return EXIT_USAGE
    if record.draining and not gate.ours(record.reason):
        context.say(f"left alone: drained by someone else: {record.reason}")
    elif judgement.unfit:
        _take_out(context, judgement.reason, record, action, clock)
    else:
        return _put_back(context, record, clock)
    return EXIT_OK if not judgement.unfit else (
        EXIT_USAGE if judgement.klass == UNKNOWN else EXIT_FINDINGS)


def _take_out(context: JobContext, reason: str, record: NodeRecord, action: str,
              clock: Clock) -> None:
    node = record.name
    if action == "reserve":
        try:
            done = gate.reserve(node, clock.left())
        except SlurmError as exc:
            context.say(f"could not reserve: {exc}: draining")
        else:
            context.say(f"{done}, ReservationName={gate.reservation_name(node)} ({reason})")
            return
    if record.draining and record.reason == reason:
        context.say(f"unchanged: already drained, Reason={reason}")
        return
    error = gate.run(gate.drain_argv(node, reason), clock.left())
    context.say(f"could not drain: {error}" if error else f"drained, Reason={reason}")


def _put_back(context: JobContext, record: NodeRecord, clock: Clock) -> int:
    """Resume our drain and delete our reservation; exit 1 when one of them failed."""
    node, status = record.name, EXIT_OK
    if record.draining:  # ours: somebody else's was left alone before
        error = gate.run(gate.resume_argv([node]), clock.left())
        context.say(f"could not resume: {error}" if error else
                    f"resumed, was Reason={record.reason}")
        status = EXIT_FINDINGS if error else status
    try:
        reserved = gate.has_reservation(node, clock.left())
    except SlurmError as exc:
        context.say(f"cannot read the reservation: {exc}")
        return EXIT_FINDINGS
    if reserved:
        error = gate.run(gate.unreserve_argv(node), clock.left())
        context.say(f"could not delete the reservation: {error}" if error else
                    f"deleted ReservationName={gate.reservation_name(node)}")
        status = EXIT_FINDINGS if error else status
    if status == EXIT_OK:
        context.say("pass")
    return status
