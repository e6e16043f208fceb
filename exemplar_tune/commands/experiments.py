"""``tune``, ``resume``, ``history``, ``show`` and ``report``: measured experiments and their
record in the ledger."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ansible_collections.exemplar.tune.plugins.module_utils.layers import ROLE_LAYERS

from exemplar_tune.commands import SUMMARIES
from exemplar_tune.commands.options import PROFILE_HELP, add_change_target, add_loop_options
from exemplar_tune.errors import EXIT_OK, UserError
from exemplar_tune.fleet import reaper
from exemplar_tune.fleet.playbook_runs import claim_hosts, recorded, runner
from exemplar_tune.inputs import output_file
from exemplar_tune.ledger import LAYER_DONE, Ledger, NoLedger, resumable
from exemplar_tune.orchestration.benchmark import load_benchmarks
from exemplar_tune.orchestration.experiments import end_leftovers, run_experiment, walk_layers
from exemplar_tune.orchestration.stats import CONFIDENCE
from exemplar_tune.profile import AUTO, load_profile
from exemplar_tune.reports import sweep as sweep_report
from exemplar_tune.reports.experiment import html_page, markdown, show_lines
from exemplar_tune.reports.provenance import made
from exemplar_tune.signals import graceful_stop
from exemplar_tune.terminal import escape, join_lines


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``tune``, ``resume``, ``history``."""
    _add_tune(sub)
    _add_resume(sub)
    _add_history(sub)


TUNE_EPILOG = """examples:
  exemplar-tune tune --bench bench.yaml --dry-run          the plan: what would change, runs
  exemplar-tune tune --bench bench.yaml -i hosts.yml --profile site.yaml
  exemplar-tune apply --layer cpu --bench bench.yaml       one layer, measured
  exemplar-tune history; exemplar-tune show latest; exemplar-tune rollback --run EXP

For each layer: benchmark runs in the order A B B A ... (the layer restored for A, applied
for B; boot-time changes in blocks with reboots) until the confidence interval of the
relative change is clear of --min-effect (default 0) and the gain clears the
group-sequential boundary for the looks taken, a keep is out of reach by --max-runs, or
--max-runs is reached. Kept only if some workload shape is better and none worse;
otherwise restored from the host journals. A failing or unparsable benchmark gives no
measurement: the layer is restored. With the profile's workload.reference, the summary
gives the gap to the reference before and after.
Try it on a simulated cluster: exemplar-tune demo; exemplar-tune sim --help.
"""


