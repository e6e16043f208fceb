"""``apply``, ``restore`` and ``audit``: the layer module run through Ansible, results per knob.

Every knob module reports ``layer``, ``knob``, ``changes`` (path, before, after) and
``reboot_required``; these functions run the playbooks and fold those results into one
document per command, with the hosts that failed or could not be reached kept apart.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import ROLE_LAYERS

from exemplar_tune import reaper
from exemplar_tune.ansible_run import AnsibleRun, RunOutcome, local_inventory
from exemplar_tune.change_report import apply_lines, audit_lines, group_drift
from exemplar_tune.collection import collection_root
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, UserError
from exemplar_tune.inventory import check_source, host_identities
from exemplar_tune.ledger import Ledger
from exemplar_tune.lock import hold_hosts
from exemplar_tune.profile import profile_vars
from exemplar_tune.prometheus import audit_text, write_atomically
from exemplar_tune.runs import state_dir
from exemplar_tune.signals import Interrupted, StoppedAtOnce, graceful_stop
from exemplar_tune.slurm.jobs import cancel_jobs, submitted_jobs


def target_inventory(inventory: str | None, sysroot: str | None) -> str | dict:
    """A user's inventory, a one-host inventory that works inside ``sysroot``, or this host."""
    if sysroot is None:
        if inventory:
            check_source(inventory)
        return inventory or local_inventory()
    if not os.path.isdir(sysroot):
        raise UserError(f"sysroot {sysroot}: changes need a directory (unpack an archive first)")
    name = os.path.basename(os.path.normpath(sysroot))
    return local_inventory([name], {name: {"exemplar_sysroot": os.path.abspath(sysroot),
                                           "ansible_python_interpreter": sys.executable}})


def playbook(name: str) -> str:
    """Path of one of the collection's playbooks."""
    return str(collection_root() / "playbooks" / f"{name}.yml")


def claim_hosts(run: AnsibleRun, command: str) -> contextlib.AbstractContextManager[None]:
    """Hold ``run``'s hosts (resolved now: a missing inventory, or a ``--limit`` that matches
    nothing, is a ``UserError`` here) for a command that changes them; see :mod:`lock`."""
    return hold_hosts(state_dir(), host_identities(run).values(), command)


@contextlib.contextmanager
def recorded(ledger: Ledger, experiment: str) -> Iterator[None]:
    """Close ``experiment`` in the ledger when the block is cut short: ``interrupted`` after
    a clean stop, ``failed`` (with the reason) after an error; a second signal
    (:class:`StoppedAtOnce`) leaves it running, to be resumed or rolled back."""
    try:
        yield
    except StoppedAtOnce as exc:
        ledger.log_event(experiment, "error", f"stopped at once by a second {exc}: hosts left "
                         "as they were")
        raise
    except Interrupted as exc:
        ledger.log_event(experiment, "warning", f"interrupted by {exc}")
        ledger.finish(experiment, "interrupted")
        exc.note = "; ".join(filter(None, [exc.note, f"'exemplar-tune rollback --run "
                                           f"{experiment}' puts back what it changed"]))
        raise
    except BaseException as exc:
        ledger.log_event(experiment, "error", f"{type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:300]}")
        ledger.finish(experiment, "failed")
        raise


def end_leftovers(ledger: Ledger, experiment: str) -> None:
    """End what an earlier controller of ``experiment`` left running before this one touches
    the hosts: its supervised Ansible and benchmark processes, and its Slurm jobs."""
    for proc in reaper.tagged_processes(experiment):
        reaper.end_tree(proc)
    cancelled = cancel_jobs(submitted_jobs(ledger.show(experiment)["events"]))
    if cancelled:
        ledger.log_event(experiment, "warning", f"cancelled Slurm job(s) {', '.join(cancelled)} "
                         "left by an earlier controller")
        print(f"cancelled Slurm job(s) {', '.join(cancelled)} of experiment {experiment}",
              file=sys.stderr)


