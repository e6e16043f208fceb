"""NCCL topology files (``NCCL_TOPO_FILE``, ``NCCL_TOPO_DUMP_FILE`` output).

Format: NCCL ``src/graph/xml.{h,cc}`` and ``src/graph/topo.cc``:
a ``<system version="1">`` root (``NCCL_TOPO_XML_VERSION``; any other version makes NCCL
``WARN("XML Topology has wrong version ...")``) holding ``<cpu>`` elements with nested
``<pci busid=... class=...>`` elements; a GPU is a ``pci`` of class ``0x0302xx`` (3D
controller) or ``0x0300xx`` (VGA) or one that contains ``<gpu>``; a NIC is a ``pci`` of class
``0x0207xx`` (InfiniBand) or ``0x0200xx`` (Ethernet) or one that contains ``<nic>``/``<net>``;
a ``<nic>`` with no ``pci`` parent (directly under ``<cpu>``, as NCCL dumps a virtual NIC, e.g.
Azure NCv4's ``eth0``) is a NIC too, named by its nets. ``<net name="mlx5_0" .../>`` names
the network devices; ``virtual_nets`` lists those named as a bridge, veth pair, overlay,
tunnel or loopback (``netdev_names``: a socket transport's dump on a host running containers),
which NCCL would use as network devices. A ``<graphs>`` root is an ``NCCL_GRAPH_DUMP_FILE`` (for
``NCCL_GRAPH_FILE``), not a topology. Parsed with ``safe_xml`` (untrusted).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.netdev_names import is_virtual
from ansible_collections.exemplar.tune.plugins.module_utils.readers.safe_xml import parse_xml
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET  # noqa: S405 - types only; parsing goes through safe_xml

TOPO_XML_VERSION = "1"
GPU_CLASSES = ("0x0302", "0x0300")
NIC_CLASSES = ("0x0207", "0x0200")
_BDF = re.compile(r"^(?:([0-9a-f]{1,4}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$")


def normalize_bdf(busid: str) -> str:
    """``"0000:A4:00.0"`` or ``"a4:00.0"`` -> ``"0000:a4:00.0"``; other text is lower-cased."""
    text = busid.strip().lower()
    match = _BDF.match(text)
    if not match:
        return text
    domain, bus, slot, func = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(slot, 16):02x}.{func}"


def _is_gpu(pci: ET.Element) -> bool:
    cls = pci.get("class", "").lower()
    return cls.startswith(GPU_CLASSES) or pci.find("gpu") is not None


def _is_nic(pci: ET.Element) -> bool:
    cls = pci.get("class", "").lower()
    return cls.startswith(NIC_CLASSES) or pci.find("nic") is not None or pci.find("net") is not None


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _pci_less_nics(element: ET.Element, under_pci: bool = False) -> list[ET.Element]:
    """``<nic>`` elements with no ``<pci>`` ancestor."""
    found = []
    for child in element:
        if child.tag == "nic" and not under_pci:
            found.append(child)
        found += _pci_less_nics(child, under_pci or child.tag == "pci")
    return found


def summarize_topology(system: ET.Element) -> dict[str, Any]:
    """GPUs, NICs (normalised BDFs), net names (and the virtual ones) of a parsed ``<system>``
    element, NICs with no PCI parent (by their net names) and the element counts (``nic``
    counts both kinds)."""
    pcis = [pci for pci in system.iter("pci") if pci.get("busid")]
    gpus = _unique([normalize_bdf(p.get("busid", "")) for p in pcis if _is_gpu(p)])
    nics = _unique([normalize_bdf(p.get("busid", "")) for p in pcis if _is_nic(p)])
    loose = [",".join(n.get("name", "?") for n in nic.iter("net")) or "?"
             for nic in _pci_less_nics(system)]
    nets = _unique([net.get("name", "") for net in system.iter("net") if net.get("name")])
    return {
        "gpus": gpus,
        "nics": nics,
        "nets": nets,
        "virtual_nets": [name for name in nets if is_virtual(name)],
        "nics_without_pci": loose,
        "counts": {"cpu": sum(1 for _ in system.iter("cpu")),
                   "pci": sum(1 for _ in system.iter("pci")),
                   "gpu": len(gpus), "nic": len(nics) + len(loose),
                   "graph": sum(1 for _ in system.iter("graph")),
                   "channel": sum(1 for _ in system.iter("channel"))},
    }


def parse_topo_xml(text: str, source: str) -> dict[str, Any]:
    """``{valid, root, version, gpus, nics, nets, virtual_nets, nics_without_pci, counts,
    error}`` of an
    NCCL topology file.

    Malformed or unsafe XML raises ``ParseError``. A well-formed document whose root is not
    ``<system>`` or whose ``version`` is not ``"1"`` is returned with ``valid: False`` and the
    reason in ``error`` (NCCL refuses it), keeping whatever GPUs/NICs it names.
    """
    root = parse_xml(text, source)
    version = root.get("version")
    error = None
    if root.tag != "system":
        error = f"root element is <{root.tag}>, NCCL needs <system>"
    elif version is None:
        error = "<system> has no version attribute"
    elif version.strip() != TOPO_XML_VERSION:
        error = f"XML Topology has wrong version {version}, {TOPO_XML_VERSION} needed"
    if root.tag == "graphs":
        error += " (a <graphs> file is an NCCL_GRAPH_DUMP_FILE, for NCCL_GRAPH_FILE)"
    return {"valid": error is None, "root": root.tag, "version": version,
            **summarize_topology(root), "error": error}


def invalid(reason: str) -> dict[str, Any]:
    """The summary of a file that could not be read or parsed at all."""
    return {"valid": False, "root": None, "version": None, "gpus": None, "nics": None,
            "nets": None, "virtual_nets": None, "nics_without_pci": None, "counts": None,
            "error": reason}


def read_topo_file(root: Sysroot, path: str) -> dict[str, Any]:
    """Summary of the topology file at host path ``path``; never raises.

    Unreadable or malformed files give ``valid: False`` with the reason, as NCCL would ignore
    (unreadable) or refuse (malformed) them.
    """
    try:
        text = root.read_text(path, strip=False)
        return parse_topo_xml(text, root.display(path))
    except HostStateError as exc:
        return invalid(f"{exc.path}: {exc.reason}")
