"""The ``apply``, ``restore``, ``abandon`` and ``audit`` commands: the layer module run through
Ansible (``playbook_runs``), results per knob, printed per command with the hosts that failed
or could not be reached kept apart.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import ROLE_LAYERS

from exemplar_tune.commands import SUMMARIES
from exemplar_tune.commands.options import PROFILE_HELP, add_change_target, add_loop_options
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, UserError
from exemplar_tune.fleet import reaper
from exemplar_tune.fleet.collection import playbook_line
from exemplar_tune.fleet.hostlist import compress
from exemplar_tune.fleet.playbook_runs import (
    changed_hosts,
    claim_hosts,
    host_records,
    ledger_target,
    recorded,
    run_playbook,
    runner,
)
from exemplar_tune.json_schemas import checked
from exemplar_tune.ledger import Ledger
from exemplar_tune.orchestration.experiments import end_leftovers, run_experiment
from exemplar_tune.profile import AUTO, profile_vars
from exemplar_tune.reports.change import (
    apply_lines,
    audit_lines,
    boot_time,
    group_drift,
    group_not_applicable,
    group_not_audited,
    layer_verdicts,
    problem_lines,
)
from exemplar_tune.reports.prometheus import audit_text, write_atomically
from exemplar_tune.reports.provenance import made
from exemplar_tune.signals import graceful_stop
from exemplar_tune.terminal import escape, join_lines
from exemplar_tune.verdict import Target, audit_verdict

AUDIT_SCHEMA_VERSION = 1  # of schemas/audit-result.schema.json


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``apply``, ``audit``, ``restore`` (and ``rollback``) and ``abandon``."""
    _add_apply(sub)
    _add_audit(sub)
    _add_restore(sub)


APPLY_EPILOG = """examples:
  exemplar-tune apply --layer cpu --check                 what would change on this host
  exemplar-tune apply --layer cpu -i hosts.yml --limit 'gpu[01-04]' --profile site.yaml
  exemplar-tune apply --layer runtime --sysroot /srv/node07 --format json
  exemplar-tune restore --run latest

Each change is recorded in the host's journal (/var/lib/exemplar-tune/journal/RUN_ID.json)
before it is made; 'restore' puts back exactly those bytes. Changes that only take effect
after a reboot (kernel arguments) are reported as such, never as done.
"""


