"""``dcgmi nvlink`` captures: link states (``-s`` / ``--link-status``) and error counters
(``-e -g N``, as a table or ``-j`` JSON), judged by the preflight checks ``gpu.nvlink-links``
and ``gpu.nvlink-errors`` (their own functions, so a capture and a live host read alike).

``-s`` prints a ``NvLink Link Status`` box, ``GPUs:`` then ``gpuId N:`` with one line of
states per GPU, ``NvSwitches:`` then ``physicalId N:`` and a line of states per switch (or
``No NvSwitches found.``), and ends with ``Key: Up=U, Down=D, Disabled=X, Not Supported=_``.
``_`` is a link the GPU does not have (an H800 lists 18 slots and has 8): not a fault. ``D``
is a link down, ``X`` one disabled. ``No NvSwitches found`` says only that DCGM sees no
NVSwitch entity (it needs its NVSwitch module for that): an HGX board prints it too, so it is
no evidence either way.

``-e`` prints an ``NVLINK Error Counts`` box for one GPU (``| GPU 0 |``), then ``| Link N |``
and ``| -> CRC FLIT Error | 0 |`` rows, and a closing border; ``-j`` writes the same as
``{"header": ["NVLINK Error Counts", "GPU 0"], "body": {"Link 0": {"children": {"CRC FLIT
Error": {"value": "0"}}}}}``. Counter names become the check's keys (``replay errors``).

A capture cut short (no ``Key:`` line, no closing border, JSON that does not end) is read
as far as it goes and says so: what it shows is reported, the rest is unknown, never clean.
"""

from __future__ import annotations

import json
import re
from typing import Any

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import SKIP
from exemplar_tune.diagnose.base import (
    FAIL,
    INFO,
    PASS,
    WARN,
    Analyzer,
    DiagnoseError,
    Finding,
    Report,
    cite,
    finding,
    numbered,
)

KIND = "dcgmi nvlink"
CHECK_LINKS = "gpu.nvlink-links"
CHECK_ERRORS = "gpu.nvlink-errors"
STATUS_TITLE = "NvLink Link Status"
ERRORS_TITLE = "NVLINK Error Counts"
_ENTITY = re.compile(r"^\s*(gpuId|physicalId) (\d+):\s*$")
_STATES = re.compile(r"^\s*[UDX_](?: [UDX_])*\s*$")
_GPU_ROW = re.compile(r"^\|\s*GPU (\d+)\s*\|")
_LINK_ROW = re.compile(r"^\|\s*Link (\d+)\s*\|")
_JSON_LINK = re.compile(r'"Link \d+"\s*:')
_BORDER = re.compile(r"^\+[-=+]+\+$")
_STATE_NAMES = {"U": "up", "D": "down", "X": "disabled", "_": "not supported"}


def sniff(text: str) -> bool:
    """The ``NvLink Link Status`` box, the ``NVLINK Error Counts`` table, or its JSON: a
    ``"body"`` of ``"Link N"`` entries with ``"children"`` (its header comes last, and a
    capture cut short lacks it)."""
    head = text[:4096]
    return f"|  {STATUS_TITLE}  |" in head or f"| {ERRORS_TITLE}" in head or (
        '"body"' in head and '"children"' in head and bool(_JSON_LINK.search(head)))


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    """The report of a ``dcgmi nvlink -s`` or ``-e`` capture; ``DiagnoseError`` when it holds
    neither a GPU's link states nor a link's counters."""
    profile = expectations.get("profile") or {}
    if STATUS_TITLE in text[:4096]:
        return _status_report(parse_link_status(text), source, profile)
    errors = parse_error_json(text) if '"body"' in text[:4096] else parse_error_table(text)
    return _errors_report(errors, source, profile)


# -- parsing -------------------------------------------------------------------------------


def parse_link_status(text: str) -> dict[str, Any]:
    """``{"gpus": [...], "nvswitches": [...], "nvswitches_listed": bool, "complete": bool}``;
    each entity ``{"id", "line", "states": "UUD_..."}``. ``DiagnoseError`` without a GPU."""
    found: dict[str, list[dict[str, Any]]] = {"gpuId": [], "physicalId": []}
    pending: dict[str, Any] | None = None
    listed, complete = True, False
    for n, line in numbered(text):
        if entity := _ENTITY.match(line):
            pending = {"id": int(entity.group(2)), "line": n, "states": ""}
            found[entity.group(1)].append(pending)
        elif pending is not None and not pending["states"] and _STATES.match(line):
            pending["states"] = line.replace(" ", "")
        elif "No NvSwitches found" in line:
            listed = False
        elif line.startswith("Key: Up=U"):
            complete = True
    gpus = [g for g in found["gpuId"] if g["states"]]
    if not gpus:
        raise DiagnoseError("dcgmi nvlink -s: no 'gpuId N:' line followed by its link states "
                            "(U D X _)")
    return {"gpus": gpus, "nvswitches": [s for s in found["physicalId"] if s["states"]],
            "nvswitches_listed": listed, "complete": complete}


