"""A preflight result for Kubernetes node-problem-detector (NPD), and NPD's configuration.

NPD's custom-plugin protocol: the plugin exits 0 (OK), 1 (NonOK: the problem is there) or 2
(Unknown), and its standard output is the condition's message (NPD keeps the first
``max_output_length`` characters). :func:`npd_result` turns one node's preflight into that
exit status and one line; ``preflight --format npd --layer LAYER`` prints it, and an error
before any check ran (exit 2) is Unknown to NPD, as it should be.

:func:`plugin_config` is the custom-plugin-monitor configuration that runs it, one node
condition per layer with checks (``ExemplarTuneGpu`` ...), each layer through
``nsenter`` into the node's own namespaces, where exemplar-tune is installed as for the
systemd-timer recipe. ``python -m exemplar_tune.registry_docs`` writes it into
``deploy/kubernetes/``.
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYER_NAMES

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, WARN
from exemplar_tune.errors import UserError

OK, NON_OK, UNKNOWN = 0, 1, 2
MAX_MESSAGE = 256  # NPD's max_output_length in the shipped configuration
INSTALLED = "/opt/exemplar-tune/bin/exemplar-tune"  # where the node recipe installs it
NSENTER = ["/usr/bin/nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid",
           "--"]


def npd_result(doc: dict[str, Any]) -> tuple[int, str]:
    """``(exit status, message)`` of a one-node preflight document for NPD."""
    if len(doc["hosts"]) + len(doc["unreachable"]) != 1:
        raise UserError("--format npd reports one node: run it on the node (no -i)")
    if doc["unreachable"]:
        (host, why), = doc["unreachable"].items()
        return UNKNOWN, _short(f"{host} could not be checked: {why}")
    results = next(iter(doc["hosts"].values()))["results"]
    failing = [r for r in results if r["status"] == FAIL]
    warning = [r for r in results if r["status"] == WARN]
    ran = [r for r in results if r["status"] in (FAIL, WARN, "pass")]
    if failing:
        more = f" (and {len(failing) - 1} more failing)" if failing[1:] else ""
        return NON_OK, _short(f"{failing[0]['id']}: {failing[0]['detail']}", more)
    if not ran:
        return UNKNOWN, "no check could run (every check skipped: its facts are missing)"
    warned = f"; warn: {', '.join(r['id'] for r in warning)}" if warning else ""
    return OK, _short(f"{len(ran)} check(s) pass{warned}")


def _short(text: str, tail: str = "") -> str:
    """One line of at most :data:`MAX_MESSAGE` characters, ``tail`` kept whole."""
    text = " ".join(text.split())
    room = MAX_MESSAGE - len(tail)
    return (text if len(text) <= room else text[:room - 3] + "...") + tail


def condition(layer: str) -> str:
    """The node condition of ``layer``: ``ExemplarTuneGpu`` ..."""
    return "ExemplarTune" + layer.capitalize()


def plugin_config() -> dict[str, Any]:
    """NPD's custom-plugin-monitor configuration: a condition and a rule per layer."""
    layers = [layer for layer in LAYER_NAMES if any(c.layer == layer for c in CHECKS)]
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
