"""Checks declared as a comparison: one fact of the host, or of each of its devices, against a
profile key or a default threshold.

A :class:`Comparison` says which fact (``field``, a path in the layer's facts or in each
device of a :class:`Devices` list), how it is compared (:data:`COMPARISONS`), the profile key
that sets the wanted value and the default used when the profile is silent (with its public
source), what a mismatch reports and the check's identity (severity, class, risk, fix,
actions). :func:`declare` registers it; :func:`judge` is the one function that judges every
declaration, so each says the same things the same way:

* not applicable: the profile sets no value and there is no default; no device of the kind
  (no GPU); no device reports the field and no read error was recorded (``not_reported``);
* unknown: the devices could not be listed, or the field could not be read on some of them
  (the read error named);
* a mismatch: ``status`` with every device that differs, folded as
  ``persistence mode: want on; 1 of 8 GPUs differ: 00000000:C2:00.0 off``;
* else pass, ``GPU temperature <= 85 C for all 8 GPUs (highest 45 C)``.

Each declaration carries :class:`Example` cases (the field's value on the devices, the
profile's value, the status judged); the tests run them against real fact shapes, so a new
declaration needs no test edited.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exemplar_tune.checks.base import (
    PASS,
    WARN,
    Facts,
    Outcome,
    Profile,
    check,
    not_applicable,
    source,
    unknown,
    why_unknown,
)


def _contains(have: Any, want: Any) -> bool:
    return str(want).lower() in str(have).lower()


def _one_of(have: Any, want: Any) -> bool:
    return have in want


# name -> (holds(have, want), how the wanted value reads)
COMPARISONS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    "equals": (operator.eq, "{want}"),
    "at_least": (operator.ge, ">= {want}"),
    "at_most": (operator.le, "<= {want}"),
    "one_of": (_one_of, "one of {want}"),
    "contains": (_contains, "contains {want!r}"),
}


@dataclass(frozen=True)
class Devices:
    """A layer's list of devices that a check folds over (the GPUs, the fabric ports).

    ``listed`` gives the list, or the outcome that ends the check when there is none to judge
    (no GPU: not applicable; the inventory unread: unknown); ``name`` how a finding names one;
    ``field_error`` the read error recorded for a field of some of them (``": path: reason"``
    or ``""``), given the error marks of the declaration; ``evidence`` the layer fact whose
    source is the evidence.
    """

    layer: str
    noun: str
    listed: Callable[[Facts], tuple[list[dict[str, Any]], Outcome | None]]
    name: Callable[[dict[str, Any]], str]
    field_error: Callable[[Facts, list[dict[str, Any]], tuple[str, ...]], str]
    evidence: str


@dataclass(frozen=True)
class Example:
    """A case a declaration is tested on: ``have`` is the field's value on each device in turn
    (a list, repeated over the devices; ``None`` unread) or the host's value, ``want`` the
    profile's value (``None``: the profile is silent), ``status`` what the check returns."""

    have: Any
    want: Any
    status: str


@dataclass(frozen=True)
class Comparison:
    """A check that compares one fact with a profile key or a default threshold."""

    id: str
    title: str
    severity: str
    risk: str
    fix: str
    label: str  # the fact as the finding names it: "GPU temperature"
    field: tuple[str, ...]  # its path in each device, or in the layer's facts
    compare: str  # a key of COMPARISONS
    key: str | None = None  # the profile key of the check's layer that sets the wanted value
    default: Any = None  # the wanted value when the profile sets none
    source: str = ""  # the public source of the default
    devices: Devices | None = None  # None: a fact of the host
    status: str = WARN  # what a mismatch reports
    unit: str = ""  # " C": after every value shown
    shown: Callable[[Any], str] = str  # a value as the finding shows it
    not_reported: str = "not reported"  # why no device reports the field, when none does
    error_marks: tuple[str, ...] = ()  # where a read error of the field is recorded
    schema: dict[str, Any] | None = None  # the profile key's JSON schema
    health: bool = False
    actions: tuple[str, ...] | None = None
    knob: str | None = None
    examples: tuple[Example, ...] = field(default=(), compare=False)

    @property
    def layer(self) -> str:
        """The layer of the check (its id's first part)."""
        return self.id.split(".", 1)[0]

    def expected(self, want: Any) -> str:
        """The wanted value as a finding reads it: ``<= 85 C``, ``on``."""
        shown = [self.shown(w) for w in want] if self.compare == "one_of" else self.shown(want)
        return COMPARISONS[self.compare][1].format(want=shown) + (
            self.unit if self.compare != "contains" else "")


