"""``perfquery`` text (plain, ``-x`` extended, ``-E``/``-D`` error details): port error
counters judged as the preflight check ``fabric.ib-errors`` judges the sysfs ones.

Format (infiniband-diags ``perfquery``): per port a header ``# Port extended counters: Lid
2052 port 1 (CapMask: ...)`` (``# Port counters:``, ``# PortRcvErrorDetails counters:`` ...)
then ``Name:.....value`` lines. The error counters are named as the PMA names them
(``SymbolErrorCounter``, ``LinkDownedCounter``, ``PortXmitDiscards`` ...) and judged against
the check's thresholds (ibqueryerrors' defaults, :data:`~exemplar_tune.checks.fabric.
IB_ERROR_THRESHOLDS`) by their sysfs names; a detail counter takes the threshold of the
counter it details. ``PortXmitWait`` is congestion, not an error. Counters are cumulative
since they were last cleared: one sample over its threshold warns (old events cannot be told
from new ones); the same port sampled again in the file is judged on the gain, as with
``--counter-window``: a gain over a threshold, or a link down or error recovery, fails; any
other gain warns. A MAD failure (no MAD port, as on RoCE ports) is reported by :mod:`.ib_mad`.
"""

from __future__ import annotations

import re
from typing import Any

from exemplar_tune.checks.fabric import FLAPS, IB_ERROR_THRESHOLDS
from exemplar_tune.diagnose.base import (
    FAIL,
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
from exemplar_tune.diagnose.ib_capture import read_surround
from exemplar_tune.diagnose.ib_mad import mad_findings

KIND = "perfquery"
CHECK = "fabric.ib-errors"
SYSFS = {  # PMA counter name -> sysfs name (the thresholds' keys)
    "SymbolErrorCounter": "symbol_error", "LinkErrorRecoveryCounter": "link_error_recovery",
    "LinkDownedCounter": "link_downed", "PortRcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors",
    "PortXmitDiscards": "port_xmit_discards",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors",
    "VL15Dropped": "VL15_dropped",
}
DETAILS = {"PortRcvErrorDetails": "port_rcv_errors",  # detail block -> the counter it details
           "PortXmitDiscardDetails": "port_xmit_discards"}
_HEADER = re.compile(r"^# ([\w ]{1,60}) counters: Lid (\d{1,6}) port (\w{1,6})")
_HEADER_ANY = re.compile(r"^[ \t]*# [\w ]{1,60} counters: Lid \d", re.M)
_COUNTER = re.compile(r"^(\w{1,60}):\.*(\d{1,30})$")


def sniff(text: str) -> bool:
    """A perfquery counters header, or perfquery's own failure line."""
    return bool(_HEADER_ANY.search(text)) or "perfquery: iberror: " in text


def parse(text: str) -> list[dict[str, Any]]:
    """Every counter block: ``{title, lid, port, line, last, counters: {name: int}}``; the
    title is the header's words before ``counters`` (``Port extended``, ``PortRcvErrorDetails``)."""
    blocks: list[dict[str, Any]] = []
    for n, raw in numbered(text):
        line = raw.strip()
        if m := _HEADER.match(line):
            blocks.append({"title": m.group(1).strip(), "lid": int(m.group(2)),
                           "port": m.group(3), "line": n, "last": n, "counters": {}})
        elif blocks and (m := _COUNTER.match(line)):
            blocks[-1]["counters"][m.group(1)] = int(m.group(2))
            blocks[-1]["last"] = n
    return blocks


def _threshold(block: dict[str, Any], name: str) -> tuple[str, int] | None:
    """(sysfs name, threshold) of an error counter, ``None`` for any other counter."""
    if name in SYSFS:
        return SYSFS[name], IB_ERROR_THRESHOLDS[SYSFS[name]]
    detailed = DETAILS.get(block["title"])
    if detailed and name not in ("PortSelect", "CounterSelect"):
        return detailed, IB_ERROR_THRESHOLDS[detailed]
    return None


def errors_of(block: dict[str, Any]) -> dict[str, int]:
    """The block's error counters (name -> value)."""
    return {k: v for k, v in block["counters"].items() if _threshold(block, k)}


def _where(block: dict[str, Any]) -> str:
    return f"Lid {block['lid']} port {block['port']}"


def _listed(block: dict[str, Any], values: dict[str, int]) -> str:
    parts = []
    for name, value in values.items():
        sysfs, over = _threshold(block, name)  # type: ignore[misc]
        note = " (the link went down)" if sysfs == "link_downed" else ""
        parts.append(f"{name} {value}" + (f" (threshold {over})" if value > over else note))
    return ", ".join(parts)


def judge_once(source: str, block: dict[str, Any]) -> Finding:
    """One sample: a counter over its threshold since last cleared warns."""
    nonzero = {k: v for k, v in errors_of(block).items() if v}
    over = {k for k, v in nonzero.items() if v > _threshold(block, k)[1]}  # type: ignore[index]
    ev = [cite(source, range(block["line"], block["last"] + 1))]
    vals = {"lid": block["lid"], "port": block["port"], "nonzero": nonzero}
    if over:
        return finding(CHECK, WARN, f"{_where(block)}: {_listed(block, nonzero)} since the "
                       "counters were last cleared; one sample cannot tell whether they are "
                       "rising (take a second one)", ev, over=sorted(over), **vals)
    if nonzero:
        return finding(CHECK, PASS, f"{_where(block)}: error counters within their thresholds "
                       f"since last cleared ({_listed(block, nonzero)})", ev, **vals)
    return finding(CHECK, PASS, f"{_where(block)}: every error counter is 0", ev, **vals)


def judge_gain(source: str, first: dict[str, Any], last: dict[str, Any]) -> Finding:
    """Two samples of one port: a gain over a threshold, a link down or recovery fails."""
    before, after = errors_of(first), errors_of(last)
    gained = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
    bad = {k for k, v in gained.items()
           if v > _threshold(last, k)[1] or _threshold(last, k)[0] in FLAPS}  # type: ignore[index]
    ev = [cite(source, [first["line"], *range(last["line"], last["last"] + 1)])]
    vals = {"lid": last["lid"], "port": last["port"], "gained": gained}
    if not gained:
        return finding(CHECK, PASS, f"{_where(last)}: no error counter rose between the "
                       f"samples at lines {first['line']} and {last['line']}", ev, **vals)
    text = f"{_where(last)}: between lines {first['line']} and {last['line']}: " + ", ".join(
        f"{k} +{v}" for k, v in gained.items())
    return finding(CHECK, FAIL if bad else WARN, text, ev, **vals)


def judge(source: str, blocks: list[dict[str, Any]]) -> list[Finding]:
    """Per port and block kind: the gain when sampled more than once, else the one sample."""
    samples: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for block in blocks:
        if errors_of(block) or block["title"] in DETAILS:
            samples.setdefault((block["title"], block["lid"], block["port"]), []).append(block)
    return [judge_gain(source, seen[0], seen[-1]) if len(seen) > 1 else
            judge_once(source, seen[0]) for seen in samples.values()]


def _format(blocks: list[dict[str, Any]]) -> str:
    titles = {b["title"] for b in blocks}
    return "perfquery -x" if "Port extended" in titles else \
        "perfquery -E" if "PortRcvErrorDetails" in titles else "perfquery"


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    del expectations
    blocks = parse(text)
    around = read_surround(text)
    found = judge(source, blocks) + mad_findings(source, around.mad_failures, [])
    if not found:
        raise DiagnoseError(f"{source}: perfquery output without a counters block ('# Port "
                            "counters: Lid N port N' and 'Name:....value' lines with error "
                            "counters)")
    summary = {"format": _format(blocks) if blocks else "perfquery failure",
               "ports": [{k: b[k] for k in ("title", "lid", "port", "line", "counters")}
                         | {"errors": errors_of(b)} for b in blocks],
               "mad_failures": around.mad_failures}
    return Report(source, KIND, summary, found)


ANALYZER = Analyzer(KIND, sniff, analyze)
