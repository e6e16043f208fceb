"""``exemplar-tune sweep``: NCCL settings chosen by measurement on the target fabric.

The hosts' current values are the incumbent arm; every candidate value is applied through the
fabric layer's knob (journaled under ``<experiment>-fabric``, like ``tune``) and measured with
the benchmark file's nccl-tests shapes, at the workload's message sizes when ``--sizes-from``
names an NCCL COLL log of the training job. :class:`exemplar_tune.selection.ArmSelection`
decides after every round. Several knobs are swept one at a time in the order given, each on
top of the earlier winners, or as a grid (``--grid``). The hosts end on the chosen settings, or
restored from their journals byte for byte when the incumbent stays.

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
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exemplar_tune import reaper
from exemplar_tune.benchmark import BenchmarkFailed, BenchmarkSpec, load_benchmarks
from exemplar_tune.checks.fabric import fabric_identity
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, UserError, crash_report
from exemplar_tune.experiments import (
    check_measuring,
    details_hint,
    duration,
    gap_summary,
    past_run_seconds,
    print_gap,
)
from exemplar_tune.facts import collect_facts
from exemplar_tune.inputs import read_input
from exemplar_tune.ledger import Ledger
from exemplar_tune.playbook_runs import claim_hosts, ledger_target, recorded, runner
from exemplar_tune.profile import AUTO, load_profile, profile_for_hosts
from exemplar_tune.progress import say
from exemplar_tune.runs import state_dir
from exemplar_tune.selection import ArmSelection, Selection, run_score
from exemplar_tune.signals import Interrupted, StoppedAtOnce, graceful_stop
from exemplar_tune.stats import CONFIDENCE, MAX_RUNS, MIN_RUNS
from exemplar_tune.sweep_plan import (
    Settings,
    Step,
    SweptKnob,
    arm_count,
    arm_label,
    coordinate_step,
    current_values,
    nccl_shapes,
    parse_knob,
    profile_fragment,
    sizes_from_log,
    steps,
    with_sizes,
)
from exemplar_tune.tune import HostsLost, LayerLoop, LoopOptions, Scope, _time_like

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


def cmd_sweep(args: argparse.Namespace) -> int:
    """``exemplar-tune sweep``."""
    knobs = [parse_knob(text) for text in args.knob]
    names = [k.name for k in knobs]
    if len(set(names)) != len(names):
        raise UserError("--knob: each setting once (give all its values in one --knob)")
    check_measuring(args.canary, args.confidence, (args.min_rounds, args.max_rounds), "rounds")
    profile = None if args.profile == AUTO else load_profile(args.profile)
    shapes = nccl_shapes(load_benchmarks(args.bench), str(args.bench))
    notes: list[str] = []
    if args.sizes_from:
        sizes = sizes_from_log(read_input(args.sizes_from, "--sizes-from"), str(args.sizes_from))
        shapes, notes = with_sizes(shapes, sizes)
    validate = load_benchmarks(args.validate) if args.validate else []
    hosts_facts, missing = collect_facts(args.sysroot, runner(args), ["vm", "fabric"])
    if missing:
        raise UserError("hosts unreachable while reading their fabric: "
                        + ", ".join(f"{h} ({why})" for h, why in sorted(missing.items())))
    if profile is None:
        args.profile = profile_for_hosts(AUTO, hosts_facts.values())
        profile = load_profile(args.profile)
    current = current_values(hosts_facts, names)
    identity = _one_identity(hosts_facts)
    plan = steps(knobs, current, args.grid)
    if not plan[0].candidates:
        raise UserError(f"--knob: every value is what the hosts have now "
                        f"({arm_label(plan[0].incumbent)}): nothing to sweep")
    if args.dry_run:
        return _dry_run(args, knobs, plan, shapes, notes, identity)
    with claim_hosts(runner(args), "sweep"), graceful_stop(), Ledger(args.ledger) as ledger:
        options = {"bench": str(Path(args.bench).resolve()), "knobs": args.knob,
                   "grid": args.grid, "confidence": args.confidence,
                   "min_rounds": args.min_rounds, "max_rounds": args.max_rounds,
                   "canary": args.canary, "sizes": {s.name: list(s.sizes) for s in shapes},
                   "fabric": identity, "forks": args.forks, "timeout": args.timeout}
        experiment = ledger.start_experiment("sweep", profile["name"], ledger_target(args),
                                             options)
        say(f"experiment {experiment}")
        for note in notes:
            say(f"  sizes: {note}")
        with recorded(ledger, experiment), reaper.tagged(experiment):
            sweep = Sweep(args, profile, shapes, ledger, experiment)
            results = sweep.run(knobs, plan, current)
            return _finish(args, sweep, results, current, identity, validate)


def _one_identity(hosts_facts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The fabric identity the hosts share; a ``UserError`` when they do not share one."""
    found: dict[str, list[str]] = {}
    for host, facts in sorted(hosts_facts.items()):
        key = json.dumps(fabric_identity(facts.get("fabric") or {}), sort_keys=True)
        found.setdefault(key, []).append(host)
    if len(found) > 1:
        shown = "; ".join(f"{', '.join(h)}: {k}" for k, h in found.items())
        raise UserError(f"the hosts are on different fabrics ({shown}); sweep each fabric on "
                        "its own (--limit)")
    return json.loads(next(iter(found)))


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
        self.original = dict(current)
        self.ledger.add_layer(self.experiment, LAYER, POSITION, f"{self.experiment}-{LAYER}")
        self.scope = self._scope()
        self.ledger.set_layer_status(self.experiment, LAYER, "measuring")
        results: list[StepResult] = []
        try:
            step: Step | None = plan[0]
            while step is not None:
                results.append(self._measure(step))
                index = len(results)
                step = (coordinate_step(knobs, index, results[-1].chosen)
                        if not self.args.grid and index < len(knobs) else None)
            self._set(results[-1].chosen)
            if self.scope.rest and results[-1].chosen != self.original:
                self.loop.profile = self._arm_profile(results[-1].chosen)
                self.loop._roll_out(self.scope)
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
        return results

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

    def _bench_arm(self, arm: str) -> float:
        """One run of every shape on the current arm; its score (lower is better)."""
        values = []
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
            values.append(_time_like(measurement.value, spec.higher_is_better))
        return run_score(values)

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


