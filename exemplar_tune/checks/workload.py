"""workload-layer checks: the user's benchmark results against the profile's reference."""

from __future__ import annotations

from typing import Any

from exemplar_tune.checks.base import (
    FAIL,
    PASS,
    Facts,
    Outcome,
    Profile,
    check,
    not_applicable,
    unknown,
)

DEFAULT_GATE = 0.95


def performance_ratio(value: float, reference: float, higher_is_better: bool) -> float:
    """Measured performance as a fraction of the reference (1.0 = reference, < 1 = worse)."""
    if higher_is_better:
        return value / reference
    return reference / value if value > 0 else float("inf")


def _judge(shape: str, result: Any, ref: dict[str, Any], gate: float) -> dict[str, Any] | str:
    """``{value, unit, ratio, passed}`` for one shape, or why it cannot be compared."""
    if not isinstance(result, dict) or not isinstance(result.get("value"), (int, float)):
        return f"{shape}: no numeric value"
    if result.get("unit") != ref["unit"]:
        return f"{shape}: unit {result.get('unit')!r}, reference in {ref['unit']!r}"
    ratio = performance_ratio(float(result["value"]), float(ref["value"]),
                              bool(ref.get("higher_is_better", False)))
    return {"value": result["value"], "unit": result["unit"], "ratio": round(ratio, 4),
            "passed": ratio >= gate}


@check("workload.reference",
       hand="benchmark results against the profile's reference and gate",
       severity="high",
       title="Benchmark results reach the profile's reference within the gate",
       risk="the cluster trains slower than the reference hardware should: a gap in an "
            "earlier layer that the host checks did not catch",
       fix="rerun the preflight for the earlier layers and fix what they find; then bisect "
           "the failing shape layer by layer")
def check_reference(facts: Facts, profile: Profile) -> Outcome:
    """Each measured shape vs ``workload.reference[shape]`` x ``gate`` (0.95 by default)."""
    expectations = profile.get("workload") or {}
    reference = expectations.get("reference")
    if not reference:
        return not_applicable("profile sets no workload.reference")
    results = (facts.get("workload") or {}).get("results")
    if not results:
        return not_applicable("no benchmark results (give --results)")
    gate = expectations.get("gate", DEFAULT_GATE)
    judged: dict[str, dict[str, Any]] = {}
    notes, unusable = [], False
    for shape, ref in reference.items():
        if shape not in results:
            notes.append(f"{shape}: not measured")
            continue
        verdict = _judge(shape, results[shape], ref, gate)
        if isinstance(verdict, str):
            notes.append(verdict)
            unusable = True
        else:
            judged[shape] = verdict
    expected = {shape: {"value": ref["value"], "unit": ref["unit"], "min_ratio": gate,
                        "higher_is_better": bool(ref.get("higher_is_better", False))}
                for shape, ref in reference.items()}
    if not judged:  # a measured shape without a usable value cannot be judged
        return (unknown if unusable else not_applicable)(
            "no benchmark result matches a reference shape: " + "; ".join(notes))
    evidence = ("benchmark results",)
    below = [f"{s} at {v['ratio']:.1%} of reference {expected[s]['value']} {v['unit']} "
             f"(measured {v['value']})" for s, v in judged.items() if not v["passed"]]
    if below:
        return Outcome(FAIL, judged, expected,
                       f"below the {gate:.0%} gate: {'; '.join(below + notes)}", evidence)
    detail = f"{len(judged)} shape(s) within the {gate:.0%} gate"
    return Outcome(PASS, judged, expected, "; ".join([detail, *notes]), evidence)
