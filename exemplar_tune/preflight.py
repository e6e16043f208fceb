"""``exemplar-tune preflight``: facts -> checks, host by host, in layer order.

The result is one document (see ``schemas/preflight-result.schema.json``): per host the
check results, the hosts that could not be reached, and the fleet view that folds the hosts
with the same finding ("FAIL cpu.deep-cstates-disabled 112/128 gpu[001-112]").
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYER_NAMES

from exemplar_tune import __version__
from exemplar_tune.checks.base import FAIL, PASS, SEVERITIES, STATUSES, UNKNOWN, WARN
from exemplar_tune.checks.run import run_checks
from exemplar_tune.fleet.hostlist import compress
from exemplar_tune.reports.provenance import made
from exemplar_tune.verdict import Target, counts, host_verdict, result_actions, unreadable

Facts = dict[str, dict[str, Any]]


SCHEMA_VERSION = 2  # of schemas/preflight-result.schema.json; 2: class, actions, verdicts


def preflight_hosts(facts_by_host: dict[str, Facts],
                    profiles: dict[str, tuple[dict[str, Any], str]],
                    layers: list[str] | None, stop_at_first_failing_layer: bool,
                    unreachable: dict[str, str] | None = None,
                    target: Target | None = None) -> dict[str, Any]:
    """Run the checks on every host's facts and assemble the result document.

    ``profiles``: per host its profile and why it was chosen (``profile.host_profiles``);
    each host's result names both. ``target`` is how the printed commands reach the hosts
    again. ``verdicts`` holds every host's one verdict (:mod:`exemplar_tune.verdict`), the
    unreachable ones included: every channel reads it.
    """
    target = target or Target()
    hosts, verdicts, kinds = {}, {}, {}
    for host, facts in sorted(facts_by_host.items()):
        profile, why = profiles[host]
        results = []
        for found in run_checks(facts, profile, layers, stop_at_first_failing_layer):
            kinds[host, found.id] = found.action_kinds
            results.append(_with_actions(found.to_dict(), facts, host, target))
        unread = unreadable(facts)
        verdicts[host] = {**host_verdict(results, target, host, unread),
                          "counts": counts(results)}
        hosts[host] = {"status": "unknown" if unread else host_status(
                           results, verdicts[host]["class"]),
                       "profile": profile["name"], "profile_reason": why,
                       "unreadable": unread, "results": results}
    for host, why in sorted((unreachable or {}).items()):
        verdicts[host] = {**host_verdict([], target, host, f"unreachable: {why}"),
                          "counts": counts([])}
    names = sorted({h["profile"] for h in hosts.values()})
    profile = (names[0] if len(names) == 1 else "auto (" + ", ".join(names) + ")" if names
               else f"{target.profile or 'auto'} (no host answered)")
    return {
        "tool": "exemplar-tune", "version": __version__, "schema_version": SCHEMA_VERSION,
        "made": made(profile), "profile": profile,
        "target": asdict(target),
        "layers": layers or None, "hosts": hosts, "unreachable": dict(unreachable or {}),
        "verdicts": verdicts,
        "summary": counts(r for h in hosts.values() for r in h["results"]),
        "groups": group_by_check(hosts, target, kinds),
    }


def _with_actions(result: dict[str, Any], facts: Facts, host: str,
                  target: Target) -> dict[str, Any]:
    """A check result with its ``actions`` and ``pending_reboot`` for this host."""
    kinds = result.pop("action_kinds")
    pending = result["knob"] in ((facts.get(result["layer"]) or {}).get("pending_reboot") or ())
    result["pending_reboot"] = pending
    result["actions"] = result_actions(result, kinds, host, target, pending)
    return result


def host_status(results: list[dict[str, Any]], klass: str) -> str:
    """A host's worst status: fail, warn or pass, or ``unknown`` when it could not be
    judged and nothing failed or warned."""
    status = worst(r["status"] for r in results)
    return "unknown" if status == PASS and klass == UNKNOWN else status


def worst(statuses: Any) -> str:
    """The worst of the given statuses (``pass`` when there are none)."""
    seen = set(statuses)
    return next((s for s in STATUSES if s in seen and s in (FAIL, WARN)), "pass")


def group_by_check(hosts: dict[str, dict[str, Any]], target: Target | None = None,
                   kinds: dict[tuple[str, str], tuple[str, ...]] | None = None
                   ) -> list[dict[str, Any]]:
    """Failing and warning checks across hosts, one group per check and finding.

    Hosts whose result is the same (check, status, observed, expected, pending reboot) are
    folded into one group with their hostlist (``gpu[01-12]``) and the actions for all of
    them (``kinds``: each host's and check's action kinds); the groups are sorted failing
    first, then by the check's severity, then by host count (most first). A host that could
    not be read has no finding.
    """
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for host, data in hosts.items():
        for result in [] if data.get("unreadable") else data["results"]:
            if result["status"] in (FAIL, WARN):
                key = (result["id"], result["status"],
                       json.dumps([result["observed"], result["expected"],
                                   result["pending_reboot"]], sort_keys=True))
                group = groups.setdefault(key, {
                    **{k: result[k] for k in ("id", "layer", "status", "severity", "title",
                                              "detail", "observed", "expected", "fix", "risk",
                                              "evidence", "knob", "class", "pending_reboot")},
                    "hosts": []})
                group["hosts"].append(host)
    total = len(hosts)
    ordered = sorted(groups.values(), key=lambda g: (
        STATUSES.index(g["status"]), SEVERITIES.index(g["severity"]), -len(g["hosts"]),
        LAYER_NAMES.index(g["layer"]), g["id"]))
    return [dict(g, hosts=sorted(g["hosts"]), hostlist=compress(g["hosts"]),
                 count=len(g["hosts"]), total=total,
                 actions=result_actions(g, (kinds or {}).get((g["hosts"][0], g["id"]), ()),
                                        compress(g["hosts"]),
                                        target or Target(), g["pending_reboot"]))
            for g in ordered]


def exit_status(document: dict[str, Any]) -> int:
    """1 when any check failed or a host could not be judged (unreachable, unknown), else 0."""
    failed = any(h["status"] in (FAIL, "unknown") for h in document["hosts"].values())
    return 1 if failed or document["unreachable"] else 0
