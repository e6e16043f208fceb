"""``ibdev2netdev`` text: which netdev each RDMA port carries, and what its state says.

Format (MLNX_OFED / DOCA ``ibdev2netdev``): ``mlx5_0 port 1 ==> ibp26s0 (Down)``, one line per
port (``| column -t`` only respaces it; a trailing ``# note`` is the operator's). ``-v`` adds
the PCI address, the adapter model and the port's link state: ``0000:1a:00.0 mlx5_0 (MT4129
- ...) fw 28.39.1002 port 1 (ACTIVE) ==> ibp26s0 (Down)``. The state after the netdev is the
netdev's: for an InfiniBand port (an ``ib*`` IPoIB netdev) it is the IPoIB interface, not the
InfiniBand link: a ``(Down)`` there says nothing about the rail, and without ``-v`` the link
state is unknown. For an Ethernet port (RoCE) the netdev's state is the link's. Ethernet
ports beside InfiniBand ones are front end, reported (info), never a rail down; where every
port is Ethernet they are judged as rails (:mod:`.ib_rails`).
"""

from __future__ import annotations

import re
from typing import Any

from exemplar_tune.diagnose.base import (
    INFO,
    Analyzer,
    DiagnoseError,
    Finding,
    Report,
    cite,
    finding,
    numbered,
)
from exemplar_tune.diagnose.ib_rails import CHECK, ETH, IB, Port, judge_ports
from exemplar_tune.diagnose.normalize import natural

KIND = "ibdev2netdev"
_ROW = re.compile(r"^(?:[0-9a-fA-F]{4}:[0-9a-fA-F:.]{1,20}\s+)?(\w{1,200})\s+"
                  r"(?:\(([^)\n]{0,200})\)\s+(?:[^\n]{0,300}?\s)?)?(?:fw\s+\S{1,40}\s+)?"
                  r"port\s+(\d{1,4})\s+(?:\((\w{1,30})\)\s+)?==>\s+(\S{1,200})\s+\((\w{1,30})\)")
_ROW_ANY = re.compile(r" port +\d{1,4} +(?:\(\w{1,30}\) +)?==> +\S{1,200} +\(\w{1,30}\)")


def sniff(text: str) -> bool:
    """A ``<device> port <n> ==> <netdev> (<state>)`` line."""
    return "==>" in text and bool(_ROW_ANY.search(text))


def parse(text: str) -> list[dict[str, Any]]:
    """Every row: ``{device, port, model, link_state, netdev, netdev_state, ipoib, line}``."""
    rows = []
    for n, raw in numbered(text):
        if m := _ROW.match(raw.strip()):
            model = (m.group(2) or "").split(" - ")[0].strip() or None
            rows.append({"device": m.group(1), "port": int(m.group(3)), "model": model,
                         "link_state": m.group(4), "netdev": m.group(5),
                         "netdev_state": m.group(6), "ipoib": m.group(5).startswith("ib"),
                         "line": n})
    return rows


def _port(row: dict[str, Any]) -> Port:
    state = row["link_state"] or (None if row["ipoib"] else
                                  "ACTIVE" if row["netdev_state"].upper() == "UP" else "DOWN")
    return Port(row["device"], row["port"], state, None, None, IB if row["ipoib"] else ETH,
                (row["line"], row["line"]), row["model"])


def _unknown_links(source: str, rows: list[dict[str, Any]]) -> list[Finding]:
    """IPoIB rows without ``-v``: the InfiniBand link state is not in the capture."""
    ib = [r for r in rows if r["ipoib"]]
    eth = [r for r in rows if not r["ipoib"]]
    states = ", ".join(sorted({r["netdev_state"] for r in ib}))
    names = ", ".join(r["device"] for r in ib)
    found = [finding(CHECK, INFO, f"{len(ib)} InfiniBand ports ({names}): their netdevs' "
                     f"state ({states}) is the IPoIB interface's, not the "
                     "InfiniBand link's: link state unknown (ibstat, or ibdev2netdev -v, "
                     "shows it)", [cite(source, [r["line"] for r in ib])],
                     devices=[r["device"] for r in ib])]
    if eth:
        parts = [f"{r['device']} ({r['netdev']}) {r['netdev_state']}" for r in eth]
        found.append(finding(CHECK, INFO, "not compute rails (Ethernet ports beside the "
                             "InfiniBand fabric, front end or storage): " + "; ".join(parts),
                             [cite(source, [r["line"] for r in eth])],
                             devices=[r["device"] for r in eth]))
    return found


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    del expectations
    rows = sorted(parse(text), key=lambda r: (natural(r["device"]), r["port"]))
    if not rows:
        raise DiagnoseError(f"{source}: ibdev2netdev output without a "
                            "'<device> port <n> ==> <netdev> (<state>)' line")
    unknown = any(r["ipoib"] and not r["link_state"] for r in rows)
    found = _unknown_links(source, rows) if unknown else judge_ports(source,
                                                                      [_port(r) for r in rows])
    summary = {"format": "ibdev2netdev -v" if any(r["link_state"] for r in rows)
               else "ibdev2netdev", "ports": rows,
               "link_layer_from": "netdev name (ib*: IPoIB on InfiniBand, else Ethernet)"}
    return Report(source, KIND, summary, found)


ANALYZER = Analyzer(KIND, sniff, analyze)
