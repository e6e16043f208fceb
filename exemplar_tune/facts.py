"""Collect layer facts: in-process for a sysroot, through Ansible for live hosts."""

from __future__ import annotations

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


def collect_facts(sysroot: str | None, run: AnsibleRun, layers: list[str] | None
                  ) -> tuple[dict[str, dict], dict[str, str]]:
    """``({host: {layer: facts}}, {unreachable host: reason})`` for a sysroot or an inventory.

    A sysroot is one host, named after the directory or archive.
    """
    if sysroot:
        name = os.path.basename(os.path.normpath(sysroot)).split(".tar")[0].removesuffix(".tgz")
        return {name: facts_from_sysroot(sysroot, layers)}, {}
    hosts, outcome = facts_from_hosts(run, layers)
    missing = {h: r.message for h, r in outcome.hosts.items() if h not in hosts}
    if not hosts and not missing:
        raise UserError(f"no host matched (ansible-runner status {outcome.status})")
    return hosts, missing


def facts_from_sysroot(path: str, layers: list[str] | None) -> dict[str, Any]:
    """Facts of a captured host (directory or snapshot archive); no command is executed."""
    with open_sysroot(path) as root:
        return gather_facts(Sysroot(root), layers)


def facts_from_hosts(run: AnsibleRun, layers: list[str] | None) -> tuple[dict, RunOutcome]:
    """Facts of every inventory host via one ``exemplar.tune.facts`` call per host.

    Returns ``({host: {layer: facts}}, outcome)``; unreachable/failed hosts are absent from
    the first mapping and reported in ``outcome.hosts``.
    """
    names = [layer.name for layer in select_layers(layers)]
    # A host whose inventory sets exemplar_sysroot is read inside that tree (simulated hosts,
    # captured bundles laid out on a host); the others are read live. A host with
    # exemplar_bmc_address also has its BIOS read over Redfish (password: no_log).
    outcome = run.module("exemplar.tune.facts", {
        "layers": names, "sysroot": "{{ exemplar_sysroot | default('/') }}",
        "bmc": "{{ lookup('exemplar.tune.bmc') }}"})
    facts = {}
    for host, result in outcome.hosts.items():
        for task in result.tasks:
            gathered = task["result"].get("ansible_facts", {}).get("exemplar_tune")
            if gathered is not None:
                facts[host] = gathered
    return facts, outcome
