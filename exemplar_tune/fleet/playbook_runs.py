"""Running the collection's playbooks on a target, and what every command that changes hosts
shares: the target's inventory, the hold on its hosts, the ledger record of an experiment, and
the results folded per host and knob.

The command modules (``commands.change``, ``commands.experiments``, ``commands.sweep``) and
the orchestration use these; nothing here parses command lines.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from exemplar_tune.errors import UserError
from exemplar_tune.fleet import host_claims
from exemplar_tune.fleet.ansible_run import AnsibleRun, RunOutcome, local_inventory
from exemplar_tune.fleet.collection import collection_root
from exemplar_tune.fleet.inventory import check_source, host_identities
from exemplar_tune.fleet.lock import hold_hosts
from exemplar_tune.ledger import Ledger, next_steps
from exemplar_tune.runs import state_dir
from exemplar_tune.signals import Interrupted, StoppedAtOnce
from exemplar_tune.terminal import escape


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


@contextlib.contextmanager
def claim_hosts(run: AnsibleRun, command: str, single_run: bool = False) -> Iterator[None]:
    """Hold ``run``'s hosts for a command that changes them, for the ``with`` block.

    First on this controller (:mod:`lock`: a missing inventory, a ``--limit`` that matches
    nothing, or hosts another controller here holds are a ``UserError`` before any host is
    reached), then on each host itself (:mod:`host_claims`): a command made of one change
    run (``single_run``) has that run take and give back the claim; the others take it here
    first (a host another controller holds is a ``UserError``, naming it, and nothing is
    changed) and give it back when the block ends.
    """
    with hold_hosts(state_dir(), host_identities(run).values(), command), \
            host_claims.under(host_claims.Claim(command, single_run)):
        if single_run:
            yield
            return
        _take_claims(run)
        try:
            yield
        except StoppedAtOnce:  # a second signal: nothing more runs; the claim goes stale
            raise
        except BaseException:
            with contextlib.suppress(Exception):
                _give_back_claims(run)
            raise
        _give_back_claims(run)


def _take_claims(run: AnsibleRun) -> None:
    """Claim every host of ``run`` (unreachable ones are left to the command's own runs);
    ``UserError`` if any cannot be claimed, after the claims taken are given back."""
    result = run_playbook(run, "claim", {})
    if result["failed"]:
        taken = sorted(result["hosts"].keys() - result["failed"].keys())
        if taken:
            with contextlib.suppress(Exception):
                _give_back_claims(run.limited(",".join(taken)))
        host, why = sorted(result["failed"].items())[0]
        more = len(result["failed"]) - 1
        raise UserError(f"{host}: {why}" + (f" (and {more} more host(s))" if more else ""))


def _give_back_claims(run: AnsibleRun) -> None:
    """Give back this controller's claim on ``run``'s hosts; a host that cannot be reached
    keeps it until the next claim from this machine finds it stale."""
    result = run_playbook(run, "claim", {"exemplar_claim_state": "absent"})
    for host, why in sorted({**result["failed"], **result["unreachable"]}.items()):
        print(f"warning: {escape(host)}: the claim was not given back ({escape(why)}); the "
              "next exemplar-tune from this machine takes it over", file=sys.stderr)


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
        exc.note = next_steps(ledger.show(experiment)["experiment"])
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


def knob_results(outcome: RunOutcome) -> dict[str, dict[str, Any]]:
    """Per host: status, the knobs that changed (or would), the knobs that do not apply
    there (with the reason), each layer's status as the layer module reported it
    (``{layer: {status, error}}``; empty when no layer module answered), the profile the
    layer module planned with, the host claim a module reported (``claimed_by``: the other
    controller that holds the host, or the claim a check-mode ``claim`` run read), reboot
    flag (a changed knob's, or a module's own: ``restore`` staging BIOS values or putting
    back boot-time knobs, ``pending_reboot``), messages."""
    hosts: dict[str, dict[str, Any]] = {}
    for host, result in outcome.hosts.items():
        results = _module_results(result.tasks)
        knobs = [{"layer": res["layer"], "knob": res["knob"], "changes": res.get("changes", []),
                  "reboot_required": bool(res.get("reboot_required"))}
                 for res in results if "knob" in res and res.get("changed")]
        hosts[host] = {
            "status": result.status, "error": result.message or None,
            "changed": knobs, "reboot_required": any(k["reboot_required"] for k in knobs)
            or any(r.get("reboot_required") is True or bool(r.get("pending_reboot"))
                   for r in results if "knob" not in r),
            "not_applicable": [{"layer": res["layer"], "knob": res["knob"],
                                "reason": res["not_applicable"]}
                               for res in results if "knob" in res and res.get("not_applicable")],
            "layers": {entry["layer"]: {"status": entry.get("status", "ok"),
                                        "error": entry.get("error")}
                       for task in result.tasks for entry in task["result"].get("layers") or []
                       if isinstance(entry, dict) and "layer" in entry},
            "restored": [s for r in results for s in r.get("restored", [])],
            "profile": next((task["result"]["profile"] for task in result.tasks
                             if isinstance(task["result"].get("profile"), str)), None),
            "claimed_by": next((task["result"]["claimed_by"] for task in result.tasks
                                if isinstance(task["result"].get("claimed_by"), dict)), None),
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
    """Run a collection playbook and return ``{hosts, unreachable, failed}``.

    A change run carries the current host claim (:func:`host_claims.claim_vars`); hosts that
    failed on a stale claim of this machine are run again with that claim replaced.
    """
    outcome = run.playbook(playbook(name), {**extravars, **host_claims.claim_vars(run.check)})
    hosts = knob_results(outcome)
    stale = host_claims.stale_tokens(hosts)
    if stale:
        hosts.update(knob_results(run.limited(",".join(sorted(stale))).playbook(
            playbook(name), {**extravars, **host_claims.claim_vars(run.check)})))
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


def runner(args: argparse.Namespace, check: bool = False) -> AnsibleRun:
    """The Ansible run a command's target options (inventory, sysroot, limit, forks,
    timeout) describe, with diffs."""
    return AnsibleRun(target_inventory(args.inventory, args.sysroot), limit=args.limit,
                      forks=args.forks, timeout=args.timeout, check=check, diff=True)


def ledger_target(args: argparse.Namespace) -> dict[str, Any]:
    """What reaches the same hosts again from any directory (kept in the ledger for restore
    and resume): inventory files and sysroots as absolute paths (a host list as it is)."""
    def absolute(path: str | None) -> str | None:
        return os.path.abspath(path) if path and os.path.exists(path) else path

    return {"inventory": absolute(args.inventory), "limit": args.limit,
            "sysroot": absolute(args.sysroot)}


def changed_hosts(doc: dict[str, Any], layer: str) -> list[str]:
    """Hosts the ledger saw change ``layer`` in the experiment ``doc`` (they have a journal)."""
    return sorted({h["host"] for h in doc["hosts"] if h["layer"] == layer and h["changed"]})