def knob_results(outcome: RunOutcome) -> dict[str, dict[str, Any]]:
    """Per host: status, the knobs that changed (or would), reboot flag, messages."""
    hosts: dict[str, dict[str, Any]] = {}
    for host, result in outcome.hosts.items():
        knobs = []
        for res in _module_results(result.tasks):
            if "knob" in res and res.get("changed"):
                knobs.append({"layer": res["layer"], "knob": res["knob"],
                              "changes": res.get("changes", []),
                              "reboot_required": bool(res.get("reboot_required"))})
        hosts[host] = {
            "status": result.status, "error": result.message or None,
            "changed": knobs, "reboot_required": any(k["reboot_required"] for k in knobs),
            "restored": [s for r in _module_results(result.tasks) for s in r.get("restored", [])],
        }
    return hosts


def _module_results(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each module result, with the items of loop tasks and the knobs of a layer module
    result (``exemplar.tune.layer``) taken one by one."""
    found = []
    for task in tasks:
        res = task["result"]
        found += res["results"] if isinstance(res.get("results"), list) else [res]
    found = [r for r in found if isinstance(r, dict)]
    return [k for r in found for k in (r["knobs"] if isinstance(r.get("knobs"), list) else [r])
            if isinstance(k, dict)]


def run_playbook(run: AnsibleRun, name: str, extravars: dict[str, Any]) -> dict[str, Any]:
    """Run a collection playbook and return ``{hosts, unreachable, failed}``."""
    outcome = run.playbook(playbook(name), extravars)
    hosts = knob_results(outcome)
    unreachable = {h: d["error"] for h, d in hosts.items() if d["status"] == "unreachable"}
    failed = {h: d["error"] for h, d in hosts.items() if d["status"] == "failed"}
    if not hosts:
        raise UserError(f"no host matched (ansible-runner status {outcome.status})")
    return {"hosts": {h: d for h, d in hosts.items() if h not in unreachable},
            "unreachable": unreachable, "failed": failed}


def host_records(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per host of a :func:`run_playbook` result what the ledger keeps: status, changes,
    error (unreachable hosts included, with no changes)."""
    records = {h: {"status": d["status"], "changed": d["changed"], "error": d["error"]}
               for h, d in result["hosts"].items()}
    records.update({h: {"status": "unreachable", "changed": [], "error": why}
                    for h, why in result["unreachable"].items()})
    return records


def _runner(args: argparse.Namespace, check: bool = False) -> AnsibleRun:
    return AnsibleRun(target_inventory(args.inventory, args.sysroot), limit=args.limit,
                      forks=args.forks, timeout=args.timeout, check=check, diff=True)


def cmd_apply(args: argparse.Namespace) -> int:
    """``exemplar-tune apply``: one layer, fleet-wide, journaled; recorded in the ledger."""
    name, targets = profile_vars(args.profile)
    if args.check:
        result = run_playbook(_runner(args, check=True), "apply", {
            "layer": args.layer, **targets})
        return _report_apply(args, None, None, name, result)
    run = _runner(args)
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


def ledger_target(args: argparse.Namespace) -> dict[str, Any]:
    """What reaches the same hosts again from any directory (kept in the ledger for restore
    and resume): inventory files and sysroots as absolute paths (a host list as it is)."""
    def absolute(path: str | None) -> str | None:
        return os.path.abspath(path) if path and os.path.exists(path) else path

    return {"inventory": absolute(args.inventory), "limit": args.limit,
            "sysroot": absolute(args.sysroot)}


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
        run = _runner(args)
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


def changed_hosts(doc: dict[str, Any], layer: str) -> list[str]:
    """Hosts the ledger saw change ``layer`` in the experiment ``doc`` (they have a journal)."""
    return sorted({h["host"] for h in doc["hosts"] if h["layer"] == layer and h["changed"]})


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
    result = run_playbook(_runner(args, check=True), "audit", extravars)
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
