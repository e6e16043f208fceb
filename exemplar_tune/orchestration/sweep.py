"""The sweep: NCCL settings chosen by measurement on the target fabric (``exemplar-tune sweep``).

The hosts' current values are the incumbent arm; every candidate value is applied through the
fabric layer's knob (journaled under ``<experiment>-fabric``, like ``tune``) and measured with
the benchmark file's nccl-tests shapes, at the workload's message sizes when ``--sizes-from``
names an NCCL COLL log of the training job. :class:`.selection.ArmSelection`
decides after every round. Several knobs are swept one at a time in the order given, each on
top of the earlier winners, or as a grid (``--grid``). The hosts end on the chosen settings, or
restored from their journals byte for byte when the incumbent stays.

With ``--per-size`` every (collective, message size) of the shapes is a choice of its own
between NCCL's own algorithm and protocol and the candidates (:meth:`Sweep.run_per_size`, rows
of a tuner table: :mod:`.tuner_table`); the hosts end as they were, and the table is what the
sweep gives.

With ``--validate TRAIN.yaml`` a winner then goes through the keep-or-restore rule of ``tune``
on the training shapes, in an experiment of its own: the sweep's hosts are first put back on
the incumbent, so that the training benchmark measures the incumbent against the winner. A
winner that does not help training is restored and the sweep's record says so.

Every run goes to the ledger as it happens (arm = its settings); a killed sweep leaves an
experiment that ``exemplar-tune rollback --run EXP`` restores.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from exemplar_tune.diagnose import nccl_tests
from exemplar_tune.errors import UserError, crash_report
from exemplar_tune.fleet.playbook_runs import runner
from exemplar_tune.ledger import Ledger
from exemplar_tune.orchestration.benchmark import BenchmarkFailed, BenchmarkSpec, Measurement
from exemplar_tune.orchestration.selection import ArmSelection, Selection, run_score
from exemplar_tune.orchestration.sweep_plan import (
    Settings,
    Step,
    SweptKnob,
    arm_label,
    coordinate_step,
)
from exemplar_tune.orchestration.tune import HostsLost, LayerLoop, LoopOptions, Scope, _time_like
from exemplar_tune.orchestration.tuner_table import SizeChoice
from exemplar_tune.progress import say
from exemplar_tune.runs import state_dir
from exemplar_tune.signals import Interrupted, StoppedAtOnce

LAYER, POSITION = "fabric", 5


@dataclass
class StepResult:
    """One step's outcome: the arm chosen (the incumbent when nothing won) and the evidence."""

    step: Step
    chosen: Settings
    outcome: str  # choose | incumbent
    reason: str
    estimates: list[dict[str, Any]] = field(default_factory=list)
    rounds: int = 0


