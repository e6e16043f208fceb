"""Each rank's output from ``srun --label`` text, and the node each rank ran on.

``srun --label`` prefixes every line a task prints with its rank (``0: ``, right-aligned when
there are ten or more ranks: `` 3: ``). Lines without that prefix come from srun or the batch
script itself (``srun: error: node2: task 1: Exited with exit code 3``) and are kept apart.
With ``--distribution=block`` and ``--ntasks-per-node=K``, rank ``r`` runs on the
``r // K``-th node of the job's node list (Slurm ``srun(1)``, ``--distribution``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

_LABEL = re.compile(r"^ *(\d+): ?(.*)$")


@dataclass
class RankOutput:
    """What one rank printed, and where it ran."""

    rank: int
    node: str | None = None
    host: str | None = None
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


def split_ranks(stdout: str, stderr: str) -> tuple[dict[int, RankOutput], list[str]]:
    """``({rank: RankOutput}, unlabelled lines)`` from labelled stdout and stderr."""
    ranks: dict[int, RankOutput] = {}
    other: list[str] = []
    for stream, text in (("stdout", stdout), ("stderr", stderr)):
        for line in text.splitlines():
            match = _LABEL.match(line)
            if match is None:
                other.append(line)
                continue
            rank = ranks.setdefault(int(match.group(1)), RankOutput(int(match.group(1))))
            getattr(rank, stream).append(match.group(2))
    return dict(sorted(ranks.items())), other


def place_ranks(ranks: Mapping[int, RankOutput], nodes: Sequence[str], per_node: int,
                hosts: Mapping[str, str]) -> None:
    """Set each rank's node (block placement) and the inventory host of that node."""
    for rank in ranks.values():
        index = rank.rank // max(per_node, 1)
        rank.node = nodes[index] if index < len(nodes) else None
        rank.host = hosts.get(rank.node) if rank.node else None


def joined(ranks: Mapping[int, RankOutput], stream: str) -> str:
    """One stream of every rank, rank 0 first, as the text a parser reads."""
    lines = [line for rank in ranks.values() for line in getattr(rank, stream)]
    return "\n".join(lines) + ("\n" if lines else "")


def log_text(header: str, ranks: Mapping[int, RankOutput], other: Sequence[str]) -> str:
    """A readable log: the job line, then each rank's stdout and stderr under its heading."""
    parts = [header]
    for rank in ranks.values():
        where = f"{rank.node or '?'}" + (f" (host {rank.host})" if rank.host else "")
        parts.append(f"==> rank {rank.rank} on {where} <==")
        parts += rank.stdout
        parts += [f"[stderr] {line}" for line in rank.stderr]
    if other:
        parts.append("==> srun / batch script <==")
        parts += other
    return "\n".join(parts) + "\n"
