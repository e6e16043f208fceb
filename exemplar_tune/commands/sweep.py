"""``sweep``: NCCL settings chosen by measurement on the target fabric (the measuring loop is
``exemplar_tune.orchestration.sweep``)."""

from __future__ import annotations

import argparse
import copy
import json
import os
from pathlib import Path
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import nccl_tuner

from exemplar_tune.checks.fabric import fabric_identity
from exemplar_tune.commands import SUMMARIES
from exemplar_tune.commands.options import add_change_target
from exemplar_tune.diagnose import nccl_tests
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, UserError
from exemplar_tune.facts import collect_facts
from exemplar_tune.fleet import reaper
from exemplar_tune.fleet.playbook_runs import claim_hosts, ledger_target, recorded, runner
from exemplar_tune.inputs import output_file
from exemplar_tune.ledger import Ledger
from exemplar_tune.orchestration import tuner_table
from exemplar_tune.orchestration.benchmark import BenchmarkSpec, load_benchmarks
from exemplar_tune.orchestration.experiments import (
    check_canary,
    check_measuring,
    details_hint,
    duration,
    gap_summary,
    past_run_seconds,
    print_gap,
)
from exemplar_tune.orchestration.stats import CONFIDENCE, MAX_RUNS, MIN_RUNS
from exemplar_tune.orchestration.sweep import LAYER, POSITION, StepResult, Sweep
from exemplar_tune.orchestration.sweep_plan import (
    Settings,
    Step,
    SweptKnob,
    arm_count,
    arm_label,
    current_values,
    nccl_shapes,
    parse_knob,
    profile_fragment,
    sizes_from_file,
    steps,
    with_sizes,
)
from exemplar_tune.orchestration.tune import LayerLoop, LoopOptions
from exemplar_tune.orchestration.tuner_table import (
    DEFAULT_PLUGIN,
    DEFAULT_TABLE,
    LOADED,
    SizeChoice,
    check_columns,
    check_unset,
    check_values,
    deploy_settings,
    table_step,
)
from exemplar_tune.profile import AUTO, load_profile, profile_for_hosts
from exemplar_tune.progress import say
from exemplar_tune.reports.provenance import made
from exemplar_tune.runs import state_dir
from exemplar_tune.signals import graceful_stop
from exemplar_tune.terminal import escape, join_lines


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``sweep``."""
    _add_sweep(sub)


SWEEP_EPILOG = """examples:
  exemplar-tune sweep -i hosts.yml --bench nccl.yaml --knob NCCL_IB_QPS_PER_CONNECTION=1,2,4,8
  exemplar-tune sweep ... --sizes-from train-coll.log --validate train.yaml
  exemplar-tune sweep ... --knob NCCL_IB_QPS_PER_CONNECTION=2,4 --knob NCCL_IB_SPLIT_DATA_ON_QPS=0,1
  exemplar-tune sweep ... --dry-run                       arms, rounds and the budget
  exemplar-tune sweep ... --write-profile fabric-cx8.yaml a profile fragment for this fabric
  exemplar-tune sweep ... --per-size --knob NCCL_ALGO=ring,tree --knob NCCL_PROTO=ll128,simple
      --write-tuner nccl_tuner.conf                      a tuner table: one choice per size

