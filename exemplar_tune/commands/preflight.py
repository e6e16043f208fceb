"""``preflight``: every layer's checks against a profile, on one host or a fleet."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYER_NAMES

from exemplar_tune.checks.base import FAIL, HEALTH, TUNING
from exemplar_tune.commands import SUMMARIES
from exemplar_tune.commands.options import add_host_options, check_layers, facts_runner
from exemplar_tune.commands.slurm import add_prolog_option
from exemplar_tune.dcgm import CAPTURE, LEVEL_TIME, from_output
from exemplar_tune.errors import UserError
from exemplar_tune.facts import collect_facts
from exemplar_tune.inputs import output_file, read_input
from exemplar_tune.json_schemas import checked
from exemplar_tune.ledger import Ledger, NoLedger
from exemplar_tune.offenders import offenders, repeat_failures, thresholds
from exemplar_tune.preflight import exit_status, preflight_hosts
from exemplar_tune.probe import probe_container
from exemplar_tune.profile import host_profiles, load_profile, shipped_profiles
from exemplar_tune.progress import say
from exemplar_tune.reports.npd import npd_result
from exemplar_tune.reports.preflight import html_report, markdown, table, use_colour
from exemplar_tune.reports.prometheus import preflight_text, write_atomically
from exemplar_tune.terminal import escape, join_lines, raw
from exemplar_tune.verdict import Target


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``preflight`` and ``offenders``."""
    _add_preflight(sub)
    _add_offenders(sub)


PREFLIGHT_EPILOG = """examples:
  exemplar-tune preflight                               this host, profile chosen by its hardware
  exemplar-tune preflight --profile gb200-grace --stop-at-first-failing-layer
  exemplar-tune preflight --sysroot node07.tar.gz --format html --output node07.html
  exemplar-tune preflight -i hosts.yml --format json --output fleet.json
  exemplar-tune preflight --launcher "enroot start --rw pytorch"   check inside the container
  exemplar-tune preflight --slurm-prolog --drain-at medium   as a Slurm prolog gate
  exemplar-tune preflight --format npd --layer cpu     a node-problem-detector plugin

Checks run layer by layer (gpu, vm, cpu, runtime, fabric, workload); every result has a status
(pass, warn, fail, skip), a class (health: the node is broken or degrading; tuning: a
preference of the profile is not met; not_applicable; unknown: it could not be judged), what
was observed and expected, the evidence (file or command), the risk and its actions, first
to last (none, apply, reboot, reset_gpu, restart_service, drain, replace, investigate), each
with the command that does it where one exists; pending_reboot marks a fix applied that waits
for a reboot. Each host gets one verdict: health, unknown, tuning, not_applicable or ok. With
several hosts the table prints one line per failing or warning check and finding, the hosts
with that finding folded into a hostlist (gpu[001-112,115]), failing first, then by severity
and host count; --details adds every host's checks. JSON keeps every host's results
('exemplar-tune schema preflight' prints its JSON Schema).

exit codes: 0 no failing check, 1 a check failed or a host was unreachable or could not be
judged (an empty or unreadable host is unknown, never a pass), 2 usage/input error.
"""


