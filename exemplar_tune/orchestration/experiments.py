"""Measured experiments: layers walked through the tuning loop for ``tune``, ``apply --bench``
and ``resume``, the gap summary and the plan of a dry run."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from exemplar_tune.checks.workload import DEFAULT_GATE, performance_ratio
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, UserError
from exemplar_tune.facts import collect_facts
from exemplar_tune.fleet import reaper
from exemplar_tune.fleet.hostlist import compress
from exemplar_tune.fleet.inventory import inventory_hosts
from exemplar_tune.fleet.playbook_runs import (
    claim_hosts,
    ledger_target,
    recorded,
    run_playbook,
    runner,
)
from exemplar_tune.ledger import Ledger
from exemplar_tune.orchestration.benchmark import load_benchmarks
from exemplar_tune.orchestration.stats import (
    block_runs,
)
from exemplar_tune.orchestration.tune import LayerLoop, LoopOptions
from exemplar_tune.preflight import preflight_hosts
from exemplar_tune.profile import AUTO, GIVEN, load_profile, profile_for_hosts
from exemplar_tune.runs import state_dir
from exemplar_tune.signals import graceful_stop
from exemplar_tune.slurm.jobs import cancel_jobs, submitted_jobs
from exemplar_tune.terminal import escape


def check_measuring(canary: int, confidence: float, bounds: tuple[int, int], unit: str) -> None:
    """One-line errors for the options every measured command shares (``unit``: runs or
    rounds, the ``--min-UNIT``/``--max-UNIT`` pair)."""
    if canary < 0:
        raise UserError(f"--canary {canary}: a number of hosts, 0 for none")
    if not 0 < confidence < 1:
        raise UserError(f"--confidence {confidence}: a fraction between 0 and 1, e.g. 0.9")
    low, high = bounds
    if not 2 <= low <= high:
        raise UserError(f"--min-{unit} {low} --max-{unit} {high}: need 2 <= min-{unit} <= "
                        f"max-{unit}")


def check_canary(canary: int, hosts: int) -> None:
    """A one-line error for a canary that is not fewer hosts than the target has."""
    if canary and canary >= hosts:
        raise UserError(f"--canary {canary}: the target has {hosts} host(s); a canary is "
                        "fewer hosts than that (0 for none)")


def run_experiment(args: argparse.Namespace, layers: list[str], kind: str) -> int:
    """Walk ``layers`` in preflight order through the measured loop; print the summary."""
    check_measuring(args.canary, args.confidence, (args.min_runs, args.max_runs), "runs")
    if not 0 <= args.min_effect < 1:
        raise UserError(f"--min-effect {args.min_effect}: a fraction from 0 to below 1, e.g. "
                        "0.01 for 1 %")
    check_canary(args.canary, len(inventory_hosts(runner(args))))
    if args.profile == AUTO:
        hosts, _missing = collect_facts(args.sysroot, runner(args), ["vm"])
        args.profile = profile_for_hosts(AUTO, hosts.values())
    profile = load_profile(args.profile)
    specs = load_benchmarks(args.bench)
    if getattr(args, "dry_run", False):
        return _dry_run(args, profile, specs, layers)
    target = ledger_target(args)
    options = {"bench": str(Path(args.bench).resolve()), "layers": layers,
               "profile": _profile_ref(args.profile), "min_effect": args.min_effect,
               "confidence": args.confidence,
               "min_runs": args.min_runs, "max_runs": args.max_runs,
               "allow_reboot": args.allow_reboot, "canary": args.canary,
               "forks": args.forks, "timeout": args.timeout}
    with claim_hosts(runner(args), kind), graceful_stop(), Ledger(args.ledger) as ledger:
        experiment = ledger.start_experiment(kind, profile["name"], target, options)
        print(f"experiment {experiment}")
        with recorded(ledger, experiment), reaper.tagged(experiment):
            ledger.set_summary(experiment, {"preflight": _preflight_groups(args, profile)})
            return walk_layers(ledger, experiment, args, profile, specs, [(layer, False)
                                                                    for layer in layers])


def _preflight_groups(args: argparse.Namespace, profile: dict[str, Any]) -> list[dict]:
    """The failing and warning checks before any change: ``[{id, status, count, total}]``."""
    hosts, missing = collect_facts(args.sysroot, runner(args), None)
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    given = {host: (profile, GIVEN) for host in hosts}
    for group in preflight_hosts(hosts, given, None, False, missing)["groups"]:
        entry = merged.setdefault((group["id"], group["status"]), {
            "id": group["id"], "status": group["status"], "count": 0, "total": group["total"]})
        entry["count"] += group["count"]
    return list(merged.values())


def _profile_ref(name_or_path: str) -> str:
    """A profile name, or the absolute path of a profile file (to load it again on resume)."""
    path = Path(name_or_path)
    return str(path.resolve()) if path.suffix in (".yaml", ".yml") else name_or_path


def walk_layers(ledger: Ledger, experiment: str, args: argparse.Namespace, profile: dict[str, Any],
          specs: list[Any], layers: list[tuple[str, bool]]) -> int:
    """Measure ``layers`` (name, measured before) in order; stop at a layer that must wait."""
    options = LoopOptions(min_effect=args.min_effect, min_runs=args.min_runs,
                          confidence=args.confidence,
                          max_runs=args.max_runs, allow_reboot=args.allow_reboot,
                          canary=args.canary, log_dir=state_dir() / "logs" / experiment)
    loop = LayerLoop(runner(args), profile, specs, ledger, experiment, options)
    positions = {layer["layer"]: layer["position"]
                 for layer in ledger.show(experiment)["layers"]}
    outcomes = []
    for layer, again in layers:
        outcome = loop.layer(layer, positions.get(layer, len(positions)), again=again)
        positions.setdefault(layer, len(positions))
        outcomes.append(outcome)
        if outcome.action == "stopped" or outcome.halt:
            break
    stopped = any(o.action == "stopped" for o in outcomes)
    failed = any(o.action == "failed" or o.excluded for o in outcomes)
    doc = ledger.show(experiment)
    summary = dict(doc["experiment"]["summary"] or {})
    if not (stopped or failed):  # no "after" on a fleet with hosts lost or half-measured
        summary.update(gap_summary(doc, profile, loop.final_values() if specs else {}))
    ledger.set_summary(experiment, summary)
    ledger.finish(experiment, "failed" if failed or stopped else "finished")
    _print_outcomes(outcomes, summary)
    if not getattr(args, "ledger_removed_after", False):
        print(details_hint(experiment, args.ledger))
    return EXIT_FINDINGS if failed or stopped else EXIT_OK


def gap_summary(doc: dict[str, Any], profile: dict[str, Any], after: dict[str, float]
                ) -> dict[str, Any]:
    """Per shape: before (the first measured baseline), after, and both against the profile's
    ``workload.reference`` and gate."""
    workload = profile.get("workload") or {}
    reference, gate = workload.get("reference") or {}, workload.get("gate", DEFAULT_GATE)
    before: dict[str, list[float]] = {}
    measured = [s for s in doc["samples"] if s["arm"] == "baseline"]
    first = min((s["layer"] for s in measured), default=None,
                key=lambda name: next(layer["position"] for layer in doc["layers"]
                                      if layer["layer"] == name))
    for sample in measured:
        if sample["layer"] == first:
            before.setdefault(sample["shape"], []).append(sample["value"])
    shapes = {}
    for shape, value in after.items():
        entry: dict[str, Any] = {"before": statistics.fmean(before[shape]) if shape in before
                                 else value, "after": value}
        ref = reference.get(shape)
        if ref:
            better_high = bool(ref.get("higher_is_better", False))
            for key in ("before", "after"):
                entry[f"{key}_ratio"] = performance_ratio(entry[key], ref["value"], better_high)
            entry["reference"] = ref["value"]
        shapes[shape] = entry
    ratios = [e["after_ratio"] for e in shapes.values() if "after_ratio" in e]
    return {"gate": gate, "shapes": shapes,
            "passed": all(r >= gate for r in ratios) if ratios else None}


def _print_outcomes(outcomes: list[Any], summary: dict[str, Any]) -> None:
    for outcome in outcomes:
        print(f"  {outcome.layer:<8} {outcome.action.upper():<8} {escape(outcome.reason)}")
        for c in outcome.comparisons:
            print(f"           {escape(c['shape'])}: {c['rel_change']:+.2%} "
                  f"({c['confidence']:.1%} CI {c['ci_low']:+.2%}"
                  f" .. {c['ci_high']:+.2%}; {c['n_baseline']}+{c['n_candidate']} runs)")
        for host, why in outcome.excluded.items():
            print(f"           excluded {escape(host)}: {escape(why)}")
    print_gap(summary)


def details_hint(experiment: str, ledger: Path | None) -> str:
    """The commands that show an experiment, naming a ledger other than the default (not
    printed where the ledger goes away after the command: ``ledger_removed_after`` set on
    the arguments, as the demo without ``--keep`` does)."""
    where = f" --ledger {ledger}" if ledger else ""
    return (f"details: exemplar-tune show {experiment}{where}; exemplar-tune report "
            f"{experiment}{where}")


def duration(seconds: float) -> str:
    """``45 s``, ``12 min`` or ``2.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def past_run_seconds(ledger_path: Path | None, shapes: list[str]) -> float | None:
    """Median seconds of one run of every shape, from the ledger's past samples; ``None``
    without a ledger or without runs of every shape."""
    path = Path(ledger_path) if ledger_path else state_dir() / "ledger.sqlite3"
    if not path.is_file():
        return None
    with Ledger(path, read_only=True) as ledger:
        seconds = ledger.sample_seconds(shapes)
    if any(shape not in seconds for shape in shapes):
        return None
    return sum(statistics.median(v) for v in seconds.values())