def _finish(args: argparse.Namespace, sweep: Sweep, results: list[StepResult],
            current: Settings, identity: dict[str, Any], validate: list[BenchmarkSpec]) -> int:
    """Record the decision, validate the winner if asked, print and write the result."""
    ledger, experiment = sweep.ledger, sweep.experiment
    chosen = results[-1].chosen
    changed = chosen != current
    reason = "; ".join(f"{r.step.title}: {r.reason}" for r in results)
    ledger.record_decision(experiment, LAYER, "keep" if changed else "restore", reason,
                           [{"step": r.step.title, "incumbent": arm_label(r.step.incumbent),
                             "chosen": arm_label(r.chosen), "outcome": r.outcome,
                             "rounds": r.rounds, "arms": r.estimates} for r in results])
    validation = None
    if changed and validate:
        sweep.restore()
        ledger.set_layer_status(experiment, LAYER, "restored")
        validation = _validate(args, sweep, chosen, validate)
        kept = validation["action"] == "keep"
        ledger.log_event(experiment, "info", f"validation on training ({validation['experiment']}"
                         f"): {'kept' if kept else 'restored: the winner does not help training'}")
        chosen = chosen if kept else current
    else:
        ledger.set_layer_status(experiment, LAYER, "kept" if changed else "restored")
    ledger.set_summary(experiment, {"sweep": {"chosen": arm_label(chosen), "fabric": identity,
                                              "validation": validation}})
    ledger.finish(experiment, "finished")
    if args.write_profile:
        _write(args.write_profile, profile_fragment(chosen, identity, experiment,
                                                    _extends(args.profile)))
    doc = {"experiment": experiment, "fabric": identity, "incumbent": arm_label(current),
           "chosen": arm_label(chosen), "validation": validation,
           "steps": [{"step": r.step.title, "outcome": r.outcome, "chosen": arm_label(r.chosen),
                      "reason": r.reason, "rounds": r.rounds, "arms": r.estimates}
                     for r in results]}
    _print(args, doc)
    return EXIT_FINDINGS if validation and validation["action"] == "failed" else EXIT_OK


def _validate(args: argparse.Namespace, sweep: Sweep, chosen: Settings,
              specs: list[BenchmarkSpec]) -> dict[str, Any]:
    """The keep-or-restore rule of ``tune`` on the training shapes, winner against incumbent,
    in an experiment of its own."""
    ledger = sweep.ledger
    profile = sweep._arm_profile(chosen)
    options = {"bench": str(Path(args.validate).resolve()), "layers": [LAYER],
               "validates": sweep.experiment, "confidence": args.confidence}
    experiment = ledger.start_experiment("tune", profile["name"], ledger_target(args), options)
    say(f"validating {arm_label(chosen)} on training shapes: experiment {experiment}")
    loop_options = LoopOptions(confidence=args.confidence, canary=args.canary,
                               log_dir=state_dir() / "logs" / experiment,
                               progress=say)
    with recorded(ledger, experiment):
        loop = LayerLoop(runner(args), profile, specs, ledger, experiment, loop_options)
        outcome = loop.layer(LAYER, POSITION)
        summary = {}
        if outcome.action in ("keep", "restore"):
            summary = gap_summary(ledger.show(experiment), profile, loop.final_values())
            ledger.set_summary(experiment, summary)
        ledger.finish(experiment, "failed" if outcome.action == "failed" else "finished")
    return {"experiment": experiment, "action": outcome.action, "reason": outcome.reason,
            "comparisons": outcome.comparisons, "gap": summary}


def _extends(profile: str) -> str:
    """What a written profile extends: a shipped name as it is, a file by its absolute path."""
    path = Path(profile)
    return str(path.resolve()) if path.suffix in (".yaml", ".yml") else profile


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise UserError(f"--write-profile {path}: {exc.strerror or exc}") from None


