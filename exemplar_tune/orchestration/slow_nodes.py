"""Slow nodes: one benchmark run on every host alone, repeated, each host against the rest of
the fleet, and the facts where a slow host differs from the majority
(``exemplar-tune slow-nodes``).

The benchmark is either

* the node benchmark (:func:`measure_on_hosts`): playbook ``node_bench`` runs
  ``exemplar.tune.node_bench`` on every host at once (Ansible's forks), one call per host that
  reads the host's facts and then runs the benchmark ``runs`` times: the host's
  ``exemplar_node_bench_command``, else nccl-tests ``all_reduce_perf`` over its GPUs, else a
  timed loop on one core. A run's value is read from its output (:func:`node_value`); or
* a shape of a benchmark file (:func:`measure`: the user's command from the controller, e.g.
  ``srun`` of a single-node nccl-tests), run once per host per round with that host alone
  (``EXEMPLAR_TUNE_HOSTS``, and the inventory limited to it for Slurm shapes), the hosts in a
  rotating order so that a drift falls on every host alike.

A run's value is time-like (throughput inverted).

A host is compared with the pooled runs of the other hosts that are not slow (Welch, delta
method, as the keep rule; see :func:`judge`): its *slowdown* is how much longer its mean time
is, with an interval at ``confidence`` shared over all hosts (Bonferroni: each host's interval
at ``1 - (1 - confidence) / N``). It is **slow** when the whole interval lies above zero and
the slowdown is at least ``min_slowdown``. Fewer than ``MIN_RUNS`` runs per host, or fewer
than ``MIN_HOSTS`` hosts, cannot tell. A host whose benchmark failed, timed out or gave no
result is never left out silently: the measuring functions name it with why
(:func:`lost_groups` folds them), and the command compares nothing then.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from exemplar_tune.diagnose.change_point import ChangePoint, run_change
from exemplar_tune.diagnose.nccl_tests import parse_tests
from exemplar_tune.diagnose.normalize import normalize
from exemplar_tune.diagnose.steptime import parse_steps
from exemplar_tune.errors import UserError
from exemplar_tune.fleet.ansible_run import AnsibleRun
from exemplar_tune.fleet.hostlist import compress, named, without_host
from exemplar_tune.fleet.inventory import inventory_hosts
from exemplar_tune.fleet.majority import Difference, host_differences
from exemplar_tune.fleet.playbook_runs import playbook
from exemplar_tune.orchestration.benchmark import (
    BenchmarkFailed,
    BenchmarkSpec,
    run_benchmark,
    value_of,
)
from exemplar_tune.orchestration.stats import compare
from exemplar_tune.orchestration.tune import HOSTS_VARIABLE, _time_like

MIN_RUNS = 3
MIN_HOSTS = 3
MIN_SLOWDOWN = 0.01
MAX_PASSES = 4
NCCL_TIME = BenchmarkSpec("node", (), "nccl-tests", metric="time")
STEP_TIME = BenchmarkSpec("node", (), "steptime")


@dataclass(frozen=True)
class NodeRuns:
    """One pass of the node benchmark: facts and time-like run values per host, the hosts
    that gave neither (one line each) and what was measured (``cpu-loop: seconds``)."""

    facts: dict[str, dict]
    values: dict[str, list[float]]
    missing: dict[str, str]
    measured: str


@dataclass(frozen=True)
class HostVerdict:
    """One host against the rest: its slowdown (positive: slower) and interval."""

    host: str
    runs: tuple[float, ...]
    slowdown: float
    low: float
    high: float
    slow: bool
    differs: tuple[str, ...] = field(default=())
    turned: ChangePoint | None = None  # where the host turned slow among its runs

    def to_dict(self) -> dict[str, Any]:
        turned = None if self.turned is None else {
            "run": self.turned.index + 1,
            "interval": [self.turned.low + 1, self.turned.high + 1],
            "slowdown": round(self.turned.relative, 5), "p_value": self.turned.p_value}
        return {"host": self.host, "slow": self.slow, "slowdown": round(self.slowdown, 5),
                "interval": [round(self.low, 5), round(self.high, 5)],
                "runs": list(self.runs), "differs": list(self.differs),
                "turned_slow": turned}

    def turned_line(self) -> str:
        """``node05: 4.1% slower from run 5 of 8 [runs 5-6]`` (``""`` when it did not)."""
        if self.turned is None:
            return ""
        low, high = self.turned.low + 1, self.turned.high + 1
        runs = f"run {low}" if low == high else f"runs {low}-{high}"
        return (f"{self.host}: {self.turned.relative:.1%} slower from run "
                f"{self.turned.index + 1} of {len(self.runs)} [{runs}]")

    def line(self) -> str:
        """``node17: 6.1 % slower [4.8, 7.3]``."""
        word = "slower" if self.slowdown >= 0 else "faster"
        return (f"{self.host}: {abs(self.slowdown):.1%} {word} [{self.low:+.1%}, "
                f"{self.high:+.1%}]")


def measure(run: AnsibleRun, spec: BenchmarkSpec, hosts: list[str], runs: int,
            log_dir: Path | None, progress: Callable[[str], None],
            ) -> tuple[dict[str, list[float]], dict[str, str]]:
    """``runs`` rounds of ``spec`` on each host alone: per host its time-like values, and
    the hosts whose run failed, timed out or gave no measurement, with why (one line each;
    such a host is not run again)."""
    values: dict[str, list[float]] = {h: [] for h in hosts}
    failed: dict[str, str] = {}
    for index in range(runs):
        order = hosts[index % len(hosts):] + hosts[:index % len(hosts)]
        for position, host in enumerate(order, start=1):
            if host in failed:
                continue
            progress(f"{spec.name}: round {index + 1}/{runs}, host {position}/{len(hosts)}: "
                     f"{host}")
            try:
                measured = run_benchmark(spec, env={HOSTS_VARIABLE: host},
                                         log_dir=log_dir / host if log_dir else None,
                                         inventory=run.limited(host))
            except BenchmarkFailed as exc:
                failed[host] = f"run {index + 1} of {runs}: {exc.reason}"
                continue
            if measured.value <= 0:
                failed[host] = (f"run {index + 1} of {runs}: value {measured.value:g} "
                                f"{measured.unit} is not a measurement")
                continue
            values[host].append(_time_like(measured.value, spec.higher_is_better))
    return {h: v for h, v in values.items() if h not in failed}, failed


def unanswered(run: AnsibleRun, answered: Iterable[str], status: str | None = None,
               ) -> dict[str, str]:
    """The hosts of ``run`` that gave no result at all, with why: an Ansible pass stopped
    at ``--timeout`` (runner ``status`` canceled or timeout, or not known) reports nothing
    of the hosts still running."""
    stopped = status in (None, "canceled", "timeout") and run.timeout
    why = (f"no result within --timeout {run.timeout:g} s (raise it for long benchmarks)"
           if stopped else f"no result (ansible-runner status {status})")
    seen = set(answered)
    return {host: why for host, _ in inventory_hosts(run) if host not in seen}


def lost_groups(missing: Mapping[str, str]) -> list[dict[str, Any]]:
    """Hosts that gave no measurement, folded by why: ``[{hosts, count, reason}]``, most
    hosts first (hosts whose reasons differ only in their own names are one group, the name
    written ``<host>``: ``hostlist.named``)."""
    folded: dict[str, list[str]] = {}
    for host, why in sorted(missing.items()):
        folded.setdefault(without_host(why, host), []).append(host)
    return [{"hosts": compress(hosts), "count": len(hosts), "reason": named(why, hosts)}
            for why, hosts in sorted(folded.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def measure_on_hosts(run: AnsibleRun, runs: int) -> NodeRuns:
    """Every host's facts and ``runs`` runs of its node benchmark, in one Ansible pass.

    A host that failed, could not be reached or gave no result before the pass was stopped
    at ``--timeout`` is in ``missing``, with why. The hosts must all run the same kind of
    benchmark; a fleet where some run nccl-tests and others the CPU loop is a ``UserError``
    naming which ran what.
    """
    outcome = run.playbook(Path(playbook("node_bench")), {"exemplar_node_bench_runs": runs})
    facts: dict[str, dict] = {}
    found: dict[str, tuple[str, list[dict]]] = {}
    missing = unanswered(run, outcome.hosts, outcome.status)
    for host, result in outcome.hosts.items():
        for task in result.tasks:
            res = task["result"]
            if task["status"] == "ok" and isinstance(res.get("exemplar_tune_json"), str):
                facts[host] = json.loads(res["exemplar_tune_json"])
                found[host] = (res["kind"], list(res["runs"]))
        if host not in found:
            missing[host] = result.message or "no benchmark result"
    kinds: dict[str, list[str]] = {}
    for host, (kind, _) in found.items():
        kinds.setdefault(kind, []).append(host)
    if len(kinds) > 1:
        raise UserError("the hosts ran different node benchmarks: " + "; ".join(
            f"{kind} on {compress(hosts)}" for kind, hosts in sorted(kinds.items()))
            + " (set exemplar_node_bench_command for every host)")
    values, units = {}, set()
    for host, (kind, done) in found.items():
        read = [node_value(kind, one, host) for one in done]
        values[host] = [value for value, _ in read]
        units.update(unit for _, unit in read)
    measured = (f"{next(iter(kinds))}: {', '.join(sorted(units)) or '-'}" if kinds
                else "nothing measured")
    return NodeRuns(facts, values, missing, measured)


def node_value(kind: str, done: Mapping[str, Any], host: str) -> tuple[float, str]:
    """A node benchmark run's time-like value and what it is: the time of the largest
    nccl-tests row, the median step time of a training log (after the warm-up), else the
    run's wall time (the CPU loop, or a command whose output is neither)."""
    output = str(done.get("output") or "")
    try:
        if kind != "cpu-loop" and parse_tests(normalize(output)):
            return value_of(NCCL_TIME, output), "nccl-tests time (us)"
        if kind != "cpu-loop" and parse_steps(output)[0] not in ("", "plain"):
            return value_of(STEP_TIME, output), "median step time (ms)"
    except ValueError as exc:
        raise UserError(f"node benchmark on {host}: {exc}") from None
    return float(done["seconds"]), "wall time (s)"


