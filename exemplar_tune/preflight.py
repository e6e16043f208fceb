"""``exemplar-tune preflight``: facts -> checks, host by host, in layer order.

The result is one document (see ``schemas/preflight-result.schema.json``): per host the
check results, the hosts that could not be reached, and the fleet view that folds the hosts
with the same finding ("FAIL cpu.deep-cstates-disabled 112/128 gpu[001-112]").
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYER_NAMES

from exemplar_tune import __version__
from exemplar_tune.checks.base import FAIL, SEVERITIES, STATUSES, WARN
from exemplar_tune.checks.run import run_checks
from exemplar_tune.fleet.hostlist import compress
from exemplar_tune.reports.provenance import made

Facts = dict[str, dict[str, Any]]


def preflight_hosts(facts_by_host: dict[str, Facts],
                    profiles: dict[str, tuple[dict[str, Any], str]],
                    layers: list[str] | None, stop_at_first_failing_layer: bool,
                    unreachable: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the checks on every host's facts and assemble the result document.

    ``profiles``: per host its profile and why it was chosen (``profile.host_profiles``);
    each host's result names both.
    """
    hosts = {}
    for host, facts in sorted(facts_by_host.items()):
        profile, why = profiles[host]
        results = run_checks(facts, profile, layers, stop_at_first_failing_layer)
        hosts[host] = {"status": worst(r.status for r in results), "profile": profile["name"],
                       "profile_reason": why, "results": [r.to_dict() for r in results]}
    names = sorted({h["profile"] for h in hosts.values()})
    profile = names[0] if len(names) == 1 else "auto (" + ", ".join(names) + ")"
    return {
        "tool": "exemplar-tune", "version": __version__, "made": made(profile),
        "profile": profile,
        "layers": layers or None, "hosts": hosts, "unreachable": dict(unreachable or {}),
        "summary": dict(Counter(r["status"] for h in hosts.values() for r in h["results"])),
        "groups": group_by_check(hosts),
    }


def worst(statuses: Any) -> str:
    """The worst of the given statuses (``pass`` when there are none)."""
    seen = set(statuses)
    return next((s for s in STATUSES if s in seen and s in (FAIL, WARN)), "pass")


def group_by_check(hosts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Failing and warning checks across hosts, one group per check and finding.

    Hosts whose result is the same (check, status, observed, expected) are folded into one
    group with their hostlist (``gpu[01-12]``); the groups are sorted failing first, then by
    the check's severity, then by host count (most first).
    """
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for host, data in hosts.items():
        for result in data["results"]:
            if result["status"] in (FAIL, WARN):
                key = (result["id"], result["status"],
                       json.dumps([result["observed"], result["expected"]], sort_keys=True))
                group = groups.setdefault(key, {
                    **{k: result[k] for k in ("id", "layer", "status", "severity", "title",
                                              "detail", "observed", "expected", "fix", "risk",
                                              "evidence", "knob")},
                    "hosts": []})
                group["hosts"].append(host)
    total = len(hosts)
    ordered = sorted(groups.values(), key=lambda g: (
        STATUSES.index(g["status"]), SEVERITIES.index(g["severity"]), -len(g["hosts"]),
        LAYER_NAMES.index(g["layer"]), g["id"]))
    return [dict(g, hosts=sorted(g["hosts"]), hostlist=compress(g["hosts"]),
                 count=len(g["hosts"]), total=total) for g in ordered]


def exit_status(document: dict[str, Any]) -> int:
    """1 when any check failed or a host was unreachable, else 0."""
    failed = any(h["status"] == FAIL for h in document["hosts"].values())
    return 1 if failed or document["unreachable"] else 0
