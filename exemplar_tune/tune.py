"""The measured loop: baseline -> apply one layer -> re-benchmark -> keep or restore.

For each layer: the hosts are brought to the layer's target through its role (journaled under
the run id ``<experiment>-<layer>``), the benchmarks run interleaved baseline/candidate
(A/B/A/B: the layer is restored for each baseline run and re-applied for each candidate run,
which cancels slow drift), and :class:`exemplar_tune.stats.SequentialTest` decides after every
pair. The layer is kept only when some workload shape is better beyond the minimum effect and
none is worse; otherwise it is restored from the journals. A benchmark that fails, times out
or prints nothing parsable gives no measurement: the layer is restored and the reason kept.
Changes that need a reboot stop the loop (unless reboots are allowed) with the next step
printed. Everything goes to the SQLite ledger as it happens, so a killed controller leaves a
record that ``exemplar-tune rollback`` can act on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exemplar_tune.ansible_run import AnsibleRun
from exemplar_tune.benchmark import BenchmarkFailed, BenchmarkSpec, run_benchmark
from exemplar_tune.ledger import Ledger
from exemplar_tune.remediate import run_playbook
from exemplar_tune.stats import BASELINE, CANDIDATE, SequentialTest


@dataclass
class LoopOptions:
    """How the loop measures and decides."""

    min_effect: float = 0.01
    confidence: float = 0.95
    min_runs: int = 3
    max_runs: int = 6
    allow_reboot: bool = False
    log_dir: Path | None = None
    progress: Callable[[str], None] = field(default=lambda text: print(text, file=sys.stderr))


@dataclass
class LayerOutcome:
    """What happened to one layer."""

    layer: str
    action: str  # keep | restore | skipped | failed | stopped
    reason: str
    comparisons: list[dict[str, Any]] = field(default_factory=list)


class LayerLoop:
    """Runs the measured loop for the layers of one experiment."""

    def __init__(self, run: AnsibleRun, profile: dict[str, Any], specs: list[BenchmarkSpec],
                 ledger: Ledger, experiment: str, options: LoopOptions) -> None:
        self.run, self.profile, self.specs = run, profile, specs
        self.ledger, self.experiment, self.options = ledger, experiment, options
        self.applied = False

    # -- one layer ------------------------------------------------------------------------

    def layer(self, layer: str, position: int) -> LayerOutcome:
        """Measure ``layer`` and keep or restore it; every step is recorded."""
        run_id = f"{self.experiment}-{layer}"
        self.ledger.add_layer(self.experiment, layer, position, run_id)
        plan = self._playbook("apply", layer, check=True)
        if not any(h["changed"] for h in plan["hosts"].values()):
            return self._finish(layer, "skipped", "already at the profile's target")
        test = SequentialTest(higher_is_better=False, min_effect=self.options.min_effect,
                              confidence=self.options.confidence,
                              min_runs=self.options.min_runs, max_runs=self.options.max_runs)
        self.applied = False
        try:
            return self._measure_until_decided(layer, run_id, test)
        except BenchmarkFailed as exc:
            self._restore(layer, run_id)
            return self._finish(layer, "failed", f"no measurement: {exc}")
        except LayerStopped as exc:
            return self._finish(layer, "stopped", str(exc), status="applied")

    def _measure_until_decided(self, layer: str, run_id: str, test: SequentialTest
                               ) -> LayerOutcome:
        while True:
            arm = test.next_arm()
            self._set_arm(layer, run_id, arm)
            index = test.runs(arm)
            self.options.progress(f"{layer}: {ARM_NAMES[arm]} run {index + 1} (at most "
                                  f"{self.options.max_runs} per arm)")
            for spec in self.specs:
                measurement = run_benchmark(spec, log_dir=self.options.log_dir)
                test.add(arm, spec.name, _time_like(measurement.value, spec.higher_is_better),
                         steps=None if spec.higher_is_better else measurement.samples)
                self.ledger.add_sample(self.experiment, layer, ARM_NAMES[arm], spec.name, index,
                                       measurement.value, measurement.unit, measurement.samples,
                                       str(measurement.log_path or ""), measurement.seconds)
            decision = test.decide()
            if decision.action != "continue":
                break
        comparisons = [_comparison_dict(c) for c in decision.comparisons]
        self.ledger.record_decision(self.experiment, layer, decision.action, decision.reason,
                                    comparisons)
        if decision.action == "keep":
            self._set_arm(layer, run_id, CANDIDATE)
            return self._finish(layer, "keep", decision.reason, comparisons)
        self._restore(layer, run_id)
        return self._finish(layer, "restore", decision.reason, comparisons)

    # -- moving between the arms ------------------------------------------------------------

    def _set_arm(self, layer: str, run_id: str, arm: str) -> None:
        if arm == CANDIDATE and not self.applied:
            result = self._playbook("apply", layer, run_id=run_id)
            self.ledger.record_hosts(self.experiment, layer, _host_records(result))
            self.applied = True
            self._check_hosts(layer, run_id, result)
        elif arm == BASELINE and self.applied:
            self._restore(layer, run_id)

    def _check_hosts(self, layer: str, run_id: str, result: dict[str, Any]) -> None:
        broken = {**result["failed"], **result["unreachable"]}
        if broken:
            self._restore(layer, run_id)
            raise BenchmarkFailed(layer, "hosts failed or unreachable while applying: "
                                  + ", ".join(f"{h} ({why})" for h, why in broken.items()))
        reboot = sorted(h for h, d in result["hosts"].items() if d["reboot_required"])
        if reboot and self.options.allow_reboot:
            self.ledger.log_event(self.experiment, "info", f"{layer}: rebooting {reboot}")
            self.options.progress(f"{layer}: rebooting {', '.join(reboot)}")
            rebooted = run_playbook(self.run.limited(",".join(reboot)), "reboot", {})
            if rebooted["failed"] or rebooted["unreachable"]:
                raise BenchmarkFailed(layer, f"reboot failed: {rebooted['failed']} "
                                      f"{rebooted['unreachable']}")
        elif reboot:
            self.ledger.set_layer_status(self.experiment, layer, "applied", reboot_required=True)
            raise LayerStopped(f"reboot required on {', '.join(reboot)} before the change takes "
                               f"effect: reboot them, then measure again, or restore with "
                               f"'exemplar-tune rollback --run {self.experiment}'")

    def _restore(self, layer: str, run_id: str) -> None:
        self._playbook("restore", layer, run_id=run_id)
        self.applied = False

    def _playbook(self, name: str, layer: str, run_id: str | None = None,
                  check: bool = False) -> dict[str, Any]:
        extravars: dict[str, Any] = {"layer": layer, "exemplar_profile": self.profile}
        if run_id:
            extravars["exemplar_run_id"] = run_id
        if name == "restore":
            extravars["exemplar_restore_layers"] = [layer]
        self.run.check = check
        try:
            return run_playbook(self.run, name, extravars)
        finally:
            self.run.check = False

    def _finish(self, layer: str, action: str, reason: str,
                comparisons: list[dict[str, Any]] | None = None,
                status: str | None = None) -> LayerOutcome:
        status = status or {"keep": "kept", "restore": "restored"}.get(action, action)
        self.ledger.set_layer_status(self.experiment, layer, status)
        self.ledger.log_event(self.experiment, "info", f"{layer}: {action}: {reason}")
        self.options.progress(f"{layer}: {action.upper()}: {reason}")
        return LayerOutcome(layer, action, reason, comparisons or [])


ARM_NAMES = {BASELINE: "baseline", CANDIDATE: "candidate"}


class LayerStopped(Exception):
    """The layer was applied but cannot be measured yet (a reboot is needed)."""


def _time_like(value: float, higher_is_better: bool) -> float:
    """All shapes compared as lower-is-better: throughput becomes time per unit of work."""
    return 1.0 / value if higher_is_better else value


def _comparison_dict(comparison: Any) -> dict[str, Any]:
    return {"shape": comparison.shape, "rel_change": comparison.rel_change,
            "ci_low": comparison.ci_low, "ci_high": comparison.ci_high,
            "verdict": comparison.verdict, "n_baseline": comparison.n_baseline,
            "n_candidate": comparison.n_candidate, "confidence": comparison.confidence}


def _host_records(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    records = {h: {"status": d["status"], "changed": d["changed"], "error": d["error"]}
               for h, d in result["hosts"].items()}
    records.update({h: {"status": "unreachable", "changed": [], "error": why}
                    for h, why in result["unreachable"].items()})
    return records
