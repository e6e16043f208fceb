"""Render a preflight document: terminal table, Markdown, self-contained HTML.

The table and the Markdown are rendered from the document escaped
(:func:`exemplar_tune.terminal.escaped`): a host name, fact or reason shows what it holds and
never starts a line; the table's colours are the only terminal codes in them. The HTML page
is autoescaped."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from typing import Any

from exemplar_tune.checks.base import NOT_APPLICABLE, UNKNOWN
from exemplar_tune.fleet.hostlist import compress, named, without_host
from exemplar_tune.profile import GIVEN
from exemplar_tune.reports.html import render
from exemplar_tune.reports.provenance import made_line
from exemplar_tune.terminal import escape, escaped
from exemplar_tune.verdict import HOST_CLASSES, Target

SYMBOL = {"fail": "FAIL", "warn": "WARN", "pass": "PASS", "skip": "skip"}
COLOUR = {"fail": "\033[31m", "warn": "\033[33m", "pass": "\033[32m", "skip": "\033[2m",
          "unknown": "\033[35m"}
RESET = "\033[0m"
# A skipped result as its class names it (what the headline counts).
SKIP_SYMBOL = {NOT_APPLICABLE: "n/a", UNKNOWN: "UNKN"}


def use_colour(stream: Any = sys.stdout) -> bool:
    """Colour only on a terminal and only when ``NO_COLOR`` is not set."""
    return stream.isatty() and "NO_COLOR" not in os.environ


def finding_text(observed: Any, expected: Any) -> str:
    """``observed X, expected Y`` in full; for two mappings only the keys that differ. One
    line, escaped (strings as they are, anything else as JSON, before escaping)."""
    if isinstance(observed, dict) and isinstance(expected, dict) and set(expected) <= set(observed):
        differ = [k for k in expected if observed[k] != expected[k]]
        if differ:
            return escape(", ".join(f"{k}: observed {_json(observed[k])}, expected "
                                    f"{_json(expected[k])}" for k in differ))
    return escape(f"observed {_json(observed)}, expected {_json(expected)}")


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def table(doc: dict[str, Any], colour: bool = False, details: bool = False) -> str:
    """The headline (profile, host verdicts, check counts), the fleet view (one line per
    check and finding, hosts folded), then with ``details`` or a single host each host's
    verdict, next action and checks by layer; unreachable hosts folded by reason. Values
    are escaped; ``colour`` adds the only terminal codes."""
    doc = escaped(doc, keep=("observed", "expected"))  # finding_text escapes those
    paint = (lambda s, t: f"{COLOUR[s]}{t}{RESET}") if colour else (lambda s, t: t)
    lines = headline(doc) + _profile_lines(doc)
    if len(doc["hosts"]) > 1:
        lines += _fleet_lines(doc, paint)
    if len(doc["hosts"]) == 1 or details:
        for host, data in sorted(doc["hosts"].items()):
            verdict = doc["verdicts"][host]
            status = paint(_paint_key(data["status"]), data["status"].upper())
            lines.append(f"\n### {host}: {status} ({_klass(verdict)})")
            lines += [f"  {line}" for line in verdict_lines(verdict)]
            lines += _host_lines(data["results"], paint)
    target = Target(**doc.get("target") or {})
    for reason, hosts in fold_reasons(doc["unreachable"]).items():
        lines.append(f"\n### {compress(hosts)}: UNREACHABLE (unknown): {reason}")
        lines.append(f"  next: investigate: {target.command(['facts'], compress(hosts))}")
    return "\n".join(lines)


def headline(doc: dict[str, Any]) -> list[str]:
    """The profile chosen, the hosts by verdict and the checks by outcome, e.g.
    ``profile h100-x86; 8 host(s): 1 health, 7 tuning; checks: 2 fail, 9 warn, ...``."""
    classes = Counter(v["class"] for v in doc["verdicts"].values())
    hosts = ", ".join(f"{classes[c]} {c}" for c in HOST_CLASSES if classes[c])
    checks = ", ".join(f"{n} {k}" for k, n in doc["summary"].items())
    return [f"profile {doc['profile']}; {len(doc['verdicts'])} host(s): {hosts or 'none'}; "
            f"checks: {checks}"]


def verdict_lines(verdict: dict[str, Any]) -> list[str]:
    """A verdict's reason and its actions, ``next: KIND: COMMAND`` (or its detail)."""
    lines = [f"why:  {verdict['reason']}"] if verdict["reason"] else []
    for step in verdict["actions"]:
        if step["kind"] != "none" or len(verdict["actions"]) > 1:
            lines.append(f"next: {step['kind']}: {step.get('command') or step.get('detail', '')}"
                         .rstrip(": "))
    return lines or ["next: none"]


