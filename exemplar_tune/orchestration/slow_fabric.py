"""Slow fabric: the host(s) whose NIC, cable, port or NVLink slows the collectives that span
several hosts, found by bisection (``exemplar-tune slow-nodes --fabric``).

A bad link shows only in a collective across hosts: each host's own benchmark is fine. The
hosts are split in two halves and a multi-node collective runs over each half (``repeat``
times, the halves side by side: one *round*); the half that is slower beyond the noise holds
the bad host, and it is split again, until two hosts remain; each of those two then runs with
a host already known good (one more round). N hosts take about log2 N rounds. Where a
split cannot separate (both halves alike, a bad host in each, or none at all), every host
still suspected runs in a pair with a known-good host (or, with none known yet, the hosts
run in pairs with each other and a slow pair's hosts are then paired with a good one).

The values are time-like and must compare across group sizes: nccl-tests bus bandwidth
(inverted), which nccl-tests normalises for the rank count, not the raw time. Groups are
compared as ``slow-nodes`` compares hosts (Welch, delta method, ``stats.compare``), each test
at ``1 - (1 - confidence) / M`` where M is the most tests the search can make for N hosts
(log2 N splits and N pair tests), so that the error is shared over the tests made: a group
is slower when its whole interval lies above zero and its slowdown is at least
``min_slowdown``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exemplar_tune.errors import UserError
from exemplar_tune.orchestration.benchmark import BenchmarkFailed, BenchmarkSpec, run_benchmark
from exemplar_tune.orchestration.stats import compare
from exemplar_tune.orchestration.tune import HOSTS_VARIABLE, _time_like

Group = tuple[str, ...]
# runs a collective over each group (disjoint groups of one round), ``repeat`` times each:
# per group its time-like values
Measure = Callable[[list[Group]], dict[Group, list[float]]]
MIN_HOSTS = 4
MIN_REPEAT = 3


@dataclass(frozen=True)
class GroupTest:
    """One comparison: ``group`` against ``reference`` (its hosts or a pooled sample), the
    slowdown of the group's mean time and its interval, and whether it is slower."""

    round: int
    group: Group
    reference: str
    slowdown: float
    low: float
    high: float
    slower: bool

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, "hosts": list(self.group), "reference": self.reference,
                "slowdown": round(self.slowdown, 5),
                "interval": [round(self.low, 5), round(self.high, 5)], "slower": self.slower}


@dataclass
class FabricSearch:
    """The search's record: rounds, multi-node runs, the tests made and the hosts found
    (``suspects``), with how they were found (``method``)."""

    hosts: Group
    rounds: int = 0
    runs: int = 0
    tests: list[GroupTest] = field(default_factory=list)
    suspects: list[str] = field(default_factory=list)
    good: set[str] = field(default_factory=set)
    method: str = "bisection"

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": len(self.hosts), "rounds": self.rounds, "runs": self.runs,
                "method": self.method, "suspects": self.suspects,
                "tests": [t.to_dict() for t in self.tests]}


def max_tests(hosts: int) -> int:
    """The most comparisons the search makes for ``hosts`` hosts: the splits, then a pair
    test per host (the error is shared over these)."""
    return math.ceil(math.log2(hosts)) + hosts