def _counter_key(name: str) -> str:
    """``CRC FLIT Error`` -> ``crc flit errors`` (the keys of the error check's thresholds)."""
    key = " ".join(name.lower().split())
    return key + "s" if key.endswith("error") else key


def _counter_row(line: str) -> tuple[str, int] | None:
    """``(name, count)`` of a ``| -> CRC FLIT Error | 0 |`` row (split on its bars: one pass,
    whatever its blanks); ``None`` for another row or a count that is not whole (``N/A``)."""
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    if len(cells) != 2 or not cells[0].startswith("->") or not cells[1].isdigit():
        return None
    return cells[0][2:].strip(), int(cells[1])


def parse_error_table(text: str) -> dict[str, Any]:
    """``{"gpu", "links": {"0": {"replay errors": 0, ...}}, "lines", "complete"}`` of the
    table; a value that is not a whole count (``N/A``) is left out. ``DiagnoseError`` when no
    link row holds a counter."""
    gpu, link = None, None
    links: dict[str, dict[str, int]] = {}
    lines: list[int] = []
    last = ""
    for n, line in numbered(text):
        line = line.strip()
        if line:
            last = line
        if gpu is None and (m := _GPU_ROW.match(line)):
            gpu = int(m.group(1))
        elif m := _LINK_ROW.match(line):
            link = m.group(1)
        elif link is not None and (counter := _counter_row(line)):
            links.setdefault(link, {})[_counter_key(counter[0])] = counter[1]
            lines.append(n)
    if not links:
        raise DiagnoseError(f"dcgmi nvlink -e: no '| Link N |' row followed by '| -> ... "
                            f"Error | count |' rows under '{ERRORS_TITLE}'")
    return {"gpu": gpu, "links": links, "lines": lines, "complete": bool(_BORDER.match(last))}


def parse_error_json(text: str) -> dict[str, Any]:
    """The same as :func:`parse_error_table`, from ``dcgmi nvlink -e -j``; ``DiagnoseError``
    for JSON that does not parse (a capture cut short) or holds no link."""
    start = text.find("{")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:]) if start >= 0 else (None, 0)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("body"), dict):
        raise DiagnoseError("dcgmi nvlink -e -j: no whole JSON object with a \"body\" of "
                            "\"Link N\" entries (cut short?)")
    header = " ".join(str(h) for h in doc.get("header") or [])
    gpu = re.search(r"GPU (\d+)", header)
    links: dict[str, dict[str, int]] = {}
    for name, entry in doc["body"].items():
        number = re.fullmatch(r"Link (\d+)", str(name))
        children = entry.get("children") if isinstance(entry, dict) else None
        if not number or not isinstance(children, dict):
            continue
        for counter, value in children.items():
            shown = str(value.get("value") if isinstance(value, dict) else value)
            if shown.isdigit():
                links.setdefault(number.group(1), {})[_counter_key(counter)] = int(shown)
    if not links:
        raise DiagnoseError("dcgmi nvlink -e -j: no \"Link N\" entry with counters")
    return {"gpu": int(gpu.group(1)) if gpu else None, "links": links, "lines": [],
            "complete": True}


# -- judging -------------------------------------------------------------------------------


def _run_check(check_id: str, facts: dict[str, Any], profile: dict[str, Any]) -> Any:
    """The preflight check's :class:`~exemplar_tune.checks.base.Outcome` on ``facts``."""
    (check,) = [c for c in CHECKS if c.id == check_id]
    return check.func(facts, profile)


def _as_finding(check_id: str, outcome: Any, evidence: str, **values: Any) -> Finding:
    """A check's outcome as a finding: a skip (not applicable, unknown) is ``info``."""
    status = INFO if outcome.status == SKIP else outcome.status
    return finding(check_id, status, outcome.detail, [evidence], observed=outcome.observed,
                   **values)


