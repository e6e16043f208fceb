"""Inventory hosts and the Slurm nodes they are.

A host's Slurm node is its ``exemplar_slurm_node`` variable (host or group variable, a plain
name), else its inventory name. The inventory is what ``-i`` names (a file, directory or
host list, read with Ansible's own inventory manager, ``--limit`` applied) or an inventory
mapping such as :func:`exemplar_tune.ansible_run.local_inventory` builds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

NODE_VAR = "exemplar_slurm_node"
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class InventoryError(ValueError):
    """An inventory that cannot be read, or a host whose Slurm node name is unusable."""


class HostSource(Protocol):
    """Where the hosts come from: an inventory and a limit (an ``AnsibleRun`` is one)."""

    inventory: str | dict
    limit: str | None


def host_nodes(source: HostSource) -> dict[str, str]:
    """``{inventory host: Slurm node}`` of ``source``'s hosts, in inventory order."""
    inventory, limit = source.inventory, source.limit
    found = (_from_sources(inventory, limit) if isinstance(inventory, str)
             else _from_mapping(inventory, limit))
    if not found:
        where = inventory if isinstance(inventory, str) else "(mapping)"
        raise InventoryError(f"inventory {where}: no host (unreadable, or --limit {limit!r} "
                             "matches none)")
    return {host: _node(host, hostvars) for host, hostvars in found}


def _from_sources(sources: str, limit: str | None) -> list[tuple[str, dict[str, Any]]]:
    """Hosts and their variables through Ansible's inventory manager."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    try:
        inventory = InventoryManager(loader=loader, sources=[sources])
        inventory.subset(limit)
        variables = VariableManager(loader=loader, inventory=inventory)
        return [(host.name, variables.get_vars(host=host, include_hostvars=False))
                for host in inventory.get_hosts("all")]
    except AnsibleError as exc:
        raise InventoryError(f"inventory {sources}: {' '.join(str(exc).split())}") from None


def _from_mapping(data: Mapping[str, Any], limit: str | None) -> list[tuple[str, dict]]:
    """Hosts of an inventory mapping (``all.hosts`` and ``children``, group vars below host
    vars); ``limit`` as a comma-separated list of host names."""
    found: dict[str, dict[str, Any]] = {}

    def walk(group: Mapping[str, Any], inherited: dict[str, Any]) -> None:
        merged = {**inherited, **(group.get("vars") or {})}
        for host, hostvars in (group.get("hosts") or {}).items():
            found[host] = {**merged, **found.get(host, {}), **(hostvars or {})}
        for child in (group.get("children") or {}).values():
            walk(child or {}, merged)

    walk(data.get("all") or {}, {})
    wanted = set(limit.split(",")) if limit else None
    return [(h, v) for h, v in found.items() if wanted is None or h in wanted]


def _node(host: str, hostvars: Mapping[str, Any]) -> str:
    node = str(hostvars.get(NODE_VAR) or host)
    if not _NODE_NAME.match(node):
        raise InventoryError(f"host {host}: {NODE_VAR} {node!r} is not a Slurm node name")
    return node
