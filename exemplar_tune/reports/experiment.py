"""``exemplar-tune report``: one experiment as Markdown or a self-contained HTML page.

Everything comes from the ledger's ``show`` document. The page (``templates/tune.html.j2``,
autoescaped) shows per workload shape a waterfall from the first baseline through each kept
layer to the final measurement and the reference; each layer's decision with its interval and
runs; the step-time distributions of the baseline and candidate runs behind every decision
(charts: :mod:`exemplar_tune.reports.charts`, inline SVG); the changes the kept layers made on
the hosts, hosts with the same changes in one group; and the preflight before tuning. No
scripts, no external resources.
"""

from __future__ import annotations

import difflib
import json
import statistics
from typing import Any

from exemplar_tune.fleet.hostlist import compress, without_host
from exemplar_tune.ledger import NOT_RESTORED, RESTORED
from exemplar_tune.reports import charts as run_charts
from exemplar_tune.reports.change import boot_time, change_lines, problem_lines
from exemplar_tune.reports.html import render
from exemplar_tune.reports.provenance import made, made_line
from exemplar_tune.terminal import escaped

SHOWN_LINES = 8  # of a changed file's removed or added lines


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
    """The experiment as Markdown: layers, decisions with intervals, the gap closed (values
    escaped: :func:`exemplar_tune.terminal.escaped`)."""
    doc = escaped(doc)
    exp = doc["experiment"]
    out = [f"# exemplar-tune experiment {exp['id']}", "", made_line(made(exp["profile_name"])),
           "", f"{exp['kind']}, profile {exp['profile_name']}, status **{exp['status']}**", "",
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


def show_lines(doc: dict[str, Any]) -> list[str]:
    """``exemplar-tune show`` as text: the experiment; per layer its status, the hosts that
    changed it with their knobs (before -> after as recorded, boot-time changes marked;
    hosts with the same changes folded), the hosts it failed on or could not reach, and
    where a restore put it back or not; then the decisions."""
    exp = doc["experiment"]
    lines = [f"{exp['id']} ({exp['kind']}, {exp['status']}), profile {exp['profile_name']}"]
    for layer in doc["layers"]:
        lines.append(f"  {layer['layer']:<8} {layer['status']}")
        lines += [f"    {line}" for line in layer_host_lines(
            [row for row in doc["hosts"] if row["layer"] == layer["layer"]])]
    lines += [f"  {d['layer']}: {d['action']}: {d['reason']}" for d in doc["decisions"]]
    return lines


def layer_host_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One layer's host rows (in recorded order) as text: per host its newest change, the
    failure of its newest change run, and its newest restore since that change."""
    changed: dict[str, list[dict[str, Any]]] = {}
    broken: dict[str, dict[str, str]] = {"failed": {}, "unreachable": {}}
    restores: dict[str, dict[str, Any]] = {}
    for row in rows:
        host = row["host"]
        if row["status"] in (RESTORED, NOT_RESTORED):
            restores[host] = row
            continue
        if row["changed"]:
            changed[host] = row["changed"]
            restores.pop(host, None)
        for kind, hosts in broken.items():
            hosts.pop(host, None)
            if row["status"] == kind:
                hosts[host] = row["error"] or kind
    total = len({row["host"] for row in rows})
    lines = _change_lines(changed, total)
    lines += [line[2:] for line in problem_lines(broken)]
    return lines + _restore_lines(restores, changed)


def _change_lines(changed: dict[str, list[dict[str, Any]]], total: int) -> list[str]:
    """Hosts with the same changes folded, most hosts first, each change's lines after."""
    folded: dict[str, list[str]] = {}
    for host, knobs in sorted(changed.items()):
        folded.setdefault(without_host(json.dumps(knobs, sort_keys=True), host), []).append(host)
    lines = []
    for key, hosts in sorted(folded.items(), key=lambda kv: (-len(kv[1]), kv[1])):
        knobs = json.loads(key)
        names = ", ".join(dict.fromkeys(k["knob"] for k in knobs))
        reboot = "; REBOOT REQUIRED to take effect" if any(map(boot_time, knobs)) else ""
        lines.append(f"{compress(hosts)} ({len(hosts)}/{total}): changed {names}{reboot}")
        lines += [line[4:] for k in knobs for c in k.get("changes") or []
                  for line in change_lines(c, False)]
    return lines


def _restore_lines(restores: dict[str, dict[str, Any]],
                   changed: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Where the newest restore put the layer back (boot-time changes: at the next boot),
    and where not, folded by the reason."""
    done = sorted(h for h, row in restores.items() if row["status"] == RESTORED)
    lines = []
    if done:
        at = max(restores[h]["recorded_at"] for h in done)[:19] + "Z"
        boot = [h for h in done if any(map(boot_time, changed.get(h, [])))]
        lines.append(f"restored on {compress(done)} ({at})" + (
            f"; boot-time: in effect after the next boot of {compress(boot)}" if boot else ""))
    missed: dict[str, list[str]] = {}
    for host, row in sorted(restores.items()):
        if row["status"] == NOT_RESTORED:
            missed.setdefault(row["error"] or "not restored", []).append(host)
    return lines + [f"NOT RESTORED {compress(hosts)}: {why}" for why, hosts in missed.items()]


def run_values(doc: dict[str, Any]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """The runs of every ``(layer, arm, shape)``, in run order."""
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for sample in doc["samples"]:
        runs.setdefault((sample["layer"], sample["arm"], sample["shape"]), []).append(sample)
    return runs


def shapes(doc: dict[str, Any]) -> list[str]:
    """The workload shapes measured, in recorded order."""
    summary = (doc["experiment"].get("summary") or {}).get("shapes") or {}
    return list(dict.fromkeys([s["shape"] for s in doc["samples"]] + list(summary)))


def waterfall_data(doc: dict[str, Any], shape: str) -> dict[str, Any] | None:
    """One shape's way from the first baseline to the final measurement; ``None`` unmeasured.

    Each kept layer is a step of its measured relative change (mean of the candidate runs
    over the mean of its baseline runs) applied to the level before it; what the steps leave
    between their end and the final measurement is one more step, ``run-to-run drift``.
    """
    runs = run_values(doc)
    mean = {key: statistics.fmean(r["value"] for r in rows) for key, rows in runs.items()}
    order = [layer["layer"] for layer in doc["layers"] if (layer["layer"], "baseline", shape)
             in mean]
    if not order:
        return None
    summary = doc["experiment"].get("summary") or {}
    entry = (summary.get("shapes") or {}).get(shape, {})
    start = entry.get("before", mean[(order[0], "baseline", shape)])
    kept = {d["layer"] for d in doc["decisions"] if d["action"] == "keep"}
    level, steps = start, []
    for layer in order:
        if layer in kept and (layer, "candidate", shape) in mean:
            ratio = mean[(layer, "candidate", shape)] / mean[(layer, "baseline", shape)] - 1
            steps.append({"label": layer, "delta": level * ratio, "other": False})
            level += level * ratio
    after = entry.get("after")
    if after is not None and abs(after - level) > 1e-9 * abs(after):
        steps.append({"label": "run-to-run drift", "delta": after - level, "other": True})
    return {"shape": shape, "unit": runs[(order[0], "baseline", shape)][0]["unit"],
            "start": start, "steps": steps, "after": after,
            "reference": entry.get("reference"), "gate": summary.get("gate")}


def decision_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per layer in order: status, decision (or none) and per shape change, interval, runs
    (as text)."""
    decisions = {d["layer"]: d for d in doc["decisions"]}
    rows = []
    for layer in doc["layers"]:
        decision = decisions.get(layer["layer"]) or {}
        rows.append({"layer": layer["layer"], "status": layer["status"],
                     "action": decision.get("action"), "reason": decision.get("reason", ""),
                     "comparisons": [_comparison_text(c)
                                     for c in decision.get("comparisons") or []]})
    return rows


def _comparison_text(c: dict[str, Any]) -> dict[str, str]:
    """One shape of a decision as text: change, interval (with its confidence), runs."""
    confidence = f"{c['confidence']:.0%}: " if "confidence" in c else ""
    return {"shape": c["shape"], "change": f"{c['rel_change']:+.2%}",
            "interval": f"{confidence}{c['ci_low']:+.2%} .. {c['ci_high']:+.2%}",
            "runs": f"{c['n_baseline']} + {c['n_candidate']}", "verdict": c.get("verdict", "")}


def distribution_charts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One chart per decided layer and shape with runs in both arms: ``{layer, shape, svg}``."""
    runs = run_values(doc)
    charts = []
    for decision in doc["decisions"]:
        layer = decision["layer"]
        for shape in shapes(doc):
            arms = {arm: runs.get((layer, arm, shape), []) for arm in ("baseline", "candidate")}
            if not all(arms.values()):
                continue
            samples = {arm: [r["samples"] or [r["value"]] for r in rows]
                       for arm, rows in arms.items()}
            charts.append({"layer": layer, "shape": shape, "svg": run_charts.distribution(
                layer, decision["action"], shape, arms["baseline"][0]["unit"], samples)})
    return charts


def host_groups(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The changes of the kept layers, hosts with identical changes in one group.

    Per host and kept layer the newest record that changed something counts (a layer is
    applied once per candidate block). ``[{hosts, hostlist, changes: [{layer, knob, path,
    before, after}]}]``, groups in the order of their first host.
    """
    kept = {d["layer"] for d in doc["decisions"] if d["action"] == "keep"}
    newest: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in doc["hosts"]:
        if record["layer"] in kept and record["changed"]:
            newest[(record["host"], record["layer"])] = record["changed"]
    per_host: dict[str, list[dict[str, Any]]] = {}
    for layer in (entry["layer"] for entry in doc["layers"]):
        for (host, changed_layer), knobs in newest.items():
            if changed_layer == layer:
                per_host.setdefault(host, []).extend(_change_rows(layer, knobs))
    groups: dict[str, dict[str, Any]] = {}
    for host in sorted(per_host):
        key = repr(per_host[host])
        groups.setdefault(key, {"hosts": [], "changes": per_host[host]})["hosts"].append(host)
    return [dict(g, hostlist=compress(g["hosts"])) for g in groups.values()]


def _change_rows(layer: str, knobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per changed path; a knob's first row has ``span``, its number of rows."""
    rows = []
    for knob in knobs:
        changes = knob.get("changes") or []
        for index, change in enumerate(changes):
            before, after = changed_lines(change.get("before") or "", change.get("after") or "")
            rows.append({"layer": layer, "knob": knob["knob"], "path": change["path"],
                         "before": before, "after": after, "span": 0 if index else len(changes),
                         "reboot": bool(knob.get("reboot_required"))})
    return rows


def changed_lines(before: str, after: str) -> tuple[str, str]:
    """What changed between two file contents: the whole of one-line values, else the
    removed and the added lines, at most :data:`SHOWN_LINES` each."""
    old, new = before.splitlines(), after.splitlines()
    if len(old) <= 1 and len(new) <= 1:
        return _shown(old, "(empty)"), _shown(new, "(empty)")
    removed, added = [], []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, low, high, start, end in matcher.get_opcodes():
        if tag != "equal":
            removed += old[low:high]
            added += new[start:end]
    return (_shown(removed, "(empty)" if not old else "(lines added only)"),
            _shown(added, "(empty)" if not new else "(lines removed only)"))


def _shown(lines: list[str], nothing: str) -> str:
    if not lines:
        return nothing
    more = len(lines) - SHOWN_LINES
    return "\n".join(lines[:SHOWN_LINES]) + (f"\n... {more} more line(s)" if more > 0 else "")


def html_page(doc: dict[str, Any]) -> str:
    """The experiment as one self-contained HTML page (no scripts, nothing fetched)."""
    waterfalls = [data for data in (waterfall_data(doc, shape) for shape in shapes(doc))
                  if data is not None]
    decisions = decision_rows(doc)
    return render("tune.html.j2", exp=doc["experiment"], gate=_gate_text(doc).replace("**", ""),
                  made=made_line(made(doc["experiment"]["profile_name"])),
                  gap=gap_rows(doc), waterfalls=[run_charts.waterfall(d) for d in waterfalls],
                  decisions=decisions, distributions=distribution_charts(doc),
                  groups=host_groups(doc), preflight=preflight_groups(doc),
                  restored=[r["layer"] for r in decisions if r["action"] == "restore"])
