"""``ibstat`` text: each RDMA port's state, rate and link layer, judged as compute rails
(:mod:`.ib_rails`), and devices that vanished while ibstat read them.

The format is read by the reader the fabric facts use on a captured host (``readers.ibstat``).
ibstat stops at the first device it cannot stat (``ibpanic: ... stat of IB device 'mlx5_8'
failed``, :mod:`.ib_capture`): the ports before it are good readings, the device is gone, and
any device after it is unknown.
``ibstat | grep mlx5`` leaves only the ``CA`` lines: devices present, ports unknown.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.ibstat import (
    parse_ibstat,
    rate_gbps,
)

from exemplar_tune.diagnose.base import (
    FAIL,
    INFO,
    Analyzer,
    DiagnoseError,
    Finding,
    Report,
    cite,
    finding,
)
from exemplar_tune.diagnose.ib_capture import Surround, command, read_surround
from exemplar_tune.diagnose.ib_rails import CHECK, Port, fabric_of, judge_ports

KIND = "ibstat"
_CA_LINE = re.compile(r"^[ \t]*CA '[^'\n]{1,200}'[ \t]*$", re.M)
_CA_FIELD = re.compile(r"^[ \t]*(?:CA type|Number of ports|Physical state|Link layer):", re.M)
_PANIC = "main: stat of IB device '"


def sniff(text: str) -> bool:
    """``CA '<name>'`` lines with ibstat's fields, an ``ibstat`` prompt, or its ibpanic."""
    if "ibpanic: [" in text and _PANIC in text:
        return True
    if not _CA_LINE.search(text):
        return False
    return bool(_CA_FIELD.search(text)) or any(
        (cmd := command(line)) is not None and cmd.split()[0] == "ibstat"
        for line in text.splitlines()[:200])


def parse(text: str) -> list[dict[str, Any]]:
    """Every device (``readers.ibstat.parse_ibstat``); a shell prompt ends a device block."""
    return parse_ibstat(text, lambda line: command(line) is not None)


def ports_of(devices: list[dict[str, Any]]) -> list[Port]:
    """:class:`~.ib_rails.Port` of every port read."""
    return [Port(d["name"], p["port"], p["fields"].get("State"),
                 p["fields"].get("Physical state"), rate_gbps(p["fields"].get("Rate")),
                 p["fields"].get("Link layer"), (p["line"], p["last"]),
                 d["fields"].get("CA type"))
            for d in devices for p in d["ports"]]


def _vanished(source: str, around: Surround, reported: set[str]) -> list[Finding]:
    """A device ibstat could not stat (fail), and devices listed but never reported."""
    found = [finding(CHECK, FAIL, f"RDMA device {v['device']} vanished while "
                     f"{v['command'] or 'ibstat'} read it (stat failed: {v['error']}): ibstat "
                     "stopped there, so devices after it were not reported",
                     [cite(source, [int(v["line"])])], device=v["device"])
             for v in around.vanished]
    gone = {str(v["device"]) for v in around.vanished}
    if unseen := [d for d in around.listed if d not in reported | gone]:
        found.append(finding(CHECK, INFO, f"{len(unseen)} devices listed in "
                             f"/sys/class/infiniband but not reported by ibstat: state "
                             f"unknown ({', '.join(unseen)})", [cite(source, [around.listed_line])],
                             devices=unseen))
    return found


def _names_only(source: str, devices: list[dict[str, Any]], around: Surround) -> Finding:
    grep = next((c.text for c in around.commands if c.filtered), None)
    why = f" (its output went through `{grep}`)" if grep else ""
    return finding(CHECK, INFO, f"{len(devices)} RDMA devices present "
                   f"({', '.join(d['name'] for d in devices)}); the capture holds only their "
                   f"names{why}: port state, rate and link layer unknown",
                   [cite(source, [d["line"] for d in devices])],
                   devices=[d["name"] for d in devices])


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    del expectations
    around = read_surround(text)
    devices = parse(text)
    ports = ports_of(devices)
    if not devices and not around.vanished:
        raise DiagnoseError(f"{source}: ibstat output without a device block "
                            "(\"CA '<name>'\" followed by 'Port N:' and 'State:' lines)")
    found = judge_ports(source, ports) if ports else []
    if devices and not ports:
        found.append(_names_only(source, devices, around))
    found += _vanished(source, around, {d["name"] for d in devices})
    summary = {"format": "ibstat", "fabric": fabric_of(ports),
               "devices": [{"name": d["name"], "ca_type": d["fields"].get("CA type"),
                            "firmware": d["fields"].get("Firmware version"),
                            "node_guid": d["fields"].get("Node GUID"), "line": d["line"]}
                           for d in devices],
               "ports": [p.to_dict() for p in ports],
               "vanished": around.vanished, "commands": [c.text for c in around.commands]}
    return Report(source, KIND, summary, found)


ANALYZER = Analyzer(KIND, sniff, analyze)