def locate(hosts: Sequence[str], measure: Measure, *, repeat: int, confidence: float,
           min_slowdown: float, progress: Callable[[str], None] = lambda _: None
           ) -> FabricSearch:
    """Find the hosts that slow multi-node collectives (see the module docstring). Groups
    compared with each other always have as many hosts (a half is padded with a known-good
    host; with an odd count at first, one host waits for the pair round)."""
    if len(hosts) < MIN_HOSTS:
        raise UserError(f"--fabric: {len(hosts)} hosts: at least {MIN_HOSTS} are needed to "
                        "split them and keep a known-good host")
    if repeat < MIN_REPEAT:
        raise UserError(f"--runs {repeat}: at least {MIN_REPEAT} runs per group are needed "
                        "to know the noise")
    search = FabricSearch(tuple(hosts))
    probe = _Probe(search, measure, 1.0 - (1.0 - confidence) / max_tests(len(hosts)),
                   min_slowdown, progress)
    held = tuple(hosts[len(hosts) - len(hosts) % 2:])
    suspect = tuple(hosts[:len(hosts) - len(held)])
    while len(suspect) > 2:
        half = len(suspect) // 2
        a, b = suspect[:half], suspect[half:]
        if len(a) < len(b):
            a += (min(search.good),)  # known good from the rounds before
        found = probe.run([a, b])
        a_slow = probe.test(a, ",".join(b), found[a], found[b]).slower
        b_slow = probe.test(b, ",".join(a), found[b], found[a]).slower
        if a_slow == b_slow:  # alike: no bad host, or one in each half
            break
        slow, fast = (a, b) if a_slow else (b, a)
        search.good.update(fast)
        suspect = tuple(h for h in slow if h not in search.good)
    if not search.good:
        search.method = "pairs"
        suspect = _slow_pairs(search, probe)
    elif len(suspect) > 2:
        search.method = "bisection, then pairs"
    _with_good(search, probe, tuple(dict.fromkeys(suspect + held)))  # pairs hold it already
    return search


@dataclass
class _Probe:
    """Runs rounds and makes tests for one search."""

    search: FabricSearch
    measure: Measure
    each: float
    min_slowdown: float
    progress: Callable[[str], None]

    def run(self, groups: list[Group]) -> dict[Group, list[float]]:
        self.search.rounds += 1
        self.progress(f"--fabric: round {self.search.rounds}: {len(groups)} groups of "
                      f"{'/'.join(sorted({str(len(g)) for g in groups}))} hosts")
        found = self.measure(groups)
        self.search.runs += sum(len(v) for v in found.values())
        return found

    def test(self, group: Group, reference: str, values: list[float],
             against: list[float]) -> GroupTest:
        comp = compare(against, values, higher_is_better=False, confidence=self.each)
        slowdown, low, high = -comp.rel_change, -comp.ci_high, -comp.ci_low
        found = GroupTest(self.search.rounds, group, reference, slowdown, low, high,
                          low > 0 and slowdown >= self.min_slowdown)
        self.search.tests.append(found)
        return found


def _slow_pairs(search: FabricSearch, probe: _Probe) -> Group:
    """The hosts in pairs (a trio for an odd count), each against the faster half of the
    other pairs: the hosts of the slow pairs; the others are then known good."""
    hosts = list(search.hosts)
    pairs = [tuple(hosts[i:i + 2]) for i in range(0, len(hosts) - 1, 2)]
    if len(hosts) % 2:
        pairs[-1] = (*pairs[-1], hosts[-1])
    found = probe.run(pairs)
    middle = statistics.median(statistics.fmean(found[p]) for p in pairs)
    slow: list[str] = []
    for pair in pairs:
        fast = [v for p in pairs if p != pair and statistics.fmean(found[p]) <= middle
                for v in found[p]]
        if probe.test(pair, "the faster pairs", found[pair], fast).slower:
            slow += pair
        else:
            search.good.update(pair)
    return tuple(slow)


def _with_good(search: FabricSearch, probe: _Probe, suspect: Group) -> None:
    """One round: each suspected host beside a known-good one, and a pair of known-good
    hosts as the reference; the hosts whose pair is slower are the suspects found."""
    if not suspect or len(search.good) < 2:
        return
    good = sorted(search.good)
    spare = len(good) - len(suspect)  # good hosts beyond one partner per suspect
    controls = [tuple(good[-2 * i - 2:len(good) - 2 * i]) for i in range(2 if spare >= 4 else 1)]
    partners = good[:len(good) - 2 * len(controls)] or good
    groups = [(host, partners[i % len(partners)]) for i, host in enumerate(suspect)]
    found = probe.run([*groups, *controls])
    reference = [v for c in controls for v in found[c]]
    named = "; ".join(",".join(c) for c in controls)
    search.suspects = [group[0] for group in groups if probe.test(
        group, named, found[group], reference).slower]


