"""Run the registered checks over one host's facts, in layer order."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYER_NAMES

from exemplar_tune.checks import CHECKS, Check
from exemplar_tune.checks.base import (
    FAIL,
    HEALTH,
    NOT_APPLICABLE,
    SKIP,
    STATUSES,
    TUNING,
    UNKNOWN,
    Facts,
    Profile,
    unknown,
)

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict on one host, with everything a report needs."""

    id: str
    layer: str
    severity: str
    title: str
    status: str
    observed: Any
    expected: Any
    detail: str
    evidence: list[str]
    risk: str
    fix: str
    knob: str | None
    health: bool
    klass: str  # ``class`` in JSON: health, tuning, not_applicable or unknown
    action_kinds: tuple[str, ...]  # what a failing result calls for (``verdict`` adds commands)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (see ``preflight-result.schema.json``), before ``verdict`` turns the
        action kinds into actions."""
        found = asdict(self)
        found["class"] = found.pop("klass")
        return found


def run_checks(facts: Facts, profile: Profile, layers: list[str] | None = None,
               stop_at_first_failing_layer: bool = False) -> list[CheckResult]:
    """Every check of the selected layers, layer by layer in preflight order.

    Within a layer, results are sorted worst first. With ``stop_at_first_failing_layer``,
    the layers after the first one with a failing check are not evaluated.
    """
    results: list[CheckResult] = []
    for layer in (name for name in LAYER_NAMES if not layers or name in layers):
        found = [_evaluate(c, facts, profile) for c in CHECKS if c.layer == layer]
        found.sort(key=lambda r: STATUSES.index(r.status))
        results += found
        if stop_at_first_failing_layer and any(r.status == FAIL for r in found):
            break
    return results


def result_class(status: str, health: bool, unknown: bool) -> str:
    """The class of one result: its check's kind, or for a skip n/a or unknown."""
    if status == SKIP:
        return UNKNOWN if unknown else NOT_APPLICABLE
    return HEALTH if health else TUNING


def _evaluate(check: Check, facts: Facts, profile: Profile) -> CheckResult:
    try:
        outcome = check.func(facts, profile)
    except Exception as exc:  # noqa: BLE001 - a broken check must not hide the others
        LOG.exception("check %s raised", check.id)
        outcome = unknown(f"check could not run: {type(exc).__name__}: {exc}")
    return CheckResult(
        id=check.id, layer=check.layer, severity=check.severity, title=check.title,
        status=outcome.status, observed=outcome.observed, expected=outcome.expected,
        detail=outcome.detail, evidence=list(outcome.evidence), risk=check.risk,
        fix=outcome.fix or check.fix,
        knob=check.knob or outcome.knob, health=check.health,
        klass=result_class(outcome.status, check.health, outcome.unknown),
        action_kinds=outcome.actions or check.actions,
    )
