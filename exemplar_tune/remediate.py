"""The ``apply``, ``restore``, ``abandon`` and ``audit`` commands: the layer module run through
Ansible (``playbook_runs``), results per knob, printed per command with the hosts that failed
or could not be reached kept apart.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import ROLE_LAYERS

from exemplar_tune import reaper
from exemplar_tune.change_report import apply_lines, audit_lines, group_drift
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, UserError
from exemplar_tune.ledger import Ledger
from exemplar_tune.playbook_runs import (
    changed_hosts,
    claim_hosts,
    end_leftovers,
    host_records,
    ledger_target,
    recorded,
    run_playbook,
    runner,
)
from exemplar_tune.profile import profile_vars
from exemplar_tune.prometheus import audit_text, write_atomically
from exemplar_tune.signals import graceful_stop


def cmd_apply(args: argparse.Namespace) -> int:
    """``exemplar-tune apply``: one layer, fleet-wide, journaled; recorded in the ledger."""
    name, targets = profile_vars(args.profile)
    if args.check:
        result = run_playbook(runner(args, check=True), "apply", {
            "layer": args.layer, **targets})
        return _report_apply(args, None, None, name, result)
    run = runner(args)
    with claim_hosts(run, f"apply --layer {args.layer}"), graceful_stop(), \
            Ledger(args.ledger) as ledger:
        experiment = ledger.start_experiment("apply", name, ledger_target(args),
                                             {"layer": args.layer})
        run_id = args.run_id or experiment
        with recorded(ledger, experiment), reaper.tagged(experiment):
            ledger.add_layer(experiment, args.layer, 0, run_id)
            result = run_playbook(run, "apply", {
                "layer": args.layer, **targets, "exemplar_run_id": run_id})
            ledger.record_hosts(experiment, args.layer, host_records(result))
            broken = bool(result["failed"] or result["unreachable"])
            ledger.set_layer_status(experiment, args.layer, "failed" if broken else "applied")
            ledger.finish(experiment, "failed" if broken else "finished")
    return _report_apply(args, experiment, run_id, name, result)


def _report_apply(args: argparse.Namespace, experiment: str | None, run_id: str | None,
                  profile: str, result: dict[str, Any]) -> int:
    doc = {"experiment": experiment, "run_id": run_id, "layer": args.layer,
           "check": args.check, "profile": profile, **result}
    _emit(args, doc, apply_lines(doc, args.diff))
    return EXIT_FINDINGS if result["failed"] or result["unreachable"] else EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    """``exemplar-tune restore|rollback --run ID|latest``: every layer of an experiment.

    Works for experiments whose controller died too: the host journals hold what changed.
    A host the ledger saw change a layer must still have that layer's journal (a missing one
    fails that host); the others may have none.
    """
    with Ledger(args.ledger, create=False) as ledger:
        doc = ledger.show(_latest_with_changes(ledger) if args.run == "latest" else args.run)
        exp = doc["experiment"]
        _refuse_live_controller(ledger, exp)
        for key, value in exp["target"].items():
            setattr(args, key, getattr(args, key) or value)
        run = runner(args)
        with claim_hosts(run, f"{args.command} --run {exp['id']}"):
            end_leftovers(ledger, exp["id"])
            lines, results = [f"restore of experiment {exp['id']}"], {}
            for layer in reversed(doc["layers"]):
                result = run_playbook(run, "restore", {
                    "exemplar_run_id": layer["run_id"],
                    "exemplar_restore_layers": [layer["layer"]],
                    "exemplar_restore_expected": changed_hosts(doc, layer["layer"])})
                results[layer["layer"]] = result
                lines += _restore_lines(layer["layer"], result)
            failed = any(r["failed"] or r["unreachable"] for r in results.values())
            ledger.finish(exp["id"], "failed" if failed else "rolled_back")
    _emit(args, {"experiment": exp["id"], "layers": results}, lines)
    return EXIT_FINDINGS if failed else EXIT_OK


def cmd_abandon(args: argparse.Namespace) -> int:
    """``exemplar-tune abandon --run ID``: mark an unfinished experiment failed, after asking."""
    with Ledger(args.ledger, create=False) as ledger:
        exp = ledger.show(args.run)["experiment"]
        if exp["status"] in ("finished", "rolled_back"):
            raise UserError(f"experiment {exp['id']} is {exp['status']}: nothing to abandon")
        _refuse_live_controller(ledger, exp)
        if not args.yes:
            if not sys.stdin.isatty():
                raise UserError("abandon asks for confirmation: run it in a terminal, or add "
                                "--yes")
            try:
                answer = input(f"abandon experiment {exp['id']} ({exp['status']}); hosts it "
                               "changed stay changed. Type 'abandon' to confirm: ")
            except EOFError:
                answer = ""
            if answer.strip() != "abandon":
                print("not abandoned")
                return EXIT_USAGE
        ledger.log_event(exp["id"], "warning", f"abandoned by {_who()} (was {exp['status']}); "
                         "hosts it changed were not restored")
        ledger.finish(exp["id"], "failed")
    print(f"experiment {exp['id']} abandoned (marked failed); 'exemplar-tune rollback --run "
          f"{exp['id']}' still restores a host that comes back")
    return EXIT_OK


def _who() -> str:
    try:
        user = os.getlogin()
    except OSError:
        user = os.environ.get("USER", f"uid {os.getuid()}")
    return f"{user} on {socket.gethostname()}"


def _refuse_live_controller(ledger: Ledger, exp: dict[str, Any]) -> None:
    """``UserError`` when the experiment's own controller still runs: two must not meet."""
    if exp["status"] != "running":
        return
    if not any(e["id"] == exp["id"] for e in ledger.unfinished()):
        raise UserError(f"experiment {exp['id']} is still running (pid {exp['controller_pid']} "
                        f"on {exp['controller_host']}): stop it first (SIGINT restores the layer "
                        "it is measuring)")