def judge(values: Mapping[str, list[float]], confidence: float,
          min_slowdown: float = MIN_SLOWDOWN) -> list[HostVerdict]:
    """Every host against the pooled runs of the others, slowest first.

    The others are the fleet's hosts that are not slow: the hosts found slow against all the
    others are left out of everyone's reference and every host is judged again, until the set
    of slow hosts stays the same (at most ``MAX_PASSES``), so that a rack of slow hosts does not
    dilute its own slowdown. The reference always keeps at least half of the hosts.
    """
    if len(values) < MIN_HOSTS:
        raise UserError(f"{len(values)} hosts: too few to tell a slow one (at least "
                        f"{MIN_HOSTS} needed)")
    if min(len(v) for v in values.values()) < MIN_RUNS:
        raise UserError(f"--runs: at least {MIN_RUNS} runs per host are needed to know the noise")
    each = 1.0 - (1.0 - confidence) / len(values)
    slow: set[str] = set()
    for _ in range(MAX_PASSES):
        verdicts = [_verdict(host, values, slow, each, min_slowdown) for host in values]
        found = {v.host for v in verdicts if v.slow}
        if found == slow or 2 * len(found) > len(values):
            break
        slow = found
    return sorted(verdicts, key=lambda v: -v.slowdown)


def _verdict(host: str, values: Mapping[str, list[float]], left_out: set[str], each: float,
             min_slowdown: float) -> HostVerdict:
    others = [v for h, vs in values.items() if h != host and h not in left_out for v in vs]
    comp = compare(others, values[host], higher_is_better=False, confidence=each)
    slowdown, low, high = -comp.rel_change, -comp.ci_high, -comp.ci_low
    return HostVerdict(host, tuple(values[host]), slowdown, low, high,
                       low > 0 and slowdown >= min_slowdown)


