"""A preflight result for Kubernetes node-problem-detector (NPD), and NPD's configuration.

NPD's custom-plugin protocol: the plugin exits 0 (OK), 1 (NonOK: the problem is there) or 2
(Unknown), and its standard output is the condition's message (NPD keeps the first
``max_output_length`` characters). :func:`npd_result` turns one node's verdict into that
exit status and one line; ``preflight --format npd --layer LAYER`` prints it, and an error
before any check ran (exit 2) is Unknown to NPD, as it should be. Only health problems are
NonOK by default (``--npd-include-tuning`` adds tuning ones); a layer the profile asks
nothing of, or whose checks do not apply, is OK with a line that says so.

:func:`plugin_config` is the custom-plugin-monitor configuration that runs it, one node
condition per layer read on the node (``ExemplarTuneGpu`` ...), each layer through
``nsenter`` into the node's own namespaces, where exemplar-tune is installed as for the
systemd-timer recipe. ``python -m exemplar_tune.registry_docs`` writes it into
``deploy/kubernetes/``.
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYERS

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, HEALTH, NOT_APPLICABLE, TUNING, UNKNOWN, WARN
from exemplar_tune.errors import UserError
from exemplar_tune.terminal import escape

OK, NON_OK, UNKNOWN_EXIT = 0, 1, 2
MAX_MESSAGE = 256  # NPD's max_output_length in the shipped configuration
INSTALLED = "/opt/exemplar-tune/bin/exemplar-tune"  # where the node recipe installs it
NSENTER = ["/usr/bin/nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid",
           "--"]


def npd_result(doc: dict[str, Any], include_tuning: bool = False) -> tuple[int, str]:
    """``(exit status, message)`` of a one-node preflight document for NPD, from the node's
    verdict (:mod:`exemplar_tune.verdict`): NonOK for a health problem (and, with
    ``include_tuning``, a tuning one); Unknown only where the checks could not judge the node,
    with the reason; OK otherwise, the message saying whether the checks passed, do not apply
    or the profile asks nothing, and naming tuning findings and pending reboots."""
    if len(doc["hosts"]) + len(doc["unreachable"]) != 1:
        raise UserError("--format npd reports one node: run it on the node (no -i)")
    (host, verdict), = doc["verdicts"].items()
    results = doc["hosts"][host]["results"] if host in doc["hosts"] else []
    klass = verdict["class"]
    status = {HEALTH: NON_OK, UNKNOWN: UNKNOWN_EXIT,
              TUNING: NON_OK if include_tuning else OK}.get(klass, OK)
    return status, _short(f"{klass}: {_message(doc, host, verdict, results)}", _step(verdict))


def _message(doc: dict[str, Any], host: str, verdict: dict[str, Any],
             results: list[dict[str, Any]]) -> str:
    """What the condition's message says after the class."""
    layers = "/".join(doc.get("layers") or ["every"]) + " layer"
    if verdict["class"] == HEALTH:
        more = sum(r["class"] == HEALTH and r["status"] in (FAIL, WARN) for r in results) - 1
        return verdict["reason"] + (f" (and {more} more)" if more > 0 else "")
    if verdict["class"] == UNKNOWN:
        return f"{host} could not be judged: {verdict['reason']}"
    if verdict["class"] == TUNING:
        return ("pending reboot: " if verdict["pending_reboot"] else "") + verdict["reason"]
    if verdict["class"] == NOT_APPLICABLE:
        first = results[0] if results else {"id": layers, "detail": "no check"}
        more = f" (and {len(results) - 1} more)" if len(results) > 1 else ""
        return (f"nothing to judge in the {layers} here, profile {doc['profile']}: "
                f"{first['id']}: {first['detail']}{more}")
    return f"{sum(r['status'] != 'skip' for r in results)} check(s) of the {layers} pass"


def _step(verdict: dict[str, Any]) -> str:
    """`` -> next: KIND`` of a verdict's first action (the command does not fit 256)."""
    first = verdict["actions"][0]["kind"] if verdict["actions"] else "none"
    return "" if first == "none" else f"; next: {first}"


def _short(text: str, tail: str = "") -> str:
    """One line of at most :data:`MAX_MESSAGE` characters, ``tail`` kept whole; runs of
    whitespace are one space, any other control character is escaped."""
    text = escape(" ".join(text.split()))
    room = MAX_MESSAGE - len(tail)
    return (text if len(text) <= room else text[:room - 3] + "...") + tail


def condition(layer: str) -> str:
    """The node condition of ``layer``: ``ExemplarTuneGpu`` ..."""
    return "ExemplarTune" + layer.capitalize()


def plugin_config() -> dict[str, Any]:
    """NPD's custom-plugin-monitor configuration: a condition and a rule per layer."""
    layers = [layer.name for layer in LAYERS  # a layer not read on the node has no condition
              if layer.reads_host and any(c.layer == layer.name for c in CHECKS)]
    return {
        "plugin": "custom",
        "pluginConfig": {"invoke_interval": "10m", "timeout": "5m",
                         "max_output_length": MAX_MESSAGE, "concurrency": 1},
        "source": "exemplar-tune",
        "conditions": [{"type": condition(layer), "reason": f"{condition(layer)}Passing",
                        "message": f"exemplar-tune preflight: no failing {layer} check"}
                       for layer in layers],
        "rules": [{"type": "permanent", "condition": condition(layer),
                   "reason": f"{condition(layer)}Failing", "path": NSENTER[0],
                   "args": [*NSENTER[1:], INSTALLED, "preflight", "--format", "npd",
                            "--layer", layer, "--quiet"],
                   "timeout": "5m"} for layer in layers],
    }


def plugin_config_text() -> str:
    """:func:`plugin_config` as the JSON file NPD reads."""
    return json.dumps(plugin_config(), indent=2) + "\n"
