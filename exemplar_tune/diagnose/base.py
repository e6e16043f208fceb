"""What a diagnosis returns: findings on one captured file, and the error for unusable input.

A :class:`Finding` names the layer and the check it bears on: a preflight check's id, or one of
:data:`SIGNAL_CHECKS` where only a captured signal can judge (there is no host fact). It has a
status, a one-line message, the evidence (file and line numbers, and the column when the value
came from a table) and the numbers behind it. A :class:`Report` is one file: its kind, a
summary of what was parsed and its findings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYER_NAMES

from exemplar_tune.checks import CHECKS

PASS, WARN, FAIL, INFO = "pass", "warn", "fail", "info"
STATUSES = (PASS, WARN, FAIL, INFO)
KINDS_TEXT = ("turbostat, numastat, perf, step-time log, nccl-tests, NCCL debug log, "
              "nvidia-smi -q / -q -x, dcgmi diag, kernel log (dmesg, journalctl -k, syslog), "
              "nsys stats or SQLite export")
SIGNAL_CHECKS = {  # judged from captured signals only; the other ids are preflight checks
    "fabric.nccl-validation": "nccl-tests reports no wrong results (its #wrong column)",
    "fabric.nccl-errors": "NCCL logs no failures (WARN lines, error returns, raised errors)",
    "fabric.nccl-interfaces": "NCCL's bootstrap and socket interfaces are physical NICs, not "
                              "container bridges, veth pairs, overlays or tunnels",
    "workload.step-time-stability": "Step times are steady: not bimodal, low CV and p99",
    "workload.slow-ranks": "No rank of the job logs slower steps than the others again and "
                           "again (median and MAD across ranks, per iteration)",
    "workload.nccl-message-sizes": "The message sizes the workload's NCCL calls carry "
                                   "(NCCL_DEBUG_SUBSYS=COLL), to benchmark nccl-tests at",
    "fabric.nccl-kernel-time": "Share of GPU kernel time in NCCL kernels per collective, and "
                               "their mean duration (Nsight Systems)",
    "workload.kernel-launch-rate": "Kernels are not many and tiny (median under 10 us with "
                                   "1000+ per step, or launched slower than they run): "
                                   "launch-bound (Nsight Systems)",
    "workload.gpu-idle-gaps": "The GPU is not idle between kernels for long: gaps of 1 ms or "
                              "more stay under 10 % of the timeline (Nsight Systems SQLite)",
}


class DiagnoseError(ValueError):
    """A file that cannot be diagnosed (unreadable, empty, binary, unknown format); one line."""


@dataclass(frozen=True)
class Finding:
    """One judgement on a captured file, tied to a layer and a check id."""

    layer: str
    check_id: str
    status: str
    message: str
    evidence: tuple[str, ...] = ()
    values: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.layer not in LAYER_NAMES or not self.check_id.startswith(f"{self.layer}."):
            raise ValueError(f"finding {self.check_id}: bad layer {self.layer!r}")
        if self.check_id not in SIGNAL_CHECKS and all(c.id != self.check_id for c in CHECKS):
            raise ValueError(f"finding {self.check_id}: not a preflight check nor a signal check")
        if self.status not in STATUSES:
            raise ValueError(f"finding {self.check_id}: bad status {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "check_id": self.check_id, "status": self.status,
                "message": self.message, "evidence": list(self.evidence),
                "values": dict(self.values)}


@dataclass(frozen=True)
class Report:
    """The diagnosis of one file."""

    source: str
    kind: str
    summary: dict[str, Any]
    findings: list[Finding]

    @property
    def status(self) -> str:
        """``fail`` or ``warn`` when any finding is, else ``pass`` (``info`` never lowers it)."""
        seen = {f.status for f in self.findings}
        return next((s for s in (FAIL, WARN) if s in seen), PASS)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "status": self.status,
                "summary": self.summary, "findings": [f.to_dict() for f in self.findings]}


@dataclass(frozen=True)
class Analyzer:
    """One input format: its kind, a content sniffer and the analysis."""

    kind: str
    sniff: Callable[[str], bool]
    analyze: Callable[[str, str, dict[str, Any]], Report]


def finding(check_id: str, status: str, message: str, evidence: Iterable[str] = (),
            **values: Any) -> Finding:
    """A :class:`Finding` whose layer is the check id's prefix."""
    return Finding(check_id.split(".", 1)[0], check_id, status, message, tuple(evidence), values)


def cite(source: str, lines: Iterable[int], column: str | None = None, limit: int = 6) -> str:
    """``source:3-5,9 [column]``: line numbers (1-based) folded into ranges, at most ``limit``."""
    ranges: list[list[int]] = []
    for n in sorted(set(lines)):
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:limit]]
    text = f"{source}:{','.join(parts)}" + (",..." if len(ranges) > limit else "")
    return f"{text} [{column}]" if column else text


def to_float(token: str) -> float | None:
    """A number, or ``None`` for ``-``, ``N/A`` and anything else that is not one."""
    try:
        return float(token)
    except ValueError:
        return None


def numbered(text: str) -> list[tuple[int, str]]:
    """``(line_number, line)`` for every line, numbered from 1."""
    return list(enumerate(text.splitlines(), start=1))
