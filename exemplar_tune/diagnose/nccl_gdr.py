"""GPUDirect RDMA as NCCL saw it, from its INFO lines; judged as ``fabric.gpudirect-rdma``.

NCCL's IB transport says per HCA, once per process, whether it can register GPU memory with
the NIC: ``NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'`` or ``... Disabled for HCA 1
'mlx5_1'`` (newer versions add the means in brackets, ``GPU Direct RDMA (DMABUF) enabled``).
Disabled means the peer-memory module was not found (not loaded, or an NCCL that does not
detect the one loaded) and no dma-buf: every network transfer is staged through host memory.
Per GPU and HCA pair it then says whether the distance allows it: ``GPU Direct RDMA Enabled
for GPU 81000 / HCA 0 (distance 7 <= 7), read 0`` (``Disabled ... (distance 7 > 4)``: the pair
is farther apart than ``NCCL_NET_GDR_LEVEL``), and ``NCCL_NET_GDR_LEVEL set by environment to
SYS`` says the limit was forced. ``via NET/IB/0/GDRDMA`` on a channel line is a connection
that uses it. Everything is folded as lines are fed (per HCA, per pair): constant state.
"""

from __future__ import annotations

import re
from typing import Any

from exemplar_tune.diagnose.base import (
    FAIL,
    PASS,
    WARN,
    Finding,
    Occurrences,
    cite,
    finding,
    merge_folded,
    occurrences_merged,
)

CHECK = "fabric.gpudirect-rdma"
_HCA = re.compile(r"GPU Direct RDMA(?: \(([^()]{0,40})\))? ([Ee]nabled|[Dd]isabled) for HCA "
                  r"(\d+) '([^']{0,64})'")
_PAIR = re.compile(r"GPU Direct RDMA ([Ee]nabled|[Dd]isabled) for GPU (\w+) / HCA (\d+) "
                   r"\(distance (\d+) ([<>]=?) (\d+)\)")
_LEVEL = re.compile(r"NCCL_NET_GDR_LEVEL set by environment to (\S+)")
_DMABUF = re.compile(r"DMA-BUF is available on GPU device (\d+)")
_GDRDMA = re.compile(r"\bvia NET/[\w-]+/\d+/GDRDMA\b")
MAX_HOSTS = 64  # host names kept per HCA state (the count goes on)


