"""MAD tools that could not open a MAD port (``perfquery``, ``ibnetdiscover``...), read as
``fabric.ib-errors``: the error counters are unknown, and on Ethernet (RoCE) ports that is
expected, not a fault: subnet management datagrams exist only on InfiniBand links."""

from __future__ import annotations

from typing import Any

from exemplar_tune.diagnose.base import INFO, Finding, cite, finding
from exemplar_tune.diagnose.ib_rails import ETH, IB, Port

CHECK = "fabric.ib-errors"


def mad_findings(source: str, failures: list[dict[str, Any]],
                 ports: list[Port]) -> list[Finding]:
    """One info finding for the MAD failures, if any, worded by the ports' link layer."""
    if not failures:
        return []
    tools = sorted({str(f["tool"]) for f in failures if f.get("tool")}) or ["a MAD tool"]
    layers = {p.link_layer for p in ports}
    head = f"{' and '.join(tools)} could not open a MAD port"
    if layers == {ETH}:
        text = (f"{head}: expected on these Ethernet (RoCE) ports, where MAD-based InfiniBand "
                "diagnostics do not run; not a fault. Their error counters are not read here "
                "(ethtool -S, or the sysfs port counters)")
    elif IB in layers:
        text = (f"{head} although InfiniBand ports are present: error counters unknown "
                "(check that ib_umad is loaded and /dev/infiniband/umad* is readable)")
    else:
        text = (f"{head}: on Ethernet (RoCE) ports that is expected, not a fault; on "
                "InfiniBand, check ib_umad. Error counters unknown")
    return [finding(CHECK, INFO, text, [cite(source, [int(f["line"]) for f in failures])],
                    tools=tools, failures=[f["error"] for f in failures])]
