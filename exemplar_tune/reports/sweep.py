"""``exemplar-tune report`` of a sweep: every candidate's result per shape and message size.

The figures come from the ledger alone: per arm, shape and size the mean of the runs and its
90 % Student t interval, next to the incumbent's, and each step's choice. The HTML page is
``templates/sweep.html.j2`` (autoescaped) with one chart per shape, drawn by matplotlib as
inline SVG (axes, units, one series per size, interval bars): no scripts, no external
resources (see :mod:`exemplar_tune.reports.html`).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from markupsafe import Markup

from exemplar_tune.diagnose.nccl_tests import human
from exemplar_tune.orchestration.stats import CONFIDENCE, t_ppf
from exemplar_tune.reports.html import axis_label, new_figure, render, svg


def size_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per shape, size and arm: runs, mean, interval and unit, in recorded order."""
    sizes = (doc["experiment"].get("options") or {}).get("sizes") or {}
    groups: dict[tuple[str, str], list[list[float]]] = {}
    units: dict[str, str] = {}
    for sample in doc["samples"]:
        groups.setdefault((sample["shape"], sample["arm"]), []).append(sample["samples"])
        units[sample["shape"]] = sample["unit"]
    rows = []
    for (shape, arm), runs in groups.items():
        labels = [human(s) for s in sizes.get(shape) or []] or ["largest"]
        for index, label in enumerate(labels):
            values = [r[index] for r in runs if index < len(r)]
            if not values:
                continue
            mean, half = _interval(values)
            rows.append({"shape": shape, "size": label, "arm": arm, "runs": len(values),
                         "mean": mean, "half": half, "unit": units[shape],
                         "interval": "-" if math.isnan(half) else
                         f"{mean - half:.4g} .. {mean + half:.4g}"})
    return sorted(rows, key=lambda r: (r["shape"], r["size"], r["arm"]))


def _interval(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    half = t_ppf(1 - (1 - CONFIDENCE) / 2, len(values) - 1) * statistics.stdev(values)
    return mean, half / math.sqrt(len(values))


def _steps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    decision = next((d for d in doc["decisions"] if d["layer"] == "fabric"), None)
    return decision["comparisons"] if decision else []


def markdown(doc: dict[str, Any]) -> str:
    """The sweep as Markdown: each step's arms against the incumbent, then the per-size table."""
    exp, summary = doc["experiment"], (doc["experiment"].get("summary") or {}).get("sweep", {})
    out = [f"# exemplar-tune sweep {exp['id']}", "",
           f"status **{exp['status']}**; chosen **{summary.get('chosen', '-')}**", ""]
    for step in _steps(doc):
        out += [f"## {step['step']}: {step['outcome']} {step['chosen']} after "
                f"{step['rounds']} rounds", "",
                "| arm | runs | change vs incumbent | interval | left the race |",
                "|---|---:|---:|---|---|"]
        out += [f"| {a['arm']} | {a['runs']} | {a['rel_change']:+.2%} | [{a['ci_low']:+.2%}, "
                f"{a['ci_high']:+.2%}] | {a['eliminated']} |" for a in step["arms"]]
        out.append("")
    out += ["## Results per shape and message size", "",
            f"| shape | size | arm | runs | mean | {CONFIDENCE:.0%} interval |",
            "|---|---|---|---:|---:|---|"]
    out += [f"| {r['shape']} | {r['size']} | {r['arm']} | {r['runs']} | {r['mean']:.4g} "
            f"{r['unit']} | {r['interval']} |" for r in size_rows(doc)]
    return "\n".join(out) + "\n"


def html_page(doc: dict[str, Any]) -> str:
    """The sweep as one self-contained HTML page with a chart per shape."""
    exp = doc["experiment"]
    summary = (exp.get("summary") or {}).get("sweep", {})
    rows = size_rows(doc)
    return render("sweep.html.j2", exp=exp, fabric=summary.get("fabric", {}),
                  chosen=summary.get("chosen", "-"), validation=summary.get("validation"),
                  steps=_steps(doc), rows=rows, confidence=f"{CONFIDENCE:.0%}",
                  charts=[chart(rows, shape) for shape in dict.fromkeys(r["shape"] for r in rows)])


def chart(rows: list[dict[str, Any]], shape: str) -> Markup:
    """One shape's means per arm (x) and size (series), with interval bars, as inline SVG."""
    mine = [r for r in rows if r["shape"] == shape]
    arms = list(dict.fromkeys(r["arm"] for r in mine))
    sizes = list(dict.fromkeys(r["size"] for r in mine))
    figure = new_figure(9, 4.2)
    axes = figure.subplots()
    width = 0.8 / max(1, len(sizes))
    for index, size in enumerate(sizes):
        points = {r["arm"]: r for r in mine if r["size"] == size}
        xs = [a + (index - (len(sizes) - 1) / 2) * width for a in range(len(arms))]
        means = [points[a]["mean"] if a in points else math.nan for a in arms]
        errors = [0 if a not in points or math.isnan(points[a]["half"]) else points[a]["half"]
                  for a in arms]
        axes.bar(xs, means, width, yerr=errors, capsize=3, label=f"{size} messages")
    names = {part.partition("=")[0] for a in arms for part in a.split(",")}
    if len(names) == 1:
        ticks, xlabel = [a.partition("=")[2] for a in arms], names.pop()
    else:
        ticks = ["\n".join(p.removeprefix("NCCL_") for p in a.split(",")) for a in arms]
        xlabel = "arm (NCCL settings)"
    axes.set_xticks(range(len(arms)), ticks, fontsize=8)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(axis_label(shape, mine[0]["unit"] if mine else ""))
    axes.set_title(f"{shape}: mean of the runs per arm, {CONFIDENCE:.0%} interval")
    axes.legend(fontsize=8)
    return svg(figure, f"sweep-{shape}")
