"""A per-message-size tuner table from a sweep's choices (``exemplar-tune sweep --per-size``).

Each measured (collective, message size) is its own choice between NCCL's own pick (the
incumbent: ``NCCL_ALGO`` and ``NCCL_PROTO`` unset) and every algorithm x protocol candidate,
made by :class:`.selection.ArmSelection` with the error shared over all sizes. A size whose
candidate won becomes a row of NCCL's example tuner plugin table
(:mod:`...knobs.nccl_tuner`); a size where no candidate beat NCCL is left to NCCL (no row).

A row covers the sizes it was measured at and, between two measured sizes, up to the
geometric midpoint (half an octave beyond the first and last measured size): nothing is
claimed far from a measurement. Neighbouring sizes with the same winner share one row.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import nccl_tuner

from exemplar_tune.diagnose import nccl_tests
from exemplar_tune.errors import UserError
from exemplar_tune.orchestration.sweep_plan import Settings, Step, SweptKnob, arm_label

ALGO, PROTO, CHANNELS = "NCCL_ALGO", "NCCL_PROTO", "NCCL_MAX_NCHANNELS"
TABLE_KNOBS = (ALGO, PROTO, CHANNELS)
DEFAULT_PLUGIN = "libnccl-tuner-example.so"
DEFAULT_TABLE = "/etc/nccl_tuner.conf"
LOADED = "NCCL_TUNER_PLUGIN"


@dataclass(frozen=True)
class SizeChoice:
    """The outcome at one (collective, message size): the winning arm's settings (None: NCCL
    keeps its own choice) and every candidate's estimate against NCCL (``rel_change`` of
    time, positive is faster, with its interval)."""

    collective: str  # nccl-tests name: all_gather ...
    size: int
    chosen: Mapping[str, str | None] | None
    reason: str
    rounds: int
    estimates: tuple[Mapping[str, Any], ...] = ()

    @property
    def estimate(self) -> Mapping[str, Any] | None:
        """The winner's estimate (None when NCCL keeps its choice)."""
        label = arm_label(self.chosen) if self.chosen else None
        return next((e for e in self.estimates if e["arm"] == label), None)

    def record(self, incumbent: str) -> dict[str, Any]:
        """The choice as a step of the sweep's record (``show``, ``report``)."""
        return {"step": f"{self.collective} {nccl_tests.human(self.size)}",
                "collective": self.collective, "size": self.size, "incumbent": incumbent,
                "chosen": arm_label(self.chosen) if self.chosen else incumbent,
                "outcome": "choose" if self.chosen else "incumbent", "reason": self.reason,
                "rounds": self.rounds, "arms": [dict(e) for e in self.estimates]}


def check_columns(names: list[str]) -> None:
    """``UserError`` unless the swept knobs make table rows: ``NCCL_ALGO`` and ``NCCL_PROTO``
    (a row names both), optionally ``NCCL_MAX_NCHANNELS``, nothing else."""
    missing = [n for n in (ALGO, PROTO) if n not in names]
    if missing:
        raise UserError(f"--per-size: a tuner row names an algorithm and a protocol; add "
                        f"--knob {missing[0]}=... (for example NCCL_ALGO=ring,tree "
                        "NCCL_PROTO=ll128,simple)")
    other = [n for n in names if n not in TABLE_KNOBS]
    if other:
        raise UserError(f"--per-size: {other[0]} is not a tuner table column; sweep it "
                        f"without --per-size (table columns: {', '.join(TABLE_KNOBS)})")


def check_unset(current: Mapping[str, str | None]) -> None:
    """``UserError`` when the hosts set a swept setting or load a tuner plugin (``current``:
    their values of those and of :data:`LOADED`): the table is measured against NCCL's own
    choice."""
    set_here = [f"{n}={v}" for n, v in current.items() if v is not None]
    if set_here:
        raise UserError(f"--per-size measures against NCCL's own choice, but the hosts set "
                        f"{', '.join(set_here)}: remove it first (fabric.nccl: {{"
                        f"{set_here[0].partition('=')[0]}: null}}, exemplar-tune apply --layer "
                        "fabric)")


