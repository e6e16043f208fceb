"""Preflight and audit results in the Prometheus text format, for node_exporter's textfile
collector (continuous drift monitoring; the alert rules in ``monitoring/`` read these series).

Series (every one a gauge):

* ``exemplar_tune_check_status{host, layer, check, severity, class, pending_reboot}``: 0 pass,
  1 warn, 2 fail; ``class`` is ``health`` or ``tuning`` (``exemplar_tune.verdict``);
  ``pending_reboot`` ``true`` where the fix was applied and waits for a reboot;
* ``exemplar_tune_check_unknown{host, layer, check, severity}``: 1 for a check that applies
  but could not be judged (checks that do not apply are left out);
* ``exemplar_tune_host_verdict{host, command, class, action, pending_reboot, next}``: 1, one
  series per host: its one verdict (``ok``, ``health``, ``tuning``, ``not_applicable`` or
  ``unknown``), the kind of its first action and, in ``next``, that action's command line
  (its kind where it has none: ``reset_gpu``); the alert rules print it;
* ``exemplar_tune_knob_drift{host, layer, knob, profile, inventory}``: 1 when the host
  differs from the profile's target for that knob, 0 when it does not (audit; every knob of
  the layers audited on that host, except the knobs that do not apply to it); ``profile`` is
  the profile asked for and
  ``inventory`` the inventory given (left out for a local run), so that the alert's remedy
  names them;
* ``exemplar_tune_knob_not_applicable{host, layer, knob}``: 1 for a knob that does not apply
  to the host (no bootloader configuration ...);
* with ``preflight --record``, ``exemplar_tune_check_repeat_failures{host, check, class}``:
  how often the check failed in the host's last recorded preflights (the profile's
  ``offenders.runs`` within ``offenders.days``), and ``exemplar_tune_repeat_offender{host,
  check, class}`` (1) where that reaches ``offenders.failures``; only health checks are
  offenders by default (``offenders --include-tuning``);
* ``exemplar_tune_layer_status{host, layer, command, status}``: 1, one series per host and
  layer, the state in ``status``: ``checked`` or ``not_checked`` (preflight: every check of
  the layer skipped, or not run after a failing layer), ``drift``, ``no_drift`` or
  ``not_audited`` (audit);
* ``exemplar_tune_host_status{host, command, status}``: 1, one series per host: ``ok``,
  ``failed`` (it answered, the run failed there) or ``unreachable``; a host that could not be
  checked is never a row of zeros;
* ``slow-nodes``: ``exemplar_tune_node_slowdown_ratio{host}`` (how much longer the host's
  benchmark runs take than the rest of the fleet's, 0.061 for 6.1 %) with
  ``exemplar_tune_node_slowdown_low_ratio`` and ``..._high_ratio`` (its interval),
  ``exemplar_tune_node_slow{host}`` (1 slow, 0 not), ``exemplar_tune_node_turned_slow{host}``
  (1 when the host turned slow among its runs, with ``..._turned_slow_run`` and
  ``exemplar_tune_node_turned_slowdown_ratio`` for such a host) and
  ``exemplar_tune_node_differs{host, fact}`` (1 for each fact where a slow host differs from
  the fleet's majority);
* ``exemplar_tune_run_timestamp_seconds{command}`` and ``exemplar_tune_run_info{command,
  profile, version}`` (always 1): when the file was written (Unix time, to the millisecond),
  by what.

The ``command`` label keeps a preflight file and an audit file in one textfile directory
apart (node_exporter refuses a series that two files both hold).

The ``host`` label is the inventory's host name; a local run's ``localhost`` is written as the
machine's host name, so that files of many nodes do not fold into one host. Values are written
exactly (integers as integers, times to the millisecond: Python's shortest round-trip form).
Label values are escaped as the format requires (backslash, double quote, newline); any other
control character is first written as its visible escape (:func:`exemplar_tune.terminal.clean`:
an ESC is read back as the four characters ``\\x1b``), so no host or profile name can change
the file's syntax, nor reach a terminal or an alert that shows it. :func:`write_atomically`
writes a temp file in the target's directory and renames it over the target, so the collector
never reads half a file.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYER_NAMES, get_layer

from exemplar_tune import __version__
from exemplar_tune.checks.base import check_class
from exemplar_tune.errors import UserError
from exemplar_tune.inputs import output_file
from exemplar_tune.terminal import clean

STATUS_VALUE = {"pass": 0, "warn": 1, "fail": 2}
_HELP = {
    "exemplar_tune_check_status": "Preflight check outcome: 0 pass, 1 warn, 2 fail.",
    "exemplar_tune_check_unknown": "1 for a preflight check that could not be judged.",
    "exemplar_tune_host_verdict": "1 for the host's verdict (class) and its first action.",
    "exemplar_tune_knob_drift": "1 when the host differs from the profile's target for a knob.",
    "exemplar_tune_knob_not_applicable": "1 for a knob that does not apply to the host.",
    "exemplar_tune_check_repeat_failures": "Failures of the check in the host's last "
                                           "recorded preflights (preflight --record).",
    "exemplar_tune_repeat_offender": "1 when the host is a repeat offender for the check.",
    "exemplar_tune_layer_status": "1 for the layer's state on the host, named in status.",
    "exemplar_tune_host_status": "1 for the host's state, named in status (ok, failed, "
                                 "unreachable).",
    "exemplar_tune_node_slowdown_ratio": "How much longer the host's benchmark runs take "
                                         "than the rest of the fleet's (slow-nodes).",
    "exemplar_tune_node_slowdown_low_ratio": "Low end of the slowdown's interval.",
    "exemplar_tune_node_slowdown_high_ratio": "High end of the slowdown's interval.",
    "exemplar_tune_node_slow": "1 when the host is slower than the fleet beyond its noise.",
    "exemplar_tune_node_turned_slow": "1 when the host turned slow among its runs (a change "
                                      "point), 0 not.",
    "exemplar_tune_node_turned_slow_run": "The run (1-based) from which the host turned slow.",
    "exemplar_tune_node_turned_slowdown_ratio": "How much slower the host's runs are from that "
                                                "run on than the fleet's at the same runs.",
    "exemplar_tune_node_differs": "1 for a fact where a slow host differs from the majority.",
    "exemplar_tune_run_timestamp_seconds": "When exemplar-tune wrote this file (Unix time).",
    "exemplar_tune_run_info": "The exemplar-tune command and profile behind this file.",
}


def _escape(value: Any) -> str:
    """A label value in the text format: control characters but newline shown as escapes,
    then backslash, double quote and newline escaped as the format requires."""
    return clean(str(value)).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _value(value: float) -> str:
    """A sample value written exactly: an integer as one, a float in its shortest form that
    reads back as the same float (``1796420012.345``, never ``1.79642e+09``)."""
    if isinstance(value, bool) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def _series(name: str, labels: Mapping[str, Any], value: float) -> str:
    inner = ",".join(f'{key}="{_escape(val)}"' for key, val in labels.items())
    return f"{name}{{{inner}}} {_value(value)}" if inner else f"{name} {_value(value)}"


def _text(samples: Iterable[tuple[str, Mapping[str, Any], float]]) -> str:
    by_name: dict[str, list[str]] = {name: [] for name in _HELP}
    for name, labels, value in samples:
        by_name[name].append(_series(name, labels, value))
    lines = []
    for name, series in by_name.items():
        if series:
            lines += [f"# HELP {name} {_HELP[name]}", f"# TYPE {name} gauge", *series]
    return "\n".join(lines) + "\n"


def host_label(host: str) -> str:
    """The ``host`` label of an inventory host: its name, the machine's name for the local
    host (``localhost``)."""
    return socket.gethostname() if host == "localhost" else host


def _run(command: str, profile: str, now: float | None) -> list[tuple[str, dict, float]]:
    return [("exemplar_tune_run_timestamp_seconds", {"command": command},
             round(now or time.time(), 3)),
            ("exemplar_tune_run_info", {"command": command, "profile": profile,
                                        "version": __version__}, 1)]


def _hosts(command: str, statuses: Mapping[str, str]) -> list[tuple[str, dict, float]]:
    """One ``exemplar_tune_host_status`` series per host."""
    return [("exemplar_tune_host_status",
             {"host": host_label(host), "command": command, "status": status}, 1)
            for host, status in sorted(statuses.items())]


def preflight_text(doc: Mapping[str, Any], now: float | None = None) -> str:
    """A preflight result (``preflight --format json``'s document) as textfile metrics."""
    samples = _run("preflight", doc["profile"], now)
    layers = doc.get("layers") or LAYER_NAMES
    for host, result in sorted(doc["hosts"].items()):
        label = host_label(host)
        checked = set()
        for check in result["results"]:
            labels = {"host": label, "layer": check["layer"], "check": check["id"],
                      "severity": check["severity"]}
            if check["status"] in STATUS_VALUE:
                checked.add(check["layer"])
                samples.append(("exemplar_tune_check_status",
                                {**labels, "class": check["class"],
                                 "pending_reboot": str(check["pending_reboot"]).lower()},
                                STATUS_VALUE[check["status"]]))
            elif check["class"] == "unknown":
                samples.append(("exemplar_tune_check_unknown", labels, 1))
        samples += [("exemplar_tune_layer_status", {
            "host": label, "layer": layer, "command": "preflight",
            "status": "checked" if layer in checked else "not_checked"}, 1) for layer in layers]
    for host, checks in sorted((doc.get("repeat_failures") or {}).items()):
        offending = set((doc.get("repeat_offenders") or {}).get(host) or ())
        for check, failures in sorted(checks.items()):
            labels = {"host": host_label(host), "check": check, "class": check_class(check)}
            samples.append(("exemplar_tune_check_repeat_failures", labels, failures))
            if check in offending:
                samples.append(("exemplar_tune_repeat_offender", labels, 1))
    samples += verdict_samples("preflight", doc["verdicts"])
    samples += _hosts("preflight", {**dict.fromkeys(doc["hosts"], "ok"),
                                    **dict.fromkeys(doc.get("unreachable") or {},
                                                    "unreachable")})
    return _text(samples)


def verdict_samples(command: str, verdicts: Mapping[str, Mapping[str, Any]]
                    ) -> list[tuple[str, dict, float]]:
    """One ``exemplar_tune_host_verdict`` series per host."""
    out = []
    for host, verdict in sorted(verdicts.items()):
        first = verdict["actions"][0] if verdict["actions"] else {"kind": "none"}
        out.append(("exemplar_tune_host_verdict", {
            "host": host_label(host), "command": command, "class": verdict["class"],
            "action": first["kind"], "pending_reboot": str(verdict["pending_reboot"]).lower(),
            "next": first.get("command") or first["kind"]}, 1))
    return out


def audit_text(doc: Mapping[str, Any], layers: list[str], now: float | None = None) -> str:
    """An audit result (``audit --format json``'s document) as textfile metrics: each of
    ``layers``' state on each host that answered, and the drift of every knob of the layers
    that were audited."""
    samples = _run("audit", doc["profile"], now)
    target = doc.get("target") or {}
    asked = {"profile": target.get("profile") or "auto",
             **({"inventory": target["inventory"]} if target.get("inventory") else {})}
    for host, data in sorted(doc["hosts"].items()):
        label = host_label(host)
        drifting = {(k["layer"], k["knob"]) for k in data.get("changed") or []}
        absent = {(k["layer"], k["knob"]) for k in data.get("not_applicable") or []}
        for layer in layers:
            status = data["audit"][layer]["status"]
            samples.append(("exemplar_tune_layer_status",
                            {"host": label, "layer": layer, "command": "audit",
                             "status": status.replace(" ", "_")}, 1))
            for knob in get_layer(layer).knobs if status != "not audited" else ():
                labels = {"host": label, "layer": layer, "knob": f"{layer}.{knob.name}"}
                if (layer, knob.name) in absent:
                    samples.append(("exemplar_tune_knob_not_applicable", labels, 1))
                else:
                    samples.append(("exemplar_tune_knob_drift", {**labels, **asked},
                                    int((layer, knob.name) in drifting)))
    samples += verdict_samples("audit", doc.get("verdicts") or {})
    samples += _hosts("audit", {**dict.fromkeys(doc["hosts"], "ok"),
                                **dict.fromkeys(doc.get("failed") or {}, "failed"),
                       **dict.fromkeys(doc.get("unreachable") or {}, "unreachable")})
    return _text(samples)


def slow_nodes_text(doc: Mapping[str, Any], now: float | None = None) -> str:
    """A slow-nodes result (``slow-nodes --format json``'s document) as textfile metrics."""
    samples = _run("slow-nodes", "none", now)
    for host in doc["hosts"]:
        label = {"host": host_label(host["host"])}
        low, high = host["interval"]
        samples += [("exemplar_tune_node_slowdown_ratio", label, host["slowdown"]),
                    ("exemplar_tune_node_slowdown_low_ratio", label, low),
                    ("exemplar_tune_node_slowdown_high_ratio", label, high),
                    ("exemplar_tune_node_slow", label, int(host["slow"])),
                    ("exemplar_tune_node_turned_slow", label, int(bool(host["turned_slow"])))]
        if host["turned_slow"]:
            turned = host["turned_slow"]
            samples += [("exemplar_tune_node_turned_slow_run", label, turned["run"]),
                        ("exemplar_tune_node_turned_slowdown_ratio", label, turned["slowdown"])]
        samples += [("exemplar_tune_node_differs", {**label, "fact": fact}, 1)
                    for fact in dict.fromkeys(d.partition("=")[0] for d in host["differs"])]
    samples += verdict_samples("slow-nodes", doc.get("verdicts") or {})
    samples += _hosts("slow-nodes", {h["host"]: "ok" for h in doc["hosts"]})
    return _text(samples)


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename (mode 0644), never leaving half a file;
    only a regular file is ever replaced (:func:`~exemplar_tune.inputs.output_file`)."""
    output_file(path)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
        with os.fdopen(handle, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except OSError as exc:
        if "temp" in locals():
            Path(temp).unlink(missing_ok=True)
        raise UserError(f"--output {path}: {exc.strerror or exc}") from None
