"""Which RDMA ports are compute rails, and ``fabric.ports`` findings on them.

The ports come from ``ibstat`` or ``ibstatus`` text. Where any port's link layer is
InfiniBand, the InfiniBand ports are the compute fabric and Ethernet ports beside them are
front-end or storage ports: one of those down or slow is reported (info), never a rail down.
Where every port is Ethernet the fabric is RoCE: the rails are the ports at the fastest rate
among the active ones, and the ports of the same adapter model (``CA type``) as those; a port
of another model is front end, and a port down whose model is unknown cannot be told apart
(warn). A rail that is not Active/LinkUp fails (``Initializing`` with the physical link up: the
subnet manager has not activated it); an active rail slower than its peers warns. A port's
rate field while it is down is no link rate and is not judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exemplar_tune.diagnose.base import FAIL, INFO, PASS, WARN, Finding, cite, finding
from exemplar_tune.diagnose.normalize import natural

CHECK = "fabric.ports"
IB, ETH = "InfiniBand", "Ethernet"
RAIL, FRONT, UNKNOWN = "compute rail", "front end", "unknown"
_WHY = {  # (state, physical state) -> what it means, for the message
    ("INITIALIZING", "LINKUP"): "physical link up, the subnet manager has not activated it",
    ("ARMED", "LINKUP"): "physical link up, the subnet manager has not activated it",
    ("DOWN", "POLLING"): "polling for a link partner: no cable, or the peer port is down",
    ("DOWN", "DISABLED"): "no link",
}


@dataclass
class Port:
    """One port as a tool printed it; ``lines`` the first and last line it took."""

    device: str
    port: int | str
    state: str | None
    phys_state: str | None
    rate_gbps: float | None
    link_layer: str | None
    lines: tuple[int, int]
    ca_type: str | None = None
    role: str = UNKNOWN

    @property
    def active(self) -> bool:
        return (self.state or "").upper() == "ACTIVE" and \
            (self.phys_state or "LinkUp").upper() == "LINKUP"

    @property
    def label(self) -> str:
        return f"{self.device} port {self.port}"

    def status_text(self) -> str:
        return f"{self.state or '?'}/{self.phys_state or '?'}"

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "port": self.port, "state": self.state,
                "phys_state": self.phys_state, "rate_gbps": self.rate_gbps,
                "link_layer": self.link_layer, "ca_type": self.ca_type, "role": self.role,
                "active": self.active, "lines": list(self.lines)}


def fabric_of(ports: list[Port]) -> str | None:
    """``InfiniBand`` when any port is, ``RoCE`` when the ports are Ethernet, else ``None``."""
    layers = {p.link_layer for p in ports}
    return IB if IB in layers else "RoCE" if ETH in layers else None


def assign_roles(ports: list[Port]) -> None:
    """Set each port's ``role``: compute rail, front end or unknown (module docstring)."""
    fabric = fabric_of(ports)
    if fabric == IB:
        for p in ports:
            p.role = RAIL if p.link_layer == IB else FRONT if p.link_layer == ETH else UNKNOWN
        return
    rates = [p.rate_gbps for p in ports if p.active and p.rate_gbps]
    top = max(rates, default=None)
    models = {p.ca_type for p in ports if p.active and p.rate_gbps == top and p.ca_type}
    for p in ports:
        if p.active and p.rate_gbps == top or p.ca_type and p.ca_type in models:
            p.role = RAIL
        elif p.active or p.ca_type:
            p.role = FRONT
        else:
            p.role = UNKNOWN


def _rate(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def _ev(source: str, ports: list[Port]) -> list[str]:
    return [cite(source, sorted({n for p in ports for n in range(p.lines[0], p.lines[1] + 1)}))]


def _down(source: str, port: Port, fabric: str) -> Finding:
    what = port.link_layer or "link layer unknown"
    model = f", {port.ca_type}" if port.ca_type else ""
    key = ((port.state or "").upper(), (port.phys_state or "").upper())
    why = f": {_WHY[key]}" if key in _WHY else ""
    if key[1] == "LINKUP" and port.rate_gbps:  # a rate is a link rate only with the link up
        why = f" at {_rate(port.rate_gbps)} Gb/s{why}"
    if port.role == RAIL:
        return finding(CHECK, FAIL, f"{port.label} ({fabric} compute rail{model}) is "
                       f"{port.status_text()}{why}", _ev(source, [port]), port=port.to_dict())
    return finding(CHECK, WARN, f"{port.label} ({what}{model}) is {port.status_text()}{why}: "
                   "cannot tell from this capture whether it is a compute rail or a front-end port",
                   _ev(source, [port]), port=port.to_dict())


def _names(ports: list[Port]) -> str:
    return ", ".join(p.device if p.port in (1, "1") else p.label for p in ports)


def judge_ports(source: str, ports: list[Port]) -> list[Finding]:
    """``fabric.ports`` findings: each rail not up (fail) or slower than its peers (warn),
    each down port of unknown role (warn), the rails up (pass, or info beside a problem) and
    the front-end ports (info)."""
    ports = sorted(ports, key=lambda p: (natural(p.device), str(p.port)))
    assign_roles(ports)
    fabric = fabric_of(ports) or "RDMA"
    rails = [p for p in ports if p.role == RAIL]
    up = [p for p in rails if p.active]
    top = max((p.rate_gbps or 0 for p in up), default=0)
    found = [_down(source, p, fabric) for p in ports if not p.active and p.role != FRONT]
    found += [finding(CHECK, WARN, f"{p.label} ({fabric} compute rail) is Active at "
                      f"{_rate(p.rate_gbps)} Gb/s, below its peers' {top:g} Gb/s",
                      _ev(source, [p]), port=p.to_dict())
              for p in up if (p.rate_gbps or 0) < top]
    if up:
        rates = sorted({p.rate_gbps or 0 for p in up})
        at = f"{rates[0]:g}" if len(rates) == 1 else f"{rates[0]:g}-{rates[-1]:g}"
        count = f"{len(up)}" if len(up) == len(rails) else f"{len(up)} of {len(rails)}"
        text = f"{count} {fabric} compute rails Active/LinkUp at {at} Gb/s: {_names(up)}"
        found.append(finding(CHECK, INFO if len(up) < len(rails) else PASS, text,
                             _ev(source, up), rails_up=len(up), rails=len(rails)))
    if front := [p for p in ports if p.role == FRONT]:
        parts = [f"{p.device} {p.status_text()} {_rate(p.rate_gbps)} Gb/s" for p in front]
        found.append(finding(CHECK, INFO, f"not compute rails ({ETH if fabric == IB else 'other'}"
                             f" ports beside the {fabric} fabric, front end or storage): "
                             + "; ".join(parts), _ev(source, front),
                             ports=[p.device for p in front]))
    return found
