"""``tune``, ``apply --bench``, ``history``, ``show`` and ``rollback``: measured experiments."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import ROLE_LAYERS

from exemplar_tune.benchmark import load_benchmarks
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK
from exemplar_tune.ledger import Ledger
from exemplar_tune.lock import hold_lock
from exemplar_tune.profile import load_profile
from exemplar_tune.remediate import _runner, run_playbook
from exemplar_tune.run_report import html_page, markdown
from exemplar_tune.runs import state_dir
from exemplar_tune.tune import LayerLoop, LoopOptions


def add_loop_options(cmd: argparse.ArgumentParser) -> None:
    """Options of the measured loop (shared by ``tune`` and ``apply --bench``)."""
    cmd.add_argument("--min-effect", type=float, default=0.01, metavar="FRACTION",
                     help="smallest relative improvement worth keeping (default 0.01 = 1 %%)")
    cmd.add_argument("--min-runs", type=int, default=3, help="runs per arm before deciding")
    cmd.add_argument("--max-runs", type=int, default=6,
                     help="runs per arm at most; inconclusive then means restore")
    cmd.add_argument("--allow-reboot", action="store_true",
                     help="reboot hosts whose change needs it (otherwise stop and say so)")
    cmd.add_argument("--ledger", type=Path, help="SQLite ledger (default in the state dir)")


def target_key(args: argparse.Namespace) -> str:
    """What the lock protects: the same inventory/limit or sysroot."""
    return json.dumps([args.inventory, args.limit, args.sysroot], sort_keys=True)


def run_experiment(args: argparse.Namespace, layers: list[str], kind: str) -> int:
    """Walk ``layers`` in preflight order through the measured loop; print the summary."""
    profile = load_profile(args.profile)
    specs = load_benchmarks(args.bench)
    if getattr(args, "dry_run", False):
        return _dry_run(args, profile, specs, layers)
    options = LoopOptions(min_effect=args.min_effect, min_runs=args.min_runs,
                          max_runs=args.max_runs, allow_reboot=args.allow_reboot)
    with hold_lock(state_dir(), target_key(args)), Ledger(args.ledger) as ledger:
        experiment = ledger.start_experiment(kind, profile["name"], {
            "inventory": args.inventory, "limit": args.limit, "sysroot": args.sysroot},
            {"bench": str(args.bench), "layers": layers, "min_effect": args.min_effect})
        options.log_dir = state_dir() / "logs" / experiment
        print(f"experiment {experiment}")
        loop = LayerLoop(_runner(args), profile, specs, ledger, experiment, options)
        outcomes = [loop.layer(layer, position) for position, layer in enumerate(layers)]
        failed = any(o.action in ("failed", "stopped") for o in outcomes)
        ledger.finish(experiment, "failed" if failed else "finished")
    for outcome in outcomes:
        print(f"  {outcome.layer:<8} {outcome.action.upper():<8} {outcome.reason}")
        for c in outcome.comparisons:
            print(f"           {c['shape']}: {c['rel_change']:+.2%} ({c['confidence']:.1%} CI "
                  f"{c['ci_low']:+.2%}"
                  f" .. {c['ci_high']:+.2%}; {c['n_baseline']}+{c['n_candidate']} runs)")
    print(f"details: exemplar-tune show {experiment}")
    return EXIT_FINDINGS if failed else EXIT_OK


def _dry_run(args: argparse.Namespace, profile: dict[str, Any], specs: list[Any],
             layers: list[str]) -> int:
    """Print the plan: per layer the knobs that would change where; the benchmarks."""
    print(f"plan (dry run, nothing changes): profile {profile['name']}")
    run = _runner(args, check=True)
    for layer in layers:
        result = run_playbook(run, "apply", {"layer": layer, "exemplar_profile": profile})
        changes = {h: [k["knob"] for k in d["changed"]] for h, d in result["hosts"].items()}
        hosts = [f"{h} ({', '.join(k)})" for h, k in changes.items() if k]
        print(f"  {layer}: " + ("; ".join(hosts) if hosts else "nothing to change"))
    names = ", ".join(s.name for s in specs)
    print(f"  benchmarks: {names}; per changed layer {args.min_runs}-{args.max_runs} runs per "
          f"arm, at most {2 * args.max_runs * len(specs)} benchmark runs")
    return EXIT_OK


def cmd_tune(args: argparse.Namespace) -> int:
    """``exemplar-tune tune``: every layer with a role, in preflight order."""
    layers = [name for name in ROLE_LAYERS if not args.layer or name in args.layer]
    return run_experiment(args, layers, "tune")


def cmd_history(args: argparse.Namespace) -> int:
    """``exemplar-tune history``."""
    with Ledger(args.ledger) as ledger:
        rows = ledger.history(args.limit)
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=str))
        return EXIT_OK
    for row in rows:
        print(f"{row['id']}  {row['kind']:<5} {row['status']:<11} {row['started_at']}  "
              f"profile {row['profile_name']}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    """``exemplar-tune show RUN``."""
    with Ledger(args.ledger) as ledger:
        doc = ledger.show(args.experiment)
    if args.format == "json":
        print(json.dumps(doc, indent=2, default=str))
        return EXIT_OK
    exp = doc["experiment"]
    print(f"{exp['id']} ({exp['kind']}, {exp['status']}), profile {exp['profile_name']}")
    for layer in doc["layers"]:
        print(f"  {layer['layer']:<8} {layer['status']}")
    for decision in doc["decisions"]:
        print(f"  {decision['layer']}: {decision['action']}: {decision['reason']}")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    """``exemplar-tune report RUN|latest``: Markdown or a self-contained HTML page."""
    with Ledger(args.ledger) as ledger:
        doc = ledger.show(args.experiment)
    text = html_page(doc) if args.format == "html" else markdown(doc)
    if args.output is None:
        print(text, end="")
        return EXIT_OK
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return EXIT_OK