def _add_tune(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("tune", help=SUMMARIES["tune"],
                         description="The measured loop over every layer in preflight order.",
                         epilog=TUNE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_change_target(cmd)
    cmd.add_argument("--bench", type=Path, required=True, metavar="FILE.yaml",
                     help="the workload shapes to measure (benchmark file: command, parser)")
    cmd.add_argument("--profile", default=AUTO, metavar="NAME|FILE", help=PROFILE_HELP)
    cmd.add_argument("--layer", action="append", choices=ROLE_LAYERS, metavar="LAYER",
                     help="only these layers (repeatable)")
    cmd.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    add_loop_options(cmd)
    cmd.set_defaults(func=cmd_tune)


def _add_resume(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("resume", help=SUMMARIES["resume"],
                         description="Continue an interrupted tune/apply experiment: the layer "
                         "it was measuring is restored from the host journals and measured "
                         "again, decided layers stay as they are, the remaining layers follow.")
    cmd.add_argument("--run", metavar="EXPERIMENT",
                     help="the experiment (default: the only one whose controller died)")
    cmd.add_argument("--allow-reboot", action="store_true", default=None,
                     help="allow reboots this time even if the experiment did not")
    cmd.add_argument("--ledger", type=Path, help="SQLite ledger (default in the state dir)")
    cmd.set_defaults(func=cmd_resume)


def _add_history(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("history", help=SUMMARIES["history"],
                         description="The newest experiments in the ledger (tune, apply, "
                         "sweep), one per line: id, kind, status, start, profile.")
    cmd.add_argument("--last", type=int, default=20, metavar="N",
                     help="how many, newest first (default 20)")
    # its earlier name, still read: every other --limit is a host pattern
    cmd.add_argument("--limit", type=int, dest="last", help=argparse.SUPPRESS)
    cmd.add_argument("--format", choices=("table", "json"), default="table",
                     help="output format (default table)")
    cmd.add_argument("--ledger", type=Path, help="SQLite ledger (default in the state dir)")
    cmd.set_defaults(func=cmd_history)
    show = sub.add_parser("show", help=SUMMARIES["show"],
                          description="One experiment as the ledger holds it: its layers and "
                          "their status, the hosts changed, every benchmark run, the decisions "
                          "and the events. 'latest' is the newest experiment.")
    show.add_argument("experiment", metavar="EXPERIMENT|latest",
                      help="an experiment or apply run id, or latest")
    show.add_argument("--format", choices=("table", "json"), default="table",
                      help="output format (default table)")
    show.add_argument("--ledger", type=Path, help="SQLite ledger (default in the state dir)")
    show.set_defaults(func=cmd_show)
    report = sub.add_parser("report", help=SUMMARIES["report"],
                            description="Render one experiment: decisions with their numbers, "
                            "a waterfall of the gap closed per layer, step-time distributions.")
    report.add_argument("experiment", metavar="EXPERIMENT|latest",
                        help="an experiment or apply run id, or latest")
    report.add_argument("--format", choices=("markdown", "html"), default="markdown",
                        help="output format (default markdown)")
    report.add_argument("--output", type=Path, metavar="FILE",
                        help="write the report to FILE (default: standard output)")
    report.add_argument("--ledger", type=Path, help="SQLite ledger (default in the state dir)")
    report.set_defaults(func=cmd_report)


def cmd_tune(args: argparse.Namespace) -> int:
    """``exemplar-tune tune``: every layer with a role, in preflight order."""
    layers = [name for name in ROLE_LAYERS if not args.layer or name in args.layer]
    return run_experiment(args, layers, "tune")


def cmd_resume(args: argparse.Namespace) -> int:
    """``exemplar-tune resume``: continue an experiment whose controller died.

    The interrupted layer is restored from its journals and measured again; layers already
    decided keep their decision; the remaining layers follow.
    """
    try:
        ledger = Ledger(args.ledger, create=False)
    except NoLedger as exc:
        what = f"no experiment {args.run!r}" if args.run else "no interrupted experiment"
        raise UserError(f"{what} to resume ({exc})") from None
    with ledger:
        experiment = _resumable(ledger, args.run)
        doc = ledger.show(experiment)
        options, target = doc["experiment"]["options"], doc["experiment"]["target"]
        if not resumable(doc["experiment"]):
            raise UserError(f"experiment {experiment} ({doc['experiment']['kind']}) cannot be "
                            f"resumed, only rolled back: 'exemplar-tune rollback --run "
                            f"{experiment}'")
        allow_reboot = args.allow_reboot
        options = {"confidence": CONFIDENCE, **options}  # recorded before --confidence
        args = argparse.Namespace(**target, **options, ledger=args.ledger)
        args.bench = Path(options["bench"])
        args.allow_reboot = args.allow_reboot or bool(allow_reboot)
        profile, specs = load_profile(options["profile"]), load_benchmarks(args.bench)
        done = {layer["layer"] for layer in doc["layers"] if layer["status"] in LAYER_DONE}
        seen = {layer["layer"] for layer in doc["layers"]}
        with claim_hosts(runner(args), "resume"), graceful_stop():
            end_leftovers(ledger, experiment)
            ledger.resume_experiment(experiment)
            print(escape(f"experiment {experiment} resumed"))
            todo = [(layer, layer in seen) for layer in options["layers"] if layer not in done]
            with recorded(ledger, experiment), reaper.tagged(experiment):
                return walk_layers(ledger, experiment, args, profile, specs, todo)


def _resumable(ledger: Ledger, wanted: str | None) -> str:
    """The unfinished experiment to resume: ``wanted`` or the only one whose controller died."""
    orphaned = [e for e in ledger.unfinished() if e["controller_alive"] is False]
    dead = [e for e in orphaned if resumable(e)]
    dead += [e for e in ledger.history(50) if e["status"] == "interrupted" and resumable(e)]
    stopped = [e for e in ledger.history(50) if e["status"] == "failed"]
    if wanted:
        exp = ledger.show(wanted)["experiment"]
        if exp["status"] in ("finished", "rolled_back"):
            raise UserError(f"experiment {exp['id']} is {exp['status']}: nothing to resume")
        if exp["status"] == "running" and exp["id"] not in {e["id"] for e in orphaned}:
            raise UserError(f"experiment {exp['id']} is still running (pid "
                            f"{exp['controller_pid']} on {exp['controller_host']})")
        return exp["id"]
    if len(dead) == 1:
        return dead[0]["id"]
    if not dead and stopped:
        raise UserError(f"no interrupted experiment; name one with --run (latest stopped or "
                        f"failed: {stopped[0]['id']})")
    raise UserError("no interrupted experiment to resume" if not dead else
                    "several interrupted experiments: choose one with --run ("
                    + ", ".join(e["id"] for e in dead) + ")")


def cmd_history(args: argparse.Namespace) -> int:
    """``exemplar-tune history``."""
    try:
        with Ledger(args.ledger, read_only=True) as ledger:
            rows = ledger.history(args.last)
    except NoLedger:
        rows = []
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=str))
        return EXIT_OK
    if not rows:
        print("no experiments recorded yet (tune, apply and sweep record theirs)")
        return EXIT_OK
    print(join_lines([f"{'experiment':<21} {'kind':<5} {'status':<11} {'started (UTC)':<27} "
                      "profile"]
                     + [f"{row['id']:<21} {row['kind']:<5} {row['status']:<11} "
                        f"{row['started_at']:<27} {row['profile_name']}" for row in rows]))
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    """``exemplar-tune show RUN``: the experiment, per layer the hosts and knobs it changed
    and whether a restore put them back (:func:`show_lines`), its decisions."""
    with Ledger(args.ledger, read_only=True) as ledger:
        doc = ledger.show(args.experiment)
    if args.format == "json":
        doc["made"] = made(doc["experiment"]["profile_name"])
        print(json.dumps(doc, indent=2, default=str))
        return EXIT_OK
    print(join_lines(show_lines(doc)))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    """``exemplar-tune report RUN|latest``: Markdown or a self-contained HTML page."""
    with Ledger(args.ledger, read_only=True) as ledger:
        doc = ledger.show(args.experiment)
    if doc["experiment"]["kind"] == "sweep":
        text = sweep_report.html_page(doc) if args.format == "html" else \
            sweep_report.markdown(doc)
    else:
        text = html_page(doc) if args.format == "html" else markdown(doc)
    if args.output is None:
        print(text, end="")
        return EXIT_OK
    try:
        output_file(args.output).write_text(text)
    except OSError as exc:
        raise UserError(f"report --output {args.output}: {exc.strerror or exc}") from None
    print(escape(f"wrote {args.output}"))
    return EXIT_OK
