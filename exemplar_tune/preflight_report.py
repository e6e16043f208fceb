"""Render a preflight document: terminal table, Markdown, self-contained HTML."""

from __future__ import annotations

import html
import json
import os
import sys
from collections import Counter
from typing import Any

from exemplar_tune.hostlist import compress, without_host

SYMBOL = {"fail": "FAIL", "warn": "WARN", "pass": "PASS", "skip": "skip"}
COLOUR = {"fail": "\033[31m", "warn": "\033[33m", "pass": "\033[32m", "skip": "\033[2m"}
RESET = "\033[0m"


def use_colour(stream: Any = sys.stdout) -> bool:
    """Colour only on a terminal and only when ``NO_COLOR`` is not set."""
    return stream.isatty() and "NO_COLOR" not in os.environ


def finding_text(observed: Any, expected: Any) -> str:
    """``observed X, expected Y`` in full; for two mappings only the keys that differ."""
    if isinstance(observed, dict) and isinstance(expected, dict) and set(expected) <= set(observed):
        differ = [k for k in expected if observed[k] != expected[k]]
        if differ:
            return ", ".join(f"{k}: observed {_json(observed[k])}, expected {_json(expected[k])}"
                             for k in differ)
    return f"observed {_json(observed)}, expected {_json(expected)}"


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def table(doc: dict[str, Any], colour: bool = False, details: bool = False) -> str:
    """The fleet view (one line per check and finding, hosts folded), then with ``details``
    or a single host each host's checks by layer; unreachable hosts folded by reason."""
    paint = (lambda s, t: f"{COLOUR[s]}{t}{RESET}") if colour else (lambda s, t: t)
    counts = Counter(data["status"] for data in doc["hosts"].values())
    head = f"profile {doc['profile']}; {len(doc['hosts'])} host(s) checked"
    if len(doc["hosts"]) > 1:
        head += ": " + ", ".join(f"{counts[s]} {s}" for s in ("fail", "warn", "pass") if counts[s])
    lines = [head + (f", {len(doc['unreachable'])} unreachable" if doc["unreachable"] else "")]
    if len(doc["hosts"]) > 1:
        lines += _fleet_lines(doc, paint)
    if len(doc["hosts"]) == 1 or details:
        for host, data in sorted(doc["hosts"].items()):
            lines.append(f"\n### {host}: {paint(data['status'], data['status'].upper())}")
            lines += _host_lines(data["results"], paint)
    for reason, hosts in fold_reasons(doc["unreachable"]).items():
        lines.append(f"\n### {compress(hosts)}: UNREACHABLE: {reason}")
    return "\n".join(lines)


def fold_reasons(reasons: dict[str, str]) -> dict[str, list[str]]:
    """Hosts by the reason given for them, the host's own name in it written ``{host}``."""
    folded: dict[str, list[str]] = {}
    for host, reason in sorted(reasons.items()):
        folded.setdefault(without_host(str(reason), host), []).append(host)
    return folded


def _fleet_lines(doc: dict[str, Any], paint: Any) -> list[str]:
    if not doc["groups"]:
        return ["  no failing or warning check on any host"]
    lines = []
    for g in doc["groups"]:
        lines.append(f"  {paint(g['status'], SYMBOL[g['status']]):<4}  {g['id']}  "
                     f"{g['count']}/{g['total']} hosts  {g['hostlist']}")
        lines.append(f"        {g['detail']}")
        lines.append(f"        {finding_text(g['observed'], g['expected'])}")
    return lines


def _host_lines(results: list[dict[str, Any]], paint: Any) -> list[str]:
    lines, layer = [], None
    for r in results:
        if r["layer"] != layer:
            layer = r["layer"]
            lines.append(f"== {layer}")
        lines.append(f"  {paint(r['status'], SYMBOL[r['status']]):<4}  {r['id']}: {r['detail']}")
        if r["status"] in ("fail", "warn"):
            lines.append(f"        {finding_text(r['observed'], r['expected'])}")
            lines += [f"        evidence {e}" for e in r["evidence"]]
            lines.append(f"        risk: {r['risk']}")
            knob = f" [knob {r['knob']}]" if r["knob"] else ""
            lines.append(f"        fix:  {r['fix']}{knob}")
    return lines


def markdown(doc: dict[str, Any]) -> str:
    """A Markdown report: fleet summary, then each host's checks by layer."""
    out = [f"# exemplar-tune preflight ({doc['profile']})", ""]
    if doc["groups"]:
        out += ["| status | check | hosts | fix |", "|---|---|---|---|"]
        out += [f"| {g['status']} | `{g['id']}` | {g['count']}/{g['total']} | {_md(g['fix'])} |"
                for g in doc["groups"]]
    else:
        out.append("No failing or warning check.")
    for host, data in doc["hosts"].items():
        out += ["", f"## {host} — {data['status']}", "",
                "| layer | status | check | finding | evidence |", "|---|---|---|---|---|"]
        out += [f"| {r['layer']} | {r['status']} | `{r['id']}` | {_md(r['detail'])} | "
                f"{_md(', '.join(r['evidence']))} |" for r in data["results"]]
    out += [f"\n**{host}: unreachable** — {_md(reason)}" for host, reason in
            doc["unreachable"].items()]
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;
text-align:left;vertical-align:top}.fail{background:#fdd}.warn{background:#ffe8b0}
.pass{background:#e3f6e3}.skip{color:#888}code{font-size:90%}"""


def html_report(doc: dict[str, Any]) -> str:
    """A self-contained HTML page (inline CSS, no scripts, no external resources)."""
    esc = html.escape
    rows = "".join(
        f"<tr class='{g['status']}'><td>{g['status']}</td><td><code>{esc(g['id'])}</code></td>"
        f"<td>{g['count']}/{g['total']}</td><td>{esc(g['fix'])}</td></tr>" for g in doc["groups"])
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>exemplar-tune "
             f"preflight</title><style>{CSS}</style></head><body>",
             f"<h1>exemplar-tune preflight — profile {esc(doc['profile'])}</h1>",
             f"<table><tr><th>status</th><th>check</th><th>hosts</th><th>fix</th></tr>{rows}"
             "</table>" if rows else "<p>No failing or warning check.</p>"]
    for host, data in doc["hosts"].items():
        cells = "".join(
            f"<tr class='{r['status']}'><td>{r['layer']}</td><td>{r['status']}</td>"
            f"<td><code>{esc(r['id'])}</code></td><td>{esc(r['detail'])}</td>"
            f"<td>{esc(', '.join(r['evidence']))}</td><td>{esc(r['fix'])}</td></tr>"
            for r in data["results"])
        parts.append(f"<h2>{esc(host)} — {data['status']}</h2><table><tr><th>layer</th>"
                     f"<th>status</th><th>check</th><th>finding</th><th>evidence</th>"
                     f"<th>fix</th></tr>{cells}</table>")
    parts += [f"<p class='fail'>{esc(h)}: unreachable — {esc(r)}</p>"
              for h, r in doc["unreachable"].items()]
    return "".join(parts) + "</body></html>\n"
