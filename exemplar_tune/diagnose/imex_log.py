"""IMEX captures: the ``nvidia-imex`` daemon's log, ``nvidia-imex-ctl -N`` (and ``-q``) pasted,
and DCGM's IMEX health line.

The daemon logs (``/var/log/nvidia-imex.log``, the journal, or a pod's stderr) as Fabric
Manager does, ``[Mar 25 2025 10:41:54] [INFO] [tid 38] message``: ``IMEX Log initializing at:
...``, ``IMEX version V is running ...``, its configuration, ``Identified this node as ID N,
using bind IP of 'A'``, ``Creating gRPC channels to all peers (nPeers = P)``, ``GPU event
successfully subscribed`` (initialisation done); then ``Attempting connection for target
node N - host:port, attempt #K`` while a peer is unreachable, ``Node disconnect event
detected for node N`` and ``[ERROR]`` lines (``No matching network interface found for any IP
addresses in the node configuration file``: the daemon does not start). The log holds no
line that says the domain is READY: readiness is read from ``nvidia-imex-ctl -q`` (``READY``)
or ``-N`` (:func:`~readers.imex.parse_imex_nodes`: every node READY, every connection ``C``,
``Domain State: UP``). A log without that evidence reads *unknown*, never ready. DCGM's
``IMEX daemon status is -3 (not READY)`` (``DCGM_FR_IMEX_UNHEALTHY``) is its
``DCGM_FI_IMEX_DAEMON_STATUS`` field: ``-1`` not installed, ``-2`` not configured, ``-3`` the
``nvidia-imex-ctl -q`` query failed (no daemon answered), ``0``-``7`` the daemon's states
(``5`` READY). All findings are ``gpu.imex``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.imex import (
    NO_CONFIG,
    parse_imex_nodes,
)

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
)

KIND = "imex log"
CHECK = "gpu.imex"
UNREACHABLE_ATTEMPTS = 10  # connection attempts to one peer (one a minute) that mean down
DCGM_STATES = {-1: "NOT_INSTALLED", -2: "NOT_CONFIGURED",
               -3: "COMMAND_ERROR: nvidia-imex-ctl -q got no answer from a daemon",
               0: "INITIALIZING", 1: "STARTING_AUTH_SERVER", 2: "WAITING_FOR_PEERS",
               3: "WAITING_FOR_RECOVERY", 4: "INIT_GPU", 5: "READY", 6: "SHUTTING_DOWN",
               7: "UNAVAILABLE"}
_STAMP = re.compile(r"^\[(\w{3} [ \d]?\d \d{4} \d\d:\d\d:\d\d)\] \[(\w+)\] \[tid \d+\] ?")
_VERSION = re.compile(r"IMEX version (\S+?):? is running")
_NODE_ID = re.compile(r"Identified this node as ID (\d+), using bind IP of '([^']{0,255})'")
_PEERS = re.compile(r"gRPC channels to all peers \(nPeers = (\d+)\)")
_ATTEMPT = re.compile(r"Attempting connection for target node (\d+) - (\S{1,300}), "
                      r"attempt #(\d+)")
_DISCONNECT = re.compile(r"Node disconnect event detected for node (\d+)")
_SHUTDOWN = re.compile(r"notification of shutdown from node (\d+)")
_CONNECTED = re.compile(r"(?:[Cc]onnection established|[Cc]onnected) (?:to|with) "
                        r"(?:target )?node (\d+)")
_GPU = re.compile(r"Attached to GPU id: (\d+)")
_DCGM = re.compile(r"IMEX daemon status is (-?\d+)")
_SNIFF = re.compile(r"IMEX Log initializing at|IMEX version \S+ is running|nvidia-imex|"
                    r"IMEX_WAIT_FOR_QUORUM|Attempting connection for target node|"
                    r"Node disconnect event detected for node|notification of shutdown from "
                    r"node|DCGM_FR_IMEX_UNHEALTHY|IMEX daemon status is|"
                    r"Connectivity Table Legend")
_NODE_ROW = re.compile(r"^[ \t]*Node #\d+ ", re.M)
_DOMAIN = re.compile(r"^[ \t]*Domain State:", re.M)


def sniff(text: str) -> bool:
    """An IMEX log's own phrases, DCGM's IMEX health line, or ``nvidia-imex-ctl -N``."""
    return bool(_SNIFF.search(text)) or bool(
        _NODE_ROW.search(text) and _DOMAIN.search(text))


@dataclass
class Daemon:
    """What one daemon log says."""

    starts: list[tuple[int, str | None]] = field(default_factory=list)
    version: str | None = None
    node: dict[str, Any] | None = None
    peers: int | None = None
    initialised: int | None = None  # "GPU event successfully subscribed"
    gpus: list[str] = field(default_factory=list)
    attempts: dict[int, dict[str, Any]] = field(default_factory=dict)
    connected: dict[int, int] = field(default_factory=dict)  # node -> line
    disconnects: list[dict[str, Any]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)
    notes: list[tuple[int, str]] = field(default_factory=list)  # WARNING lines before the log
    lines: int = 0  # lines in the log's own format


def _event(d: Daemon, n: int, time: str | None, body: str, level: str | None) -> None:
    header = "IMEX Log initializing at" in body
    version = _VERSION.search(body)
    if header or (version and (not d.starts or n - d.starts[-1][0] > 2)):
        d.starts.append((n, time))  # a version line right after the header is the same start
    if version:
        d.version = version.group(1)
    elif m := _NODE_ID.search(body):
        d.node = {"id": int(m.group(1)), "address": m.group(2), "line": n}
    elif m := _PEERS.search(body):
        d.peers = int(m.group(1))
    elif "GPU event successfully subscribed" in body:
        d.initialised = n
    elif m := _ATTEMPT.search(body):
        d.attempts[int(m.group(1))] = {"node": int(m.group(1)), "target": m.group(2),
                                       "attempt": int(m.group(3)), "line": n, "time": time}
    elif m := _CONNECTED.search(body):
        d.connected[int(m.group(1))] = n
    elif m := _DISCONNECT.search(body):
        d.disconnects.append({"node": int(m.group(1)), "line": n, "time": time,
                              "after_shutdown": False})
    elif m := _SHUTDOWN.search(body):
        d.notes.append((n, f"shutdown notice from node {m.group(1)}"))
    elif m := _GPU.search(body):
        d.gpus.append(m.group(1))
    elif level in ("ERROR", "FATAL", "CRITICAL") or (level and "version mismatch" in
                                                      body.lower()):
        d.errors.append((n, body.strip()[:200]))
    elif level is None and body.startswith(("WARNING:", "INFO:", "ERROR:")):
        d.notes.append((n, body.strip()[:160]))


def parse_log(text: str) -> Daemon:
    """Every start, node identity, peer connection and error of a daemon log."""
    d = Daemon()
    for n, line in enumerate(text.split("\n"), start=1):
        stamp = _STAMP.match(line)
        d.lines += bool(stamp)
        _event(d, n, stamp.group(1) if stamp else None, line[stamp.end():] if stamp else line,
               stamp.group(2).upper() if stamp else None)
    for gone in d.disconnects:
        gone["after_shutdown"] = any(f"shutdown notice from node {gone['node']}" == t
                                     and gone["line"] - k <= 2 for k, t in d.notes)
    return d


def _identity(d: Daemon) -> str:
    parts = [f"version {d.version}"] if d.version else []
    if d.node:
        parts.append(f"node ID {d.node['id']} at {d.node['address']}")
    if d.peers is not None:
        parts.append(f"{d.peers} node(s) in its configuration")
    if d.gpus:
        parts.append(f"attached to GPU {', '.join(d.gpus)}")
    return f" ({', '.join(parts)})" if parts else ""


def judge_log(source: str, d: Daemon) -> list[Finding]:
    """Errors and unreachable or disconnected peers fail; without them, a started daemon is
    *unknown* (the log never says READY)."""
    out = []
    if d.errors:
        never = not d.initialised
        n, text = d.errors[0]
        out.append(finding(CHECK, FAIL, (f"IMEX daemon failed to start: {text}; never ready"
                                         if never else f"IMEX daemon error: {text}")
                           + (f" ({len(d.errors)} error lines)" if len(d.errors) > 1 else ""),
                           [cite(source, [e[0] for e in d.errors])], errors=len(d.errors)))
    down = [a for a in d.attempts.values() if a["attempt"] >= UNREACHABLE_ATTEMPTS
            and d.connected.get(a["node"], 0) < a["line"]]
    if down:
        names = ", ".join(f"node {a['node']} ({a['target']}, attempt #{a['attempt']})"
                          for a in down)
        out.append(finding(CHECK, FAIL, f"IMEX domain not fully connected: {len(down)} peer(s) "
                           f"still unreachable: {names}; never ready while they are",
                           [cite(source, [a["line"] for a in down])],
                           unreachable=[a["node"] for a in down]))
    gone = [g for g in d.disconnects if d.connected.get(g["node"], 0) < g["line"]]
    if gone:
        names = ", ".join(f"node {g['node']}" + (" (after its shutdown notice)"
                                                 if g["after_shutdown"] else "") for g in gone)
        out.append(finding(CHECK, FAIL, f"IMEX peer disconnected: {names} at {gone[-1]['time']}"
                           "; the domain is not fully connected, the cause is not in the log",
                           [cite(source, [g["line"] for g in gone])],
                           disconnected=[g["node"] for g in gone]))
    if out:
        return out
    started = d.starts or d.node or d.initialised
    if not started and not d.attempts:
        return []
    cut = "" if d.initialised else ", the log ends before its initialisation completes"
    return [finding(CHECK, INFO, f"IMEX daemon started{_identity(d)}{cut}; readiness unknown: "
                    "the log shows no READY state nor peer connections (nvidia-imex-ctl -N "
                    "tells)", [cite(source, [x for x in (
                        *(s[0] for s in d.starts[-1:]), d.node and d.node["line"],
                        d.initialised) if x] or [min(a["line"] for a in d.attempts.values())])],
                    state="unknown")]


def judge_nodes(source: str, text: str, found: dict[str, Any]) -> Finding:
    """``nvidia-imex-ctl -N``: as the ``gpu.imex`` preflight check judges it."""
    lines = [n for n, line in enumerate(text.split("\n"), start=1)
             if "Domain State:" in line or line.strip().startswith("Node #")]
    if not found["configured"]:
        no = next(n for n, line in enumerate(text.split("\n"), start=1) if NO_CONFIG in line)
        return finding(CHECK, INFO, "IMEX not configured on this node (nvidia-imex-ctl found no "
                       "configuration file): not applicable unless it is in a multi-node "
                       "NVLink domain", [cite(source, [no])], state="not configured")
    nodes = found["nodes"]
    down = [f"node {n['index']} ({n['address']}) {n['state']}" for n in nodes
            if n["state"] != "READY"]
    links = [f"{a}->{b} {s}" for a, b, s in found["not_connected"]]
    versions = sorted({n["version"] for n in nodes if n["version"]})
    if found["domain_state"] != "UP" or down or links:
        parts = [f"domain {found['domain_state']}"] + (
            [f"{len(down)} node(s) not READY: {', '.join(down[:6])}"] if down else []) + (
            [f"{len(links)} connection(s) not C: {', '.join(links[:6])}"] if links else [])
        mixed = f"; versions differ: {', '.join(versions)}" if len(versions) > 1 else ""
        return finding(CHECK, FAIL, f"IMEX broken: {'; '.join(parts)}{mixed}",
                       [cite(source, lines)], state="broken")
    return finding(CHECK, PASS, f"IMEX domain UP: {len(nodes)} node(s) READY, every connection "
                   "C" + (f", version {', '.join(versions)}" if versions else ""),
                   [cite(source, lines)], state="ready")


def judge_dcgm(source: str, text: str) -> list[Finding]:
    """DCGM's IMEX health line: not READY, and what its status number says."""
    out = []
    for n, line in enumerate(text.split("\n"), start=1):
        if m := _DCGM.search(line):
            status = int(m.group(1))
            what = DCGM_STATES.get(status, "unknown status")
            if status == 5:
                out.append(finding(CHECK, PASS, "DCGM: IMEX daemon READY",
                                   [cite(source, [n])], dcgm_status=status))
                continue
            out.append(finding(CHECK, WARN, f"DCGM: IMEX daemon status {status} ({what}): not "
                               "READY; expected on a node with no ComputeDomain or multi-node "
                               "NVLink job, a fault only where one needs IMEX; not an NVLink "
                               "or hardware fault", [cite(source, [n])], dcgm_status=status))
    return out