def declare(decl: Comparison) -> Comparison:
    """Register ``decl`` as a check (in the order of the calls, as ``check`` does)."""
    if decl.compare not in COMPARISONS:
        raise ValueError(f"check {decl.id}: compare {decl.compare!r} not in {list(COMPARISONS)}")
    if decl.key is None and decl.default is None:
        raise ValueError(f"check {decl.id}: neither a profile key nor a default")
    if decl.default is not None and not decl.source:
        raise ValueError(f"check {decl.id}: a default threshold needs its public source")
    if len({e.status for e in decl.examples}) < 2:
        raise ValueError(f"check {decl.id}: examples must show a pass and a finding")
    check(decl.id, severity=decl.severity, title=decl.title, risk=decl.risk, fix=decl.fix,
          knob=decl.knob, health=decl.health, actions=decl.actions,
          declaration=decl)(lambda facts, profile: judge(decl, facts, profile))
    return decl


def judge(decl: Comparison, facts: Facts, profile: Profile) -> Outcome:
    """The outcome of ``decl`` on one host's ``facts`` under ``profile`` (module docstring)."""
    want = (profile.get(decl.layer) or {}).get(decl.key) if decl.key else None
    if want is None:
        want = decl.default
    if want is None:
        return not_applicable(f"profile sets no {decl.layer}.{decl.key}")
    if decl.devices is None:
        return _judge_host(decl, facts, want)
    return _judge_devices(decl, decl.devices, facts, want)


def _value(node: Any, path: tuple[str, ...]) -> Any:
    """``node[path[0]][path[1]]...``; ``None`` where a level is missing or ``None``."""
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _holds(decl: Comparison, have: Any, want: Any) -> bool:
    try:
        return bool(COMPARISONS[decl.compare][0](have, want))
    except TypeError:  # a value of another type than the profile's: not what it wants
        return False


def _judge_host(decl: Comparison, facts: Facts, want: Any) -> Outcome:
    have = _value(facts.get(decl.layer), decl.field)
    if have is None:
        return unknown(f"{decl.label} unknown: {why_unknown(facts, decl.layer, decl.field[0])}")
    shown, expected = f"{decl.shown(have)}{decl.unit}", decl.expected(want)
    evidence = source(facts, decl.layer, decl.field[0])
    if not _holds(decl, have, want):
        return Outcome(decl.status, have, want, f"{decl.label} {shown}, want {expected}",
                       evidence)
    return Outcome(PASS, have, want, f"{decl.label} {shown} ({expected})", evidence)


def _list(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def _judge_devices(decl: Comparison, devices: Devices, facts: Facts, want: Any) -> Outcome:
    listed, ends = devices.listed(facts)
    if ends is not None:
        return ends
    values = {devices.name(d): _value(d, decl.field) for d in listed}
    expected, noun = decl.expected(want), devices.noun
    wanted = want if decl.compare in ("equals", "one_of") else expected  # as the JSON says it
    evidence = source(facts, devices.layer, devices.evidence)
    unread = [d for d in listed if _value(d, decl.field) is None]
    if len(unread) == len(listed):
        why = devices.field_error(facts, listed, decl.error_marks)
        if why:
            return unknown(f"{decl.label} not read{why}")
        return not_applicable(f"{decl.label} {decl.not_reported}")
    differ = [f"{name} {decl.shown(have)}{decl.unit}" for name, have in values.items()
              if have is not None and not _holds(decl, have, want)]
    if differ:
        return Outcome(decl.status, values, wanted, f"{decl.label}: want {expected}; "
                       f"{len(differ)} of {len(values)} {noun} differ: {_list(differ)}",
                       evidence)
    if unread:
        why = devices.field_error(facts, unread, decl.error_marks) or " (not reported)"
        names = [devices.name(d) for d in unread]
        return unknown(f"{decl.label} unknown on {len(unread)} of {len(listed)} {noun}: "
                       f"{_list(names)}{why}")
    return Outcome(PASS, values, wanted,
                   f"{decl.label} {expected} for all {len(values)} {noun}{_extreme(decl, values)}",
                   evidence)


def _extreme(decl: Comparison, values: dict[str, Any]) -> str:
    """`` (highest 52 C)`` for an upper bound, `` (lowest ...)`` for a lower one."""
    if decl.compare not in ("at_most", "at_least") or len(values) < 2:
        return ""
    pick, word = (max, "highest") if decl.compare == "at_most" else (min, "lowest")
    return f" ({word} {decl.shown(pick(values.values()))}{decl.unit})"
