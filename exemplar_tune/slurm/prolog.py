"""``exemplar-tune preflight --slurm-prolog``: this node's checks as a Slurm prolog gate.

slurmd runs the prolog as root on each allocated node with ``SLURMD_NODENAME``,
``SLURM_JOB_ID``, ``SLURM_JOB_*`` and ``SLURM_CONF`` set (and no ``PATH``: the installed
script sets one). The facts are read in this process, without Ansible (live ``/``, or
``--sysroot`` where ``%n`` stands for the node name), the checks run, and:

* no check that makes the node unfit (a failing health check of ``--drain-at`` severity or
  worse, ``checks.base.makes_unfit``): exit 0 and the job starts; failing tuning preferences
  are printed (``FAIL ... (tuning, not draining)``) and never drain;
* a check that makes it unfit: one line per failing check on stdout (slurmd logs a failed
  prolog's output), then ``scontrol update NodeName=$SLURMD_NODENAME State=DRAIN
  Reason=exemplar:<first unfit check id>`` (argv), then exit 1. Slurm 22.05 keeps a reason
  set by the prolog (it would otherwise write "Prolog error"), requeues and holds a batch job
  and fails an interactive one;
* the gate itself cannot run (bad profile, unreadable sysroot): drained with
  ``Reason=exemplar:prolog-error``, exit 2 -- a gate fails closed.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYER_NAMES,
    LAYERS,
    UnknownLayer,
    gather_facts,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks.base import FAIL, makes_unfit
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, UserError
from exemplar_tune.facts import facts_from_sysroot
from exemplar_tune.preflight import preflight_hosts
from exemplar_tune.profile import host_profiles
from exemplar_tune.slurm.commands import SlurmError, program, run_client

REASON_PREFIX = "exemplar:"
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

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> JobContext:
        """From ``SLURMD_NODENAME`` and the ``SLURM_JOB_*`` variables (absent: None)."""
        return cls(environ.get("SLURMD_NODENAME"), environ.get("SLURM_JOB_ID"),
                   environ.get("SLURM_JOB_USER"), environ.get("SLURM_JOB_PARTITION"),
                   environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST"))

    @property
    def label(self) -> str:
        """``node3 job 12`` (what each output line starts with)."""
        return f"{self.node or '(not in a prolog)'} job {self.job_id or '-'}"


def run_prolog(args: argparse.Namespace) -> int:
    """The gate: check this node, drain it and exit non-zero when a check fails."""
    context = JobContext.from_environ(os.environ)
    start = time.monotonic()
    try:
        _refuse_fleet_options(args)
        doc = check_node(context, args)
    except (UserError, UnknownLayer) as exc:
        print(f"exemplar-tune prolog {context.label}: error: {exc}", flush=True)
        drain_self(context, ERROR_REASON)
        return EXIT_USAGE
    failing = [r for r in next(iter(doc["hosts"].values()))["results"] if r["status"] == FAIL]
    unfit = [r for r in failing if makes_unfit(r, args.drain_at)]
    seconds = time.monotonic() - start
    if args.output:
        _write(args.output, doc)
    for result in failing:
        kept = "" if result in unfit else (
            " (tuning, not draining)" if not result["health"] else
            f" (severity {result['severity']}, below --drain-at {args.drain_at}: not draining)")
        print(f"exemplar-tune prolog {context.label}: FAIL {result['id']}: "
              f"{result['detail']}{kept}", flush=True)
    if not unfit:
        print(f"exemplar-tune prolog {context.label}: pass ({seconds:.2f} s)", flush=True)
        return EXIT_OK
    drain_self(context, f"{REASON_PREFIX}{unfit[0]['id']}")
    return EXIT_FINDINGS


def _refuse_fleet_options(args: argparse.Namespace) -> None:
    for flag, value in (("-i", args.inventory), ("--launcher", args.launcher),
                        ("--results", args.results), ("--limit", args.limit)):
        if value:
            raise UserError(f"--slurm-prolog checks this node only: {flag} is not allowed")


def check_node(context: JobContext, args: argparse.Namespace) -> dict[str, Any]:
    """The preflight document of this node (named after it), read without Ansible."""
    layers = args.layer or HOST_LAYERS
    unknown = [name for name in layers if name not in LAYER_NAMES]
    if unknown:
        raise UserError(f"unknown layer {unknown[0]!r}; choose from {', '.join(LAYER_NAMES)}")
    if args.sysroot:
        facts = facts_from_sysroot(args.sysroot.replace("%n", context.node or ""), layers)
    else:
        facts = gather_facts(Sysroot("/"), layers)
    hosts = {context.node or "localhost": facts}
    return preflight_hosts(hosts, host_profiles(args.profile, hosts), layers,
                           args.stop_at_first_failing_layer)


def drain_self(context: JobContext, reason: str) -> None:
    """Drain this node with ``reason`` (printed either way); never raises."""
    if not context.node:
        print(f"exemplar-tune prolog {context.label}: SLURMD_NODENAME unset, not draining",
              flush=True)
        return
    argv = [_scontrol(), "update", f"NodeName={context.node}", "State=DRAIN",
            f"Reason={reason}"]
    try:
        run_client(argv, timeout=30)
    except SlurmError as exc:
        print(f"exemplar-tune prolog {context.label}: could not drain: {exc}", flush=True)
        return
    print(f"exemplar-tune prolog {context.label}: drained, Reason={reason}", flush=True)


def _scontrol() -> str:
    try:
        return program("scontrol")
    except SlurmError:
        return "scontrol"  # run_client reports it as not found


def _write(path: Any, doc: dict[str, Any]) -> None:
    try:
        path.write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        print(f"exemplar-tune prolog: cannot write {path}: {exc.strerror or exc}", flush=True)
