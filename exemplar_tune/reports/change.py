"""What ``apply`` and ``audit`` print: knob changes across a fleet, hosts folded.

Hosts whose knob changes are the same (knob, path, before, after) share one group, named by
their hostlist (``gpu[001-112]``); groups come most hosts first, then in layer order. Each
change shows the lines that differ, never cut; ``diff`` gives full unified diffs instead, and
``details`` adds one sorted line per host.

An audit says, per host and layer, ``drift``, ``no drift`` or ``not audited`` (with the
reason: the layer failed, or the host failed before any layer answered); nothing says "no
drift" of a layer that was not audited.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYER_NAMES,
    registered_knobs,
)

from exemplar_tune.fleet.hostlist import compress, without_host
from exemplar_tune.profile import AUTO
from exemplar_tune.reports.preflight import fold_reasons

FILES_SHOWN = 4  # per group without --diff; the rest is counted
CHANGED_LINES_SHOWN = 4  # per file without --diff; the rest is counted


def group_drift(hosts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Knobs that drift, hosts with the same changes folded:
    ``{layer, knob, hosts, hostlist, count, total, changes}`` (a host's own name in its changes
    written ``{host}``)."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for host, data in sorted(hosts.items()):
        for knob in data["changed"]:
            changes = without_host(json.dumps(knob["changes"], sort_keys=True), host)
            key = (knob["layer"], knob["knob"], changes)
            groups.setdefault(key, {"layer": knob["layer"], "knob": knob["knob"], "hosts": [],
                                    "changes": json.loads(changes)})["hosts"].append(host)
    ordered = sorted(groups.values(),
                     key=lambda g: (-len(g["hosts"]), LAYER_NAMES.index(g["layer"])))
    return [{**g, "hostlist": compress(g["hosts"]), "count": len(g["hosts"]),
             "total": len(hosts)} for g in ordered]


def layer_verdicts(data: dict[str, Any], layers: list[str]) -> dict[str, dict[str, Any]]:
    """Per audited layer of one host: ``{status: drift | no drift | not audited, reason}``.

    A layer the layer module did not report (the host failed before any layer ran) is not
    audited, with the host's error as the reason.
    """
    drifting = {k["layer"] for k in data["changed"]}
    verdicts = {}
    for layer in layers:
        reported = (data.get("layers") or {}).get(layer)
        if reported is None or reported["status"] != "ok":
            reason = (reported or {}).get("error") or data.get("error") or "no result"
            verdicts[layer] = {"status": "not audited", "reason": reason}
        else:
            verdicts[layer] = {"status": "drift" if layer in drifting else "no drift",
                               "reason": None}
    return verdicts


def group_not_audited(hosts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Layers that could not be audited, hosts with the same layer and reason folded:
    ``{layer, reason, hosts, hostlist, count, total}``."""
    return _fold(hosts, ("layer", "reason"), lambda host, data: [
        (layer, without_host(verdict["reason"], host))
        for layer, verdict in data["audit"].items() if verdict["status"] == "not audited"])


def group_not_applicable(hosts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Knobs that do not apply, hosts with the same knob and reason folded:
    ``{layer, knob, reason, hosts, hostlist, count, total}``."""
    return _fold(hosts, ("layer", "knob", "reason"), lambda host, data: [
        (knob["layer"], knob["knob"], without_host(knob["reason"], host))
        for knob in data.get("not_applicable") or []])


def _fold(hosts: dict[str, dict[str, Any]], fields: tuple[str, ...],
          keys: Callable[[str, dict[str, Any]], list[tuple[str, ...]]]) -> list[dict[str, Any]]:
    """Hosts grouped by each key ``keys(host, data)`` gives (its first field a layer), most
    hosts first, then in layer order."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for host, data in sorted(hosts.items()):
        for key in keys(host, data):
            groups.setdefault(key, []).append(host)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), LAYER_NAMES.index(kv[0][0])))
    return [{**dict(zip(fields, key, strict=True)), "hosts": members,
             "hostlist": compress(members), "count": len(members), "total": len(hosts)}
            for key, members in ordered]


def audit_lines(doc: dict[str, Any], diff: bool, details: bool) -> list[str]:
    """The audit as text: the grouped drift, the layers that could not be audited and the
    knobs that do not apply (folded by reason), per-host lines with ``details``, then the
    hosts that could not be reached."""
    drifting = {h for g in doc["drift"] for h in g["hosts"]}
    partial = {h for g in doc["not_audited"] for h in g["hosts"]}
    head = (f"audit against profile {doc['profile']}: {len(doc['hosts'])} host(s) answered, "
            f"{len(drifting)} drift")
    head += f", {len(partial)} not audited in full" if partial else ""
    lines = [head + (f", {len(doc['unreachable'])} unreachable" if doc["unreachable"] else "")]
    for group in doc["drift"]:
        lines.append(f"  DRIFT  {group['layer']}/{group['knob']}  "
                     f"{group['count']}/{group['total']} hosts  {group['hostlist']}")
        shown = group["changes"] if diff else group["changes"][:FILES_SHOWN]
        lines += [line for change in shown for line in change_lines(change, diff)]
        if len(shown) < len(group["changes"]):
            lines.append(f"        ({len(group['changes']) - len(shown)} more files: "
                         "--diff shows them all)")
    for group in doc["not_audited"]:
        lines.append(f"  NOT AUDITED  {group['layer']}  {group['count']}/{group['total']} "
                     f"hosts  {group['hostlist']}: {group['reason']}")
    for group in doc["not_applicable"]:
        lines.append(f"  N/A    {group['layer']}/{group['knob']}  {group['count']}/"
                     f"{group['total']} hosts  {group['hostlist']}: {group['reason']}")
    if not doc["drift"] and doc["hosts"] and len(partial) < len(doc["hosts"]):
        lines.append("  no drift" + (" in the layers audited" if partial else ""))
    if details:
        lines += [f"  {host}: {_host_summary(data)}"
                  for host, data in sorted(doc["hosts"].items())]
    return lines + problem_lines({"unreachable": doc["unreachable"]})


