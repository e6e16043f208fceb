"""NVIDIA Fabric Manager captures: its log file, its journal and ``systemctl status`` text.

Fabric Manager configures the NVSwitches of an HGX/DGX board so its GPUs can join the NVLink
fabric. Its log (``/var/log/fabricmanager.log``) writes ``[Dec 19 2024 19:17:49] [ERROR]
[tid 1374] message``; each start writes ``Fabric Manager Log initializing at: ...`` and
``Fabric Manager version V is running ...``, then the topology (``NVSwitches: 4, GPUs: 8``),
``Successfully configured all the available NVSwitches ...`` and one ``added GPU with UUID``
per GPU that registers. NVSwitch port errors read ``detected NVSwitch non-fatal error 12028
on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 61`` (``fatal`` for the
fatal ones). The journal (``journalctl -u nvidia-fabricmanager``) carries the same messages
and systemd's ``Starting``/``Started``/``Stopping``/``Control process exited ...
status=1/FAILURE`` lines; ``systemctl status`` adds ``Active: active (running) since ...``.
On a host without NVSwitches (PCIe GPUs, NVLink bridges) the daemon exits with
``NV_WARN_NOTHING_TO_DO``: Fabric Manager does not apply there, and the unit's failure is no
fault.

Findings: NVSwitch port errors are NVLink fabric errors on a switch port, so they are read
as ``gpu.nvlink-errors`` (non-fatal warns, fatal fails), each naming the switch (physical
id, PCI address) and port; the service's own state (healthy start, restart, stop, failed
start, not applicable) is ``gpu.fabric-manager``. A capture's reading is as of its last line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

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

KIND = "fabric manager log"
CHECK, ERRORS = "gpu.fabric-manager", "gpu.nvlink-errors"
_STAMP = re.compile(r"^\[(\w{3} [ \d]?\d \d{4} \d\d:\d\d:\d\d)\] \[(\w+)\] \[tid \d+\] ?")
_SYSLOG_TIME = re.compile(r"^(?:\w{3}|\d+\S{1,2}) [ \d]?\d (\d\d:\d\d:\d\d) ")
_HEADER = re.compile(r"Fabric Manager (?:Log initializing at|version (\S+) is running)")
_SWITCH_ERROR = re.compile(r"NVSwitch (non-fatal|fatal) error (\d+)")
_PCI = re.compile(r"pci bus id ([0-9A-Fa-f:.]{1,40})")
_PHYSICAL = re.compile(r"physical id (\d+)")
_PORT = re.compile(r"\bport (\d+)")
_TOPOLOGY = re.compile(r"NVSwitches: (\d+), GPUs: (\d+)")
_ACTIVE = re.compile(r"^\s*Active: (\S+) \(([^)]{0,80})\)(?: since ([^;]{0,60}))?")
_EXIT = re.compile(r"status=(\d+)/(\w+)|Exit code: (\d+)")
_SNIFF = re.compile(r"Fabric Manager (?:Log initializing|version \S+ is running)|"
                    r"nvidia-fabricmanager|nv-fabricmanager|NV_WARN_NOTHING_TO_DO|"
                    r"detected NVSwitch (?:non-)?fatal error")


def sniff(text: str) -> bool:
    """The log's start header, the unit's or daemon's name, NV_WARN_NOTHING_TO_DO or an
    NVSwitch error line."""
    return bool(_SNIFF.search(text))


@dataclass
class Run:
    """One start of the daemon and what it did."""

    line: int
    time: str | None
    version: str | None = None
    switches_expected: int | None = None
    gpus_expected: int | None = None
    configured: int | None = None  # the line
    gpus_registered: int = 0
    started: int | None = None  # systemd's "Started" line

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "time": self.time, "version": self.version,
                "switches_expected": self.switches_expected,
                "gpus_expected": self.gpus_expected, "configured": self.configured is not None,
                "gpus_registered": self.gpus_registered}


@dataclass
class Capture:
    """Everything read from one capture."""

    runs: list[Run] = field(default_factory=list)
    switch_errors: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    stops: list[tuple[int, str | None]] = field(default_factory=list)
    failures: list[tuple[int, str | None, str]] = field(default_factory=list)
    restart_failed: int | None = None  # systemctl's "Job for ... failed" answer
    nothing_to_do: list[int] = field(default_factory=list)
    unit: dict[str, Any] | None = None  # systemctl status: Active line
    activity: list[tuple[int, str | None]] = field(default_factory=list)  # first, last
    other_errors: list[tuple[int, str]] = field(default_factory=list)
    stamped: int = 0  # lines in the log file's own format
    first_event: int = 0  # the first line that showed the daemon (a start or any message)


def _is_fm(lower: str) -> bool:
    return "fabricmanager" in lower or "fabric manager" in lower


def _start(cap: Capture, n: int, time: str | None, version: str | None) -> None:
    """A log header or systemd's ``Starting``: a new run, unless it is the same start's
    second header line."""
    last = cap.runs[-1] if cap.runs else None
    if last and version and last.version is None and n - last.line <= 2:
        last.version = version
        last.time = last.time or time
        return
    cap.runs.append(Run(n, time, version))
    cap.first_event = cap.first_event or n


def _switch_error(cap: Capture, n: int, time: str | None, line: str,
                  found: re.Match[str]) -> None:
    pci, phys, port = (p.search(line, found.end()) for p in (_PCI, _PHYSICAL, _PORT))
    key = (found.group(1), int(found.group(2)), phys and int(phys.group(1)),
           pci and pci.group(1), port and int(port.group(1)))
    seen = cap.switch_errors.setdefault(key, {
        "severity": key[0], "code": key[1], "switch": key[2], "pci": key[3], "port": key[4],
        "count": 0, "first": time, "last": time, "lines": []})
    seen["count"] += 1
    seen["last"] = time
    if len(seen["lines"]) < 32:
        seen["lines"].append(n)


def _service(cap: Capture, n: int, time: str | None, line: str, lower: str) -> bool:
    """systemd's and the start script's lines about the unit; ``True`` when one was read."""
    if lower.startswith("starting ") and _is_fm(lower):
        _start(cap, n, time, None)
    elif lower.startswith("started ") and _is_fm(lower):
        if not cap.runs:
            _start(cap, n, time, None)
        cap.runs[-1].started = n
    elif (lower.startswith(("stopping ", "stopped ")) and _is_fm(lower)) or (
            "deactivated successfully" in lower and _is_fm(lower)):
        if not cap.stops or cap.stops[-1][0] < (cap.runs[-1].line if cap.runs else 0) \
                or n - cap.stops[-1][0] > 2:
            cap.stops.append((n, time))
    elif lower.startswith("job for ") and _is_fm(lower) and " failed" in lower:
        cap.restart_failed = n
    elif ("process exited" in lower and "failure" in lower) or "failed! exit code" in lower \
            or (lower.startswith("failed to start") and _is_fm(lower)) \
            or ("failed with result" in lower and _is_fm(lower)):
        code = _EXIT.search(line)
        cap.failures.append((n, time, code.group(0) if code else line.strip()[:120]))
    else:
        return False
    return True


def _message(cap: Capture, n: int, time: str | None, line: str, level: str | None) -> None:
    """One line's message: a start, an NVSwitch error, a configured fabric, a GPU ..."""
    lower = line.lower()
    if header := _HEADER.search(line):
        _start(cap, n, time, header.group(1))
        return
    if level is not None:  # a line of the log file, whatever it says: the daemon ran
        cap.first_event = cap.first_event or n
    if found := _SWITCH_ERROR.search(line):
        _switch_error(cap, n, time, line, found)
    elif "NV_WARN_NOTHING_TO_DO" in line:
        cap.nothing_to_do.append(n)
    elif "successfully configured all the available nvswitches" in lower:
        if not cap.runs:
            _start(cap, n, time, None)
        cap.runs[-1].configured = n
    elif "added gpu with uuid" in lower and cap.runs:
        cap.runs[-1].gpus_registered += 1
    elif topo := _TOPOLOGY.search(line):
        if cap.runs:
            cap.runs[-1].switches_expected, cap.runs[-1].gpus_expected = map(int, topo.groups())
    elif active := _ACTIVE.match(line):
        cap.unit = {"active": active.group(1), "sub": active.group(2),
                    "since": active.group(3), "line": n}
    elif _service(cap, n, time, line, lower):
        return
    elif level in ("ERROR", "FATAL", "CRITICAL"):
        cap.other_errors.append((n, line.strip()[:160]))
    elif "multicast team" in lower or "gpu probe request" in lower or "inband" in lower:
        if len(cap.activity) < 2:
            cap.activity.append((n, time))
        else:
            cap.activity[1] = (n, time)


