"""The IMEX domain as this node's daemon sees it, from ``nvidia-imex-ctl -N``.

IMEX (the NVIDIA Internode Memory Exchange service) lets the GPUs of a multi-node NVLink domain
(GB200/GB300 NVL) import each other's memory. ``nvidia-imex-ctl -N`` prints the connectivity
legend, a timestamp, ``Nodes:`` with one line per node, ``Node #0   - 10.136.206.47   -
READY`` (R570.172 adds ``- Version: 570.172``), the connectivity matrix, `` Nodes From\\To  0  1``
then one row per node of one-letter states (``C`` connected; ``I`` invalid, ``N`` never
connected, ``R`` recovering, ``D`` disconnected, ``A`` authenticating, ``!V!`` version and
``!M!`` node-map mismatch), and ``Domain State: UP`` (or ``DEGRADED``, ``DOWN``). Where the
daemon has no configuration the tool prints ``Unable to open configuration file at ...`` and
its usage. The layout is read from real captures (sources in the test corpus); NVIDIA's IMEX
guide names the tool but no public page quoting the table was found.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

COMMAND = "nvidia-imex-ctl-N.txt"
SOURCE = "nvidia-imex-ctl -N"
_NODE = re.compile(r"Node #(\d+)\s+-\s+(\S+)\s+-\s+(\S+)(?:\s+-\s+Version:\s*(\S+))?")
_MATRIX_HEAD = re.compile(r"Nodes From\\To((?:\s+\d+)+)")
_ROW = re.compile(r"(\d+)((?:\s+\S+)+)")
_DOMAIN = re.compile(r"Domain State:\s*(\S+)")
NO_CONFIG = "Unable to open configuration file"


def parse_imex_nodes(text: str, source: str = SOURCE) -> dict[str, Any]:
    """``{"configured", "domain_state", "nodes": [{index, address, state, version}],
    "not_connected": [[from, to, state], ...]}``; ``configured`` is False (and the rest empty)
    where the tool found no configuration. ``ParseError`` when neither the node list nor the
    missing configuration is there."""
    if NO_CONFIG in text:
        return {"configured": False, "domain_state": None, "nodes": [], "not_connected": []}
    nodes, bad, columns = [], [], None
    domain = None
    for line in text.splitlines():
        body = line.strip()
        if node := _NODE.fullmatch(body):
            nodes.append({"index": int(node.group(1)), "address": node.group(2),
                          "state": node.group(3), "version": node.group(4)})
        elif head := _MATRIX_HEAD.fullmatch(body):
            columns = [int(n) for n in head.group(1).split()]
        elif columns is not None and (row := _ROW.fullmatch(body)):
            states = row.group(2).split()
            bad += [[int(row.group(1)), to, state] for to, state in zip(columns, states,
                                                                         strict=False)
                    if state != "C"]
        elif found := _DOMAIN.fullmatch(body):
            domain = found.group(1)
    if not nodes or domain is None:
        raise ParseError(source, text.strip()[:80], "no 'Nodes:' list with a 'Domain State:'")
    return {"configured": True, "domain_state": domain, "nodes": nodes, "not_connected": bad}


def read_imex_nodes(root: Sysroot) -> dict[str, Any]:
    """``parse_imex_nodes`` of the host's ``nvidia-imex-ctl -N``; ``NotSupported`` where the
    tool is not installed (or was not captured). The tool exits non-zero without a
    configuration: its output is read all the same."""
    out = root.command(COMMAND)
    return parse_imex_nodes(out.stdout + "\n" + out.stderr, out.source)
