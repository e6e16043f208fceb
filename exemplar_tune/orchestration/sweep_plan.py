"""What a sweep measures: the candidate settings, the arms, the message sizes, the fabric.

A swept knob is an ``NCCL_*`` setting of the fabric layer's knob (``fabric.nccl_conf``, the
system NCCL configuration); its values are checked by that knob's own input rules before
anything runs. An *arm* is one assignment of the swept settings, written
``NAME=VALUE[,NAME=VALUE]`` (:func:`arm_label`; ``unset`` where the setting is absent, which
NCCL reads as its default). Knobs are swept one at a time in the order given (coordinate-wise:
each later knob is measured on top of the earlier winners) or, with ``grid``, as every
combination at once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import KnobInputError
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.planners.fabric import (
    nccl_settings,
)

from exemplar_tune.compressed import capture_lines
from exemplar_tune.diagnose import MAX_READ, nccl_tests
from exemplar_tune.diagnose.nccl_coll import CollCounter
from exemplar_tune.diagnose.stream import LineStream
from exemplar_tune.errors import UserError
from exemplar_tune.orchestration.benchmark import BenchmarkSpec

UNSET = "unset"
MAX_ARMS = 100  # arms one sweep may measure: at 2-10 rounds each, more is days of fabric time
Settings = dict[str, str | None]  # None: the key is absent (NCCL's default)


@dataclass(frozen=True)
class SweptKnob:
    """One ``--knob NAME=V1,V2,...``."""

    name: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Step:
    """One measured choice: the incumbent arm and its candidates (full assignments)."""

    title: str
    incumbent: Settings
    candidates: tuple[Settings, ...]


def parse_knob(text: str) -> SweptKnob:
    """``NAME=V1,V2`` -> :class:`SweptKnob`; a one-line ``UserError`` for anything the fabric
    knob would refuse (a name that is not ``NCCL_*``, a value with a newline ...)."""
    name, sep, values = text.partition("=")
    name = name.strip()
    candidates = tuple(dict.fromkeys(v.strip() for v in values.split(",") if v.strip()))
    if not sep or not candidates:
        raise UserError(f"--knob {text!r}: write NAME=VALUE[,VALUE...], e.g. "
                        "NCCL_IB_QPS_PER_CONNECTION=1,2,4,8")
    if not name.startswith("NCCL_"):
        raise UserError(f"--knob {name}: not a fabric knob; a sweep sets NCCL_* settings of "
                        "the fabric layer's nccl_conf knob (the system NCCL configuration)")
    odd = [v for v in candidates if any(c.isspace() or c in "=,'\"" for c in v)]
    if odd:
        raise UserError(f"--knob {name}: value {odd[0]!r}: a sweep value is one token (no "
                        "space, quote, '=' or ',')")
    if UNSET in candidates:
        raise UserError(f"--knob {name}: {UNSET!r} is not a value; the hosts' current setting "
                        "is always measured as the incumbent")
    try:
        for value in candidates:
            nccl_settings({name: value}, "--knob")
    except KnobInputError as exc:
        raise UserError(f"--knob {text!r}: the fabric knob refuses it: {exc}") from None
    return SweptKnob(name, candidates)


def arm_label(settings: Mapping[str, str | None]) -> str:
    """``NAME=VALUE,...`` in the order given, ``unset`` for an absent key."""
    return ",".join(f"{k}={UNSET if v is None else v}" for k, v in settings.items())


def steps(knobs: list[SweptKnob], current: Settings, grid: bool) -> list[Step]:
    """The first step's arms (coordinate-wise: the first knob's values; grid: every
    combination), given the hosts' ``current`` values of the swept knobs."""
    if grid:
        names = [k.name for k in knobs]
        choices = [dict.fromkeys([current[k.name], *k.values]) for k in knobs]
        arms = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*choices)]
        incumbent = {n: current[n] for n in names}
        return [Step("grid " + " x ".join(names), incumbent,
                     tuple(a for a in arms if a != incumbent))]
    return [coordinate_step(knobs, 0, {k.name: current[k.name] for k in knobs})]


def coordinate_step(knobs: list[SweptKnob], index: int, base: Settings) -> Step:
    """Step ``index`` of a coordinate-wise sweep on top of ``base`` (the earlier winners and
    the hosts' current values of the later knobs)."""
    knob = knobs[index]
    candidates = tuple({**base, knob.name: v} for v in knob.values if v != base[knob.name])
    return Step(knob.name, dict(base), candidates)