def parse(text: str) -> Capture:
    """Every start, NVSwitch error, stop, failure, unit state and sign of activity."""
    cap = Capture()
    raw = getattr(text, "raw", text).split("\n")
    lines = text.split("\n")
    if len(raw) != len(lines):
        raw = lines
    for n, (line, written) in enumerate(zip(lines, raw, strict=True), start=1):
        stamp = _STAMP.match(line)
        time = stamp.group(1) if stamp else None
        cap.stamped += bool(stamp)
        if time is None and (syslog := _SYSLOG_TIME.match(written)):
            time = syslog.group(1)
        body = line[stamp.end():] if stamp else line
        _message(cap, n, time, body, stamp.group(2).upper() if stamp else None)
    return cap


def _places(seen: list[dict[str, Any]]) -> str:
    """``switch 1 (00000000:84:00.0) ports 35, 42; ...``, each port with its line count when
    it was logged more than once."""
    by_switch: dict[tuple, list[dict[str, Any]]] = {}
    for e in seen:
        by_switch.setdefault((e["switch"], e["pci"]), []).append(e)
    parts = []
    for (switch, pci), errors in sorted(by_switch.items(), key=lambda kv: (
            kv[0][0] is None, kv[0][0] or 0)):
        name = (f"switch {switch}" if switch is not None else "an NVSwitch") + (
            f" ({pci})" if pci else "")
        ports = [f"{e['port']}" + (f" x{e['count']}" if e["count"] > 1 else "")
                 for e in sorted(errors, key=lambda e: e["port"] or 0) if e["port"] is not None]
        parts.append(name + (f" port{'s' if len(ports) > 1 else ''} {', '.join(ports)}"
                             if ports else ""))
    return "; ".join(parts)


