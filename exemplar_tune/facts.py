"""Collect layer facts: in-process for a sysroot, through Ansible for live hosts."""

from __future__ import annotations

import json
import os
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    gather_facts,
    select_layers,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.bundle import open_sysroot
from exemplar_tune.errors import UserError
from exemplar_tune.fleet.ansible_run import AnsibleRun, RunOutcome


def collect_facts(sysroot: str | None, run: AnsibleRun, layers: list[str] | None,
                  counter_window: float = 0.0) -> tuple[dict[str, dict], dict[str, str]]:
    """``({host: {layer: facts}}, {unreachable host: reason})`` for a sysroot or an inventory.

    A sysroot is one host, named after the directory or archive. ``counter_window`` seconds
    (the fabric layer's): the port error counters are read twice, that long apart.
    """
    if sysroot:
        name = os.path.basename(os.path.normpath(sysroot)).split(".tar")[0].removesuffix(".tgz")
        return {name: facts_from_sysroot(sysroot, layers, counter_window)}, {}
    hosts, outcome = facts_from_hosts(run, layers, counter_window)
    missing = {h: r.message for h, r in outcome.hosts.items() if h not in hosts}
    if not hosts and not missing:
        raise UserError(f"no host matched (ansible-runner status {outcome.status})")
    return hosts, missing


def facts_from_sysroot(path: str, layers: list[str] | None,
                       counter_window: float = 0.0) -> dict[str, Any]:
    """Facts of a captured host (directory or snapshot archive); no command is executed."""
    with open_sysroot(path) as root:
        return gather_facts(Sysroot(root), layers, {"counter_window": counter_window})


def facts_from_hosts(run: AnsibleRun, layers: list[str] | None,
                     counter_window: float = 0.0) -> tuple[dict, RunOutcome]:
    """Facts of every inventory host via one ``exemplar.tune.facts`` call per host.

    Returns ``({host: {layer: facts}}, outcome)``; unreachable/failed hosts are absent from
    the first mapping and reported in ``outcome.hosts``.
    """
    names = [layer.name for layer in select_layers(layers)]
    # The module's action reads each host's exemplar_sysroot (simulated hosts, captured bundles
    # laid out on a host; the others are read live) and BMC (exemplar_bmc_address: the BIOS
    # is read over Redfish, password no_log) from the inventory.
    # as_json: one string per host crosses Ansible's workers and callbacks, not a nested dict
    args = {"layers": names, "as_json": True}
    if counter_window > 0:
        args["counter_window"] = counter_window
    outcome = run.module("exemplar.tune.facts", args)
    facts = {}
    for host, result in outcome.hosts.items():
        for task in result.tasks:
            text = task["result"].get("exemplar_tune_json")
            if isinstance(text, str):
                facts[host] = json.loads(text)
    return facts, outcome