class GdrReader:
    """The GPUDirect RDMA lines of an NCCL log, folded as they are fed."""

    def __init__(self) -> None:
        self.hcas: dict[tuple[str, str, str], Occurrences] = {}  # (state, index, name)
        # the first MAX_HOSTS hosts per state, in the order seen (a dict: ordered, see merge)
        self.hosts: dict[tuple[str, str, str], dict[str, None]] = {}
        self.pairs: dict[tuple[str, ...], Occurrences] = {}  # (state, gpu, hca, d, op, limit)
        self.level: dict[str, Occurrences] = {}
        self.dmabuf: Occurrences = Occurrences()
        self.gdrdma: Occurrences = Occurrences()
        self.means: set[str] = set()

    def feed(self, n: int, line: str, host: str | None) -> None:
        """Read line ``n``, an NCCL INFO line (``host``: of its prefix, when known)."""
        if "RDMA" in line:
            if m := _HCA.search(line):
                key = (m.group(2).lower(), m.group(3), m.group(4))
                self.hcas.setdefault(key, Occurrences()).add(n)
                hosts = self.hosts.setdefault(key, {})
                if host and len(hosts) < MAX_HOSTS:
                    hosts[host] = None
                if m.group(1):
                    self.means.add(m.group(1))
            elif m := _PAIR.search(line):
                key = (m.group(1).lower(), *m.groups()[1:])
                self.pairs.setdefault(key, Occurrences()).add(n)
        elif "GDR_LEVEL" in line and (m := _LEVEL.search(line)):
            self.level.setdefault(m.group(1), Occurrences()).add(n)
        elif "DMA-BUF" in line and _DMABUF.search(line):
            self.dmabuf.add(n)
        elif "GDRDMA" in line and _GDRDMA.search(line):
            self.gdrdma.add(n)

    def merge(self, other: GdrReader, line_offset: int) -> None:
        """Fold ``other``, the reading of the lines after these (numbered from 1 there,
        ``line_offset`` on here): what feeding this reader those lines too would hold."""
        merge_folded(self.hcas, other.hcas, line_offset)
        for key, hosts in other.hosts.items():
            mine = self.hosts.setdefault(key, {})
            for host in hosts:  # the first ones seen, in order: as many as fit
                if len(mine) >= MAX_HOSTS:
                    break
                mine[host] = None
        merge_folded(self.pairs, other.pairs, line_offset)
        merge_folded(self.level, other.level, line_offset)
        occurrences_merged(self.dmabuf, other.dmabuf, line_offset)
        occurrences_merged(self.gdrdma, other.gdrdma, line_offset)
        self.means |= other.means

    def summary(self) -> dict[str, Any]:
        """The HCAs by state, the pairs, the forced level, DMA-BUF and GDRDMA connections."""
        return {"hcas": [{"state": s, "hca": int(i), "name": name, "lines": seen.count,
                          "first": seen.first, "hosts": sorted(self.hosts[(s, i, name)])}
                         for (s, i, name), seen in sorted(self.hcas.items())],
                "pairs": [{"state": s, "gpu": gpu, "hca": int(hca), "distance": int(d),
                           "limit": int(limit), "lines": seen.count}
                          for (s, gpu, hca, d, _, limit), seen in sorted(self.pairs.items())],
                "gdr_level": sorted(self.level) or None,
                "dmabuf_lines": self.dmabuf.count, "gdrdma_connections": self.gdrdma.count,
                "means": sorted(self.means)}

    def judge(self, source: str, version: str | None) -> Finding | None:
        """The finding: an HCA disabled fails; a GPU/HCA pair disabled by distance warns;
        enabled passes, naming a forced ``NCCL_NET_GDR_LEVEL``; ``None`` without such lines."""
        if not self.hcas and not self.pairs and not self.gdrdma.count:
            return None
        disabled = _names(self.hcas, "disabled")
        enabled = _names(self.hcas, "enabled")
        level = ", ".join(f"NCCL_NET_GDR_LEVEL={v}" for v in sorted(self.level))
        values = {"enabled": enabled, "disabled": disabled, "gdr_level": sorted(self.level)}
        if disabled:
            lines = _cited(self.hcas, "disabled")
            seen = f" ({len(self.hosts_of('disabled'))} hosts)" \
                if len(self.hosts_of("disabled")) > 1 else ""
            also = f"; enabled for {', '.join(enabled)}" if enabled else ""
            return finding(CHECK, FAIL, f"NCCL: GPU Direct RDMA Disabled for "
                           f"{', '.join(disabled)}{seen}{also}: network transfers are staged "
                           "through host memory. Load nvidia_peermem (or use dma-buf); if it "
                           f"is loaded, this NCCL{f' {version}' if version else ''} does not "
                           "detect it (a newer NCCL does)", [cite(source, lines)], **values)
        far = [k for k in self.pairs if k[0] == "disabled"]
        if far:
            shown = ", ".join(f"GPU {g} / HCA {h} (distance {d} {op} {limit})"
                              for _, g, h, d, op, limit in sorted(far))
            lines = [n for k in far for n in self.pairs[k].cited()]
            return finding(CHECK, WARN, f"NCCL does not use GPU Direct RDMA between {shown}: "
                           "the pair is farther apart than NCCL_NET_GDR_LEVEL allows"
                           + (f" ({level})" if level else ""), [cite(source, lines)], **values)
        return self._enabled(source, enabled, level, values)

    def hosts_of(self, state: str) -> set[str]:
        return {h for key, hosts in self.hosts.items() if key[0] == state for h in hosts}

    def _enabled(self, source: str, enabled: list[str], level: str,
                 values: dict[str, Any]) -> Finding:
        lines = _cited(self.hcas, "enabled") + [n for o in self.level.values()
                                                for n in o.cited()]
        what = f"for {', '.join(enabled)}" if enabled else \
            f"on {self.gdrdma.count} connections (via NET/.../GDRDMA)"
        lines += [] if enabled else self.gdrdma.cited()
        means = f" ({', '.join(sorted(self.means))})" if self.means else \
            (" (DMA-BUF available)" if self.dmabuf.count else "")
        forced = ""
        if level:
            farthest = max((k for k in self.pairs if k[0] == "enabled"),
                           key=lambda k: int(k[3]), default=None)
            where = f": GPU {farthest[1]} / HCA {farthest[2]} at distance {farthest[3]}" \
                if farthest else ""
            forced = f"; forced with {level} set by environment{where}"
        return finding(CHECK, PASS, f"NCCL: GPU Direct RDMA Enabled {what}{means}{forced}",
                       [cite(source, lines)], **values)


def _names(hcas: dict[tuple[str, str, str], Occurrences], state: str) -> list[str]:
    return sorted({f"HCA {i} {name}" for s, i, name in hcas if s == state})


def _cited(hcas: dict[tuple[str, str, str], Occurrences], state: str) -> list[int]:
    return [n for key, seen in hcas.items() if key[0] == state for n in seen.cited()]
