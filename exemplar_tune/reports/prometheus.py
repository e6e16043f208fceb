"""Preflight and audit results in the Prometheus text format, for node_exporter's textfile
collector (continuous drift monitoring).

Series (every one a gauge):

* ``exemplar_tune_check_status{host, layer, check, severity}``: 0 pass, 1 warn, 2 fail
  (skipped checks are left out);
* ``exemplar_tune_knob_drift{host, layer, knob}``: 1 when the host differs from the profile's
  target for that knob, 0 when it does not (audit; every knob of the layers audited on that
  host, except the knobs that do not apply to it);
* ``exemplar_tune_layer_audited{host, layer}``: 1 when the layer was audited on that host, 0
  when it could not be (its knobs then have no drift series: absent, never 0);
* ``exemplar_tune_knob_not_applicable{host, layer, knob}``: 1 for a knob that does not apply
  to the host (no bootloader configuration ...);
* ``exemplar_tune_host_unreachable{host}``: 1 for a host that did not answer;
* ``exemplar_tune_run_timestamp_seconds`` and ``exemplar_tune_run_info{command, profile,
  version}`` (always 1): when the file was written, by what.

Label values are escaped as the format requires (backslash, double quote, newline), so no
host or profile name can change the file's syntax. :func:`write_atomically` writes a temp file
in the target's directory and renames it over the target, so the collector never reads half a
file.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import get_layer

from exemplar_tune import __version__
from exemplar_tune.errors import UserError
from exemplar_tune.inputs import output_file

STATUS_VALUE = {"pass": 0, "warn": 1, "fail": 2}
_HELP = {
    "exemplar_tune_check_status": "Preflight check outcome: 0 pass, 1 warn, 2 fail.",
    "exemplar_tune_knob_drift": "1 when the host differs from the profile's target for a knob.",
    "exemplar_tune_layer_audited": "1 when the layer was audited on the host, 0 when it could "
                                   "not be.",
    "exemplar_tune_knob_not_applicable": "1 for a knob that does not apply to the host.",
    "exemplar_tune_host_unreachable": "1 for a host that did not answer.",
    "exemplar_tune_run_timestamp_seconds": "When exemplar-tune wrote this file (Unix time).",
    "exemplar_tune_run_info": "The exemplar-tune command and profile behind this file.",
}


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _series(name: str, labels: Mapping[str, Any], value: float) -> str:
    inner = ",".join(f'{key}="{_escape(val)}"' for key, val in labels.items())
    return f"{name}{{{inner}}} {value:g}" if inner else f"{name} {value:g}"


def _text(samples: Iterable[tuple[str, Mapping[str, Any], float]]) -> str:
    by_name: dict[str, list[str]] = {name: [] for name in _HELP}
    for name, labels, value in samples:
        by_name[name].append(_series(name, labels, value))
    lines = []
    for name, series in by_name.items():
        if series:
            lines += [f"# HELP {name} {_HELP[name]}", f"# TYPE {name} gauge", *series]
    return "\n".join(lines) + "\n"


def _run(command: str, profile: str, now: float | None) -> list[tuple[str, dict, float]]:
    return [("exemplar_tune_run_timestamp_seconds", {}, round(now or time.time(), 3)),
            ("exemplar_tune_run_info", {"command": command, "profile": profile,
                                        "version": __version__}, 1)]


def preflight_text(doc: Mapping[str, Any], now: float | None = None) -> str:
    """A preflight result (``preflight --format json``'s document) as textfile metrics."""
    samples = _run("preflight", doc["profile"], now)
    for host, result in sorted(doc["hosts"].items()):
        for check in result["results"]:
            if check["status"] in STATUS_VALUE:
                samples.append(("exemplar_tune_check_status",
                                {"host": host, "layer": check["layer"], "check": check["id"],
                                 "severity": check["severity"]},
                                STATUS_VALUE[check["status"]]))
    samples += [("exemplar_tune_host_unreachable", {"host": host}, 1)
                for host in sorted(doc.get("unreachable") or {})]
    return _text(samples)


def audit_text(doc: Mapping[str, Any], layers: list[str], now: float | None = None) -> str:
    """An audit result (``audit --format json``'s document) as textfile metrics: whether each
    of ``layers`` was audited on each host that answered, and the drift of every knob of the
    layers that were."""
    samples = _run("audit", doc["profile"], now)
    for host, data in sorted(doc["hosts"].items()):
        drifting = {(k["layer"], k["knob"]) for k in data.get("changed") or []}
        absent = {(k["layer"], k["knob"]) for k in data.get("not_applicable") or []}
        for layer in layers:
            audited = data["audit"][layer]["status"] != "not audited"
            samples.append(("exemplar_tune_layer_audited", {"host": host, "layer": layer},
                            int(audited)))
            for knob in get_layer(layer).knobs if audited else ():
                labels = {"host": host, "layer": layer, "knob": f"{layer}.{knob.name}"}
                if (layer, knob.name) in absent:
                    samples.append(("exemplar_tune_knob_not_applicable", labels, 1))
                else:
                    samples.append(("exemplar_tune_knob_drift", labels,
                                    int((layer, knob.name) in drifting)))
    samples += [("exemplar_tune_host_unreachable", {"host": host}, 1)
                for host in sorted(doc.get("unreachable") or {})]
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
