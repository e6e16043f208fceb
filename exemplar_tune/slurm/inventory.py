"""Inventory hosts and the Slurm nodes they are.

A host's Slurm node is its ``exemplar_slurm_node`` variable (host or group variable, a plain
name), else its inventory name. The hosts come from
:func:`exemplar_tune.fleet.inventory.inventory_hosts`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from exemplar_tune.fleet.inventory import HostSource, InventoryError, inventory_hosts

NODE_VAR = "exemplar_slurm_node"
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def host_nodes(source: HostSource) -> dict[str, str]:
    """``{inventory host: Slurm node}`` of ``source``'s hosts, in inventory order."""
    return {host: _node(host, hostvars) for host, hostvars in inventory_hosts(source)}


def _node(host: str, hostvars: Mapping[str, Any]) -> str:
    node = str(hostvars.get(NODE_VAR) or host)
    if not _NODE_NAME.match(node):
        raise InventoryError(f"host {host}: {NODE_VAR} {node!r} is not a Slurm node name")
    return node
