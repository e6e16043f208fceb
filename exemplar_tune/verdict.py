"""The one verdict: what a check result, and a host, mean to the operator who acts on them.

Every channel (terminal text, JSON, HTML, Prometheus and its alerts, node-problem-detector,
the Slurm prolog, ``offenders``, printed hints) is a view of these functions and never judges
on its own.

A check result gets a ``class``:

* ``health``: the check judges the node's fitness (the node is broken or degrading);
* ``tuning``: it judges a preference of the profile (the node works, slower);
* ``not_applicable``: it cannot apply here (hardware absent, profile silent), with the reason;
* ``unknown``: it applies but could not be judged (a fact unreadable), with the true reason;

``actions``, an ordered list of ``{kind, command?, detail?}`` with ``kind`` from
:data:`ACTION_KINDS`, and ``pending_reboot`` (a change applied or restored on this boot that
takes effect at the next one; its first action is then ``reboot``).

A host gets one of :data:`HOST_CLASSES` by precedence: ``unknown`` when it could not be read at
all (unreachable, an empty or unreadable tree, most facts failed); else ``health`` when a
health check fails or warns; else ``unknown`` when any check could not be judged (unknown is
never OK); else ``tuning`` when a preference is not met or a change waits for a reboot; else
``not_applicable`` when no check applies; else ``ok``. Its actions are those of its worst
result.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import get_layer

from exemplar_tune.checks.base import (
    ACTION_KINDS,
    FAIL,
    HEALTH,
    NOT_APPLICABLE,
    SEVERITIES,
    SKIP,
    TUNING,
    UNKNOWN,
    WARN,
)
from exemplar_tune.fleet.collection import playbook_line

OK = "ok"
HOST_CLASSES = (HEALTH, UNKNOWN, TUNING, NOT_APPLICABLE, OK)  # precedence, worst first
# The kernel's own files that every Linux host has: neither readable, the tree is no host.
IDENTITY_FACTS = (("vm", "arch"), ("vm", "kernel_release"))


@dataclass(frozen=True)
class Target:
    """How a printed command reaches the host again: the inventory or sysroot the run was
    given and the profile asked for (``None`` or ``auto``: each host's own choice)."""

    inventory: str | None = None
    sysroot: str | None = None
    profile: str | None = None

    def __post_init__(self) -> None:
        # a file or directory given relative to where the run was made is named absolutely,
        # so that the command runs from anywhere (an alert, a timer's journal, another shell)
        for name in ("inventory", "sysroot", "profile"):
            value = getattr(self, name)
            if value and os.path.exists(value):
                object.__setattr__(self, name, os.path.abspath(value))

    def hosts(self, host: str) -> list[str]:
        """The options that select ``host`` (none for this host or a sysroot)."""
        if self.sysroot:
            return ["--sysroot", self.sysroot]
        if self.inventory:
            return ["-i", self.inventory, "--limit", host]
        return []

    def command(self, verb: list[str], host: str) -> str:
        """``exemplar-tune VERB ...`` for ``host``, quoted for a POSIX shell; ``""`` for a
        change to a captured archive (changes need a directory)."""
        if verb[0] == "apply" and self.sysroot and not os.path.isdir(self.sysroot):
            return ""
        profile = ["--profile", self.profile] if (
            self.profile not in (None, "auto") and verb[0] != "facts") else []
        return shlex.join(["exemplar-tune", *verb, *self.hosts(host), *profile])

    def reboot_command(self, host: str) -> str:
        """What reboots ``host``: the collection's reboot playbook through the inventory (it
        also boots simulated hosts), ``systemctl reboot`` on this host."""
        if self.inventory:
            return playbook_line("reboot", self.inventory, [host])
        if self.sysroot:
            return ""  # a captured tree is not booted
        return "systemctl reboot"


def action(kind: str, command: str = "", detail: str = "") -> dict[str, str]:
    """One action as JSON: ``{kind, command?, detail?}`` (empty parts left out)."""
    if kind not in ACTION_KINDS:
        raise ValueError(f"action kind {kind!r} is not one of {', '.join(ACTION_KINDS)}")
    return {"kind": kind, **({"command": command} if command else {}),
            **({"detail": detail} if detail else {})}


def result_actions(result: Mapping[str, Any], kinds: Iterable[str], host: str,
                   target: Target, pending: bool) -> list[dict[str, str]]:
    """The ordered actions of one result (a :class:`~exemplar_tune.checks.run.CheckResult`
    as a dict, its ``class`` set): ``none`` when nothing is to be done."""
    if pending:
        return [action("reboot", target.reboot_command(host),
                       f"{result['knob'] or result['layer']} was changed on this boot and takes "
                       "effect at the next")]
    if result["class"] == UNKNOWN:
        return [action("investigate", target.command(["facts", "--layer", result["layer"]],
                                                     host), result["detail"])]
    if result["class"] == NOT_APPLICABLE or result["status"] not in (FAIL, WARN):
        return [action("none")]
    out = []
    for kind in kinds:
        if kind == "apply" and result["knob"]:
            out.append(action("apply", target.command(["apply", "--layer", result["layer"]],
                                                      host), f"knob {result['knob']}"))
        elif kind == "reboot":
            out.append(action("reboot", target.reboot_command(host), result["fix"]))
        elif kind != "apply":
            out.append(action(kind, detail=result["fix"]))
    return out or [action("investigate", detail=result["fix"])]


def unreadable(facts: Mapping[str, Mapping[str, Any]]) -> str:
    """Why a host's facts cannot be judged at all (``""`` when they can): the kernel's own
    identity files unreadable (an empty or foreign tree), or most facts failed."""
    errors = {(layer, e.get("fact")): e for layer, data in facts.items()
              for e in (data or {}).get("errors") or []}
    if all(key in errors for key in IDENTITY_FACTS):
        first = errors[IDENTITY_FACTS[0]]
        return (f"not a readable host: {first.get('path')}: {first.get('error')} "
                f"({len(errors)} facts unreadable)")
    attempted = sum(len([k for k in (data or {}) if k not in ("sources", "errors")])
                    for data in facts.values())
    if attempted and len(errors) * 2 > attempted:
        return f"most facts unreadable ({len(errors)} of {attempted})"
    return ""


def host_verdict(results: list[Mapping[str, Any]], target: Target, host: str,
                 unreadable_reason: str = "") -> dict[str, Any]:
    """``{class, actions, pending_reboot, reason}`` of a host from its results (each with
    ``class``, ``actions`` and ``pending_reboot``); ``unreadable_reason`` makes it unknown."""
    if unreadable_reason:
        return {"class": UNKNOWN, "pending_reboot": False, "reason": unreadable_reason,
                "actions": [action("investigate", target.command(["facts"], host),
                                   unreadable_reason)]}
    pending = [r for r in results if r.get("pending_reboot")]
    worst = _worst(results)
    klass = worst["class"] if worst is not None else (
        TUNING if pending else NOT_APPLICABLE if results and all(
            r["class"] == NOT_APPLICABLE for r in results) else OK)
    if worst is None and pending:
        worst = pending[0]
    if klass == TUNING and pending and worst is not None and not worst.get("pending_reboot"):
        worst = pending[0]  # a reboot first: what is applied and pending must boot to count
    return {"class": klass, "pending_reboot": bool(pending),
            "reason": _reason(worst) if worst is not None else "",
            "actions": list(worst["actions"]) if worst is not None else [action("none")]}


def _worst(results: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The result that decides the host: a failing or warning health result, then an unknown
    one, then a tuning one (failing before warning, then by severity)."""
    def rank(r: Mapping[str, Any]) -> tuple[int, int, int]:
        return (HOST_CLASSES.index(r["class"]), 0 if r["status"] == FAIL else 1,
                SEVERITIES.index(r["severity"]))
    found = [r for r in results if r["class"] == UNKNOWN or
             (r["class"] in (HEALTH, TUNING) and r["status"] in (FAIL, WARN))]
    return min(found, key=rank) if found else None


def _reason(result: Mapping[str, Any]) -> str:
    return f"{result['id']}: {result['detail']}"


def audit_verdict(data: Mapping[str, Any] | None, target: Target, host: str,
                  failure: str = "") -> dict[str, Any]:
    """The verdict of one host's audit (its ``audit`` per layer and its knobs): unknown where
    it failed, could not be reached (``failure``) or a layer could not be audited; tuning
    where a knob drifted (apply the first drifting layer); not applicable where no knob
    applies; else ok."""
    if failure or data is None:
        why = failure or "no result"
        return {"class": UNKNOWN, "pending_reboot": False, "reason": why,
                "actions": [action("investigate", target.command(["facts"], host), why)]}
    layers = data["audit"]
    blind = [(layer, v["reason"]) for layer, v in layers.items() if v["status"] == "not audited"]
    drift = [layer for layer, v in layers.items() if v["status"] == "drift"]
    if blind:
        layer, why = blind[0]
        return {"class": UNKNOWN, "pending_reboot": False, "reason": f"{layer}: {why}",
                "actions": [action("investigate", target.command(["audit", "--details",
                                                                  "--layer", layer], host),
                                   why)]}
    if drift:
        knobs = [f"{k['layer']}.{k['knob']}" for k in data.get("changed") or []]
        return {"class": TUNING, "pending_reboot": False,
                "reason": f"tuning drift: {', '.join(knobs)}",
                "actions": [action("apply", target.command(["apply", "--layer", layer], host),
                                   f"brings the {layer} layer back to the profile")
                            for layer in drift]}
    knobs = sum(len(get_layer(layer).knobs) for layer in layers)
    applies = len(data.get("not_applicable") or []) < knobs
    return {"class": OK if applies else NOT_APPLICABLE, "pending_reboot": False, "reason": "",
            "actions": [action("none")]}


def slow_verdict(host: Mapping[str, Any] | None, target: Target, name: str,
                 lost: str = "") -> dict[str, Any]:
    """The verdict of one host of ``slow-nodes``: ``health`` for a host slower than the fleet
    beyond its noise, or one that turned slow among its runs (degrading; investigate the facts
    where it differs, starting with its preflight), ``unknown`` for one with no result
    (``lost``: why), else ``ok``."""
    if host is None:
        return {"class": UNKNOWN, "pending_reboot": False, "reason": lost,
                "actions": [action("investigate", target.command(["facts"], name), lost)]}
    turned = host.get("turned_slow")
    if not host["slow"] and not turned:
        return {"class": OK, "pending_reboot": False, "reason": "", "actions": [action("none")]}
    why = "; ".join(part for part in (
        host["slow"] and f"{host['slowdown']:.1%} slower than the fleet",
        turned and (f"turned {turned['slowdown']:.1%} slower from run {turned['run']}"),
        host["differs"] and f"differs: {'; '.join(host['differs'])}") if part)
    return {"class": HEALTH, "pending_reboot": False, "reason": why,
            "actions": [action("investigate", target.command(["preflight"], name), why)]}


def counts(results: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``{pass, warn, fail, n/a, unknown}`` over results: what every headline counts."""
    found = dict.fromkeys(("fail", "warn", "pass", "n/a", "unknown"), 0)
    for r in results:
        key = r["status"] if r["status"] != SKIP else (
            "unknown" if r["class"] == UNKNOWN else "n/a")
        found[key] += 1
    return found
