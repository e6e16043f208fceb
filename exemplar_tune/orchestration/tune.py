"""The measured loop: baseline -> apply one layer -> re-benchmark -> keep or restore.

For each layer: a check-mode run plans which hosts would change and whether the change needs
a reboot. The hosts are brought to the layer's target by the layer module (journaled under the
run id ``<experiment>-<layer>``) and the benchmarks run as baseline (A) and candidate (B):
interleaved A/B/A/B when the change takes effect at runtime (the layer is restored for A and
re-applied for B, which cancels slow drift), in blocks (A A A, apply and reboot, B B B ...)
when it needs a reboot. :class:`.stats.SequentialTest` decides after every
candidate run. The layer is kept only when some workload shape is better beyond the minimum
effect and none is worse; otherwise it is restored from the journals (and rebooted again
where the change was a boot-time one).

With a canary (``canary > 0``) the layer is measured on that many of the changing hosts
first; only a kept layer is then rolled out to the rest. Hosts that fail or cannot be reached
while changing are restored (the others) and reported; a restore that cannot reach a host
fails the layer with the ``rollback`` command to run once the host is back. A benchmark that
fails, times out or prints nothing parsable gives no measurement: the layer is restored and
the reason kept. Everything goes to the SQLite ledger as it happens, so a killed controller
leaves a record that ``exemplar-tune rollback`` or ``resume`` can act on.

Benchmark commands see ``EXEMPLAR_TUNE_HOSTS``: the comma-separated hosts being measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exemplar_tune.checks.base import FAIL
from exemplar_tune.checks.run import run_checks
from exemplar_tune.errors import crash_report
from exemplar_tune.facts import facts_from_hosts
from exemplar_tune.fleet.ansible_run import AnsibleRun
from exemplar_tune.fleet.playbook_runs import changed_hosts, host_records, run_playbook
from exemplar_tune.ledger import Ledger
from exemplar_tune.orchestration.benchmark import BenchmarkFailed, BenchmarkSpec, run_benchmark
from exemplar_tune.orchestration.stats import (
    BASELINE,
    CANDIDATE,
    CONFIDENCE,
    MAX_RUNS,
    MIN_EFFECT,
    MIN_RUNS,
    SequentialTest,
    block_runs,
)
from exemplar_tune.progress import say
from exemplar_tune.signals import Interrupted, StoppedAtOnce
from exemplar_tune.slurm.jobs import SUBMITTED

HOSTS_VARIABLE = "EXEMPLAR_TUNE_HOSTS"


@dataclass
class LoopOptions:
    """How the loop measures and decides."""

    min_effect: float = MIN_EFFECT
    confidence: float = CONFIDENCE
    min_runs: int = MIN_RUNS
    max_runs: int = MAX_RUNS
    allow_reboot: bool = False
    canary: int = 0
    log_dir: Path | None = None
    progress: Callable[[str], None] = say


@dataclass
class LayerOutcome:
    """What happened to one layer."""

    layer: str
    action: str  # keep | restore | skipped | failed | stopped
    reason: str
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)
    halt: bool = False  # hosts may be left changed: measure nothing more


@dataclass
class Scope:
    """The hosts one layer is measured on, and what is known about them."""

    layer: str
    run_id: str
    hosts: list[str]
    rest: list[str]
    reboot: bool
    applied: bool = False


class LayerLoop:
    """Runs the measured loop for the layers of one experiment."""

    def __init__(self, run: AnsibleRun, profile: dict[str, Any], specs: list[BenchmarkSpec],
                 ledger: Ledger, experiment: str, options: LoopOptions) -> None:
        self.run, self.profile, self.specs = run, profile, specs
        self.ledger, self.experiment, self.options = ledger, experiment, options
        self.measured_hosts: list[str] = []

    # -- one layer ------------------------------------------------------------------------

    def layer(self, layer: str, position: int, *, again: bool = False) -> LayerOutcome:
        """Measure ``layer`` and keep or restore it; every step is recorded.

        ``again``: the layer is already in the ledger (a resumed experiment); its earlier
        records are cleared first.
        """
        run_id = f"{self.experiment}-{layer}"
        if again:
            lost = self._undo_interrupted(layer, run_id)
            if lost:
                outcome = self._finish(layer, "failed", lost, status="failed")
                outcome.halt = True
                return outcome
        else:
            self.ledger.add_layer(self.experiment, layer, position, run_id)
        plan = self._playbook(self.run, "apply", layer, check=True)
        self.measured_hosts = sorted(plan["hosts"])
        if plan["unreachable"] or plan["failed"]:
            return self._finish(layer, "failed", "hosts failed or unreachable while planning "
                                "(nothing changed): " + _names(plan), status="failed")
        changing = sorted(h for h, d in plan["hosts"].items() if d["changed"])
        if not changing:
            return self._finish(layer, "skipped", "already at the profile's target")
        reboot = any(plan["hosts"][h]["reboot_required"] for h in changing)
        canary = changing[:self.options.canary] if self.options.canary else []
        scope = Scope(layer, run_id, canary or changing, changing[len(canary):] if canary else [],
                      reboot)
        self.ledger.set_layer_status(self.experiment, layer, "measuring", reboot_required=reboot)
        try:
            outcome = self._measure_until_decided(scope)
            if outcome.action == "keep" and scope.rest:
                outcome.excluded = self._roll_out(scope)
        except BenchmarkFailed as exc:
            return self._fail_restoring(scope, f"no measurement: {exc}")
        except LayerStopped as exc:
            return self._finish(layer, "stopped", str(exc), status="applied")
        except HostsLost as exc:
            outcome = self._finish(layer, "failed", str(exc), status="failed")
            outcome.halt = True
        except StoppedAtOnce:
            raise
        except Interrupted as exc:
            self._interrupted(scope, exc)
            raise
        except Exception as exc:  # a bug: the layer must not stay applied because of it
            outcome = self._fail_restoring(scope, f"internal error: {crash_report(exc)}")
            outcome.halt = True
        return outcome

    def _interrupted(self, scope: Scope, stop: Interrupted) -> None:
        """Restore the layer being measured after the first SIGINT/SIGTERM; leave it pending,
        so that ``resume`` measures it again."""
        self.options.progress(f"{scope.layer}: {stop} received: restoring the layer "
                              "(send it again to stop at once)")
        try:
            self._restore(scope, scope.hosts + scope.rest)
        except HostsLost as exc:
            self.ledger.log_event(self.experiment, "error", f"{scope.layer}: interrupted by "
                                  f"{stop}; {exc}")
            stop.note = f"the {scope.layer} layer could not be restored everywhere: {exc}"
            return
        stop.note = f"the {scope.layer} layer was restored"
        self.ledger.set_layer_status(self.experiment, scope.layer, "pending")
        self.ledger.log_event(self.experiment, "warning", f"{scope.layer}: interrupted by "
                              f"{stop}; the layer was restored")

    def _undo_interrupted(self, layer: str, run_id: str) -> str | None:
        """Restore a layer an earlier controller left half-measured on the hosts it recorded
        (with reboots allowed, reboot them back if the change was a boot-time one) and clear
        its records; the reason on failure."""
        doc = self.ledger.show(self.experiment)
        recorded = next(r for r in doc["layers"] if r["layer"] == layer)
        hosts = sorted({h["host"] for h in doc["hosts"] if h["layer"] == layer})
        scope = Scope(layer, run_id, hosts, [], recorded["reboot_required"], applied=True)
        self.options.progress(f"{layer}: restoring what the interrupted run left applied")
        try:
            self._restore(scope)
        except HostsLost as exc:
            return str(exc)
        self.ledger.reset_layer(self.experiment, layer)
        return None

    def _fail_restoring(self, scope: Scope, reason: str) -> LayerOutcome:
        """Restore the layer on every host it may have reached (canary and roll-out), then
        record it failed with ``reason``."""
        try:
            self._restore(scope, scope.hosts + scope.rest)
        except HostsLost as exc:
            reason = f"{reason}; {exc}"
        return self._finish(scope.layer, "failed", reason, status="failed")

    def _measure_until_decided(self, scope: Scope) -> LayerOutcome:
        test = SequentialTest(higher_is_better=False, min_effect=self.options.min_effect,
                              confidence=self.options.confidence,
                              min_runs=self.options.min_runs, max_runs=self.options.max_runs,
                              interleave=not scope.reboot)
        where = f" on canary {', '.join(scope.hosts)}" if scope.rest else ""
        runs = f"{self.options.min_runs}-{self.options.max_runs}"
        plan = (f"blocks, reboot; {block_runs(self.options.min_runs)} baseline runs, then {runs} "
                "candidate runs" if scope.reboot else f"A/B interleaved; {runs} runs per arm")
        self.options.progress(f"{scope.layer}: measuring{where} ({plan})")
        while True:
            arm = test.next_arm()
            self._set_arm(scope, arm)
            index = test.runs(arm)
            for spec in self.specs:
                measurement = self._bench(spec, scope.hosts if scope.rest else None)
                if measurement.value <= 0:
                    raise BenchmarkFailed(spec.name, f"value {measurement.value:g} "
                                          f"{measurement.unit}: not a measurement")
                test.add(arm, spec.name, _time_like(measurement.value, spec.higher_is_better),
                         steps=None if spec.higher_is_better else measurement.samples)
                self.ledger.add_sample(self.experiment, scope.layer, ARM_NAMES[arm], spec.name,
                                       index, measurement.value, measurement.unit,
                                       measurement.samples, str(measurement.log_path or ""),
                                       measurement.seconds)
            decision = test.decide()
            self.options.progress(_progress_line(scope.layer, arm, index, test, decision))
            if decision.action != "continue":
                break
        comparisons = [_comparison_dict(c) for c in decision.comparisons]
        self.ledger.record_decision(self.experiment, scope.layer, decision.action,
                                    decision.reason, comparisons)
        if decision.action == "keep":
            self._set_arm(scope, CANDIDATE)
            return self._finish(scope.layer, "keep", decision.reason, comparisons)
        self._restore(scope)
        return self._finish(scope.layer, "restore", decision.reason, comparisons)

    def _bench(self, spec: BenchmarkSpec, hosts: list[str] | None) -> Any:
        names = ",".join(hosts or self.measured_hosts)
        return run_benchmark(spec, env={HOSTS_VARIABLE: names}, log_dir=self.options.log_dir,
                             inventory=self.run.limited(names) if names else self.run,
                             on_submit=self._record_job)

    def _record_job(self, name: str) -> None:
        self.ledger.log_event(self.experiment, "info", SUBMITTED.format(name))

    # -- moving between the arms ------------------------------------------------------------

    def _set_arm(self, scope: Scope, arm: str) -> None:
        if arm == CANDIDATE and not scope.applied:
            self._apply(scope, scope.hosts)
        elif arm == BASELINE and scope.applied:
            self._restore(scope)

    def _apply(self, scope: Scope, hosts: list[str]) -> dict[str, Any]:
        result = self._playbook(self.run.limited(",".join(hosts)), "apply", scope.layer,
                                run_id=scope.run_id)
        self.ledger.record_hosts(self.experiment, scope.layer, host_records(result))
        scope.applied = True
        if result["failed"] or result["unreachable"]:
            self._give_up(scope, f"{scope.layer}: hosts failed or unreachable while applying: "
                          f"{_names(result)}")
        reboot = sorted(h for h, d in result["hosts"].items() if d["reboot_required"])
        if reboot and not self.options.allow_reboot:
            self.ledger.set_layer_status(self.experiment, scope.layer, "applied",
                                         reboot_required=True)
            raise LayerStopped(f"reboot required on {', '.join(reboot)} before the change takes "
                               f"effect: run 'exemplar-tune resume --run {self.experiment} "
                               f"--allow-reboot' to reboot them, measure and decide, or "
                               f"'exemplar-tune rollback --run {self.experiment}' to undo it")
        if reboot:
            try:
                self._reboot(scope.layer, reboot)
            except HostsLost as exc:
                self._give_up(scope, str(exc))
        return result

    def _give_up(self, scope: Scope, reason: str) -> None:
        """Restore every host of ``scope`` that answers, then raise :class:`HostsLost`."""
        try:
            self._restore(scope)
        except HostsLost as exc:
            raise HostsLost(f"{reason}; {exc}") from None
        raise HostsLost(reason)

    def _restore(self, scope: Scope, hosts: list[str] | None = None) -> None:
        """Restore the layer on ``hosts`` (default the scope's; none: every host of the run)."""
        hosts = hosts or scope.hosts
        target = self.run.limited(",".join(hosts)) if hosts else self.run
        result = self._playbook(target, "restore", scope.layer, run_id=scope.run_id)
        scope.applied = False
        broken = {**result["failed"], **result["unreachable"]}
        if broken:
            message = (f"{scope.layer}: restore failed on " + _names(result) + ": once they "
                       f"answer, run 'exemplar-tune rollback --run {self.experiment}'")
            self.ledger.log_event(self.experiment, "error", message)
            raise HostsLost(message)
        if scope.reboot and self.options.allow_reboot:
            self._reboot(scope.layer, sorted(result["hosts"]))

    def _reboot(self, layer: str, hosts: list[str]) -> None:
        """Reboot ``hosts``, wait for them, and re-check the layer's facts."""
        self.ledger.log_event(self.experiment, "info", f"{layer}: rebooting {hosts}")
        self.options.progress(f"{layer}: rebooting {', '.join(hosts)}")
        target = self.run.limited(",".join(hosts))
        rebooted = run_playbook(target, "reboot", {})
        if rebooted["failed"] or rebooted["unreachable"]:
            raise HostsLost(f"{layer}: reboot failed on {_names(rebooted)}: once they answer, "
                            f"run 'exemplar-tune rollback --run {self.experiment}'")
        facts, _ = facts_from_hosts(target, [layer])
        for host, host_facts in sorted(facts.items()):
            failing = [r.id for r in run_checks(host_facts, self.profile, [layer], False)
                       if r.status == FAIL]
            if failing:
                note = f"{layer}: after the reboot {host} still fails {', '.join(failing)}"
                self.ledger.log_event(self.experiment, "warning", note)
                self.options.progress(note)

    def _roll_out(self, scope: Scope) -> dict[str, str]:
        """Apply a kept layer to the hosts after the canary; restore and exclude any that fail."""
        self.options.progress(f"{scope.layer}: kept on the canary; applying to "
                              f"{len(scope.rest)} more host(s)")
        result = self._playbook(self.run.limited(",".join(scope.rest)), "apply", scope.layer,
                                run_id=scope.run_id)
        self.ledger.record_hosts(self.experiment, scope.layer, host_records(result))
        broken = {**result["failed"], **result["unreachable"]}
        if broken:
            failed = sorted(result["failed"])
            if failed:
                self._restore(scope, failed)
            self.ledger.log_event(self.experiment, "warning", f"{scope.layer}: excluded "
                                  f"{_names(result)} (restored where reachable)")
        reboot = sorted(h for h, d in result["hosts"].items()
                        if d["reboot_required"] and h not in broken)
        if reboot and self.options.allow_reboot:
            self._reboot(scope.layer, reboot)
        return broken

    def _playbook(self, run: AnsibleRun, name: str, layer: str, run_id: str | None = None,
                  check: bool = False) -> dict[str, Any]:
        extravars: dict[str, Any] = {"layer": layer, "exemplar_profile": self.profile}
        if run_id:
            extravars["exemplar_run_id"] = run_id
        if name == "restore":
            extravars["exemplar_restore_layers"] = [layer]
            extravars["exemplar_restore_expected"] = changed_hosts(
                self.ledger.show(self.experiment), layer)
        run.check = check
        try:
            return run_playbook(run, name, extravars)
        finally:
            run.check = False

    def _finish(self, layer: str, action: str, reason: str,
                comparisons: list[dict[str, Any]] | None = None,
                status: str | None = None) -> LayerOutcome:
        status = status or {"keep": "kept", "restore": "restored"}.get(action, action)
        self.ledger.set_layer_status(self.experiment, layer, status)
        self.ledger.log_event(self.experiment, "info", f"{layer}: {action}: {reason}")
        self.options.progress(f"{layer}: {action.upper()}: {reason}")
        return LayerOutcome(layer, action, reason, comparisons or [])

    # -- the whole experiment ---------------------------------------------------------------

    def final_values(self) -> dict[str, float]:
        """Mean of :func:`block_runs` runs of every shape on the hosts as they are now (``{}``
        when a benchmark gives no measurement; the reason goes to the ledger)."""
        count = block_runs(self.options.min_runs)
        self.options.progress(f"final: {count} runs of each shape")
        values = {}
        try:
            for spec in self.specs:
                runs = [self._bench(spec, None).value for _ in range(count)]
                values[spec.name] = statistics.fmean(runs)
        except BenchmarkFailed as exc:
            self.ledger.log_event(self.experiment, "warning", f"final measurement: {exc}")
            return {}
        return values


ARM_NAMES = {BASELINE: "baseline", CANDIDATE: "candidate"}


class LayerStopped(Exception):
    """The layer was applied but cannot be measured yet (a reboot is needed)."""


class HostsLost(Exception):
    """Hosts failed or could not be reached while changing, restoring or rebooting."""


def _names(result: dict[str, Any]) -> str:
    broken = {**result["failed"], **result["unreachable"]}
    return ", ".join(f"{h} ({'unreachable' if h in result['unreachable'] else 'failed'}: {why})"
                     for h, why in sorted(broken.items()))


def _progress_line(layer: str, arm: str, index: int, test: SequentialTest,
                   decision: Any) -> str:
    """``cpu: candidate run 3/10, moe -4.1 % [-5.0, -3.2] ...`` after each run."""
    text = f"{layer}: {ARM_NAMES[arm]} run {index + 1}/{test.arm_limit(arm)}"
    estimates = [f"{c.shape} {c.rel_change:+.1%} [{c.ci_low:+.1%}, {c.ci_high:+.1%}]"
                 for c in decision.comparisons]
    return text + (", " + "; ".join(estimates) if estimates else "")


def _time_like(value: float, higher_is_better: bool) -> float:
    """All shapes compared as lower-is-better: throughput becomes time per unit of work."""
    return 1.0 / value if higher_is_better else value


def _comparison_dict(comparison: Any) -> dict[str, Any]:
    return {"shape": comparison.shape, "rel_change": comparison.rel_change,
            "ci_low": comparison.ci_low, "ci_high": comparison.ci_high,
            "verdict": comparison.verdict, "n_baseline": comparison.n_baseline,
            "n_candidate": comparison.n_candidate, "confidence": comparison.confidence}

