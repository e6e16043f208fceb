"""Every declared check (``checks.compare.Comparison``), tested from its own declaration.

Nothing here names a check: each declaration's examples are run on the real facts of a
fixture host of its layer (``tests/fixtures/sysroots``) with the field set as the example
says, and the rules every declaration shares (profile silent, field unread, devices not
listed) are asserted for each. A new declaration is tested by adding it.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    gather_facts,
    registered_knobs,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, PASS, SKIP, WARN
from exemplar_tune.checks.compare import COMPARISONS, Comparison, Example, judge

from .conftest import SYSROOTS

HOST = {"gpu": "healthy-h100", "fabric": "healthy-h100", "cpu": "healthy-h100",
        "vm": "gb200-grace-vm", "runtime": "healthy-h100"}  # a real host of each layer
DECLARED = [c.declaration for c in CHECKS if c.declaration is not None]
CASES = [(d, e) for d in DECLARED for e in d.examples]


@functools.cache
def _facts(layer: str) -> dict[str, Any]:
    return gather_facts(Sysroot(str(SYSROOTS / HOST[layer])), [layer])


def _with(decl: Comparison, have: Any) -> dict[str, Any]:
    """The fixture host's facts with the declaration's field set to ``have`` (on each device
    in turn, the list repeated)."""
    facts = copy.deepcopy(_facts(decl.layer))
    if decl.devices is None:
        _put(facts[decl.layer], decl.field, have)
        return facts
    devices, ends = decl.devices.listed(facts)
    assert ends is None and devices, f"{HOST[decl.layer]} lists no {decl.devices.noun}"
    for index, device in enumerate(devices):
        _put(device, decl.field, have[index % len(have)])
    return facts


def _put(node: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value


def _profile(decl: Comparison, want: Any) -> dict[str, Any]:
    return {decl.layer: {decl.key: want}} if decl.key and want is not None else {}


def test_every_check_is_declared_or_says_why_it_is_hand_code():
    """A comparison, a family knob's check, or hand code with its reason in one line."""
    knob_checks = {k.check_id for k in registered_knobs().values() if k.check and k.state}
    for item in CHECKS:
        kinds = [item.declaration is not None, item.id in knob_checks, bool(item.hand)]
        assert kinds.count(True) == 1, item.id
        assert "\n" not in item.hand and len(item.hand) <= 90, item.id


def test_there_are_declared_checks_and_each_is_well_formed():
    assert len(DECLARED) >= 4
    for decl in DECLARED:
        assert decl.compare in COMPARISONS
        assert decl.key or (decl.default is not None and decl.source), decl.id
        assert any(e.status == PASS for e in decl.examples), decl.id
        assert any(e.status in (WARN, FAIL) for e in decl.examples), decl.id


@pytest.mark.parametrize(("decl", "example"), CASES,
                         ids=[f"{d.id}-{i}" for i, (d, _) in enumerate(CASES)])
def test_the_declarations_examples(decl: Comparison, example: Example):
    have = judge(decl, _with(decl, example.have), _profile(decl, example.want))
    assert have.status == example.status, have.detail
    assert have.detail and "\n" not in have.detail
    if have.status != SKIP:
        assert have.evidence, decl.id
    if have.status in (WARN, FAIL):
        assert have.status == decl.status
        assert "want " in have.detail and "differ" in have.detail or decl.devices is None


@pytest.mark.parametrize("decl", DECLARED, ids=[d.id for d in DECLARED])
def test_a_silent_profile_without_a_default_is_not_applicable(decl: Comparison):
    first = decl.examples[0]
    have = judge(decl, _with(decl, first.have), {})
    if decl.default is None:
        assert (have.status, have.unknown) == (SKIP, False)
        assert have.detail == f"profile sets no {decl.layer}.{decl.key}"
    else:
        assert have.detail != f"profile sets no {decl.layer}.{decl.key}"


@pytest.mark.parametrize("decl", [d for d in DECLARED if d.devices is not None],
                         ids=[d.id for d in DECLARED if d.devices is not None])
def test_devices_that_do_not_report_the_field_or_cannot_be_listed(decl: Comparison):
    want = next(e.want for e in decl.examples if e.status == PASS)
    silent = judge(decl, _with(decl, [None]), _profile(decl, want))
    assert (silent.status, silent.unknown) == (SKIP, False)
    assert silent.detail == f"{decl.label} {decl.not_reported}"
    facts = _with(decl, [next(e.have for e in decl.examples if e.status == PASS)[0]])
    listed, _ = decl.devices.listed(facts)
    name = decl.devices.name(listed[-1])
    _put(listed[-1], decl.field, None)
    partly = judge(decl, facts, _profile(decl, want))
    assert (partly.status, partly.unknown) == (SKIP, True)
    assert name in partly.detail and f"1 of {len(listed)}" in partly.detail
    facts[decl.layer] = {}
    gone = judge(decl, facts, _profile(decl, want))
    assert (gone.status, gone.unknown) == (SKIP, True), gone.detail


@pytest.mark.parametrize("decl", [d for d in DECLARED if d.devices is not None],
                         ids=[d.id for d in DECLARED if d.devices is not None])
def test_a_finding_names_every_device_that_differs_and_no_other(decl: Comparison):
    example = next(e for e in decl.examples if e.status in (WARN, FAIL))
    facts = _with(decl, example.have)
    listed, _ = decl.devices.listed(facts)
    have = judge(decl, facts, _profile(decl, example.want))
    want = example.want if example.want is not None else decl.default
    holds = COMPARISONS[decl.compare][0]
    differ = [decl.devices.name(d) for d, value in zip(listed, _values(decl, listed), strict=True)
              if value is not None and not holds(value, want)]
    assert differ and f"{len(differ)} of {len(listed)} {decl.devices.noun}" in have.detail
    for device in listed:
        name = decl.devices.name(device)
        assert (name in have.detail) is (name in differ[:8]), (name, have.detail)


def _values(decl: Comparison, devices: list[dict[str, Any]]) -> list[Any]:
    out = []
    for device in devices:
        node: Any = device
        for key in decl.field:
            node = node.get(key) if isinstance(node, dict) else None
        out.append(node)
    return out
