"""``exemplar-tune preflight --slurm-prolog``: this node's checks as a Slurm prolog gate.

slurmd runs the prolog as root on each allocated node with ``SLURMD_NODENAME``,
``SLURM_JOB_ID``, ``SLURM_JOB_*`` and ``SLURM_CONF`` set (and no ``PATH``: the installed
script sets one). The facts are read in this process, without Ansible (live ``/``, or
``--sysroot`` where ``%n`` stands for the node name), the checks run, and the gate rule of
:mod:`exemplar_tune.slurm.gate` decides. Output, one line each on stdout (slurmd logs a
failed prolog's output): every failing check (``FAIL <id>: <detail>``, with ``(tuning, not
draining)`` or ``(severity ..., below --drain-at ...)`` when it does not make the node
unfit), then the node's verdict and its first action, then what the gate did:

* the node passes (tuning findings at most): ``pass (0.31 s)``, exit 0, the job starts;
* a failing health check makes it unfit: ``scontrol update NodeName=$SLURMD_NODENAME
  State=DRAIN Reason=exemplar:health:<check id>`` (argv), exit 1. Slurm 22.05 keeps a reason
  set by the prolog (it would otherwise write "Prolog error"), requeues and holds a batch job
  and fails an interactive one;
* the node could not be read (verdict unknown: an empty, missing or unreadable tree):
  ``Reason=exemplar:unknown:<short reason>``, exit 2 -- a gate fails closed;
* the gate itself cannot run (bad profile or layer): drained with
  ``Reason=exemplar:prolog-error``, exit 2.

With ``--slurm-action reserve`` an unfit node gets the maintenance reservation
``exemplar-<node>`` instead of a drain, and this job is requeued (a batch job) or cancelled
(an interactive one, which Slurm cannot requeue); the prolog then exits 0, because a failed
prolog makes slurmd drain the node ("Prolog error"). When neither the reservation nor the
requeue or cancel works, the gate drains as above (it fails closed).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYERS,
    UnknownLayer,
)

from exemplar_tune.checks.base import FAIL, UNKNOWN, makes_unfit
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, UserError
from exemplar_tune.slurm import gate
from exemplar_tune.slurm.commands import SlurmError
from exemplar_tune.slurm.gate import REASON_PREFIX
from exemplar_tune.slurm.nodecheck import NodeCheck, read_node, sysroot_of
from exemplar_tune.terminal import escape

__all__ = ["REASON_PREFIX", "run_prolog"]  # REASON_PREFIX: nodes.py's and older imports

ERROR_REASON = f"{REASON_PREFIX}prolog-error"
HOST_LAYERS = [layer.name for layer in LAYERS if layer.reads_host]  # read on the node


@dataclass(frozen=True)
class JobContext:
    """What slurmd tells the prolog about the node and the job."""

    node: str | None
    job_id: str | None
    user: str | None
    partition: str | None
    nodelist: str | None
    mode: str = "prolog"

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> JobContext:
        """From ``SLURMD_NODENAME`` and the ``SLURM_JOB_*`` variables (absent: None)."""
        return cls(environ.get("SLURMD_NODENAME"), environ.get("SLURM_JOB_ID"),
                   environ.get("SLURM_JOB_USER"), environ.get("SLURM_JOB_PARTITION"),
                   environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST"))

    @property
    def label(self) -> str:
        """``node3 job 12`` (what each output line starts with, after the mode)."""
        if self.mode != "prolog":
            return self.node or "(no node name)"
        return f"{self.node or '(not in a prolog)'} job {self.job_id or '-'}"

    def say(self, text: str) -> None:
        """Print ``exemplar-tune <mode> <label>: <text>`` (one line, flushed)."""
        print(escape(f"exemplar-tune {self.mode} {self.label}: {text}"), flush=True)


def run_prolog(args: argparse.Namespace) -> int:
    """The gate: check this node; take it out of service and fail when it is unfit."""
    context = JobContext.from_environ(os.environ)
    try:
        refuse_fleet_options(args, "--slurm-prolog")
        checked = check_node(context.node or "localhost", args)
    except (UserError, UnknownLayer) as exc:
        context.say(f"error: {exc}")
        drain_self(context, ERROR_REASON)
        return EXIT_USAGE
    if args.output and checked.doc is not None:
        write_doc(args.output, checked.doc)
    judgement = report(context, checked, args.drain_at)
    if not judgement.unfit:
        context.say(f"pass ({checked.seconds:.2f} s)")
        return EXIT_OK
    if action_of(args) == "reserve" and reserve_self(context):
        return EXIT_OK  # a failed prolog would make slurmd drain the node
    drain_self(context, judgement.reason)
    return EXIT_USAGE if judgement.klass == UNKNOWN else EXIT_FINDINGS


def action_of(args: argparse.Namespace) -> str:
    """``--slurm-action`` (default ``drain``)."""
    return getattr(args, "slurm_action", None) or "drain"


def refuse_fleet_options(args: argparse.Namespace, mode: str) -> None:
    """:class:`UserError` for an option that names other hosts than this node."""
    for flag, value in (("-i", args.inventory), ("--launcher", args.launcher),
                        ("--results", args.results), ("--limit", args.limit)):
        if value:
            raise UserError(f"{mode} checks this node only: {flag} is not allowed")


def check_node(node: str, args: argparse.Namespace, layers: list[str] | None = None,
               deadline: float | None = None) -> NodeCheck:
    """This node read and checked (``--sysroot`` with ``%n`` as ``node``, else live)."""
    return read_node(node, sysroot_of(args.sysroot, node), args.profile,
                     args.layer or layers or HOST_LAYERS, deadline)


def report(context: JobContext, checked: NodeCheck, drain_at: str) -> gate.Judgement:
    """Print the failing checks and the verdict; the gate's judgement."""
    for result in checked.results:
        if result["status"] == FAIL:
            context.say(f"FAIL {result['id']}: {result['detail']}{_kept(result, drain_at)}")
    context.say(gate.verdict_line(checked.verdict))
    return gate.judge(checked.results, checked.unreadable, drain_at)