def _latest_with_changes(ledger: Ledger) -> str:
    """The newest experiment that changed something (or may have: it never finished)."""
    for row in ledger.history(limit=1000):
        doc = ledger.show(row["id"])
        if row["status"] in ("running", "interrupted") or any(h["changed"] for h in doc["hosts"]):
            return row["id"]
    return "latest"  # nothing changed anywhere: the newest one, or a clear "no experiment"


def _restore_lines(layer: str, result: dict[str, Any]) -> list[str]:
    lines = []
    for host, data in result["hosts"].items():
        state = "FAILED: " + (data["error"] or "") if data["status"] == "failed" else (
            f"{len(data['restored'])} change(s) put back")
        lines.append(f"  {layer} {host}: {state}")
    return lines + [f"  {layer} {host}: UNREACHABLE: {why}"
                    for host, why in result["unreachable"].items()]


def cmd_audit(args: argparse.Namespace) -> int:
    """``exemplar-tune audit``: the roles in check mode with diff; exit 1 on drift."""
    name, extravars = profile_vars(args.profile)
    if args.layer:
        extravars["exemplar_audit_layers"] = args.layer
    result = run_playbook(runner(args, check=True), "audit", extravars)
    doc = {"profile": name, **result, "drift": group_drift(result["hosts"])}
    if args.format == "prometheus":
        text = audit_text(doc, args.layer or list(ROLE_LAYERS))
        if args.output:
            write_atomically(args.output, text)
        else:
            print(text, end="")
    else:
        _emit(args, doc, audit_lines(doc, args.diff, args.details))
    drift = bool(doc["drift"]) or result["failed"] or result["unreachable"]
    return EXIT_FINDINGS if drift else EXIT_OK


def _emit(args: argparse.Namespace, doc: dict[str, Any], lines: list[str]) -> None:
    print(json.dumps(doc, indent=2) if args.format == "json" else "\n".join(lines))
