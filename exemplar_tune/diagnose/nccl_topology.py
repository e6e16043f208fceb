"""NCCL topology files: ``NCCL_TOPO_FILE`` content and ``NCCL_TOPO_DUMP_FILE`` output.

The XML is read by the reader the runtime facts use (``readers.topo_xml``). The file is judged
as NCCL would take it (``runtime.topo-file``: a root other than ``<system version="1">`` is
refused; a ``<graphs>`` file is a graph dump, not a topology) and by its network devices
(``fabric.nccl-interfaces``: a ``<net>`` named as a bridge, veth pair, overlay, tunnel or
loopback is one NCCL may carry inter-node traffic over).
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.topo_xml import (
    parse_topo_xml,
)

from exemplar_tune.diagnose.base import (
    FAIL,
    INFO,
    PASS,
    WARN,
    Analyzer,
    DiagnoseError,
    Report,
    cite,
    finding,
    numbered,
)

KIND = "nccl topology"
CHECK_FILE = "runtime.topo-file"
CHECK_NETS = "fabric.nccl-interfaces"
_ROOT = re.compile(r"<(system|graphs)[\s>]")


def sniff(text: str) -> bool:
    """The first element, after the XML declaration and comments, is ``<system`` or
    ``<graphs``."""
    head = text.lstrip()[:65536]
    while head.startswith(("<?", "<!--")):
        end = head.find("?>" if head.startswith("<?") else "-->")
        if end < 0:
            return False
        head = head[end + (2 if head.startswith("<?") else 3):].lstrip()
    return bool(_ROOT.match(head))


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    del expectations
    try:
        topo = parse_topo_xml(text, source)
    except HostStateError as exc:
        raise DiagnoseError(f"{source}: malformed NCCL topology ({exc.reason})") from None
    counts = topo["counts"]
    summary = {key: topo[key] for key in ("valid", "root", "version", "gpus", "nics", "nets",
                                          "virtual_nets", "nics_without_pci", "counts")}
    if not topo["valid"]:
        file = finding(CHECK_FILE, FAIL, f"NCCL refuses this file: {topo['error']}", [source])
    elif not counts["gpu"] and not counts["nic"]:
        file = finding(CHECK_FILE, INFO, f"a PCI tree only ({counts['cpu']} CPUs, "
                       f"{counts['pci']} PCI devices; no GPU or NIC named: NCCL adds those it "
                       f"detects), version {topo['version']}", [source])
    else:
        nets = f" (networks: {', '.join(topo['nets'])})" if topo["nets"] else ""
        file = finding(CHECK_FILE, INFO, f"a topology of {counts['gpu']} GPUs and "
                       f"{counts['nic']} NICs{nets}, version {topo['version']}", [source])
    return Report(source, KIND, summary, [file, *_nets(text, source, topo)])


def _nets(text: str, source: str, topo: dict[str, Any]) -> list:
    if not topo["nets"]:
        return []
    virtual = topo["virtual_nets"]
    shown = [f'name="{name}"' for name in virtual or topo["nets"]]
    where = [n for n, line in numbered(text) if "<net" in line and any(
        name in line for name in shown)]
    if not virtual:
        return [finding(CHECK_NETS, PASS, f"the file's network devices are physical NICs "
                        f"({', '.join(topo['nets'])})", [cite(source, where)])]
    return [finding(CHECK_NETS, WARN, f"the file names virtual interfaces as network devices "
                    f"({', '.join(virtual)}: bridges, veth pairs, overlays or tunnels), which "
                    "NCCL may carry inter-node traffic over: dump it again with "
                    "NCCL_SOCKET_IFNAME or NCCL_IB_HCA set to the host's NICs",
                    [cite(source, where)], virtual=virtual)]


ANALYZER = Analyzer(KIND, sniff, analyze,
                    label="NCCL topology XML (NCCL_TOPO_FILE, NCCL_TOPO_DUMP_FILE)")