def _kept(result: dict[str, Any], drain_at: str) -> str:
    if makes_unfit(result, drain_at):
        return ""
    if not result["health"]:
        return " (tuning, not draining)"
    return f" (severity {result['severity']}, below --drain-at {drain_at}: not draining)"


def drain_self(context: JobContext, reason: str) -> bool:
    """Drain this node with ``reason`` (printed either way); never raises. True when the
    node is drained."""
    if not context.node:
        context.say(f"SLURMD_NODENAME unset, not draining (Reason={reason})")
        return False
    error = gate.run(gate.drain_argv(context.node, reason))
    if error:
        context.say(f"could not drain: {error}")
        return False
    context.say(f"drained, Reason={reason}")
    return True


def reserve_self(context: JobContext) -> bool:
    """Reserve this node (``exemplar-<node>``) and requeue, else cancel, this job; True when
    both worked (the job will not run here, the prolog may succeed)."""
    if not (context.node and context.job_id):
        context.say("SLURMD_NODENAME or SLURM_JOB_ID unset, cannot reserve: draining")
        return False
    try:
        done = gate.reserve(context.node)
    except SlurmError as exc:
        context.say(f"could not reserve: {exc}: draining")
        return False
    context.say(f"{done}, ReservationName={gate.reservation_name(context.node)}")
    done = gate.keep_job_off(context.job_id)
    if done:
        context.say(f"job {context.job_id} {done}: it does not run on a reserved node")
        return True
    context.say(f"job {context.job_id} could be neither requeued nor cancelled: draining")
    return False


def write_doc(path: Any, doc: dict[str, Any]) -> None:
    """Write the preflight document to ``--output`` (a failure is printed, never raised)."""
    try:
        path.write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        print(f"exemplar-tune prolog: cannot write {path}: {exc.strerror or exc}", flush=True)