def _add_apply(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("apply", help=SUMMARIES["apply"],
                         description="Move hosts to the profile's target for one layer, "
                         "with a journal per run.", epilog=APPLY_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_change_target(cmd)
    cmd.add_argument("--layer", required=True, choices=ROLE_LAYERS, help="the layer to apply")
    cmd.add_argument("--profile", default=AUTO, metavar="NAME|FILE", help=PROFILE_HELP)
    cmd.add_argument("--check", action="store_true", help="show what would change; write nothing")
    cmd.add_argument("--diff", action="store_true",
                     help="table format: show each changed file or value as a unified diff")
    cmd.add_argument("--run-id", metavar="ID", help="name the run (default: time + random)")
    cmd.add_argument("--bench", type=Path, metavar="FILE.yaml",
                     help="measure: baseline, apply, re-benchmark, keep only if it helps")
    add_loop_options(cmd)
    cmd.set_defaults(func=lambda a: run_experiment(a, [a.layer], "apply") if a.bench
                     else cmd_apply(a))


RESTORE_EPILOG = """examples:
  exemplar-tune rollback --run latest                   the newest experiment, every layer
  exemplar-tune restore --run 20261202T141901-8d17      one experiment or apply run by id
  exemplar-tune restore --run EXP -i hosts.yml --limit node07   one host that came back

Each host's journal holds the exact previous bytes, owner, group and mode of what changed;
side effects (bootloader rebuilds, daemon reloads) are undone too. Hosts whose journal is
already restored are left alone; a host the ledger saw change whose journal is missing fails.
"""


def _add_restore(sub: argparse._SubParsersAction) -> None:
    """``restore`` and its synonym ``rollback`` (the word used for a killed experiment)."""
    for name in ("restore", "rollback"):
        cmd = sub.add_parser(name, help=SUMMARIES[name],
                             description="Restore every host a run touched (also one whose "
                             "controller died), newest change first, from the host journals.",
                             epilog=RESTORE_EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        add_change_target(cmd)
        cmd.add_argument("--run", required=True, metavar="EXPERIMENT|latest",
                         help="the experiment or apply run to put back (its id), or latest")
        cmd.add_argument("--ledger", type=Path, help="SQLite ledger (default in the state dir)")
        cmd.set_defaults(func=cmd_restore)
    cmd = sub.add_parser("abandon", help=SUMMARIES["abandon"],
                         description="Close an unfinished experiment whose hosts are gone for "
                         "good (rollback cannot reach them): it is marked failed, with who "
                         "abandoned it, and no longer reported as unfinished. Nothing on any host "
                         "changes; a host that comes back keeps its journal, and 'rollback --run "
                         "EXPERIMENT' still restores it then.")
    cmd.add_argument("--run", required=True, metavar="EXPERIMENT",
                     help="the unfinished experiment to close (its id)")
    cmd.add_argument("--yes", action="store_true",
                     help="do not ask (needed when stdin is not a terminal)")
    cmd.add_argument("--ledger", type=Path, help="SQLite ledger (default in the state dir)")
    cmd.set_defaults(func=cmd_abandon)


AUDIT_EPILOG = """examples:
  exemplar-tune audit -i hosts.yml --profile h100-x86
  exemplar-tune audit -i hosts.yml --layer cpu --diff        every changed file in full
  exemplar-tune audit -i hosts.yml --format json > drift.json
  exemplar-tune audit -i hosts.yml --format prometheus \\
      --output /var/lib/prometheus/node-exporter/audit.prom

One line per knob and change, the hosts with the same change folded into a hostlist
(gpu[001-112,115]), most hosts first, with the lines that would change; --details adds a line
per host, --diff shows unified diffs. Each host's layers are "drift", "no drift" or "not
audited" (the layer failed; the reason is shown, hosts folded by it): no output calls a layer
that was not audited free of drift. Knobs that do not apply to a host (no bootloader
configuration, a virtual machine's idle states) are listed as N/A with the reason.
exit codes: 0 no drift, 1 drift, a layer not audited or a host unreachable, 2 usage/input
error.
"""


def _add_audit(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("audit", help=SUMMARIES["audit"],
                         description="Compare hosts with the profile's targets, knob by knob, "
                         "without changing anything. Exit 1 on drift.", epilog=AUDIT_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_change_target(cmd, ("table", "json", "prometheus"))
    cmd.add_argument("--diff", action="store_true",
                     help="table format: every changed file as a full unified diff")
    cmd.add_argument("--details", action="store_true",
                     help="table format: add one line per host (sorted) naming its drift")
    cmd.add_argument("--output", type=Path, metavar="FILE",
                     help="prometheus: write the metrics to FILE, replaced in one rename")
    cmd.add_argument("--layer", action="append", choices=ROLE_LAYERS, metavar="LAYER",
                     help=f"only these layers (repeatable): {', '.join(ROLE_LAYERS)}")
    cmd.add_argument("--profile", default=AUTO, metavar="NAME|FILE", help=PROFILE_HELP)
    cmd.set_defaults(func=cmd_audit)



def cmd_apply(args: argparse.Namespace) -> int:
    """``exemplar-tune apply``: one layer, fleet-wide, journaled; recorded in the ledger."""
    name, targets = profile_vars(args.profile)
    if args.check:
        result = run_playbook(runner(args, check=True), "apply", {
            "layer": args.layer, **targets})
        return _report_apply(args, None, None, name, result)
    run = runner(args)
    with claim_hosts(run, f"apply --layer {args.layer}", single_run=True), graceful_stop(), \
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
            ledger.set_layer_status(experiment, args.layer, "failed" if broken else "applied",
                                    reboot_required=any(d["reboot_required"]
                                                        for d in result["hosts"].values()))
            ledger.finish(experiment, "failed" if broken else "finished")
    return _report_apply(args, experiment, run_id, name, result)


def _report_apply(args: argparse.Namespace, experiment: str | None, run_id: str | None,
                  profile: str, result: dict[str, Any]) -> int:
    doc = {"experiment": experiment, "run_id": run_id, "layer": args.layer,
           "check": args.check, "profile": profile, "made": made(profile),
           "undo": undo_command(args, experiment, result), **result}
    _emit(args, doc, apply_lines(doc, args.diff))
    return EXIT_FINDINGS if result["failed"] or result["unreachable"] else EXIT_OK


def undo_command(args: argparse.Namespace, experiment: str | None,
                 result: dict[str, Any]) -> str | None:
    """The ``restore`` that puts back what an apply journaled, as it runs when typed: ``None``
    when no host changed anything (check mode included); ``--limit`` names the hosts that
    changed when others did not (unreachable hosts would fail the restore); ``--ledger``
    the ledger the apply wrote. The inventory comes from the ledger."""
    changed = sorted(h for h, d in result["hosts"].items() if d["changed"])
    if experiment is None or not changed:
        return None
    argv = ["exemplar-tune", "restore", "--run", experiment]
    if args.ledger:
        argv += ["--ledger", os.path.abspath(args.ledger)]
    if len(changed) < len(result["hosts"]) + len(result["unreachable"]):
        argv += ["--limit", compress(changed)]
    return shlex.join(argv)


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
                expected = changed_hosts(doc, layer["layer"])
                result = run_playbook(run, "restore", {
                    "exemplar_run_id": layer["run_id"],
                    "exemplar_restore_layers": [layer["layer"]],
                    "exemplar_restore_expected": expected})
                results[layer["layer"]] = result
                _record_restore(ledger, exp["id"], layer["layer"], expected, result)
                lines += _restore_lines(layer["layer"], result)
            failed = any(r["failed"] or r["unreachable"] for r in results.values())
            ledger.finish(exp["id"], "failed" if failed else "rolled_back")
    reboot = reboot_hosts(doc, results)
    command = reboot_command(args, reboot)
    if reboot:
        lines.append(f"REBOOT REQUIRED on {compress(reboot)} to take effect: {command}")
    _emit(args, {"experiment": exp["id"], "layers": results, "reboot_required": reboot,
                 "reboot_command": command}, lines)
    return EXIT_FINDINGS if failed else EXIT_OK


def _record_restore(ledger: Ledger, experiment: str, layer: str, expected: list[str],
                    result: dict[str, Any]) -> None:
    """Keep the restore of ``layer`` in the ledger: per host the ledger saw change it, or
    that put something back or failed, whether it was restored (the error where not); the
    layer is ``restored`` once every host that changed it is, and the event says where."""
    outcome = {h: (d["error"] or "failed") if d["status"] == "failed" else None
               for h, d in result["hosts"].items()
               if h in expected or d["restored"] or d["status"] == "failed"}
    outcome.update({h: f"unreachable: {why}" for h, why in result["unreachable"].items()
                    if h in expected})
    if not outcome:
        return
    done = ledger.record_restore(experiment, layer, outcome)
    put_back = [h for h, error in outcome.items() if error is None]
    missed = [h for h, error in outcome.items() if error is not None]
    message = f"{layer}: restored on {compress(put_back) or 'no host'}"
    message += f"; not restored on {compress(missed)}" if missed else ""
    ledger.log_event(experiment, "info" if done else "warning",
                     message + ("" if done else "; the layer is not restored everywhere"))


def reboot_hosts(doc: dict[str, Any], results: dict[str, dict[str, Any]]) -> list[str]:
    """Hosts a restore put a boot-time change back on, sorted: where the restore module says
    so (BIOS values staged again), or where it put entries back of a layer the ledger saw
    change a boot-time knob on that host (kernel arguments: ``reboot_required`` as applied,
    or a knob registered with ``reboot``)."""
    boot = {(row["layer"], row["host"]) for row in doc["hosts"]
            if any(boot_time(knob) for knob in row["changed"] or [])}
    return sorted({host for layer, result in results.items()
                   for host, data in result["hosts"].items()
                   if data["reboot_required"] or (data["restored"] and (layer, host) in boot)})


def reboot_command(args: argparse.Namespace, hosts: list[str]) -> str | None:
    """What reboots ``hosts`` of the restored target, as it runs when typed: the
    collection's reboot playbook on the inventory (``--limit`` in Ansible's own form);
    ``None`` for no host. A sysroot is not booted by anyone here: the line says so."""
    if not hosts:
        return None
    if args.sysroot:
        return f"boot the host that {args.sysroot} mirrors"
    if not args.inventory:
        return "reboot this host (systemctl reboot)"
    inventory = os.path.abspath(args.inventory) if os.path.exists(args.inventory) \
        else args.inventory
    return playbook_line("reboot", inventory, hosts)


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
                answer = input(escape(f"abandon experiment {exp['id']} ({exp['status']}); hosts "
                                      "it changed stay changed. Type 'abandon' to confirm: "))
            except EOFError:
                answer = ""
            if answer.strip() != "abandon":
                print("not abandoned")
                return EXIT_USAGE
        ledger.log_event(exp["id"], "warning", f"abandoned by {_who()} (was {exp['status']}); "
                         "hosts it changed were not restored")
        ledger.finish(exp["id"], "failed")
    print(escape(f"experiment {exp['id']} abandoned (marked failed); 'exemplar-tune rollback "
                 f"--run {exp['id']}' still restores a host that comes back"))
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
    """One line per group of hosts with the same number of changes put back, then the hosts
    that failed or could not be reached, folded by reason (as ``apply`` prints them)."""
    restored: dict[int, list[str]] = {}
    for host, data in result["hosts"].items():
        if data["status"] != "failed":
            restored.setdefault(len(data["restored"]), []).append(host)
    total = len(result["hosts"]) + len(result["unreachable"])
    lines = [f"  {layer} {compress(hosts)} ({len(hosts)}/{total}): {count} change(s) put back"
             for count, hosts in sorted(restored.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    return lines + [f"  {layer}{line[1:]}" for line in problem_lines(result)]


def cmd_audit(args: argparse.Namespace) -> int:
    """``exemplar-tune audit``: the roles in check mode with diff; exit 1 on drift."""
    name, extravars = profile_vars(args.profile)
    if args.layer:
        extravars["exemplar_layers"] = args.layer
    result = run_playbook(runner(args, check=True), "audit", extravars)
    layers = args.layer or list(ROLE_LAYERS)
    for data in result["hosts"].values():
        data["audit"] = layer_verdicts(data, layers)
    target = Target(args.inventory, args.sysroot, args.profile)
    doc = {"schema_version": AUDIT_SCHEMA_VERSION, "profile": name, "made": made(name),
           "target": asdict(target), **result,
           "verdicts": {**{host: audit_verdict(data, target, host)
                           for host, data in result["hosts"].items()},
                        **{host: audit_verdict(None, target, host, f"{how}: {why}")
                           for how in ("failed", "unreachable")
                           for host, why in result[how].items()}},
           "drift": group_drift(result["hosts"]),
           "not_audited": group_not_audited(result["hosts"]),
           "not_applicable": group_not_applicable(result["hosts"])}
    if args.format == "prometheus":
        text = audit_text(doc, layers)
        if args.output:
            write_atomically(args.output, text)
        else:
            print(text, end="")
    else:
        _emit(args, doc, audit_lines(doc, args.diff, args.details), "audit")
    drift = bool(doc["drift"]) or result["failed"] or result["unreachable"]
    return EXIT_FINDINGS if drift else EXIT_OK


def _emit(args: argparse.Namespace, doc: dict[str, Any], lines: list[str],
          schema: str | None = None) -> None:
    """``doc`` as JSON, or ``lines`` as text, each escaped (a host's file, error or name
    shows what it holds and never starts a line)."""
    print(json.dumps(checked(doc, schema) if schema else doc, indent=2)
          if args.format == "json" else join_lines(lines))