def _host_summary(data: dict[str, Any]) -> str:
    drift = ", ".join(f"{k['layer']}/{k['knob']}" for k in data["changed"])
    missing = [layer for layer, v in data["audit"].items() if v["status"] == "not audited"]
    if not missing:
        return drift or "no drift"
    return (drift or "no drift in the layers audited") + f"; not audited: {', '.join(missing)}"


def apply_lines(doc: dict[str, Any], diff: bool) -> list[str]:
    """``apply`` as text: one line per group of hosts with the same changes (a host's own
    name in them written ``{host}``)."""
    verb = "would change" if doc["check"] else "changed"
    head = f"apply {doc['layer']} (profile {profile_text(doc)})"
    lines = [head + ("" if doc["check"] else f", experiment {doc['experiment']}")]
    folded: dict[str, list[str]] = {}
    ok = {h: d for h, d in doc["hosts"].items() if d["status"] != "failed"}
    for host, data in sorted(ok.items()):
        key = without_host(json.dumps(data["changed"], sort_keys=True), host)
        folded.setdefault(key, []).append(host)
    for key, hosts in sorted(folded.items(), key=lambda kv: (-len(kv[1]), kv[1])):
        knobs = json.loads(key)
        names = ", ".join(dict.fromkeys(k["knob"] for k in knobs)) or "nothing"
        reboot = "; REBOOT REQUIRED to take effect" if any(
            k["reboot_required"] for k in knobs) else ""
        lines.append(f"  {compress(hosts)} ({len(hosts)}/{len(doc['hosts'])}): "
                     f"{verb} {names}{reboot}")
        if diff:
            lines += [line for k in knobs for c in k["changes"] for line in change_lines(c, True)]
    failed = {h: d["error"] for h, d in doc["hosts"].items() if d["status"] == "failed"}
    lines += problem_lines({"failed": failed, "unreachable": doc["unreachable"]})
    if doc.get("undo"):
        lines.append(f"undo with: {doc['undo']}")
    return lines


def profile_text(doc: dict[str, Any]) -> str:
    """The profile asked for, and with ``auto`` the profiles the hosts chose:
    ``auto (gb200-grace)``, ``auto (no host answered)``; never an empty list."""
    if doc["profile"] != AUTO:
        return doc["profile"]
    chosen = sorted({d["profile"] for d in doc["hosts"].values() if d.get("profile")})
    if chosen:
        return f"auto ({', '.join(chosen)})"
    return "auto (no host answered)" if not doc["hosts"] else "auto (no host chose one)"


def boot_time(knob: dict[str, Any]) -> bool:
    """Whether a knob change (``{layer, knob, reboot_required}``, as recorded) takes effect
    only at the next boot: reported so, or a knob registered with ``reboot``."""
    registered = registered_knobs().get(f"{knob.get('layer')}.{knob.get('knob')}")
    return bool(knob.get("reboot_required") or (registered and registered.reboot))


def problem_lines(doc: dict[str, Any]) -> list[str]:
    """Failed and unreachable hosts, folded by reason."""
    return [f"  {compress(hosts)}: {what}: {reason}"
            for what, key in (("FAILED", "failed"), ("UNREACHABLE", "unreachable"))
            for reason, hosts in fold_reasons(doc.get(key) or {}).items()]


def change_lines(change: dict[str, str], full: bool) -> list[str]:
    """One file's change: ``path: before -> after`` for one-line values, else the lines that
    differ (all of them, with context, as a unified diff when ``full``)."""
    before, after = change["before"], change["after"]
    if not full and "\n" not in before.strip() and "\n" not in after.strip():
        return [f"        {change['path']}: {before.strip()!r} -> {after.strip()!r}"]
    diff = list(difflib.unified_diff(
        before.splitlines(), after.splitlines(), f"{change['path']} (before)",
        f"{change['path']} (after)", lineterm="", n=3 if full else 0))
    if full:
        return [f"        {line}" for line in diff]
    changed = [line for line in diff[2:] if line[:1] in "-+"]
    more = len(changed) - CHANGED_LINES_SHOWN
    shown = [f"          {line}" for line in changed[:CHANGED_LINES_SHOWN]]
    rest = [f"          ({more} more changed lines: --diff shows them all)"] if more > 0 else []
    return [f"        {change['path']}:", *shown, *rest]