The hosts' current value is the incumbent; every candidate is applied through the fabric
layer's knob (journaled), measured with the nccl-tests shapes in rounds (a rotating order,
so drift falls on every arm alike), and dropped when clearly worse. A candidate is chosen
only when it beats the incumbent clear of zero, the error controlled over all candidates
(Holm) and all looks (a group-sequential boundary); otherwise the incumbent stays and the
hosts are restored byte for byte. 'exemplar-tune rollback --run EXP' undoes a sweep.
With --per-size each message size of each collective is a choice of its own between NCCL's
own algorithm/protocol and the candidates (error shared over all sizes); the sizes a
candidate wins become rows of NCCL's example tuner plugin table, the rest stay with NCCL,
and the hosts end as they were (README "Per-size tuner table").
Try it: exemplar-tune sim create /tmp/c; see README "Fabric sweep".
"""


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("sweep", help=SUMMARIES["sweep"],
                         description="Measure candidate values of NCCL settings on the target "
                         "fabric at the workload's message sizes and keep the best, if any "
                         "beats the hosts' current value.", epilog=SWEEP_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_change_target(cmd)
    add_sweep_options(cmd)


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
    cmd.add_argument("--per-size", action="store_true",
                     help="choose per collective and message size: NCCL_ALGO x NCCL_PROTO "
                     "(and NCCL_MAX_NCHANNELS) candidates against NCCL's own choice, as rows "
                     "of a tuner table (needs sizes: --sizes-from or the shapes' sizes)")
    cmd.add_argument("--write-tuner", type=Path, metavar="FILE",
                     help="with --per-size: write the table as nccl_tuner.conf for NCCL's "
                     "example tuner plugin")
    cmd.add_argument("--tuner-plugin", default=DEFAULT_PLUGIN, metavar="LIB",
                     help="with --per-size: the NCCL_TUNER_PLUGIN the hosts load "
                     f"(default {DEFAULT_PLUGIN})")
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


def cmd_sweep(args: argparse.Namespace) -> int:
    """``exemplar-tune sweep``."""
    knobs = [parse_knob(text) for text in args.knob]
    names = [k.name for k in knobs]
    if len(set(names)) != len(names):
        raise UserError("--knob: each setting once (give all its values in one --knob)")
    check_measuring(args.canary, args.confidence, (args.min_rounds, args.max_rounds), "rounds")
    if args.write_tuner and not args.per_size:
        raise UserError("--write-tuner: only with --per-size (a tuner table has one choice per "
                        "message size)")
    if args.per_size:
        check_columns(names)
        for knob in knobs:
            check_values(knob.name, knob.values)
    for path, option in ((args.write_profile, "--write-profile"),
                         (args.write_tuner, "--write-tuner")):
        if path:  # checked before any measurement: a sweep takes hours
            _check_writable(path, option)
    profile = None if args.profile == AUTO else load_profile(args.profile)
    shapes = nccl_shapes(load_benchmarks(args.bench), str(args.bench))
    notes: list[str] = []
    if args.sizes_from:
        sizes = sizes_from_file(args.sizes_from)
        shapes, notes = with_sizes(shapes, sizes)
    if args.per_size:
        _check_sized(shapes)
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
    if args.per_size:
        check_unset(current_values(hosts_facts, [*names, LOADED]))
    plan = [table_step(knobs)] if args.per_size else steps(knobs, current, args.grid)
    if not plan[0].candidates:
        raise UserError(f"--knob: every value is what the hosts have now "
                        f"({arm_label(plan[0].incumbent)}): nothing to sweep")
    arm_count(knobs, plan, args.grid or args.per_size)  # refuses too large a sweep now
    check_canary(args.canary, len(hosts_facts))
    if args.dry_run:
        return _dry_run(args, knobs, plan, shapes, notes, identity)
    with claim_hosts(runner(args), "sweep"), graceful_stop(), Ledger(args.ledger) as ledger:
        options = {"bench": str(Path(args.bench).resolve()), "knobs": args.knob,
                   "grid": args.grid, "per_size": args.per_size, "confidence": args.confidence,
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
            if args.per_size:
                choices = sweep.run_per_size(plan[0], current)
                measured = len(sweep.scope.hosts) if sweep.scope else len(hosts_facts)
                return _finish_per_size(args, sweep, choices, current, identity, validate,
                                        measured)
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
        validation = _validate(args, sweep, sweep._arm_profile(chosen), arm_label(chosen),
                               validate)
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
    doc = {"experiment": experiment, "made": made(sweep.profile["name"]), "fabric": identity,
           "incumbent": arm_label(current),
           "chosen": arm_label(chosen), "validation": validation,
           "steps": [{"step": r.step.title, "outcome": r.outcome, "chosen": arm_label(r.chosen),
                      "reason": r.reason, "rounds": r.rounds, "arms": r.estimates}
                     for r in results]}
    _print(args, doc)
    return EXIT_FINDINGS if validation and validation["action"] == "failed" else EXIT_OK


def _validate(args: argparse.Namespace, sweep: Sweep, profile: dict[str, Any], what: str,
              specs: list[BenchmarkSpec]) -> dict[str, Any]:
    """The keep-or-restore rule of ``tune`` on the training shapes, the winner (``profile``'s
    fabric section) against the incumbent, in an experiment of its own."""
    ledger = sweep.ledger
    options = {"bench": str(Path(args.validate).resolve()), "layers": [LAYER],
               "validates": sweep.experiment, "confidence": args.confidence}
    experiment = ledger.start_experiment("tune", profile["name"], ledger_target(args), options)
    say(f"validating {what} on training shapes: experiment {experiment}")
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


def _check_writable(path: Path, option: str) -> None:
    """``UserError`` now for an output file that could not be written at the end."""
    output_file(path, option)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise UserError(f"{option} {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise UserError(f"{option} {path}: directory {directory} is not writable")


def _write(path: Path, text: str, option: str = "--write-profile") -> None:
    try:
        output_file(path, option).write_text(text)
    except OSError as exc:
        raise UserError(f"{option} {path}: {exc.strerror or exc}") from None


def _check_sized(shapes: list[BenchmarkSpec]) -> None:
    """``UserError`` for a shape a per-size sweep cannot read size by size."""
    for spec in shapes:
        if not spec.sizes:
            raise UserError(f"--per-size: shape {spec.name} names no message sizes; give "
                            "--sizes-from LOG (the training job's sizes) or sizes: in the shape")
        if not spec.collective:
            raise UserError(f"--per-size: shape {spec.name} names no collective (a tuner row "
                            "is per collective); set collective: in the shape")


def _finish_per_size(args: argparse.Namespace, sweep: Sweep, choices: list[SizeChoice],
                     current: Settings, identity: dict[str, Any],
                     validate: list[BenchmarkSpec], nodes: int) -> int:
    """Record the table (rows for jobs of ``nodes`` hosts, the scale measured), validate it
    on training if asked, print and write it."""
    ledger, experiment = sweep.ledger, sweep.experiment
    rows = tuner_table.rows(choices, nodes, experiment)
    incumbent = arm_label(sweep.original)
    ledger.record_decision(experiment, LAYER, "restore", f"hosts as they were; {len(rows)} "
                           f"tuner row(s) from {len(choices)} message sizes",
                           [c.record(incumbent) for c in choices])
    sizes = [{"collective": c.collective, "size": c.size,
              "chosen": arm_label(c.chosen) if c.chosen else None, "reason": c.reason,
              "rounds": c.rounds, "estimate": c.estimate} for c in choices]
    ledger.set_layer_status(experiment, LAYER, "restored")
    nccl = {**{k: v for k, v in current.items() if v is not None},
            **deploy_settings(args.tuner_plugin, DEFAULT_TABLE)}
    validation = None
    if rows and validate:
        profile = copy.deepcopy(sweep.profile)
        profile.setdefault("fabric", {}).update(nccl=nccl, nccl_tuner=rows)
        validation = _validate(args, sweep, profile, f"the tuner table ({len(rows)} rows)",
                               validate)
        kept = validation["action"] == "keep"
        ledger.log_event(experiment, "info", f"validation on training ({validation['experiment']}"
                         f"): {'kept' if kept else 'restored: the table does not help training'}")
    ledger.set_summary(experiment, {"sweep": {
        "chosen": f"a tuner table of {len(rows)} row(s)" if rows else "NCCL's own choice",
        "tuner_rows": rows, "fabric": identity, "validation": validation}})
    ledger.finish(experiment, "finished")
    text = nccl_tuner.render(rows, f"NCCL tuner table from exemplar-tune sweep {experiment}; "
                             "sizes without a row are left to NCCL")
    if args.write_tuner:
        _write(args.write_tuner, text, "--write-tuner")
    if args.write_profile and rows:
        _write(args.write_profile, profile_fragment(nccl, identity, experiment,
                                                    _extends(args.profile), rows))
    doc = {"experiment": experiment, "made": made(sweep.profile["name"]), "fabric": identity,
           "per_size": True, "sizes": sizes, "tuner_rows": rows, "tuner_conf": text,
           "deploy": nccl, "validation": validation}
    _print_per_size(args, doc)
    return EXIT_FINDINGS if validation and validation["action"] == "failed" else EXIT_OK


def _print_per_size(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    if args.format == "json":
        print(json.dumps(doc, indent=2))
        return
    rows = doc["tuner_rows"]
    kept = (doc["validation"] or {}).get("action") == "keep"
    print(escape(f"sweep {doc['experiment']} per message size: {len(rows)} tuner row(s); "
                 + ("the hosts load the table (kept by the validation)" if kept
                    else "the hosts are as they were")))
    for size in doc["sizes"]:
        est = size["estimate"]
        won = (f"{size['chosen']} {est['rel_change']:+.2%} [{est['ci_low']:+.2%}, "
               f"{est['ci_high']:+.2%}]" if size["chosen"] else "NCCL's own choice stays")
        print(escape(f"  {size['collective']} {nccl_tests.human(size['size']):>8}: {won} "
                     f"({size['rounds']} rounds)"))
    _print_validation(doc["validation"])
    if rows:
        print(escape("  deploy: " + " ".join(f"{k}={v}" for k, v in doc["deploy"].items())
                     + f" with the table at {DEFAULT_TABLE} (README \"Per-size tuner table\")"))
    _print_tail(args, doc, [args.write_tuner] + ([args.write_profile] if rows else []))


def _print(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    if args.format == "json":
        print(json.dumps(doc, indent=2))
        return
    lines = [f"sweep {doc['experiment']}: {doc['incumbent']} -> {doc['chosen']}"]
    for step in doc["steps"]:
        lines.append(f"  {step['step']}: {step['outcome'].upper()} {step['chosen']} after "
                     f"{step['rounds']} rounds")
        for arm in step["arms"]:
            gone = f"  ({arm['eliminated']})" if arm["eliminated"] else ""
            lines.append(f"    {arm['arm']:<40} {arm['rel_change']:+7.2%} [{arm['ci_low']:+.2%}, "
                         f"{arm['ci_high']:+.2%}] {arm['runs']} runs{gone}")
    print(join_lines(lines))
    _print_validation(doc["validation"])
    _print_tail(args, doc, [args.write_profile])


def _print_validation(validation: dict[str, Any] | None) -> None:
    if validation:
        print(escape(f"  validation on training ({validation['experiment']}): "
                     f"{validation['action'].upper()}: {validation['reason']}"))
        print_gap(validation["gap"])


def _print_tail(args: argparse.Namespace, doc: dict[str, Any], written: list[Path | None]
                ) -> None:
    """The files written and where the details are."""
    for path in written:
        if path:
            print(escape(f"wrote {path}"))
    if not getattr(args, "ledger_removed_after", False):
        print(escape(details_hint(doc["experiment"], args.ledger)))


def _dry_run(args: argparse.Namespace, knobs: list[SweptKnob], plan: list[Step],
             shapes: list[BenchmarkSpec], notes: list[str], identity: dict[str, Any]) -> int:
    """The arms, the rounds and the budget; nothing changes."""
    arms = arm_count(knobs, plan, args.grid or args.per_size)
    most = arms * args.max_rounds * len(shapes)
    timeout_h = sum(s.timeout for s in shapes) * arms * args.max_rounds / 3600
    print(escape(f"plan (dry run, nothing changes): fabric {json.dumps(identity)}"))
    first = plan[0]
    print(escape(f"  {first.title}: incumbent {arm_label(first.incumbent)}; candidates "
                 + "; ".join(arm_label(a) for a in first.candidates)))
    if args.per_size:
        sizes = sum(len(s.sizes) for s in shapes)
        print(f"  per message size: {sizes} choices (each size of each shape), the error shared "
              "over them; winners become tuner table rows, the hosts end as they were")
    elif not args.grid:
        for knob in knobs[1:]:
            print(escape(f"  then {knob.name}: {', '.join(knob.values)} on top of the winner"))
    for note in notes:
        print(escape(f"  sizes: {note}"))
    past = past_run_seconds(args.ledger, [s.name for s in shapes])
    typical = (f"; about {duration(past * arms * args.max_rounds)} at most from past runs "
               "in the ledger" if past else "")
    print(f"  budget: {arms} arms x {args.min_rounds}-{args.max_rounds} rounds x {len(shapes)} "
          f"shape(s): at most {most} benchmark runs (worst case {timeout_h:.1f} h by the "
          f"benchmark timeouts{typical})")
    if args.validate:
        print(escape(f"  then the winner is validated on {args.validate} by the keep rule of "
                     "tune"))
    return EXIT_OK
