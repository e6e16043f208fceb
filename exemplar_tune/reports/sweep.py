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

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import nccl_tuner
from markupsafe import Markup

from exemplar_tune.diagnose.nccl_tests import human
from exemplar_tune.orchestration.stats import CONFIDENCE, t_ppf
from exemplar_tune.reports.html import axis_label, drawn, new_figure, render, svg
from exemplar_tune.reports.provenance import made, made_line
from exemplar_tune.terminal import escaped


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


# NVIDIA (Mellanox) adapters by the hca_type the mlx5 driver reports: "MT" and the PCI device
# ID in decimal (0x101b = 4123 ...; device names from the PCI ID Repository, pci-ids.ucw.cz)
ADAPTERS = {"MT4123": "ConnectX-6", "MT4125": "ConnectX-6 Dx", "MT4127": "ConnectX-6 Lx",
            "MT4129": "ConnectX-7", "MT4131": "ConnectX-8", "MT41686": "BlueField-2",
            "MT41692": "BlueField-3"}


def fabric_words(identity: dict[str, Any]) -> str:
    """A sweep's fabric in words: ``ConnectX-7 (MT4129), firmware 28.39.1002, InfiniBand at
    400 Gb/s``."""
    if not identity or not identity.get("hca_types"):
        return "no RDMA device seen"
    models = ", ".join(f"{ADAPTERS[t]} ({t})" if t in ADAPTERS else t
                       for t in identity["hca_types"])
    firmware = ", ".join(identity.get("firmware") or []) or "unknown"
    links = " and ".join(identity.get("link_layers") or []) or "unknown link layer"
    rates = " and ".join(f"{r:g} Gb/s" for r in identity.get("rates_gbps") or [])
    return f"{models}, firmware {firmware}, {links}" + (f" at {rates}" if rates else "")


def _steps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each step's arms, the incumbent first (the reference every change is measured against:
    its runs, no change)."""
    decision = next((d for d in doc["decisions"] if d["layer"] == "fabric"), None)
    if not decision:
        return []
    runs = _runs_per_arm(doc)
    steps = []
    for step in decision["comparisons"]:
        incumbent = step.get("incumbent")
        reference = ([{"arm": incumbent, "runs": runs.get(incumbent, 0), "incumbent": True}]
                     if incumbent else [])
        steps.append({**step, "arms": reference + [dict(a, incumbent=False)
                                                   for a in step["arms"]]})
    return steps


def _runs_per_arm(doc: dict[str, Any]) -> dict[str, int]:
    """Runs of each arm (of its first shape: every run measures every shape)."""
    counts: dict[tuple[str, str], int] = {}
    for sample in doc["samples"]:
        key = (sample["arm"], sample["shape"])
        counts[key] = counts.get(key, 0) + 1
    out: dict[str, int] = {}
    for (arm, _shape), count in counts.items():
        out.setdefault(arm, count)
    return out


def tuner_text(summary: dict[str, Any]) -> str:
    """The tuner table a per-size sweep recorded, as the file's rows with their notes."""
    return nccl_tuner.render(summary["tuner_rows"], "the sweep's tuner table").rstrip("\n")


def markdown(doc: dict[str, Any]) -> str:
    """The sweep as Markdown: each step's arms against the incumbent, then the per-size table
    (values escaped: :func:`exemplar_tune.terminal.escaped`)."""
    doc = escaped(doc)
    exp, summary = doc["experiment"], (doc["experiment"].get("summary") or {}).get("sweep", {})
    out = [f"# exemplar-tune sweep {exp['id']}", "", made_line(made(exp["profile_name"])), "",
           f"status **{exp['status']}**; fabric {fabric_words(summary.get('fabric') or {})}; "
           f"chosen **{summary.get('chosen', '-')}**", ""]
    if summary.get("tuner_rows"):
        out += ["## Tuner table (nccl_tuner.conf)", "", "```", tuner_text(summary), "```", ""]
    for step in _steps(doc):
        out += [f"## {step['step']}: {step['outcome']} {step['chosen']} after "
                f"{step['rounds']} rounds", "",
                "| arm | runs | change vs incumbent | interval | left the race |",
                "|---|---:|---:|---|---|"]
        out += [f"| {a['arm']} (incumbent) | {a['runs']} | reference | – | – |"
                if a.get("incumbent") else
                f"| {a['arm']} | {a['runs']} | {a['rel_change']:+.2%} | [{a['ci_low']:+.2%}, "
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
    return render("sweep.html.j2", exp=exp, fabric=fabric_words(summary.get("fabric") or {}),
                  made=made_line(made(exp["profile_name"])),
                  chosen=summary.get("chosen", "-"), validation=summary.get("validation"),
                  tuner=tuner_text(summary) if summary.get("tuner_rows") else "",
                  steps=_steps(doc), rows=rows, confidence=f"{CONFIDENCE:.0%}",
                  charts=[chart(rows, shape) for shape in dict.fromkeys(r["shape"] for r in rows)])


@drawn
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
