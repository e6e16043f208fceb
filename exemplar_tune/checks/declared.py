"""The checks that family knobs declare (``Knob.check``): the host's setting, read back as a
fact of the layer (``Knob.state``), against the profile's value for the knob's key.

One check per declaring knob, registered under the knob's check id
(``cpu.numa_balancing`` -> ``cpu.numa-balancing``) after the hand-written checks of each
layer. A profile that sets no value makes it not applicable, and so does a host that does not
have the setting (a kernel without the sysctl or the sysfs attribute); a setting that could not
be read makes it unknown, said with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import Knob
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.families import Sysctl, SysfsAttr
from ansible_collections.exemplar.tune.plugins.module_utils.layers import registered_knobs

from exemplar_tune.checks.base import (
    PASS,
    Facts,
    Outcome,
    Profile,
    check,
    not_applicable,
    source,
    unknown,
)


def _shown(value: Any) -> str:
    """A fact as a report shows it: ``performance`` for one value over many attributes,
    ``powersave on 3, performance on 5`` for several."""
    if not isinstance(value, dict):
        return str(value)
    if len(value) == 1:
        return str(next(iter(value)))
    return ", ".join(f"{v} on {n}" for v, n in value.items())


def declared_check(knob: Knob) -> Callable[[Facts, Profile], Outcome]:
    """The check function of ``knob`` (which has a ``state`` and a ``check``)."""
    state, spec = knob.state, knob.check
    assert state is not None and spec is not None

    def run(facts: Facts, profile: Profile) -> Outcome:
        want = (profile.get(knob.layer) or {}).get(state.fact)
        if want is None:
            return not_applicable(f"profile sets no {state.fact}")
        layer = facts.get(knob.layer) or {}
        have = layer.get(state.fact)
        evidence = source(facts, knob.layer, state.fact)
        if have is None:
            errors = [e["error"] for e in layer.get("errors") or [] if e["fact"] == state.fact]
            if errors:
                return unknown(f"{state.label} unknown: {errors[0]}")
            if not evidence:  # the layer's facts were not gathered, or lack the setting
                return unknown(f"{state.label} unknown (not in the {knob.layer} facts)")
            if evidence[0] == state.label:  # a sysfs attribute: its own file
                return not_applicable(f"{state.label} absent")
            if isinstance(state, (Sysctl, SysfsAttr)):  # the kernel does not have the setting
                return not_applicable(f"{state.label} not on this kernel ({evidence[0]} absent)")
            return unknown(f"{state.label} unknown ({evidence[0]} absent or unreadable)")
        shown = _shown(have)
        if not state.matches(have, want):
            floor = "at least " if getattr(state, "minimum", False) else ""
            return Outcome(spec.status, have, want, f"{state.label}={shown}, profile wants "
                           f"{floor}{want}", evidence)
        return Outcome(PASS, have, want, f"{state.label}={shown}", evidence)

    return run


def register_declared() -> None:
    """Register the check of every knob that declares one (once: the package does it)."""
    for knob in registered_knobs().values():
        if knob.check is not None and knob.state is not None:
            check(knob.check_id, severity=knob.check.severity, title=knob.check.title,
                  risk=knob.check.risk, fix=knob.check.fix, knob=knob.id)(declared_check(knob))
