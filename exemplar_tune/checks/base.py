"""What a check is, what it returns, and the one registry that lists them.

A check is a pure function over one host's facts (all layers) and the profile; it does no
I/O. It is declared with :func:`check`, which records its id, layer, severity, the risk it
guards against, the fix and whether it judges the node's health (a failure makes the node
unfit for jobs) or a tuning preference (the node works, slower), and registers it. Checks
run in layer order (the layer registry) and, within a layer, in the order their modules
define them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYER_NAMES,
    registered_knobs,
)

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
STATUSES = (FAIL, WARN, PASS, SKIP)  # worst first
SEVERITIES = ("high", "medium", "low")
# What a result means to the operator (``verdict``): a health check judges whether the node is
# broken or degrading, a tuning check a preference of the profile; a skipped check either does
# not apply here (hardware absent, profile silent) or could not be judged (a fact unreadable).
HEALTH, TUNING, NOT_APPLICABLE, UNKNOWN = "health", "tuning", "not_applicable", "unknown"
CLASSES = (HEALTH, TUNING, NOT_APPLICABLE, UNKNOWN)
# What the operator does about a result, in order (``verdict.result_actions`` adds commands).
ACTION_KINDS = ("none", "apply", "reboot", "reset_gpu", "restart_service", "drain", "replace",
                "investigate")

Facts = dict[str, dict[str, Any]]
Profile = dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    """What a check function returns for one host; ``fix``, when set, replaces the check's
    general fix with one that names what this host needs."""

    status: str
    observed: Any = None
    expected: Any = None
    detail: str = ""
    evidence: tuple[str, ...] = ()
    fix: str | None = None
    unknown: bool = False  # a skip because it could not be judged, not because it does not apply
    actions: tuple[str, ...] = ()  # action kinds that replace the check's own, for this host
    knob: str | None = None  # the knob that fixes this finding, where the check names none


@dataclass(frozen=True)
class Check:
    """A registered check: identity, what it protects and how to fix what it finds."""

    id: str
    layer: str
    severity: str
    title: str
    risk: str
    fix: str
    knob: str | None
    func: Callable[[Facts, Profile], Outcome] = field(compare=False)
    health: bool = False
    actions: tuple[str, ...] = ()  # what a failing result calls for, first to last
    declaration: Any = field(default=None, compare=False)  # a checks.compare.Comparison
    hand: str = ""  # why a hand-written check is not a declaration, in one line


CHECKS: list[Check] = []


def check(check_id: str, *, severity: str, title: str, risk: str, fix: str,
          knob: str | None = None, health: bool = False,
          actions: tuple[str, ...] | None = None,
          declaration: Any = None, hand: str = "") -> Callable[[Callable], Callable]:
    """Register the decorated function as check ``check_id`` (``"<layer>.<name>"``).

    ``risk`` is one line on what the finding costs; ``fix`` names the knob or the manual
    action (BIOS, hypervisor) that removes it; ``knob`` is the registered knob
    (``layer.name`` in ``layers.registered_knobs()``) that does, when one exists. ``health``
    marks a check of the node's fitness (a GPU missing or failing, a fabric port down): only
    those can drain a node (:func:`makes_unfit`); the others are tuning preferences.
    ``actions`` (kinds of :data:`ACTION_KINDS`) is what a failing result calls for; by default
    a health finding is drained and investigated, a tuning one applied with its knob or, with
    none, investigated (a manual BIOS or hypervisor change). ``declaration`` is the
    :class:`~exemplar_tune.checks.compare.Comparison` a declared check was made from; a
    hand-written check says in ``hand`` why no comparison can say it (the facts it combines).
    """
    if actions is None:
        actions = ("drain", "investigate") if health else ("apply",) if knob else (
            "investigate",)
    layer = check_id.split(".", 1)[0]
    if layer not in LAYER_NAMES or severity not in SEVERITIES:
        raise ValueError(f"check {check_id}: bad layer or severity {severity!r}")
    if not set(actions) <= set(ACTION_KINDS):
        raise ValueError(f"check {check_id}: actions {actions} not in {ACTION_KINDS}")
    if knob is not None and knob not in registered_knobs():
        raise ValueError(f"check {check_id}: knob {knob!r} is not in the knob registry")

    def register(func: Callable[[Facts, Profile], Outcome]) -> Callable:
        if any(c.id == check_id for c in CHECKS):
            raise ValueError(f"check {check_id} registered twice")
        CHECKS.append(Check(check_id, layer, severity, title, risk, fix, knob, func, health,
                            actions, declaration, hand))
        return func

    return register


def check_class(check_id: str) -> str:
    """``health`` or ``tuning``: the kind of the registered check ``check_id`` (``tuning`` for
    an id no longer registered, which cannot drain)."""
    return HEALTH if any(c.health for c in CHECKS if c.id == check_id) else TUNING


def makes_unfit(result: dict[str, Any], threshold: str = "high") -> bool:
    """True for a failing health check (a preflight result, as JSON) of severity ``threshold``
    or worse: what may drain a node. A result written without ``health`` (an older document)
    is judged by the check of that id registered here."""
    health = result.get("health")
    if health is None:
        health = any(c.health for c in CHECKS if c.id == result.get("id"))
    severity = result.get("severity")
    return (result.get("status") == FAIL and bool(health) and severity in SEVERITIES
            and SEVERITIES.index(severity) <= SEVERITIES.index(threshold))


def source(facts: Facts, layer: str, key: str) -> tuple[str, ...]:
    """The evidence (file or command) behind ``facts[layer][key]``, as a 1-tuple."""
    found = (facts.get(layer) or {}).get("sources", {}).get(key)
    return (f"{found}",) if found else ()


def read_error(facts: Facts, layer: str, key: str) -> str:
    """Why ``facts[layer][key]`` could not be read, ``"path: reason"``; ``""`` when it was."""
    for err in (facts.get(layer) or {}).get("errors") or []:
        if err.get("fact") == key:
            return f"{err.get('path')}: {err.get('error')}"
    return ""


def read_errors(facts: Facts, layer: str, *keys: str) -> str:
    """The first read error (``path: reason``) of ``facts[layer][key]`` or of one of its parts
    (``key.part``) for each of ``keys`` in turn; ``""`` when none was recorded."""
    errors = (facts.get(layer) or {}).get("errors") or []
    for key in keys:
        for err in errors:
            fact = str(err.get("fact"))
            if fact == key or fact.startswith(f"{key}."):
                return f"{err.get('path')}: {err.get('error')}"
    return ""


def why_unknown(facts: Facts, layer: str, *keys: str) -> str:
    """Why the facts ``keys`` (``key`` or ``key.part``) of ``layer`` are unknown, for an
    :func:`unknown` reason: the layer not gathered or without the fact, a read error, the
    command missing, else that no error was recorded."""
    if layer not in facts:
        return f"the {layer} layer was not gathered"
    absent = [key for key in keys if key.split(".")[0] not in facts[layer]]
    if absent:
        return f"the {layer} facts hold no {absent[0]}"
    return (read_errors(facts, layer, *keys)
            or next((m for key in keys if (m := facts[layer].get(f"{key}_missing"))), "")
            or f"{layer}.{keys[0]} is null, no read error recorded")


def not_read(facts: Facts, layer: str, key: str) -> str:
    """Why a command's fact ``facts[layer][key]`` is ``None``: the command missing (its
    ``<key>_missing``) or its output unreadable (:func:`read_error`); ``""`` when neither."""
    return (facts.get(layer) or {}).get(f"{key}_missing") or read_error(facts, layer, key)


def not_applicable(reason: str) -> Outcome:
    """A check that does not apply to this host: the hardware or feature it judges is absent,
    the profile asks nothing of it, or another setting makes it moot; ``reason`` says which."""
    return Outcome(SKIP, detail=reason)


def unknown(reason: str) -> Outcome:
    """A check that applies but could not be judged: a fact it needs could not be read (the
    reason names the file or command and why), or the evidence is contradictory."""
    return Outcome(SKIP, detail=reason, unknown=True)
