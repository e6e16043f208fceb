"""The hosts a command works on: an inventory and a limit resolved to names and variables.

The inventory is what ``-i`` names (a file, a directory or a comma-separated host list, read
with Ansible's own inventory manager, ``--limit`` applied) or an inventory mapping such as
:func:`exemplar_tune.fleet.ansible_run.local_inventory` builds. :func:`host_identities` names each
host by what makes it that machine, for the lock that keeps two controllers apart.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Mapping
from typing import Any, Protocol

from exemplar_tune.errors import UserError
from exemplar_tune.fleet.inventory_files import check_inventory_files


class InventoryError(UserError):
    """An inventory that cannot be read or selects no host; one line, exit 2."""


class HostSource(Protocol):
    """Where the hosts come from: an inventory and a limit (an ``AnsibleRun`` is one)."""

    inventory: str | dict
    limit: str | None


def check_source(inventory: str) -> None:
    """``InventoryError`` for ``-i`` naming a path that does not exist, or files whose YAML
    aliases would take Ansible gigabytes (:mod:`exemplar_tune.fleet.inventory_files`).

    Ansible would take such a path for a host name (``-i /missing/hosts.yml``: an SSH error
    later); a host list has a comma (``-i node1,node2`` or ``-i node1,``).
    """
    if "," not in inventory and not os.path.exists(inventory):
        raise InventoryError(f"inventory {inventory} not found (a file or directory; a host "
                             "list needs a comma: -i node1,)")
    try:
        check_inventory_files(inventory)
    except UserError as exc:
        raise InventoryError(str(exc)) from None


def inventory_hosts(source: HostSource) -> list[tuple[str, dict[str, Any]]]:
    """``[(host, variables)]`` of ``source``'s hosts, in inventory order; ``InventoryError``
    when the inventory cannot be read or no host is selected."""
    inventory, limit = source.inventory, source.limit
    if isinstance(inventory, str):
        check_source(inventory)
        found = _from_sources(inventory, limit)
    else:
        found = _from_mapping(inventory, limit)
    if not found:
        where = inventory if isinstance(inventory, str) else "(built in)"
        raise InventoryError(f"inventory {where}: no host" + (f" matches --limit {limit}"
                                                              if limit else ""))
    return found


def host_identities(source: HostSource) -> dict[str, str]:
    """``{host: identity}``: the machine each host is, whatever the inventory calls it.

    A host that works inside a sysroot (``exemplar_sysroot``) is that directory; any other
    is its address (``ansible_host``, else its name; lower case) with ``ansible_port`` when
    it is not 22. Two inventories, paths or limits that reach the same machine by the same
    address give the same identity (a host reached once by name and once by IP does not).
    """
    identities = {}
    for host, hostvars in inventory_hosts(source):
        sysroot = hostvars.get("exemplar_sysroot")
        if sysroot and sysroot != "/":
            identities[host] = "sysroot:" + os.path.realpath(str(sysroot))
        else:
            address = str(hostvars.get("ansible_host") or host).lower().rstrip(".")
            port = str(hostvars.get("ansible_port") or "22")
            identities[host] = address if port == "22" else f"{address}:{port}"
    return identities


def _from_sources(sources: str, limit: str | None) -> list[tuple[str, dict[str, Any]]]:
    """Hosts and their variables through Ansible's inventory manager."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    try:
        # Ansible's warnings go into our one-line error when no host is found, not before it
        warnings = io.StringIO()
        with contextlib.redirect_stderr(warnings):
            inventory = InventoryManager(loader=loader, sources=[sources])
            inventory.subset(limit)
            variables = VariableManager(loader=loader, inventory=inventory)
            found = [(host.name, variables.get_vars(host=host, include_hostvars=False))
                     for host in inventory.get_hosts("all")]
    except AnsibleError as exc:
        raise InventoryError(f"inventory {sources}: {' '.join(str(exc).split())}") from None
    if not found and "Unable to parse" in warnings.getvalue():
        raise InventoryError(f"inventory {sources}: Ansible cannot parse it (ansible-inventory "
                             f"-i {sources} --list shows why)")
    return found


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