def judge_switch_errors(source: str, cap: Capture) -> list[Finding]:
    """One finding per severity: which switches and ports, which codes, when."""
    out = []
    for severity, status in (("fatal", FAIL), ("non-fatal", WARN)):
        seen = [e for e in cap.switch_errors.values() if e["severity"] == severity]
        if not seen:
            continue
        codes = sorted({e["code"] for e in seen})
        times = [t for e in seen for t in (e["first"], e["last"]) if t]
        when = (f" at {min(times)}" if min(times) == max(times) else
                f" from {times[0]} to {times[-1]}") if times else ""
        count = sum(e["count"] for e in seen)
        switches = sorted({e["switch"] for e in seen if e["switch"] is not None})
        places = _places(seen)
        what = "reset the switch and its GPUs (FM restart), then read the port's link" \
            if severity == "fatal" else "watch the port's NVLink error counters"
        out.append(finding(
            ERRORS, status, f"NVSwitch {severity} error {', '.join(map(str, codes))}{when}: "
            f"{count} line(s) on {len(switches) or 'unknown'} switch(es): {places}; {what}",
            [cite(source, sorted(n for e in seen for n in e["lines"]))],
            errors=[{k: v for k, v in e.items() if k != "lines"} for e in seen]))
    return out


def _run_text(run: Run) -> str:
    switches = f"all {run.switches_expected} NVSwitches" if run.switches_expected else \
        "the NVSwitches"
    gpus = f", {run.gpus_registered} GPU(s) registered" if run.gpus_registered else ""
    if run.gpus_registered and run.gpus_expected:
        gpus += f" of {run.gpus_expected}"
    return f"configured {switches}{gpus}"


