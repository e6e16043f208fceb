"""``exemplar-tune report``: one experiment as Markdown or a self-contained HTML page.

The page shows each layer's decision with its numbers, a waterfall of the effect each kept
layer had on every workload shape, and the step-time distributions of the baseline and the
candidate runs (inline SVG, no scripts, no external resources).
"""

from __future__ import annotations

import html
from typing import Any

WIDTH, BAR_HEIGHT = 560, 22


def kept_effects(doc: dict[str, Any]) -> list[tuple[str, str, float]]:
    """``(layer, shape, relative change)`` of every kept layer, in layer order."""
    decisions = {d["layer"]: d for d in doc["decisions"]}
    effects = []
    for layer in doc["layers"]:
        decision = decisions.get(layer["layer"])
        if decision and decision["action"] == "keep":
            effects += [(layer["layer"], c["shape"], c["rel_change"])
                        for c in decision["comparisons"]]
    return effects


def gap_rows(doc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """``(shape, reference, before, after)`` against the profile's reference, as text."""
    summary = doc["experiment"].get("summary") or {}
    rows = []
    for shape, entry in (summary.get("shapes") or {}).items():
        if "after_ratio" in entry:
            rows.append((shape, f"{entry['reference']:g}",
                         f"{entry['before']:.4g} ({entry['before_ratio']:.1%})",
                         f"{entry['after']:.4g} ({entry['after_ratio']:.1%})"))
    return rows


def preflight_groups(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The failing and warning checks recorded before the experiment changed anything."""
    return (doc["experiment"].get("summary") or {}).get("preflight") or []


def _gate_text(doc: dict[str, Any]) -> str:
    summary = doc["experiment"].get("summary") or {}
    if summary.get("passed") is None:
        return "No reference in the profile: the gap is not known."
    verdict = "reached" if summary["passed"] else "not reached"
    return f"Gate {summary['gate']:.0%} of the reference: **{verdict}**."


def markdown(doc: dict[str, Any]) -> str:
    """The experiment as Markdown: layers, decisions with intervals, the gap closed."""
    exp = doc["experiment"]
    out = [f"# exemplar-tune experiment {exp['id']}", "",
           f"{exp['kind']}, profile {exp['profile_name']}, status **{exp['status']}**", "",
           "| layer | status | shape | change | interval | runs |", "|---|---|---|---|---|---|"]
    decisions = {d["layer"]: d for d in doc["decisions"]}
    for layer in doc["layers"]:
        comparisons = (decisions.get(layer["layer"]) or {}).get("comparisons") or [None]
        for c in comparisons:
            numbers = ("| – | – | – |" if c is None else
                       f"| {c['rel_change']:+.2%} | {c['ci_low']:+.2%} .. {c['ci_high']:+.2%} | "
                       f"{c['n_baseline']}+{c['n_candidate']} |")
            shape = c["shape"] if c else "–"
            out.append(f"| {layer['layer']} | {layer['status']} | {shape} {numbers}")
    out += ["", "## Preflight before tuning", ""]
    out += [f"- {g['status'].upper()} {g['id']}: {g['count']}/{g['total']} hosts"
            for g in preflight_groups(doc)] or ["Every check passed (or none was recorded)."]
    out += ["", "## Gap to the reference", "", _gate_text(doc), ""]
    gap = gap_rows(doc)
    if gap:
        out += ["| shape | reference | before | after |", "|---|---|---|---|"]
        out += [f"| {' | '.join(row)} |" for row in gap]
    out += ["", "## Effect of the kept layers", ""]
    out += [f"- {layer} / {shape}: {change:+.2%}" for layer, shape, change in
            kept_effects(doc)] or ["No layer was kept."]
    return "\n".join(out) + "\n"


def _waterfall(effects: list[tuple[str, str, float]]) -> str:
    if not effects:
        return "<p>No layer was kept.</p>"
    scale = (WIDTH / 2 - 10) / max(abs(e) for _, _, e in effects)
    bars = []
    for row, (layer, shape, change) in enumerate(effects):
        y, length = row * BAR_HEIGHT, abs(change) * scale
        x = WIDTH / 2 if change >= 0 else WIDTH / 2 - length
        label = html.escape(f"{layer} / {shape} {change:+.2%}")
        bars.append(f"<rect x='{x:.1f}' y='{y + 3}' width='{length:.1f}' height='16' "
                    f"fill='{'#3a7' if change >= 0 else '#c44'}'/><text x='4' y='{y + 16}' "
                    f"font-size='12'>{label}</text>")
    height = len(effects) * BAR_HEIGHT
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height}'>"
            f"<line x1='{WIDTH / 2}' y1='0' x2='{WIDTH / 2}' y2='{height}' stroke='#888'/>"
            + "".join(bars) + "</svg>")


def _histogram(values: list[float], colour: str, top: float, low: float, high: float) -> str:
    bins = 30
    counts = [0] * bins
    for value in values:
        index = min(bins - 1, int((value - low) / ((high - low) or 1.0) * bins))
        counts[index] += 1
    width = WIDTH / bins
    return "".join(
        f"<rect x='{i * width:.1f}' y='{100 - 100 * c / top:.1f}' width='{width - 1:.1f}' "
        f"height='{100 * c / top:.1f}' fill='{colour}' fill-opacity='0.5'/>"
        for i, c in enumerate(counts) if c)


def _distributions(doc: dict[str, Any], layer: str) -> str:
    arms = {arm: [v for s in doc["samples"] if s["layer"] == layer and s["arm"] == arm
                  for v in s["samples"]] for arm in ("baseline", "candidate")}
    if not arms["baseline"] or not arms["candidate"]:
        return ""
    low = min(min(v) for v in arms.values())
    high = max(max(v) for v in arms.values())
    top = max(len(v) for v in arms.values()) / 4 or 1
    return (f"<h3>{html.escape(layer)}: samples per run, baseline (grey) vs candidate (green)"
            f"</h3><svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='100'>"
            + _histogram(arms["baseline"], "#777", top, low, high)
            + _histogram(arms["candidate"], "#3a7", top, low, high)
            + f"</svg><p>range {low:.4g} .. {high:.4g}</p>")


def _preflight_items(doc: dict[str, Any]) -> str:
    return "".join(f"<li>{html.escape(g['status'].upper())} {html.escape(g['id'])}: "
                   f"{g['count']}/{g['total']} hosts</li>" for g in preflight_groups(doc))


def _gap_table(doc: dict[str, Any]) -> str:
    rows = gap_rows(doc)
    if not rows:
        return ""
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                    for row in rows)
    return ("<table><tr><th>shape</th><th>reference</th><th>before</th><th>after</th></tr>"
            f"{cells}</table>")


def html_page(doc: dict[str, Any]) -> str:
    """A self-contained HTML page of the experiment."""
    table = markdown(doc).split("\n## ")[0].splitlines()[4:]
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(cell.strip())}</td>"
                                    for cell in line.strip("|").split("|")) + "</tr>"
                   for line in table[2:] if line.startswith("|"))
    layers = "".join(_distributions(doc, layer["layer"]) for layer in doc["layers"])
    exp = doc["experiment"]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>exemplar-tune "
            f"{html.escape(exp['id'])}</title><style>body{{font-family:system-ui,sans-serif;"
            "margin:2em}td,th{border:1px solid #ccc;padding:3px 8px}table{border-collapse:"
            "collapse}</style></head><body>"
            f"<h1>Experiment {html.escape(exp['id'])}</h1><p>{html.escape(exp['kind'])}, "
            f"profile {html.escape(str(exp['profile_name']))}, status {html.escape(exp['status'])}"
            "</p><table><tr><th>layer</th><th>status</th><th>shape</th><th>change</th>"
            f"<th>interval</th><th>runs</th></tr>{rows}</table>"
            f"<h2>Preflight before tuning</h2><ul>{_preflight_items(doc)}</ul>"
            f"<h2>Gap to the reference</h2><p>{html.escape(_gate_text(doc)).replace('**', '')}"
            f"</p>{_gap_table(doc)}"
            f"<h2>Gap closed per kept layer</h2>{_waterfall(kept_effects(doc))}"
            f"<h2>Step-time distributions</h2>{layers}</body></html>\n")