class Sweep:
    """Measures the arms of each step on the hosts and records every run."""

    def __init__(self, args: argparse.Namespace, profile: dict[str, Any],
                 shapes: list[BenchmarkSpec], ledger: Ledger, experiment: str) -> None:
        self.args, self.profile, self.shapes = args, profile, shapes
        self.ledger, self.experiment = ledger, experiment
        self.options = LoopOptions(confidence=args.confidence, canary=args.canary,
                                   log_dir=state_dir() / "logs" / experiment,
                                   progress=say)
        self.loop = LayerLoop(runner(args), profile, shapes, ledger, experiment, self.options)
        self.scope: Scope | None = None
        self.original: Settings = {}
        self.on_hosts: Settings | None = None  # None: as the journal found them
        self.runs: dict[tuple[str, str], int] = {}

    def run(self, knobs: list[SweptKnob], plan: list[Step], current: Settings
            ) -> list[StepResult]:
        """Every step in order; the hosts end on the last step's choice. Any failure restores
        the hosts from the journal before it is raised."""
        results: list[StepResult] = []
        with self._measuring(current):
            step: Step | None = plan[0]
            while step is not None:
                results.append(self._measure(step))
                index = len(results)
                step = (coordinate_step(knobs, index, results[-1].chosen)
                        if not self.args.grid and index < len(knobs) else None)
            self._set(results[-1].chosen)
            if self.scope and self.scope.rest and results[-1].chosen != self.original:
                self.loop.profile = self._arm_profile(results[-1].chosen)
                self.loop._roll_out(self.scope)
        return results

    def run_per_size(self, step: Step, current: Settings) -> list[SizeChoice]:
        """One choice per (shape, message size) among the step's arms, the error shared over
        all of them; the hosts end as they were (restored from the journal)."""
        with self._measuring(current):
            choices = self._measure_sizes(step)
            self._set(self.original)
        return choices

    @contextmanager
    def _measuring(self, current: Settings) -> Iterator[None]:
        """The fabric layer in the ledger and the hosts' scope; any failure restores the
        hosts from the journal before it is raised."""
        self.original = dict(current)
        self.ledger.add_layer(self.experiment, LAYER, POSITION, f"{self.experiment}-{LAYER}")
        self.scope = self._scope()
        self.ledger.set_layer_status(self.experiment, LAYER, "measuring")
        try:
            yield
        except StoppedAtOnce:
            raise
        except Interrupted as stop:
            self._restore_all(f"interrupted by {stop}")
            stop.note = f"the {LAYER} layer was restored"
            raise
        except HostsLost as exc:
            self.ledger.set_layer_status(self.experiment, LAYER, "failed")
            raise UserError(str(exc)) from None
        except BaseException as exc:
            reason = str(exc) if isinstance(exc, BenchmarkFailed | UserError) else \
                f"internal error: {crash_report(exc)}"
            self._restore_all(reason)
            raise

    def _scope(self) -> Scope:
        plan = self.loop._playbook(self.loop.run, "apply", LAYER, check=True)
        if plan["unreachable"] or plan["failed"]:
            raise UserError("hosts failed or unreachable while planning (nothing changed): "
                            + ", ".join(sorted({**plan["failed"], **plan["unreachable"]})))
        hosts = sorted(plan["hosts"])
        canary = hosts[:self.args.canary] if self.args.canary else []
        self.loop.measured_hosts = hosts
        return Scope(LAYER, f"{self.experiment}-{LAYER}", canary or hosts,
                     hosts[len(canary):] if canary else [], reboot=False)

    def _measure(self, step: Step) -> StepResult:
        if not step.candidates:
            return StepResult(step, step.incumbent, "incumbent",
                              "every value given is the current one: nothing to measure")
        labels = [arm_label(a) for a in step.candidates]
        incumbent = arm_label(step.incumbent)
        settings = {arm_label(a): a for a in (step.incumbent, *step.candidates)}
        selection = ArmSelection(incumbent, labels, confidence=self.args.confidence,
                                 min_rounds=self.args.min_rounds,
                                 max_rounds=self.args.max_rounds)
        say(f"{step.title}: {len(labels) + 1} arms (incumbent {incumbent}), "
             f"{self.args.min_rounds}-{self.args.max_rounds} rounds of "
             f"{', '.join(s.name for s in self.shapes)}")
        while True:
            arms = selection.order()
            for position, arm in enumerate(arms, start=1):
                self._set(settings[arm])
                say(f"{step.title}: round {selection.rounds() + 1}, arm {position}/"
                     f"{len(arms)}: {arm}")
                selection.add(arm, self._bench_arm(arm))
            result = selection.decide()
            say(_progress(step.title, selection, result))
            if result.outcome != "continue":
                break
        chosen = settings[result.arm or incumbent]
        return StepResult(step, chosen, result.outcome, result.reason,
                          [_estimate_dict(e) for e in result.estimates], selection.rounds())

    def _measure_sizes(self, step: Step) -> list[SizeChoice]:
        labels = [arm_label(a) for a in step.candidates]
        incumbent = arm_label(step.incumbent)
        settings = {arm_label(a): a for a in (step.incumbent, *step.candidates)}
        keys = [(spec.name, size) for spec in self.shapes for size in spec.sizes]
        selections = {key: ArmSelection(incumbent, labels, confidence=self.args.confidence,
                                        min_rounds=self.args.min_rounds,
                                        max_rounds=self.args.max_rounds, family=len(keys))
                      for key in keys}
        decided: dict[tuple[str, int], Selection] = {}
        say(f"{step.title} per message size: {len(labels) + 1} arms (incumbent {incumbent}) at "
            f"{len(keys)} sizes, {self.args.min_rounds}-{self.args.max_rounds} rounds")
        rounds = 0
        while len(decided) < len(keys):
            open_keys = [k for k in keys if k not in decided]
            live = [a for a in settings if any(a in selections[k].live() for k in open_keys)]
            shift = rounds % len(live)
            for arm in live[shift:] + live[:shift]:
                self._set(settings[arm])
                values = self._bench_sizes(arm)
                for key in open_keys:
                    if arm in selections[key].live():
                        selections[key].add(arm, values[key])
            rounds += 1
            for key in open_keys:
                result = selections[key].decide()
                if result.outcome != "continue":
                    decided[key] = result
            say(f"{step.title}: round {rounds}/{self.args.max_rounds}, {len(decided)} of "
                f"{len(keys)} sizes decided")
        return [self._size_choice(key, decided[key], settings, selections[key].rounds())
                for key in keys]

    def _size_choice(self, key: tuple[str, int], result: Selection,
                     settings: dict[str, Settings], rounds: int) -> SizeChoice:
        spec = next(s for s in self.shapes if s.name == key[0])
        won = result.arm if result.outcome == "choose" else None
        return SizeChoice(nccl_tests.collective(spec.collective or ""), key[1],
                          settings[won] if won else None, result.reason, rounds,
                          tuple(_estimate_dict(e) for e in result.estimates))

    def _bench_arm(self, arm: str) -> float:
        """One run of every shape on the current arm; its score (lower is better)."""
        return run_score([_time_like(m.value, spec.higher_is_better)
                          for spec, m in self._bench_shapes(arm)])

    def _bench_sizes(self, arm: str) -> dict[tuple[str, int], float]:
        """One run of every shape on the current arm; the time-like value at each
        (shape, size)."""
        return {(spec.name, size): _time_like(value, spec.higher_is_better)
                for spec, m in self._bench_shapes(arm)
                for size, value in zip(spec.sizes, m.samples, strict=True)}

    def _bench_shapes(self, arm: str) -> list[tuple[BenchmarkSpec, Measurement]]:
        """One run of every shape on the current arm, each recorded in the ledger."""
        done = []
        hosts = self.scope.hosts if self.scope and self.scope.rest else None
        for spec in self.shapes:
            measurement = self.loop._bench(spec, hosts)
            if measurement.value <= 0:
                raise BenchmarkFailed(spec.name, f"value {measurement.value:g} "
                                      f"{measurement.unit}: not a measurement")
            index = self.runs.get((arm, spec.name), 0)
            self.runs[(arm, spec.name)] = index + 1
            self.ledger.add_sample(self.experiment, LAYER, arm, spec.name, index,
                                   measurement.value, measurement.unit, measurement.samples,
                                   str(measurement.log_path or ""), measurement.seconds)
            done.append((spec, measurement))
        return done

    def _set(self, settings: Settings) -> None:
        """Bring the measured hosts to ``settings``: the journal's restore for the settings the
        hosts started with, the fabric knob for any other."""
        if settings == (self.on_hosts if self.on_hosts is not None else self.original):
            return
        assert self.scope is not None
        if settings == self.original:
            self.loop._restore(self.scope)
        else:
            self.loop.profile = self._arm_profile(settings)
            self.loop._apply(self.scope, self.scope.hosts)
        self.on_hosts = dict(settings)

    def _arm_profile(self, settings: Settings) -> dict[str, Any]:
        profile = copy.deepcopy(self.profile)
        profile.setdefault("fabric", {})["nccl"] = dict(settings)
        return profile

    def _restore_all(self, reason: str) -> None:
        """Put every host the sweep may have changed back from the journal."""
        assert self.scope is not None
        try:
            self.loop._restore(self.scope, self.scope.hosts + self.scope.rest)
        except HostsLost as exc:
            reason = f"{reason}; {exc}"
        self.ledger.set_layer_status(self.experiment, LAYER, "failed")
        self.ledger.log_event(self.experiment, "error", f"{LAYER}: {reason}; restored")

    def restore(self) -> None:
        """Put the hosts back on the incumbent (the journal), e.g. before a validation."""
        assert self.scope is not None
        self.loop._restore(self.scope, self.scope.hosts + self.scope.rest)
        self.on_hosts = dict(self.original)


def _progress(title: str, selection: ArmSelection, result: Selection) -> str:
    text = f"{title}: round {selection.rounds()}/{selection.max_rounds}"
    estimates = [f"{e.arm.rpartition('=')[2] if ',' not in e.arm else e.arm} "
                 f"{e.rel_change:+.1%} [{e.ci_low:+.1%}, {e.ci_high:+.1%}]"
                 + (" out" if e.eliminated else "") for e in result.estimates]
    return text + (", " + "; ".join(estimates) if estimates else "")


def _estimate_dict(estimate: Any) -> dict[str, Any]:
    return {"arm": estimate.arm, "runs": estimate.runs, "rel_change": estimate.rel_change,
            "ci_low": estimate.ci_low, "ci_high": estimate.ci_high,
            "p_value": estimate.p_value, "passes": estimate.passes,
            "eliminated": estimate.eliminated}