def turned_slow(verdicts: list[HostVerdict], confidence: float) -> list[HostVerdict]:
    """The verdicts, each host that turned slow among its runs with where it began
    (``change_point.run_change``): each host's runs over the other hosts' median at the same
    run (a drift of the whole fleet is no host's), the fleet's run-to-run noise known, the
    error shared over the hosts as for the intervals. Runs must line up (the same count on
    every host: the node benchmark's passes, or ``--bench``'s rounds)."""
    values = {v.host: list(v.runs) for v in verdicts}
    if len({len(runs) for runs in values.values()}) != 1:
        return verdicts
    cv, alpha = noise(values), (1.0 - confidence) / len(values)
    out = []
    for verdict in verdicts:
        others = [runs for host, runs in values.items() if host != verdict.host]
        fleet = [statistics.median(runs[i] for runs in others)
                 for i in range(len(verdict.runs))]
        found = run_change(verdict.runs, noise=cv, reference=fleet, alpha=alpha)
        out.append(replace(verdict, turned=found) if found else verdict)
    return out


def explain(verdicts: list[HostVerdict], found: list[Difference]) -> list[HostVerdict]:
    """The verdicts, each slow host with the facts where it differs from the majority."""
    return [replace(v, differs=tuple(host_differences(v.host, found))) if v.slow else v
            for v in verdicts]


@dataclass(frozen=True)
class SlowGroup:
    """Slow hosts that differ from the majority in the same facts (or in none)."""

    verdicts: tuple[HostVerdict, ...]
    differs: tuple[str, ...]

    @property
    def hosts(self) -> str:
        return compress(v.host for v in self.verdicts)

    def line(self) -> str:
        """One host's verdict line; several hosts folded: ``node[03,07] (2 hosts): 4.1-6.3 %
        slower, each beyond its interval``, with each host's interval for up to four."""
        if len(self.verdicts) == 1:
            return self.verdicts[0].line()
        low = min(v.slowdown for v in self.verdicts)
        high = max(v.slowdown for v in self.verdicts)
        each = "; ".join(v.line() for v in self.verdicts) if len(self.verdicts) <= 4 else \
            "each beyond its interval (--format json lists them)"
        return (f"{self.hosts} ({len(self.verdicts)} hosts): {low:.1%} to {high:.1%} slower: "
                f"{each}")


def slow_groups(verdicts: list[HostVerdict]) -> list[SlowGroup]:
    """The slow hosts, folded by the facts they differ in, the slowest group first."""
    groups: dict[tuple[str, ...], list[HostVerdict]] = {}
    for verdict in verdicts:
        if verdict.slow:
            groups.setdefault(verdict.differs, []).append(verdict)
    return [SlowGroup(tuple(found), differs) for differs, found in groups.items()]


def noise(values: Mapping[str, list[float]]) -> float:
    """The run-to-run coefficient of variation, the median over the hosts."""
    return statistics.median(statistics.stdev(v) / statistics.fmean(v)
                             for v in values.values() if len(v) > 1)