def _add_preflight(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("preflight", help=SUMMARIES["preflight"],
                         description="Run the ordered preflight: GPU health, Grace/VM "
                         "readiness, CPU power and placement, runtime topology, fabric, "
                         "workload.", epilog=PREFLIGHT_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_host_options(cmd)
    cmd.add_argument("--profile", default="auto", metavar="NAME|FILE",
                     help=f"expectations: {', '.join(shipped_profiles())}, a YAML file, or "
                     "'auto' (the default: each host the shipped profile of its hardware - "
                     "its NVIDIA GPUs by PCI device ID and its architecture - or 'generic')")
    cmd.add_argument("--layer", action="append", metavar="LAYER",
                     help=f"only this layer's checks (repeatable): {', '.join(LAYER_NAMES)}")
    cmd.add_argument("--stop-at-first-failing-layer", action="store_true",
                     help="strict gate: do not evaluate layers after the first failing one")
    cmd.add_argument("--launcher", metavar="CMD",
                     help="also probe inside the job container started by CMD (e.g. "
                     "'srun -N1 --container-image=IMG', 'enroot start IMG', 'docker run IMG')")
    cmd.add_argument("--results", type=Path, metavar="FILE.json",
                     help='benchmark results for the workload layer: {"SHAPE": {"value": N, '
                     '"unit": "s/step"}}')
    cmd.add_argument("--format", choices=("table", "json", "markdown", "html", "prometheus",
                                          "npd"), default="table",
                     help="prometheus: node_exporter's textfile format; npd: Kubernetes "
                     "node-problem-detector's plugin protocol (one node, one line: exit 1 for "
                     "a health problem, 2 when the node could not be judged, else 0)")
    cmd.add_argument("--npd-include-tuning", action="store_true",
                     help="npd format: a tuning preference not met is a problem too (exit 1)")
    cmd.add_argument("--output", type=Path, metavar="FILE",
                     help="write the report to FILE (prometheus: replaced in one rename)")
    cmd.add_argument("--details", action="store_true",
                     help="fleet table: also list every host's checks")
    cmd.add_argument("--record", action="store_true",
                     help="keep each host's failing checks in the ledger, for 'exemplar-tune "
                     "offenders' (and, in prometheus format, the repeat counts)")
    cmd.add_argument("--ledger", type=Path, help="SQLite ledger (default in the state dir)")
    cmd.add_argument("--dcgm-level", type=int, choices=(1, 2, 3, 4), metavar="N",
                     help="also run 'dcgmi diag -r N -j' on every host (gpu.dcgm-diag): 1 takes "
                     "seconds, 2 about 2 minutes, 3 about 15, 4 an hour or more (NVIDIA's "
                     "dcgmi-diag reference); default: not run. A --sysroot reads a captured "
                     ".exemplar/commands/dcgmi-diag.json instead")
    cmd.add_argument("--counter-window", type=float, default=0.0, metavar="SECONDS",
                     help="read the InfiniBand/RoCE error counters twice, this long apart, and "
                     "judge what they gained (fabric.ib-errors); default 0: their count since "
                     "they were last cleared")
    cmd.set_defaults(func=cmd_preflight)
    add_prolog_option(cmd)


def cmd_preflight(args: argparse.Namespace) -> int:
    """``exemplar-tune preflight``."""
    check_layers(args.layer)
    if args.counter_window < 0:
        raise UserError(f"--counter-window {args.counter_window:g}: seconds, 0 or more")
    hosts, missing = collect_facts(args.sysroot, facts_runner(args), None, args.counter_window)
    profiles = host_profiles(args.profile, hosts)
    extras = {"container": probe_container(args.launcher) if args.launcher else None,
              "results": _read_results(args.results) if args.results else None}
    if args.dcgm_level:
        found = dcgm_results(args, hosts)
        for host, facts in hosts.items():
            facts.setdefault("gpu", {})["dcgm_diag"] = found.get(host)
    for facts in hosts.values():
        if extras["container"] is not None:
            facts["runtime"]["container"] = extras["container"]
        if extras["results"] is not None:
            facts["workload"]["results"] = extras["results"]
    doc = preflight_hosts(hosts, profiles, args.layer, args.stop_at_first_failing_layer, missing,
                          Target(args.inventory, args.sysroot, args.profile))
    if args.record:
        _record(doc, args.ledger, next(iter(profiles.values()), ({}, ""))[0])
    if args.format == "npd":
        status, message = npd_result(doc, args.npd_include_tuning)
        print(message)
        return status
    _emit(doc, args)
    return exit_status(doc)


def dcgm_results(args: argparse.Namespace, hosts: dict[str, dict]) -> dict[str, dict]:
    """Each host's ``dcgmi diag -r N -j`` results (:func:`exemplar_tune.dcgm.from_output`):
    run there through Ansible, or read from a sysroot's capture."""
    level = args.dcgm_level
    if args.sysroot:
        capture = Path(args.sysroot) / CAPTURE
        text = capture.read_text(errors="replace") if capture.is_file() else ""
        result = from_output(level, text, "" if text else f"{CAPTURE} not captured", None)
        return dict.fromkeys(hosts, result)
    say(f"preflight: dcgmi diag -r {level} on {len(hosts)} host(s) ({LEVEL_TIME[level]}) ...")
    outcome = facts_runner(args).module(
        "ansible.builtin.command", {"argv": ["dcgmi", "diag", "-r", str(level), "-j"]})
    found = {}
    for host, result in outcome.hosts.items():
        res = result.tasks[-1]["result"] if result.tasks else {}
        if res.get("msg") == "Error executing command." and not res.get("stdout"):
            found[host] = {"absent": "dcgmi not installed (no such program on the host)"}
        else:
            found[host] = from_output(level, str(res.get("stdout", "")),
                                      str(res.get("stderr", "") or res.get("msg", "")),
                                      res.get("rc"))
    return found


def _record(doc: dict, ledger_path: Path | None, profile: dict) -> None:
    """Keep the hosts' failing checks in the ledger; add each host's repeat counts
    (``repeat_failures``) and the repeat offenders (``repeat_offenders``) to ``doc``."""
    rule = thresholds(profile)
    with Ledger(ledger_path) as ledger:
        ledger.record_preflight({host: (data["profile"], [r["id"] for r in data["results"]
                                                          if r["status"] == FAIL])
                                 for host, data in doc["hosts"].items()
                                 if not data["unreadable"]})  # its failures judge nothing
        doc["repeat_failures"] = repeat_failures(ledger, rule, sorted(doc["hosts"]))
    doc["repeat_offenders"] = {host: sorted(c for c, n in checks.items()
                                            if n >= rule["failures"])
                               for host, checks in doc["repeat_failures"].items()}


OFFENDERS_EPILOG = """examples:
  exemplar-tune preflight -i hosts.yml --record          (each run: from a timer or a prolog)
  exemplar-tune offenders                                 3 failures of the last 5 in 7 days
  exemplar-tune offenders --failures 2 --runs 3 --format json

A host is a repeat offender for a check when it failed that check in at least FAILURES of its
last RUNS recorded preflights within DAYS days. Only health checks count (a broken or
degrading node); --include-tuning counts tuning preferences too. The thresholds come from the
options, else the profile's 'offenders' settings, else 3 of 5 in 7 days. Exit 1 when there is
an offender.
"""


def _add_offenders(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("offenders", help=SUMMARIES["offenders"],
                         description="List the hosts that failed the same preflight check again "
                         "and again (from 'preflight --record').", epilog=OFFENDERS_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("--failures", type=int, metavar="N", help="failures that make an offender")
    cmd.add_argument("--runs", type=int, metavar="M", help="of a host's last M recorded runs")
    cmd.add_argument("--days", type=float, metavar="D", help="within the last D days")
    cmd.add_argument("--profile", metavar="NAME|FILE",
                     help="read the thresholds from this profile's 'offenders' settings")
    cmd.add_argument("--ledger", type=Path, help="SQLite ledger (default in the state dir)")
    cmd.add_argument("--include-tuning", action="store_true",
                     help="also count failing tuning checks (default: health checks only)")
    cmd.add_argument("--format", choices=("table", "json"), default="table",
                     help="output format (default table)")
    cmd.set_defaults(func=cmd_offenders)


def cmd_offenders(args: argparse.Namespace) -> int:
    """``exemplar-tune offenders``."""
    rule = thresholds(load_profile(args.profile) if args.profile else None,
                      failures=args.failures, runs=args.runs, days=args.days)
    try:
        with Ledger(args.ledger, read_only=True) as ledger:
            found = offenders(ledger, rule, _classes(args.include_tuning))
    except NoLedger:
        found = []
    classes = _classes(args.include_tuning)
    if args.format == "json":
        print(json.dumps({"schema_version": 1, "rule": rule, "classes": list(classes),
                          "offenders": found}, indent=2))
    elif not found:
        print(f"no repeat offender ({rule['failures']:g} failures of the last "
              f"{rule['runs']:g} recorded runs in {rule['days']:g} days; "
              f"{' and '.join(classes)} checks)")
    else:
        print(join_lines(f"{group['check']:<32} {group['class']:<7} {group['failures']}/"
                         f"{group['runs']} runs  {group['count']} host(s)  {group['hostlist']}"
                         for group in found))
    return 1 if found else 0


def _classes(include_tuning: bool) -> tuple[str, ...]:
    return (HEALTH, TUNING) if include_tuning else (HEALTH,)


def _read_results(path: Path) -> dict:
    try:
        data = json.loads(read_input(path, "results"))
    except ValueError as exc:
        raise UserError(f"results {path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("value"), (int, float))
            for v in data.values()):
        raise UserError(f'results {path}: expected {{"SHAPE": {{"value": N, "unit": "..."}}}}')
    return data


def _emit(doc: dict, args: argparse.Namespace) -> None:
    stream_colour = args.output is None and use_colour()
    text = {"json": lambda: json.dumps(checked(doc, "preflight"), indent=2),
            "markdown": lambda: markdown(doc),
            "html": lambda: html_report(doc),
            "table": lambda: table(doc, stream_colour, args.details),
            "prometheus": lambda: preflight_text(doc)}[args.format]()
    if args.output is None:  # the table's colours pass the guard: its values are escaped
        print(text, end="" if text.endswith("\n") else "\n",
              file=raw(sys.stdout) if stream_colour and args.format == "table" else sys.stdout)
        return
    if args.format == "prometheus":
        write_atomically(args.output, text)
        return
    try:
        output_file(args.output).write_text(text + ("" if text.endswith("\n") else "\n"))
    except OSError as exc:
        raise UserError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(escape(f"wrote {args.output}"))