def print_gap(summary: dict[str, Any]) -> None:
    """Each shape before and after against the profile's reference, and the gate."""
    for shape, entry in summary.get("shapes", {}).items():
        if "after_ratio" in entry:
            print(f"  {escape(shape)}: {entry['before_ratio']:.1%} -> "
                  f"{entry['after_ratio']:.1%} of the reference ({entry['reference']:g}; "
                  f"gate {summary['gate']:.0%})")
    if summary.get("passed") is not None:
        print(f"  gate: {'PASSED' if summary['passed'] else 'NOT MET'}")


def _dry_run(args: argparse.Namespace, profile: dict[str, Any], specs: list[Any],
             layers: list[str]) -> int:
    """Print the plan: per layer the knobs that would change where; the benchmarks."""
    print(f"plan (dry run, nothing changes): profile {escape(profile['name'])}")
    result = run_playbook(runner(args, check=True), "audit", {  # every layer in one run
        "exemplar_profile": profile, "exemplar_layers": layers})
    changing = 0
    for layer in layers:
        knobs = {h: [k for k in d["changed"] if k["layer"] == layer]
                 for h, d in sorted(result["hosts"].items())}
        folded: dict[tuple[str, ...], list[str]] = {}
        for host, changed in knobs.items():
            if changed:
                folded.setdefault(tuple(dict.fromkeys(k["knob"] for k in changed)), []).append(host)
        hosts = [f"{compress(names)} ({', '.join(k)})" for k, names in folded.items()]
        reboot = any(k["reboot_required"] for changed in knobs.values() for k in changed)
        changing += bool(hosts)
        print(f"  {layer}: " + (escape("; ".join(hosts)) if hosts else "nothing to change")
              + (" -- needs a reboot: " + ("allowed" if args.allow_reboot else
                                           "the loop stops here") if reboot else ""))
    names = escape(", ".join(s.name for s in specs))
    canary = f"; first on {args.canary} canary host(s)" if args.canary else ""
    per_layer = max(block_runs(args.min_runs), args.max_runs) + args.max_runs
    runs = per_layer * changing + block_runs(args.min_runs)
    print(f"  benchmarks: {names}; per changed layer {args.min_runs}-{args.max_runs} runs per "
          f"arm{canary}; at most {per_layer * len(specs) * changing} benchmark runs "
          f"in all, plus {block_runs(args.min_runs) * len(specs)} for the final measurement")
    worst = runs * sum(s.timeout for s in specs) / 3600
    past = past_run_seconds(args.ledger, [s.name for s in specs])
    typical = (f"; about {duration(runs * past)} at most from past runs in the ledger"
               if past else "")
    print(f"  time: at most {worst:.1f} h by the benchmark timeouts{typical}")
    return EXIT_OK


def end_leftovers(ledger: Ledger, experiment: str) -> None:
    """End what an earlier controller of ``experiment`` left running before this one touches
    the hosts: its supervised Ansible and benchmark processes, and its Slurm jobs."""
    for proc in reaper.tagged_processes(experiment):
        reaper.end_tree(proc)
    cancelled = cancel_jobs(submitted_jobs(ledger.show(experiment)["events"]))
    if cancelled:
        ledger.log_event(experiment, "warning", f"cancelled Slurm job(s) {', '.join(cancelled)} "
                         "left by an earlier controller")
        print(f"cancelled Slurm job(s) {', '.join(cancelled)} of experiment {experiment}",
              file=sys.stderr)
