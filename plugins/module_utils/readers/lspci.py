"""PCI functions as ``lspci -vvv`` (or ``-vvvnn``) shows them: what they are, where they hang,
and their ACS and ATS control bits.

Each function is a stanza: a header at the left margin, ``82:00.0 PCI bridge [0604]: Broadcom /
LSI Device [1000:c010] (rev b0)`` (``[0604]`` and ``[vvvv:dddd]`` with ``-nn``; a domain
``0000:`` before the address when the host has several), then indented lines. A bridge names
the buses behind it (``Bus: primary=82, secondary=83, subordinate=88``), which is how a device
is placed below its root port and switch ports; the Express capability names the port type
(``Express (v2) Downstream Port (Slot-), MSI 00``). The Access Control Services capability's
``ACSCtl:`` line lists its control bits (``SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd-
EgressCtrl- DirectTrans-``) and the Address Translation Service capability's ``ATSCtl:`` line
starts ``Enable+`` or ``Enable-``. Without root, lspci prints ``Capabilities: <access denied>``
instead: then ACS and ATS are unknown (``None``), not off. Formats: pciutils' ``ls-ecaps.c``
and ``ls-caps.c``; real stanzas of PLX PEX 8747 and Broadcom PEX88096 switch ports, and of
ConnectX-7 functions in a VM (sources in the test corpus).
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

COMMAND = "lspci-vvv.txt"
SOURCE = "lspci -vvv"
_HEADER = re.compile(r"((?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) "
                     r"([^:\[]+?)(?: \[([0-9a-f]{4})\])?: (.*)")
_BUS = re.compile(r"Bus: primary=([0-9a-f]{2}), secondary=([0-9a-f]{2}), "
                  r"subordinate=([0-9a-f]{2})")
_PORT = re.compile(r"Capabilities: \[[0-9a-f]+\] Express \(v\d\) ([A-Za-z /-]+?)(?: \(|,|$)")
# (?<!\w): a name starts where its word does (tried at each character of a long word, each
# try would read the rest of the word again)
_BIT = re.compile(r"(?<!\w)(\w+)([+-])")
DENIED = "Capabilities: <access denied>"
GPU_CLASSES = ("3D controller", "VGA compatible controller")
NIC_CLASSES = ("Infiniband controller", "Ethernet controller", "Network controller")
REDIRECT = ("ReqRedir", "CmpltRedir")  # what sends peer-to-peer traffic up to the root


def _function(bdf: str, kind: str, class_id: str | None, text: str) -> dict[str, Any]:
    return {"bdf": bdf if bdf.count(":") == 2 else f"0000:{bdf}", "class": kind,
            "class_id": class_id, "description": text, "port": None, "buses": None,
            "acs": None, "ats": None, "denied": False}


def parse_lspci(text: str, source: str = SOURCE) -> list[dict[str, Any]]:
    """Every function in the report's order: ``bdf`` (with its domain), ``class`` (lspci's
    name), ``class_id`` (with ``-nn``), ``description``, ``port`` (the Express port type),
    ``buses`` (a bridge's ``[secondary, subordinate]``), ``acs`` (``ACSCtl`` bits by name),
    ``ats`` (``ATSCtl`` enabled) and ``denied`` (capabilities unreadable: not root).

    ``ParseError`` for text before the first header that is not a prompt line (``# ...``,
    ``$ ...``) or when no function is found."""
    found: list[dict[str, Any]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if not raw[0].isspace():
            if header := _HEADER.fullmatch(raw.strip()):
                found.append(_function(*header.groups()))
            elif found or not raw.startswith(("#", "$")):
                raise ParseError(f"{source}:{number}", raw[:80], "not an lspci stanza header")
            continue
        if not found:
            raise ParseError(f"{source}:{number}", raw[:80], "an indented line before any "
                             "stanza header")
        _detail(found[-1], raw.strip())
    if not found:
        raise ParseError(source, text[:80], "no PCI function listed")
    return found


def _detail(function: dict[str, Any], line: str) -> None:
    """One indented line of ``function``'s stanza."""
    if bus := _BUS.match(line):
        function["buses"] = [int(bus.group(2), 16), int(bus.group(3), 16)]
    elif port := _PORT.match(line):
        function["port"] = port.group(1)
    elif line.startswith("ACSCtl:"):
        function["acs"] = {name: sign == "+" for name, sign in _BIT.findall(line[7:])}
    elif line.startswith("ATSCtl:"):
        function["ats"] = line[7:].strip().startswith("Enable+")
    elif line == DENIED:
        function["denied"] = True


def _vendor(function: dict[str, Any], name: str, vendor_id: str) -> bool:
    text = function["description"]
    return text.startswith(name) or f"[{vendor_id}:" in text


def is_gpu(function: dict[str, Any]) -> bool:
    """An NVIDIA GPU (3D or VGA controller)."""
    return function["class"] in GPU_CLASSES and _vendor(function, "NVIDIA", "10de")


def is_rdma_nic(function: dict[str, Any]) -> bool:
    """A Mellanox/NVIDIA ConnectX function (a physical or a virtual function)."""
    return function["class"] in NIC_CLASSES and _vendor(function, "Mellanox", "15b3")


def upstream(functions: list[dict[str, Any]], device: dict[str, Any]) -> list[dict[str, Any]]:
    """The bridges above ``device``, nearest first: those of its domain whose bus range holds
    its bus."""
    domain, bus = device["bdf"][:4], int(device["bdf"][5:7], 16)
    above = [f for f in functions if f["buses"] and f["bdf"][:4] == domain
             and f["buses"][0] <= bus <= f["buses"][1]]
    return sorted(above, key=lambda f: f["buses"][1] - f["buses"][0])


def read_pcie_paths(root: Sysroot) -> dict[str, Any]:
    """The GPUs' and RDMA NICs' functions and the bridges above them, from ``lspci -vvv``:
    ``{"devices": [{"bdf", "kind", "ats", "denied", "above": [bridge bdfs]}], "bridges":
    {bdf: {"port", "acs", "redirect", "denied"}}}``. ``NotSupported`` without lspci (or its
    capture), ``CommandFailed`` when it fails, ``ParseError`` for text that is not its report."""
    out = root.command(COMMAND).checked()
    functions = parse_lspci(out.stdout, out.source)
    devices, bridges = [], {}
    for function in functions:
        kind = "gpu" if is_gpu(function) else "nic" if is_rdma_nic(function) else None
        if kind is None:
            continue
        above = upstream(functions, function)
        devices.append({"bdf": function["bdf"], "kind": kind, "ats": function["ats"],
                        "denied": function["denied"], "above": [b["bdf"] for b in above]})
        for bridge in above:
            acs = bridge["acs"]
            bridges[bridge["bdf"]] = {
                "port": bridge["port"], "acs": acs, "denied": bridge["denied"],
                "redirect": None if acs is None else any(acs.get(b) for b in REDIRECT)}
    return {"devices": devices, "bridges": bridges}