def check_values(name: str, values: tuple[str, ...]) -> None:
    """``UserError`` for a value of a table knob that the plugin's table cannot hold."""
    known = {ALGO: nccl_tuner.ALGORITHMS, PROTO: nccl_tuner.PROTOCOLS}.get(name)
    for value in values:
        if known is not None and value.lower() not in known:
            raise UserError(f"--knob {name}={value}: the tuner table knows "
                            f"{', '.join(known)}")
        if known is None and not (value.isdigit() and 1 <= int(value) <= 64):
            raise UserError(f"--knob {name}={value}: a channel count from 1 to 64")


def table_step(knobs: list[SweptKnob]) -> Step:
    """NCCL's own choice (every table knob unset) against every combination of the values
    given: only a full combination can be a row."""
    names = [k.name for k in knobs]
    candidates: tuple[Settings, ...] = tuple(
        dict(zip(names, combo, strict=True))
        for combo in itertools.product(*(k.values for k in knobs)))
    return Step("per size " + " x ".join(names), dict.fromkeys(names), candidates)


def size_ranges(sizes: list[int]) -> dict[int, tuple[int, int]]:
    """Per measured size, the byte range a row for it covers (see the module docstring)."""
    ordered = sorted(set(sizes))
    edges = [int(math.sqrt(a * b)) for a, b in zip(ordered, ordered[1:], strict=False)]
    ranges = {}
    for index, size in enumerate(ordered):
        low = edges[index - 1] + 1 if index else int(size / math.sqrt(2))
        high = edges[index] if index < len(edges) else int(size * math.sqrt(2))
        ranges[size] = (low, high)
    return ranges


def rows(choices: list[SizeChoice], nodes: int, experiment: str) -> list[dict[str, Any]]:
    """The table rows of the sizes a candidate won (checked by :mod:`nccl_tuner`), for a
    communicator of ``nodes`` hosts (the scale it was measured at)."""
    out: list[dict[str, Any]] = []
    for collective in dict.fromkeys(c.collective for c in choices):
        mine = sorted((c for c in choices if c.collective == collective), key=lambda c: c.size)
        ranges = size_ranges([c.size for c in mine])
        previous: dict[str, Any] | None = None
        for choice in mine:
            if choice.chosen is None:
                previous = None
                continue
            row = _row(choice, ranges[choice.size], nodes, experiment)
            if previous and all(previous[k] == row[k] for k in ("algorithm", "protocol",
                                                                 "channels")):
                previous["max_bytes"] = row["max_bytes"]
                previous["note"] += f"; {_evidence(choice)}"
                continue
            out.append(row)
            previous = row
    return nccl_tuner.check_rows(out, "tuner table")


def _row(choice: SizeChoice, span: tuple[int, int], nodes: int,
         experiment: str) -> dict[str, Any]:
    settings = choice.chosen or {}
    return {"collective": nccl_tuner.NCCL_NAMES[choice.collective],
            "min_bytes": span[0], "max_bytes": span[1],
            "algorithm": str(settings[ALGO]).lower(), "protocol": str(settings[PROTO]).lower(),
            "channels": int(settings.get(CHANNELS) or -1), "nodes": nodes, "ranks": -1,
            "note": f"sweep {experiment}: {_evidence(choice)}"}


def _evidence(choice: SizeChoice) -> str:
    est = choice.estimate or {}
    return (f"{nccl_tests.human(choice.size)} {est.get('rel_change', 0.0):+.1%} time saved "
            f"[{est.get('ci_low', 0.0):+.1%}, {est.get('ci_high', 0.0):+.1%}] vs NCCL's "
            f"choice, {choice.rounds} rounds")


def deploy_settings(plugin: str, path: str) -> dict[str, str]:
    """The NCCL settings that load the example plugin with the table at ``path``."""
    return {"NCCL_TUNER_PLUGIN": plugin, "NCCL_TUNER_CONFIG_FILE": path}