def _paint_key(status: str) -> str:
    return status if status in COLOUR else "unknown"


def _profile_lines(doc: dict[str, Any]) -> list[str]:
    """Which profile each kind of host got and why, when ``auto`` chose (hosts folded)."""
    chosen: dict[tuple[str, str], list[str]] = {}
    for host, data in sorted(doc["hosts"].items()):
        if data.get("profile_reason", GIVEN) != GIVEN:
            chosen.setdefault((data["profile"], data["profile_reason"]), []).append(host)
    return [f"  profile {name} for {compress(hosts)} ({why})"
            for (name, why), hosts in sorted(chosen.items(), key=lambda kv: -len(kv[1]))]


def fold_reasons(reasons: dict[str, str]) -> dict[str, list[str]]:
    """Hosts by the reason given for them: hosts whose reasons differ only in their own
    names are one group, the name written ``<host>`` (``hostlist.named``)."""
    folded: dict[str, list[str]] = {}
    for host, reason in sorted(reasons.items()):
        folded.setdefault(without_host(str(reason), host), []).append(host)
    return {named(reason, hosts): hosts for reason, hosts in folded.items()}


def _fleet_lines(doc: dict[str, Any], paint: Any) -> list[str]:
    if not doc["groups"]:
        return ["  no failing or warning check on any host"]
    lines = []
    for g in doc["groups"]:
        lines.append(f"  {paint(g['status'], SYMBOL[g['status']]):<4}  {g['id']}  "
                     f"{g['count']}/{g['total']} hosts  {g['hostlist']}  ({_klass(g)})")
        lines.append(f"        {g['detail']}")
        lines.append(f"        {finding_text(g['observed'], g['expected'])}")
        lines += [f"        {line}" for line in verdict_lines({"reason": "", **g})]
    return lines


def _klass(result: dict[str, Any]) -> str:
    return result["class"] + (", pending reboot" if result.get("pending_reboot") else "")


def _host_lines(results: list[dict[str, Any]], paint: Any) -> list[str]:
    lines, layer = [], None
    for r in results:
        if r["layer"] != layer:
            layer = r["layer"]
            lines.append(f"== {layer}")
        symbol = SKIP_SYMBOL.get(r["class"], "skip") if r["status"] == "skip" else SYMBOL[
            r["status"]]
        key = "unknown" if r["class"] == UNKNOWN else r["status"]
        lines.append(f"  {paint(key, symbol):<4}  {r['id']}: {r['detail']}")
        if r["status"] in ("fail", "warn") or r.get("pending_reboot"):
            lines.append(f"        {_klass(r)}; {finding_text(r['observed'], r['expected'])}")
            lines += [f"        evidence {e}" for e in r["evidence"]]
            lines.append(f"        risk: {r['risk']}")
            lines += [f"        {line}" for line in verdict_lines({"reason": "", **r})]
    return lines