def _ctl(text: str) -> dict[str, Any] | None:
    """``parse_imex_nodes`` where the text is ``nvidia-imex-ctl`` output, else ``None``."""
    try:
        return parse_imex_nodes(text, "nvidia-imex-ctl -N")
    except ParseError:
        return None


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    del expectations
    daemon = parse_log(text)
    nodes = _ctl(text) if daemon.lines == 0 else None
    findings = judge_dcgm(source, text)
    if nodes is not None:
        findings.append(judge_nodes(source, text, nodes))
    findings += judge_log(source, daemon) if nodes is None else []
    if not findings:
        raise DiagnoseError(f"{source}: IMEX capture without daemon log lines ('[INFO] [tid N]'"
                            ", a start, peers), an nvidia-imex-ctl -N node list with 'Domain "
                            "State:', nor DCGM's 'IMEX daemon status is N'")
    fmt = "nvidia-imex-ctl -N" if nodes is not None else "daemon log" if (
        daemon.lines or daemon.starts) else "dcgm health"
    summary = {"format": fmt, "nodes": nodes, "daemon": {
        "starts": [{"line": n, "time": t} for n, t in daemon.starts],
        "version": daemon.version, "node": daemon.node, "peers": daemon.peers,
        "initialised": daemon.initialised is not None, "gpus": daemon.gpus,
        "connection_attempts": list(daemon.attempts.values()),
        "connected": sorted(daemon.connected), "disconnects": daemon.disconnects,
        "errors": [{"line": n, "text": t} for n, t in daemon.errors[:32]],
        "notes": [{"line": n, "text": t} for n, t in daemon.notes[:32]]},
        "ready_query": _ready_query(text)}
    return Report(source, KIND, summary, findings)


def _ready_query(text: str) -> str | None:
    """``nvidia-imex-ctl -q``'s one-word answer on a line of its own, if the text has one."""
    return next((w for w in (line.strip() for line in text.split("\n")[:64])
                 if w in ("READY", "NOT_READY", "UNAVAILABLE")), None)


ANALYZER = Analyzer(KIND, sniff, analyze)
