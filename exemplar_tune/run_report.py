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
            f"<h2>Gap closed per kept layer</h2>{_waterfall(kept_effects(doc))}"
            f"<h2>Step-time distributions</h2>{layers}</body></html>\n")