def markdown(doc: dict[str, Any]) -> str:
    """A Markdown report: the fleet summary, then each layer's findings with their hosts
    folded (as the HTML page); values escaped."""
    doc = escaped(doc)
    out = [f"# exemplar-tune preflight ({doc['profile']})", "", headline(doc)[0], ""]
    if doc.get("made"):
        out += [made_line(doc["made"]), ""]
    if doc["groups"]:
        out += ["| status | class | check | hosts | which | next |", "|---|---|---|---|---|---|"]
        out += [f"| {g['status']} | {_klass(g)} | `{g['id']}` | {g['count']}/{g['total']} | "
                f"{g['hostlist']} | {_md('; '.join(verdict_lines({'reason': '', **g})))} |"
                for g in doc["groups"]]
    else:
        out.append("No failing or warning check.")
    for section in layer_sections(doc):
        out += ["", f"## {section['layer']}", ""]
        out += [f"- **{g['status']}** `{g['id']}` on {g['hostlist']} ({g['count']}/"
                f"{g['total']}): {_md(g['detail'])}; evidence: {_md(', '.join(g['evidence']))}"
                for g in section["findings"]]
        out += [f"- {k['symbol']} `{k['id']}` on {k['hostlist']}: {_md(k['detail'])}"
                for k in section["skipped"]]
        if section["passed"]:
            out.append("- pass everywhere: " + ", ".join(f"`{c}`" for c in section["passed"]))
    out += [f"\n**{compress(hosts)}: unreachable** — {_md(reason)}" for reason, hosts in
            fold_reasons(doc["unreachable"]).items()]
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def value_text(value: Any) -> str:
    """An observed or expected value as text: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))


def layer_sections(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The fleet's results by layer, hosts folded: ``{layer, findings, skipped, passed}``.

    Findings are the failing and warning groups of ``doc`` (one per check and finding, with
    its hostlist), their values as text; skipped checks are folded by check and reason; passed
    are the checks that passed on every host that ran them. The page grows with the number of
    distinct findings, not with the number of hosts.
    """
    order = list(dict.fromkeys(r["layer"] for data in doc["hosts"].values()
                               for r in data["results"]))
    sections = {layer: {"layer": layer, "findings": [], "skipped": [], "passed": []}
                for layer in order}
    for group in doc["groups"]:
        sections[group["layer"]]["findings"].append(dict(
            group, observed=value_text(group["observed"]),
            expected=value_text(group["expected"])))
    skipped: dict[tuple[str, str, str, str], list[str]] = {}
    for host, data in doc["hosts"].items():
        for r in data["results"]:
            if r["status"] == "skip":
                skipped.setdefault((r["layer"], r["id"], r["class"],
                                    without_host(r["detail"], host)), []).append(host)
    for (layer, check, klass, detail), hosts in sorted(skipped.items(),
                                                        key=lambda kv: kv[0][2] != UNKNOWN):
        sections[layer]["skipped"].append({"id": check, "detail": detail, "class": klass,
                                           "symbol": SKIP_SYMBOL[klass],
                                           "hostlist": compress(hosts), "count": len(hosts)})
    layer_of = {r["id"]: r["layer"] for data in doc["hosts"].values() for r in data["results"]}
    for check in passed_everywhere(doc):
        sections[layer_of[check]]["passed"].append(check)
    return list(sections.values())


def passed_everywhere(doc: dict[str, Any]) -> list[str]:
    """Ids of the checks that passed on every host that ran them, in first-seen order."""
    seen: dict[str, bool] = {}
    for data in doc["hosts"].values():
        for r in data["results"]:
            if r["status"] != "skip":
                seen[r["id"]] = seen.get(r["id"], True) and r["status"] == "pass"
    return [check for check, passed in seen.items() if passed]


def html_report(doc: dict[str, Any]) -> str:
    """A self-contained HTML page (``templates/preflight.html.j2``, autoescaped; inline CSS,
    no scripts, no external resources): the fleet summary, then each layer's findings with
    the hosts that have each one folded into a hostlist."""
    return render("preflight.html.j2", doc=doc, sections=layer_sections(doc),
                  made=made_line(doc["made"]) if doc.get("made") else "",
                  unreachable=[(compress(hosts), reason) for reason, hosts in
                               fold_reasons(doc["unreachable"]).items()],
                  summary=headline(doc)[0])