def arm_count(knobs: list[SweptKnob], plan: list[Step], grid: bool) -> int:
    """Arms measured in all (incumbents included), at most: the budget's multiplier. The
    first step's are known; a later knob's incumbent may be one of its values.
    ``UserError`` past :data:`MAX_ARMS`."""
    first = len(plan[0].candidates) + 1
    count = first if grid else first + sum(len(k.values) + 1 for k in knobs[1:])
    if count > MAX_ARMS:
        raise UserError(f"--knob: {count} arms to measure, more than {MAX_ARMS}: fewer values"
                        + (", or coordinate-wise (without --grid)"
                           if plan[0].title.startswith("grid") else ""))
    return count


def nccl_shapes(specs: list[BenchmarkSpec], bench: str) -> list[BenchmarkSpec]:
    """The nccl-tests shapes of a benchmark file; a ``UserError`` when it has none."""
    shapes = [s for s in specs if s.parser == "nccl-tests"]
    if not shapes:
        raise UserError(f"{bench}: no nccl-tests shape (parser: nccl-tests); a sweep measures "
                        "collectives, and training shapes go to --validate")
    return shapes


def sizes_from_log(text: str, source: str) -> dict[str, list[int]]:
    """Per collective, the message sizes that carry most of its bytes in an NCCL COLL log,
    rounded to the nearest power of two (the rows nccl-tests prints with ``-f 2``)."""
    return _sizes(LineStream([(None, text.split("\n"))], len(text) + 1), source)


def sizes_from_file(path: str | Path) -> dict[str, list[int]]:
    """:func:`sizes_from_log` of a log file of any size, read as a stream (gzip and zstd
    expanded on the way); ``UserError`` (one line) when it cannot be read."""
    what = f"--sizes-from {path}"
    return _sizes(LineStream([(None, capture_lines(path, "--sizes-from"))], MAX_READ, what),
                  str(path))


def _sizes(stream: LineStream, source: str) -> dict[str, list[int]]:
    counter = CollCounter()
    for n, line, _, _ in stream:
        counter.feed(n, line)
    if not counter.calls:
        raise UserError(f"{source}: no NCCL collective calls; capture the training job with "
                        "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL")
    return {coll: sorted({2 ** round(math.log2(s.size)) for s in shares if s.size > 0})
            for coll, shares in counter.message_sizes().items()}


def with_sizes(shapes: list[BenchmarkSpec], sizes: dict[str, list[int]]
               ) -> tuple[list[BenchmarkSpec], list[str]]:
    """The shapes read at the workload's sizes, and one note per shape about what was used."""
    out, notes = [], []
    for spec in shapes:
        coll = nccl_tests.collective(spec.collective) if spec.collective else None
        wanted = sizes.get(coll or "")
        if wanted:
            out.append(replace(spec, sizes=tuple(wanted)))
            notes.append(f"{spec.name}: {coll} at "
                         f"{', '.join(nccl_tests.human(s) for s in wanted)} (from the log)")
        else:
            out.append(spec)
            notes.append(f"{spec.name}: the log has no {coll or 'collective for it'}; read at "
                         "the bench file's sizes")
    return out, notes


def current_values(hosts: Mapping[str, Mapping[str, Any]], names: list[str]) -> Settings:
    """The swept settings as every host has them now; a ``UserError`` when hosts differ."""
    seen: dict[str, dict[str | None, list[str]]] = {n: {} for n in names}
    for host, facts in sorted(hosts.items()):
        settings = (facts.get("fabric") or {}).get("nccl_settings") or {}
        for name in names:
            value = (settings.get(name) or {}).get("value")
            seen[name].setdefault(value, []).append(host)
    for name, values in seen.items():
        if len(values) > 1:
            shown = "; ".join(f"{UNSET if v is None else v} on {', '.join(h)}"
                              for v, h in values.items())
            raise UserError(f"hosts differ in {name} ({shown}): bring them to one value first "
                            "(exemplar-tune apply --layer fabric) or sweep them apart (--limit)")
    return {name: next(iter(values), None) for name, values in seen.items()}


def profile_fragment(settings: Settings, identity: Mapping[str, Any], experiment: str,
                     extends: str, tuner: list[dict[str, Any]] | None = None) -> str:
    """A site profile (YAML text) that extends the profile the sweep ran with by the chosen
    settings (and tuner table rows) and the fabric they were measured on."""
    fabric: dict[str, Any] = {"nccl": dict(settings)}
    if tuner:
        fabric["nccl_tuner"] = tuner
    fabric["measured_on"] = {**identity, "experiment": experiment}
    head = (f"# NCCL settings chosen by 'exemplar-tune sweep' (experiment {experiment}) on the\n"
            "# fabric named under measured_on: use it as --profile, or copy its fabric section;\n"
            "# the fabric.nccl-measured-here check warns on hosts whose fabric differs.\n")
    return head + yaml.safe_dump({"extends": extends, "fabric": fabric}, sort_keys=False)