def _nvlink_facts(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPUs' states in the shape of the gpu layer's ``nvlink`` fact (``_`` and ``X`` are
    not counted as links: absent, or switched off on purpose and reported apart). A GPU whose
    links are all ``D`` is "all links inactive", as nvidia-smi says it (one GPU alone on a
    host then has no peer to link to, as the check judges)."""
    facts = []
    for gpu in gpus:
        states = gpu["states"]
        down = [i for i, s in enumerate(states) if s == "D"]
        none_up = bool(down) and "U" not in states
        facts.append({"index": gpu["id"], "links": sum(s in "UD" for s in states),
                      "active": states.count("U"), "inactive": [] if none_up else down,
                      "all_inactive": none_up, "gbps_min": None, "gbps_max": None})
    return facts


def _entity_summary(entity: dict[str, Any]) -> dict[str, Any]:
    states = entity["states"]
    return {"id": entity["id"], "line": entity["line"], "states": states,
            **{name.replace(" ", "_"): [i for i, s in enumerate(states) if s == key]
               for key, name in _STATE_NAMES.items() if key != "_"},
            "not_supported": states.count("_")}


def _status_report(status: dict[str, Any], source: str, profile: dict[str, Any]) -> Report:
    gpus, switches = status["gpus"], status["nvswitches"]
    lines = [n for e in gpus + switches for n in (e["line"], e["line"] + 1)]
    evidence = cite(source, lines)
    facts = {"gpu": {"present": True, "gpus": [{"index": g["id"]} for g in gpus],
                     "nvlink": _nvlink_facts(gpus), "sources": {"nvlink": evidence}}}
    outcome = _run_check(CHECK_LINKS, facts, profile)
    found = [_as_finding(CHECK_LINKS, outcome, evidence)]
    if not status["complete"] and found[0].status == PASS:
        found = [finding(CHECK_LINKS, INFO, f"capture cut short (no 'Key:' line): "
                         f"{outcome.detail}; GPUs and NVSwitches after the cut unknown",
                         [evidence], observed=outcome.observed)]
    found += _disabled(gpus, "GPU", source) + _switch_links(switches, source)
    summary = {"command": "dcgmi nvlink -s", "complete": status["complete"],
               "gpus": [_entity_summary(g) for g in gpus],
               "nvswitches": [_entity_summary(s) for s in switches],
               "nvswitches_listed": status["nvswitches_listed"]}
    if not status["nvswitches_listed"]:
        summary["nvswitches_note"] = ("DCGM lists no NVSwitch entity: it sees NVSwitches only "
                                      "with its NVSwitch module, so this does not tell whether "
                                      "the board has them")
    return Report(source, KIND, summary, found)


def _disabled(entities: list[dict[str, Any]], what: str, source: str) -> list[Finding]:
    """A warning naming the links shown ``X`` (disabled: present, carrying no traffic)."""
    off = [(e, [i for i, s in enumerate(e["states"]) if s == "X"]) for e in entities]
    off = [(e, links) for e, links in off if links]
    if not off:
        return []
    shown = "; ".join(f"{what} {e['id']} link{'s' if len(links) > 1 else ''} "
                      f"{', '.join(map(str, links))}" for e, links in off)
    return [finding(CHECK_LINKS, WARN, f"NVLink disabled (X): {shown}: these links carry no "
                    "traffic; enable them or confirm they are off on purpose",
                    [cite(source, [e["line"] + 1 for e, _ in off])],
                    disabled={f"{what} {e['id']}": links for e, links in off})]


def _switch_links(switches: list[dict[str, Any]], source: str) -> list[Finding]:
    """NVSwitch links: a down one fails, disabled ones warn (``_`` ports are unwired)."""
    if not switches:
        return []
    down = [(s, [i for i, c in enumerate(s["states"]) if c == "D"]) for s in switches]
    down = [(s, links) for s, links in down if links]
    found = _disabled(switches, "NVSwitch", source)
    lines = [s["line"] + 1 for s, _ in down] or [s["line"] + 1 for s in switches]
    if down:
        shown = "; ".join(f"NVSwitch {s['id']} port{'s' if len(links) > 1 else ''} "
                          f"{', '.join(map(str, links))}" for s, links in down)
        return [finding(CHECK_LINKS, FAIL, f"NVSwitch links down: {shown}",
                        [cite(source, lines)], down={f"NVSwitch {s['id']}": links
                                                     for s, links in down}), *found]
    up = sum(s["states"].count("U") for s in switches)
    return [finding(CHECK_LINKS, PASS, f"{up} NVSwitch links of {len(switches)} NVSwitches up",
                    [cite(source, lines)]), *found]


def _errors_report(errors: dict[str, Any], source: str, profile: dict[str, Any]) -> Report:
    gpu = errors["gpu"] if errors["gpu"] is not None else 0
    evidence = cite(source, errors["lines"]) if errors["lines"] else source
    facts = {"gpu": {"present": True, "gpus": [{"index": gpu}],
                     "nvlink_errors": [{"index": gpu, "links": errors["links"]}],
                     "sources": {"nvlink_errors": evidence}}}
    outcome = _run_check(CHECK_ERRORS, facts, profile)
    found = _as_finding(CHECK_ERRORS, outcome, evidence)
    if not errors["complete"] and found.status == PASS:
        shown = ", ".join(sorted(errors["links"], key=int))
        found = finding(CHECK_ERRORS, INFO, f"capture cut short (no closing border): GPU {gpu} "
                        f"link{'s' if len(errors['links']) > 1 else ''} {shown} within "
                        "thresholds; its other links unknown", [evidence],
                        observed=outcome.observed)
    summary = {"command": "dcgmi nvlink -e", "gpu": errors["gpu"],
               "complete": errors["complete"], "links": errors["links"]}
    return Report(source, KIND, summary, [found])


ANALYZER = Analyzer(KIND, sniff, analyze)
