"""The charts of a tune report, drawn by matplotlib as inline SVG.

* :func:`waterfall`: one workload shape from the first baseline to the final measurement, one
  floating step per kept layer, the reference and the gate as lines.
* :func:`distribution`: one layer's decision for one shape: the step times (the samples
  inside each run) of the baseline and the candidate runs as two histograms on shared bins.

Both take plain data (see :mod:`exemplar_tune.reports.experiment`) and return SVG markup.
"""

from __future__ import annotations

import math
from typing import Any

from markupsafe import Markup

from exemplar_tune.reports.html import axis_label, drawn, higher_is_better, new_figure, svg

BASE, BETTER, WORSE, OTHER, AFTER = "#8a8f98", "#2e8b57", "#c0392b", "#b8a24a", "#3465a4"
ARM_COLOURS = {"baseline": "#8a8f98", "candidate": "#2e8b57"}


def gate_value(reference: float, gate: float, unit: str) -> float:
    """The value a shape must reach to pass the gate (a fraction of the reference)."""
    return reference * gate if higher_is_better(unit) else reference / gate


@drawn
def waterfall(data: dict[str, Any]) -> Markup:
    """``data``: shape, unit, start, steps [{label, delta, other}], after, reference, gate."""
    unit, start, after = data["unit"], data["start"], data["after"]
    figure = new_figure(6.4, 3.8)
    axes = figure.subplots()
    lines = _reference_lines(data)
    levels = [start] + [start + sum(s["delta"] for s in data["steps"][:i + 1])
                        for i in range(len(data["steps"]))]
    values = levels + ([after] if after is not None else []) + [v for v, _, _ in lines]
    low, high = min(values), max(values)
    pad = (high - low) * 0.3 or abs(high) * 0.05 or 1.0
    floor = low - pad
    axes.bar(0, start - floor, bottom=floor, color=BASE, width=0.6)
    _label(axes, 0, start, f"{start:.4g}")
    for index, step in enumerate(data["steps"], start=1):
        level, delta = levels[index - 1], step["delta"]
        colour = OTHER if step["other"] else BETTER if _improves(delta, unit) else WORSE
        axes.bar(index, abs(delta), bottom=min(level, level + delta), color=colour, width=0.6)
        _label(axes, index, max(level, level + delta), f"{delta:+.3g}")
    labels = ["first\nbaseline"] + [s["label"].replace(" ", "\n", 1) for s in data["steps"]]
    if after is not None:
        axes.bar(len(labels), after - floor, bottom=floor, color=AFTER, width=0.6)
        _label(axes, len(labels), after, f"{after:.4g}")
        labels.append("after")
    for index, level in enumerate(levels[:len(labels) - 1], start=1):
        axes.plot([index - 0.7, index - 0.3], [level, level], color="#555", lw=0.8)
    for value, style, text in lines:
        axes.axhline(value, color="#222", lw=1, ls=style, label=text)
    axes.set_ylim(floor, high + pad)
    axes.set_xticks(range(len(labels)), labels, fontsize=8)
    axes.set_xlabel("kept layers, in the order they were measured")
    axes.set_ylabel(axis_label(data["shape"], unit), fontsize=9)
    axes.set_title(f"{data['shape']}: first baseline to after, per kept layer", fontsize=10)
    if lines:
        axes.legend(fontsize=8, loc="best")
    return svg(figure, f"waterfall-{data['shape']}")


def _reference_lines(data: dict[str, Any]) -> list[tuple[float, str, str]]:
    """``(value, line style, legend text)`` of the reference and the gate, where known."""
    reference, unit = data["reference"], data["unit"]
    if reference is None:
        return []
    lines = [(reference, "--", f"reference {reference:g} {unit}")]
    if data["gate"]:
        value = gate_value(reference, data["gate"], unit)
        lines.append((value, ":", f"gate: {data['gate']:.0%} of the reference ({value:.4g})"))
    return lines


def _improves(delta: float, unit: str) -> bool:
    return delta > 0 if higher_is_better(unit) else delta < 0


def _label(axes: Any, x: float, y: float, text: str) -> None:
    axes.annotate(text, (x, y), xytext=(0, 2), textcoords="offset points", ha="center",
                  va="bottom", fontsize=8)


@drawn
def distribution(layer: str, action: str, shape: str, unit: str,
                 runs: dict[str, list[list[float]]]) -> Markup:
    """Histograms of ``runs`` (``{arm: [samples of one run, ...]}``) of one layer and shape.

    A run without samples counts with its value alone (``[value]``).
    """
    pooled = {arm: [v for run in arm_runs for v in run] for arm, arm_runs in runs.items()}
    every = [v for values in pooled.values() for v in values]
    bins = max(5, min(40, round(math.sqrt(len(every)))))
    span = (min(every), max(every)) if min(every) < max(every) else (every[0] - 0.5,
                                                                     every[0] + 0.5)
    figure = new_figure(6.4, 3.4)
    axes = figure.subplots()
    for arm, values in pooled.items():
        label = f"{arm}: {len(runs[arm])} runs, {len(values)} steps"
        axes.hist(values, bins=bins, range=span, color=ARM_COLOURS.get(arm), alpha=0.55,
                  label=label, histtype="stepfilled", edgecolor=ARM_COLOURS.get(arm))
    axes.set_xlabel(axis_label(shape, unit), fontsize=9)
    axes.set_ylabel("steps per bin")
    axes.set_title(f"{layer} ({action}): {shape}, baseline vs candidate", fontsize=10)
    axes.legend(fontsize=8)
    return svg(figure, f"distribution-{layer}-{shape}")