def link_facts(facts: Mapping[str, Any]) -> dict[str, Any]:
    """What tells a bad link on one host, from its fabric and gpu facts, in a form hosts can be
    compared on (``fleet.majority``): each RDMA port's state and rate, the error counters that
    are not zero, the link downs of the last boot per interface and the NVLinks down per GPU
    (``none`` where there are none, so that a healthy majority shows)."""
    fabric, gpu = facts.get("fabric") or {}, facts.get("gpu") or {}
    ports, errors = {}, {}
    for device in fabric.get("ib_devices") or []:
        for port in device["ports"]:
            name = f"{device['name']}/{port['port']}"
            ports[name] = (f"{(port.get('state') or {}).get('name')}/"
                           f"{(port.get('phys_state') or {}).get('name')} "
                           f"{port.get('rate_gbps')} Gb/s {port.get('link_layer')}")
            if nonzero := {k: v for k, v in (port.get("counters") or {}).items() if v}:
                errors[name] = nonzero
    flaps: dict[str, int] = {}
    for event in fabric.get("link_events") or []:
        if event.get("boot") == 0 and event.get("state") == "down":
            flaps[event["iface"]] = flaps.get(event["iface"], 0) + 1
    down = {f"GPU {g.get('index')}": len(g["inactive"]) for g in gpu.get("nvlink") or []
            if g.get("inactive")}
    return {"link": {"ports": ports, "port_errors": _listed(errors),
                     "link_downs": _listed(flaps), "nvlinks_down": _listed(down)}}


def _listed(found: Mapping[str, Any]) -> str:
    """``mlx5_1/1: link_downed 3, symbol_error 2113; ...`` (``none`` when empty): one value per
    host, so that the majority's ``none`` shows beside it."""
    def text(value: Any) -> str:
        return ", ".join(f"{k} {v}" for k, v in value.items()) if isinstance(value, Mapping) \
            else str(value)
    return "; ".join(f"{key}: {text(value)}" for key, value in sorted(found.items())) or "none"


def benchmark_measure(spec: BenchmarkSpec, repeat: int, limited: Callable[[str], Any],
                      progress: Callable[[str], None]) -> Measure:
    """A :data:`Measure` that runs the multi-node shape ``spec`` over each group: the groups
    of a round in turn, ``repeat`` times (round robin, so that a drift falls on every group
    alike), each run told its hosts (``EXEMPLAR_TUNE_HOSTS``; a Slurm shape gets those nodes
    through ``limited(hosts)``, the inventory limited to them). A failed run is a one-line
    ``UserError`` naming the group: nothing is compared."""
    def measure(groups: list[Group]) -> dict[Group, list[float]]:
        values: dict[Group, list[float]] = {g: [] for g in groups}
        for index in range(repeat):
            for group in groups:
                hosts = ",".join(group)
                progress(f"--fabric: run {index + 1}/{repeat} over {hosts}")
                try:
                    measured = run_benchmark(spec, env={HOSTS_VARIABLE: hosts},
                                             inventory=limited(hosts))
                except BenchmarkFailed as exc:
                    raise UserError(f"--fabric: {spec.name} over {hosts} failed (run "
                                    f"{index + 1} of {repeat}): {exc.reason}; nothing "
                                    "compared") from None
                if measured.value <= 0:
                    raise UserError(f"--fabric: {spec.name} over {hosts}: value "
                                    f"{measured.value:g} {measured.unit} is not a measurement")
                values[group].append(_time_like(measured.value, spec.higher_is_better))
        return values
    return measure