def judge_service(source: str, cap: Capture) -> list[Finding]:
    """The unit's state as of the capture's last line."""
    if cap.nothing_to_do:
        return [finding(CHECK, INFO, "Fabric Manager not applicable: no NVSwitch on this host "
                        "(NV_WARN_NOTHING_TO_DO); the unit's exit 1/FAILURE is expected here, "
                        "not a fabric fault: disable nvidia-fabricmanager",
                        [cite(source, cap.nothing_to_do + [f[0] for f in cap.failures])],
                        state="not applicable")]
    last = cap.runs[-1] if cap.runs else None
    healthy = [r for r in cap.runs if r.configured or r.started]
    history = ""
    if healthy:
        h = healthy[-1]
        history = f"the start at {h.time or f'line {h.line}'} was healthy ({_run_text(h)})"
        if cap.stops and cap.stops[-1][0] > h.line:
            history += f", then it stopped at {cap.stops[-1][1] or f'line {cap.stops[-1][0]}'}"
    if cap.restart_failed is not None:
        lines = [cap.restart_failed] + [r.configured or r.line for r in healthy[-1:]]
        return [finding(CHECK, FAIL, "nvidia-fabricmanager restart failed (its control process "
                        "exited with an error): Fabric Manager is not running, the GPUs of "
                        f"{'this' if healthy else 'an'} NVSwitch system cannot join the NVLink "
                        "fabric; "
                        + (history + "; " if history else "")
                        + "the cause is not in this capture (unknown)",
                        [cite(source, lines + [s[0] for s in cap.stops])], state="failed")]
    if cap.unit is not None:
        return [_unit_finding(source, cap.unit)]
    failed = [f for f in cap.failures if not last or f[0] > last.line]
    if failed and not (last and last.configured and last.configured > failed[-1][0]):
        f = failed[-1]
        return [finding(CHECK, FAIL, f"Fabric Manager failed to start ({f[2]}"
                        + (f" at {f[1]}" if f[1] else "") + "): the GPUs of an NVSwitch system "
                        "cannot join the NVLink fabric; journalctl -u nvidia-fabricmanager says "
                        "why", [cite(source, [x[0] for x in failed])], state="failed")]
    if last and cap.stops and cap.stops[-1][0] > last.line:
        return [finding(CHECK, FAIL, f"Fabric Manager stopped at "
                        f"{cap.stops[-1][1] or f'line {cap.stops[-1][0]}'} and was not started "
                        f"again in this capture ({history}): while it is down the GPUs of an "
                        "NVSwitch system cannot join the NVLink fabric",
                        [cite(source, [s[0] for s in cap.stops])], state="stopped")]
    if last and (last.configured or last.started):
        return [_healthy(source, cap, last)]
    if last:
        when = last.time or f"line {last.line}"
        return [finding(CHECK, INFO, f"Fabric Manager started at {when}; the capture ends "
                        "before it configured the NVSwitches: cannot tell whether it came up "
                        "(unknown)", [cite(source, [last.line])], state="unknown")]
    if cap.activity:
        first, end = cap.activity[0], cap.activity[-1]
        return [finding(CHECK, INFO, "Fabric Manager active through the capture (inband "
                        f"requests served from {first[1]} to {end[1]}); its start is not in "
                        "the capture", [cite(source, [first[0], end[0]])], state="active")]
    return []


def _unit_finding(source: str, unit: dict[str, Any]) -> Finding:
    since = f" since {unit['since']}" if unit["since"] else ""
    if (unit["active"], unit["sub"]) == ("active", "running"):
        return finding(CHECK, PASS, f"nvidia-fabricmanager active (running){since}",
                       [cite(source, [unit["line"]])], state="running")
    return finding(CHECK, FAIL, f"nvidia-fabricmanager {unit['active']} ({unit['sub']}){since}: "
                   "not running, the GPUs of an NVSwitch system cannot join the NVLink fabric",
                   [cite(source, [unit["line"]])], state=unit["active"])


def _healthy(source: str, cap: Capture, last: Run) -> Finding:
    restarts = len(cap.runs) - (cap.runs[0].line <= cap.first_event)
    after = ""
    if cap.switch_errors:
        first_error = min(n for e in cap.switch_errors.values() for n in e["lines"])
        if first_error < last.line:
            after = " after the NVSwitch errors"
    again = f"restarted {restarts} time(s){after}; the last start" if restarts else "started"
    lines = [r.line for r in cap.runs] + [last.configured or last.started]
    return finding(CHECK, PASS, f"Fabric Manager {again} at {last.time or f'line {last.line}'} "
                   f"{_run_text(last)}; running as of the capture's end (no stop or failure "
                   "after it)", [cite(source, lines)], state="running")


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    del expectations
    cap = parse(text)
    findings = judge_switch_errors(source, cap) + judge_service(source, cap)
    if cap.other_errors:
        n, line = cap.other_errors[-1]
        findings.append(finding(CHECK, WARN, f"Fabric Manager logged {len(cap.other_errors)} "
                                f"other error line(s), the last: {line}",
                                [cite(source, [e[0] for e in cap.other_errors])]))
    if not findings:
        raise DiagnoseError(f"{source}: Fabric Manager capture without a start, NVSwitch "
                            "error, unit state ('Active:') or service event (looked for "
                            "'[INFO] [tid N]' log lines and systemd's lines)")
    fmt = "systemctl status" if cap.unit else "fabricmanager.log" if cap.stamped else "journal"
    summary = {"format": fmt, "runs": [r.to_dict() for r in cap.runs],
               "switch_errors": [{k: v for k, v in e.items() if k != "lines"}
                                 for e in cap.switch_errors.values()],
               "stops": [{"line": n, "time": t} for n, t in cap.stops],
               "failures": [{"line": n, "time": t, "detail": d} for n, t, d in cap.failures],
               "restart_failed": cap.restart_failed is not None,
               "nothing_to_do": bool(cap.nothing_to_do), "unit": cap.unit,
               "other_errors": [{"line": n, "text": t} for n, t in cap.other_errors[:32]]}
    return Report(source, KIND, summary, findings)


ANALYZER = Analyzer(KIND, sniff, analyze)
