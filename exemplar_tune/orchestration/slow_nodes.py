"""Slow nodes: one benchmark run on every host alone, repeated, each host against the rest of
the fleet, and the facts where a slow host differs from the majority
(``exemplar-tune slow-nodes``).

The benchmark is a shape of a benchmark file (the user's command, e.g. a single-node
nccl-tests or a matrix multiply, or the simulated cluster's), run once per host per round with
that host alone (``EXEMPLAR_TUNE_HOSTS``, and the inventory limited to it for Slurm shapes),
the hosts in a rotating order so that a drift falls on every host alike. A run's value is
time-like (throughput inverted).

A host is compared with the pooled runs of all other hosts (Welch, delta method, as the keep
rule): its *slowdown* is how much longer its mean time is, with an interval at ``confidence``
shared over all hosts (Bonferroni: each host's interval at ``1 - (1 - confidence) / N``). It is
**slow** when the whole interval lies above zero and the slowdown is at least
``min_slowdown``. Fewer than ``MIN_RUNS`` runs per host, or fewer than ``MIN_HOSTS`` hosts,
cannot tell.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from exemplar_tune.errors import UserError
from exemplar_tune.fleet.ansible_run import AnsibleRun
from exemplar_tune.fleet.majority import Difference, host_differences
from exemplar_tune.orchestration.benchmark import BenchmarkSpec, run_benchmark
from exemplar_tune.orchestration.stats import compare
from exemplar_tune.orchestration.tune import HOSTS_VARIABLE, _time_like

MIN_RUNS = 3
MIN_HOSTS = 3
MIN_SLOWDOWN = 0.01


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

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "slow": self.slow, "slowdown": round(self.slowdown, 5),
                "interval": [round(self.low, 5), round(self.high, 5)],
                "runs": list(self.runs), "differs": list(self.differs)}

    def line(self) -> str:
        """``node17: 6.1 % slower [4.8, 7.3]``."""
        word = "slower" if self.slowdown >= 0 else "faster"
        return (f"{self.host}: {abs(self.slowdown):.1%} {word} [{self.low:+.1%}, "
                f"{self.high:+.1%}]")


def measure(run: AnsibleRun, spec: BenchmarkSpec, hosts: list[str], runs: int,
            log_dir: Path | None, progress: Callable[[str], None]) -> dict[str, list[float]]:
    """``runs`` rounds of ``spec`` on each host alone; per host its time-like values."""
    values: dict[str, list[float]] = {h: [] for h in hosts}
    for index in range(runs):
        order = hosts[index % len(hosts):] + hosts[:index % len(hosts)]
        for position, host in enumerate(order, start=1):
            progress(f"{spec.name}: round {index + 1}/{runs}, host {position}/{len(hosts)}: "
                     f"{host}")
            measured = run_benchmark(spec, env={HOSTS_VARIABLE: host},
                                     log_dir=log_dir / host if log_dir else None,
                                     inventory=run.limited(host))
            if measured.value <= 0:
                raise UserError(f"benchmark {spec.name} on {host}: value {measured.value:g} "
                                f"{measured.unit} is not a measurement")
            values[host].append(_time_like(measured.value, spec.higher_is_better))
    return values


def judge(values: Mapping[str, list[float]], confidence: float,
          min_slowdown: float = MIN_SLOWDOWN) -> list[HostVerdict]:
    """Every host against the pooled runs of the others, slowest first."""
    if len(values) < MIN_HOSTS:
        raise UserError(f"{len(values)} hosts: too few to tell a slow one (at least "
                        f"{MIN_HOSTS} needed)")
    if min(len(v) for v in values.values()) < MIN_RUNS:
        raise UserError(f"--runs: at least {MIN_RUNS} runs per host are needed to know the noise")
    each = 1.0 - (1.0 - confidence) / len(values)
    verdicts = []
    for host, mine in values.items():
        others = [v for h, vs in values.items() if h != host for v in vs]
        comp = compare(others, mine, higher_is_better=False, confidence=each)
        slowdown, low, high = -comp.rel_change, -comp.ci_high, -comp.ci_low
        verdicts.append(HostVerdict(host, tuple(mine), slowdown, low, high,
                                    low > 0 and slowdown >= min_slowdown))
    return sorted(verdicts, key=lambda v: -v.slowdown)


def explain(verdicts: list[HostVerdict], found: list[Difference]) -> list[HostVerdict]:
    """The verdicts, each slow host with the facts where it differs from the majority."""
    return [replace(v, differs=tuple(host_differences(v.host, found))) if v.slow else v
            for v in verdicts]


def noise(values: Mapping[str, list[float]]) -> float:
    """The run-to-run coefficient of variation, the median over the hosts."""
    return statistics.median(statistics.stdev(v) / statistics.fmean(v)
                             for v in values.values() if len(v) > 1)