def _print(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    if args.format == "json":
        print(json.dumps(doc, indent=2))
        return
    print(f"sweep {doc['experiment']}: {doc['incumbent']} -> {doc['chosen']}")
    for step in doc["steps"]:
        print(f"  {step['step']}: {step['outcome'].upper()} {step['chosen']} after "
              f"{step['rounds']} rounds")
        for arm in step["arms"]:
            gone = f"  ({arm['eliminated']})" if arm["eliminated"] else ""
            print(f"    {arm['arm']:<40} {arm['rel_change']:+7.2%} [{arm['ci_low']:+.2%}, "
                  f"{arm['ci_high']:+.2%}] {arm['runs']} runs{gone}")
    if doc["validation"]:
        v = doc["validation"]
        print(f"  validation on training ({v['experiment']}): {v['action'].upper()}: "
              f"{v['reason']}")
        print_gap(v["gap"])
    if args.write_profile:
        print(f"wrote {args.write_profile}")
    print(details_hint(doc["experiment"], args.ledger))


def _dry_run(args: argparse.Namespace, knobs: list[SweptKnob], plan: list[Step],
             shapes: list[BenchmarkSpec], notes: list[str], identity: dict[str, Any]) -> int:
    """The arms, the rounds and the budget; nothing changes."""
    arms = arm_count(knobs, plan, args.grid)
    most = arms * args.max_rounds * len(shapes)
    timeout_h = sum(s.timeout for s in shapes) * arms * args.max_rounds / 3600
    print(f"plan (dry run, nothing changes): fabric {json.dumps(identity)}")
    first = plan[0]
    print(f"  {first.title}: incumbent {arm_label(first.incumbent)}; candidates "
          + "; ".join(arm_label(a) for a in first.candidates))
    if not args.grid:
        for knob in knobs[1:]:
            print(f"  then {knob.name}: {', '.join(knob.values)} on top of the winner")
    for note in notes:
        print(f"  sizes: {note}")
    past = past_run_seconds(args.ledger, [s.name for s in shapes])
    typical = (f"; about {duration(past * arms * args.max_rounds)} at most from past runs "
               "in the ledger" if past else "")
    print(f"  budget: {arms} arms x {args.min_rounds}-{args.max_rounds} rounds x {len(shapes)} "
          f"shape(s): at most {most} benchmark runs (worst case {timeout_h:.1f} h by the "
          f"benchmark timeouts{typical})")
    if args.validate:
        print(f"  then the winner is validated on {args.validate} by the keep rule of tune")
    return EXIT_OK


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


def add_sweep_options(cmd: argparse.ArgumentParser) -> None:
    """The options of ``sweep`` beyond the target."""
    cmd.add_argument("--bench", type=Path, required=True, metavar="FILE.yaml",
                     help="benchmark file with nccl-tests shapes (parser: nccl-tests)")
    cmd.add_argument("--knob", action="append", required=True, metavar="NAME=V1,V2,...",
                     help="an NCCL_* setting of the fabric layer and its candidate values "
                     "(repeatable: swept one at a time in this order, or all at once with "
                     "--grid); the hosts' current value is always the incumbent")
    cmd.add_argument("--grid", action="store_true",
                     help="measure every combination of the knobs' values at once")
    cmd.add_argument("--sizes-from", type=Path, metavar="LOG",
                     help="read nccl-tests results at the message sizes that carry most bytes "
                     "in this NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL log of the training job")
    cmd.add_argument("--validate", type=Path, metavar="TRAIN.yaml",
                     help="then keep the winner only if the training shapes in this benchmark "
                     "file confirm it (the keep rule of tune)")
    cmd.add_argument("--write-profile", type=Path, metavar="FILE.yaml",
                     help="write the chosen settings as a profile fragment keyed by this "
                     "fabric's identity (HCA model, firmware, link layer and rate)")
    cmd.add_argument("--profile", default=AUTO, metavar="NAME|FILE",
                     help="profile (default auto, by the hosts' architecture)")
    cmd.add_argument("--canary", type=int, default=0, metavar="N",
                     help="measure on N hosts, then roll the winner out to the rest")
    cmd.add_argument("--confidence", type=float, default=CONFIDENCE, metavar="FRACTION",
                     help=f"1 - twice the error of a wrong pick (default {CONFIDENCE})")
    cmd.add_argument("--min-rounds", type=int, default=MIN_RUNS, metavar="N",
                     help=f"rounds before the first decision (default {MIN_RUNS})")
    cmd.add_argument("--max-rounds", type=int, default=MAX_RUNS, metavar="N",
                     help=f"rounds at most (default {MAX_RUNS})")
    cmd.add_argument("--dry-run", action="store_true",
                     help="print the arms and the budget; change nothing")
    cmd.add_argument("--ledger", type=Path, help="SQLite ledger (default in the state dir)")
    cmd.set_defaults(func=cmd_sweep)
