"""The ``exemplar-tune`` command line: parsing, dispatch, errors and exit codes.

Exit codes (stable, for scripts, Slurm prologs and CI gates):
  0  success, nothing to report
  1  findings: failing checks, drift, or hosts that could not be reached
  2  usage or input error (bad option, unknown layer, unreadable bundle ...)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import select
import sys
from pathlib import Path

import yaml
from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYER_NAMES,
    LAYERS,
    ROLE_LAYERS,
    UnknownLayer,
)

from exemplar_tune import __version__
from exemplar_tune.ansible_run import AnsibleRun, local_inventory
from exemplar_tune.diagnose import DiagnoseError, compare_reports, diagnose_paths
from exemplar_tune.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_FINDINGS,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    UserError,
    crash_report,
)
from exemplar_tune.experiments import (
    add_loop_options,
    cmd_history,
    cmd_report,
    cmd_resume,
    cmd_show,
    cmd_tune,
    run_experiment,
)
from exemplar_tune.facts import collect_facts
from exemplar_tune.facts_table import facts_table
from exemplar_tune.inputs import read_input
from exemplar_tune.ledger import Ledger
from exemplar_tune.ledger import default_path as default_ledger_path
from exemplar_tune.preflight import exit_status, preflight_hosts
from exemplar_tune.preflight_report import html_report, markdown, table, use_colour
from exemplar_tune.probe import probe_container
from exemplar_tune.profile import AUTO, load_profile, profile_for_hosts, shipped_profiles
from exemplar_tune.progress import set_quiet
from exemplar_tune.prometheus import preflight_text, write_atomically
from exemplar_tune.remediate import cmd_abandon, cmd_apply, cmd_audit, cmd_restore
from exemplar_tune.signals import Interrupted, StoppedAtOnce
from exemplar_tune.sim.commands import add_sim_parsers
from exemplar_tune.slurm.cli import add_prolog_option, add_slurm
from exemplar_tune.snapshot import take_snapshot
from exemplar_tune.sweep import add_sweep_options

LAYER_HELP = "; ".join(f"{layer.name} = {layer.title}" for layer in LAYERS)

FACTS_EPILOG = """examples:
  exemplar-tune facts                          all layers of this host, as a table
  exemplar-tune facts --layer cpu --layer gpu --format json
  exemplar-tune facts --sysroot node07.tar.gz  a host captured with 'exemplar-tune snapshot'
  exemplar-tune facts -i inventory.yml --limit 'gpu[01:16]' --format json

JSON output: one top-level key per layer; each layer also has 'sources' (the file or command
every fact came from) and 'errors' (facts that could not be read). With -i the output is
{"hosts": {HOST: {LAYER: ...}}, "unreachable": {HOST: REASON}}.
"""

SNAPSHOT_EPILOG = """examples:
  exemplar-tune snapshot -o node07.tar.gz
  exemplar-tune facts --sysroot node07.tar.gz

The archive holds only the files the fact readers read (sysfs/procfs entries, NCCL, enroot and
tuned configuration ...), the outputs of nvidia-smi -q -x, the kernel log and systemctl show
for the housekeeping slices (under .exemplar/commands/), the NCCL_/ENROOT_ environment
variables and a manifest (.exemplar/manifest.json). Run it as root to include the kernel log
and /dev/cpu_dma_latency.
"""


PREFLIGHT_EPILOG = """examples:
  exemplar-tune preflight                               this host, profile chosen by its arch
  exemplar-tune preflight --profile gb200-grace --stop-at-first-failing-layer
  exemplar-tune preflight --sysroot node07.tar.gz --format html --output node07.html
  exemplar-tune preflight -i hosts.yml --format json --output fleet.json
  exemplar-tune preflight --launcher "enroot start --rw pytorch"   check inside the container

Checks run layer by layer (gpu, vm, cpu, runtime, fabric, workload); every result has a status
(pass, warn, fail, skip), what was observed and expected, the evidence (file or command), the
risk and the fix (the role knob, or the manual BIOS/hypervisor action). With several hosts the
table prints one line per failing or warning check and finding, the hosts with that finding
folded into a hostlist (gpu[001-112,115]), failing first, then by severity and host count;
--details adds every host's checks. JSON keeps every host's results.

exit codes: 0 no failing check, 1 a check failed or a host was unreachable, 2 usage/input error.
"""


AUDIT_EPILOG = """examples:
  exemplar-tune audit -i hosts.yml --profile h100-x86
  exemplar-tune audit -i hosts.yml --layer cpu --diff        every changed file in full
  exemplar-tune audit -i hosts.yml --format json > drift.json
  exemplar-tune audit -i hosts.yml --format prometheus --output /var/lib/node_exporter/exemplar.prom

One line per knob and change, the hosts with the same change folded into a hostlist
(gpu[001-112,115]), most hosts first, with the lines that would change; --details adds a line
per host, --diff shows unified diffs. Unreachable and failed hosts are folded by reason.
exit codes: 0 no drift, 1 drift or a host failed or was unreachable, 2 usage/input error.
"""


DIAGNOSE_EPILOG = """examples:
  exemplar-tune diagnose turbostat.txt numastat.txt perf-report.txt
  exemplar-tune diagnose megatron.log --format json
  exemplar-tune diagnose nvidia-smi-q.txt              pasted 'nvidia-smi -q' (or -q -x XML)
  exemplar-tune diagnose before.txt after.txt --compare   two nccl-tests runs, ratio per size
  exemplar-tune diagnose stats.txt report.sqlite           nsys stats output, nsys export
  exemplar-tune diagnose a.sqlite b.sqlite --compare       NCCL kernel time per collective

Recognised from the content: turbostat, numastat (default and -p), perf report/top,
step-time logs (Megatron-LM, NeMo/Lightning, torchtitan, DeepSpeed, HF Trainer, litgpt, tqdm,
one number per line), nccl-tests, NCCL_DEBUG=INFO logs,
nvidia-smi -q text (whole or in part, as pasted into a ticket) and -q -x XML,
nsys stats reports (text, --format csv) and nsys SQLite exports (--type sqlite).
Every finding names the layer and the preflight check it bears on.
exit codes: 0 nothing failing, 1 a failing finding, 2 unreadable or unrecognised input.
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="exemplar-tune",
        description="Find and close the performance gap of AI-training GPU clusters, one layer "
        f"at a time. Layers, in preflight order: {LAYER_HELP}.",
        epilog="exit codes: 0 ok, 1 findings or unreachable hosts, 2 usage or input error, "
        "70 internal error (the traceback file is named), 130/143 stopped by SIGINT/SIGTERM",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_facts(sub)
    _add_preflight(sub)
    _add_apply(sub)
    _add_tune(sub)
    _add_sweep(sub)
    _add_profile(sub)
    _add_restore(sub)
    _add_resume(sub)
    _add_audit(sub)
    _add_history(sub)
    _add_diagnose(sub)
    _add_snapshot(sub)
    add_sim_parsers(sub, build_parser)  # the demo drives the real commands
    add_slurm(sub)
    _add_quiet(sub)
    return parser


QUIET_HELP = ("no progress on stderr (bars on a terminal, a line per step elsewhere); "
              "results and errors still print")


def _add_quiet(sub: argparse._SubParsersAction) -> None:
    """``--quiet`` after any command too (it only sets what the global option sets)."""
    for cmd in {id(p): p for p in sub.choices.values()}.values():
        cmd.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                         help=QUIET_HELP)
        for action in cmd._subparsers._group_actions if cmd._subparsers else ():
            _add_quiet(action)


def _add_facts(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("facts", help="print the facts of each layer",
                         description="Gather the per-layer facts of this host, of a captured "
                         "host (--sysroot) or of an inventory (-i).", epilog=FACTS_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_target_options(cmd)
    cmd.add_argument("--layer", action="append", metavar="LAYER",
                     help=f"only this layer (repeatable): {', '.join(LAYER_NAMES)}")
    cmd.add_argument("--format", choices=("table", "json"), default="table")
    cmd.add_argument("--sources", action="store_true",
                     help="table format: also show where each fact came from")
    cmd.set_defaults(func=cmd_facts)


def _add_preflight(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("preflight", help="check every layer against a profile",
                         description="Run the ordered preflight: GPU health, Grace/VM "
                         "readiness, CPU power and placement, runtime topology, fabric, "
                         "workload.", epilog=PREFLIGHT_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_target_options(cmd)
    cmd.add_argument("--profile", default="auto", metavar="NAME|FILE",
                     help=f"expectations: {', '.join(shipped_profiles())}, a YAML file, or "
                     "'auto' (gb200-grace on aarch64, else h100-x86; the default)")
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
    cmd.add_argument("--format", choices=("table", "json", "markdown", "html", "prometheus"),
                     default="table", help="prometheus: node_exporter's textfile format")
    cmd.add_argument("--output", type=Path, metavar="FILE",
                     help="write the report to FILE (prometheus: replaced in one rename)")
    cmd.add_argument("--details", action="store_true",
                     help="fleet table: also list every host's checks")
    cmd.set_defaults(func=cmd_preflight)
    add_prolog_option(cmd)


APPLY_EPILOG = """examples:
  exemplar-tune apply --layer cpu --check                 what would change on this host
  exemplar-tune apply --layer cpu -i hosts.yml --limit 'gpu[01:04]' --profile site.yaml
  exemplar-tune apply --layer runtime --sysroot /srv/node07 --format json
  exemplar-tune restore --run latest

Each change is recorded in the host's journal (/var/lib/exemplar-tune/journal/RUN_ID.json)
before it is made; 'restore' puts back exactly those bytes. Changes that only take effect
after a reboot (kernel arguments) are reported as such, never as done.
"""


PROFILE_HELP = ("targets: a shipped profile, a YAML file, or 'auto' (the default: each host "
                "gets the shipped profile for its architecture, as preflight chooses)")


def _add_apply(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("apply", help="apply one layer's fixes (journaled, restorable)",
                         description="Move hosts to the profile's target for one layer, "
                         "with a journal per run.", epilog=APPLY_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_change_target(cmd)
    cmd.add_argument("--layer", required=True, choices=ROLE_LAYERS, help="the layer to apply")
    cmd.add_argument("--profile", default=AUTO, metavar="NAME|FILE", help=PROFILE_HELP)
    cmd.add_argument("--check", action="store_true", help="show what would change; write nothing")
    cmd.add_argument("--diff", action="store_true",
                     help="table format: show each changed file or value as a unified diff")
    cmd.add_argument("--run-id", metavar="ID", help="name the run (default: time + random)")
    cmd.add_argument("--bench", type=Path, metavar="FILE.yaml",
                     help="measure: baseline, apply, re-benchmark, keep only if it helps")
    add_loop_options(cmd)
    cmd.set_defaults(func=lambda a: run_experiment(a, [a.layer], "apply") if a.bench
                     else cmd_apply(a))


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
    cmd = sub.add_parser("tune", help="walk every layer: measure, keep or restore",
                         description="The measured loop over every layer in preflight order.",
                         epilog=TUNE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_change_target(cmd)
    cmd.add_argument("--bench", type=Path, required=True, metavar="FILE.yaml",
                     help="the workload shapes to measure (benchmark file: command, parser)")
    cmd.add_argument("--profile", default=AUTO, metavar="NAME|FILE", help=PROFILE_HELP)
    cmd.add_argument("--layer", action="append", choices=ROLE_LAYERS, metavar="LAYER",
                     help="only these layers (repeatable)")
    cmd.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    add_loop_options(cmd)
    cmd.set_defaults(func=cmd_tune)


SWEEP_EPILOG = """examples:
  exemplar-tune sweep -i hosts.yml --bench nccl.yaml --knob NCCL_IB_QPS_PER_CONNECTION=1,2,4,8
  exemplar-tune sweep ... --sizes-from train-coll.log --validate train.yaml
  exemplar-tune sweep ... --knob NCCL_IB_QPS_PER_CONNECTION=2,4 --knob NCCL_IB_SPLIT_DATA_ON_QPS=0,1
  exemplar-tune sweep ... --dry-run                       arms, rounds and the budget
  exemplar-tune sweep ... --write-profile fabric-cx8.yaml a profile fragment for this fabric

The hosts' current value is the incumbent; every candidate is applied through the fabric
layer's knob (journaled), measured with the nccl-tests shapes in rounds (a rotating order,
so drift falls on every arm alike), and dropped when clearly worse. A candidate is chosen
only when it beats the incumbent clear of zero, the error controlled over all candidates
(Holm) and all looks (a group-sequential boundary); otherwise the incumbent stays and the
hosts are restored byte for byte. 'exemplar-tune rollback --run EXP' undoes a sweep.
Try it: exemplar-tune sim create /tmp/c; see README "Fabric sweep".
"""


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("sweep", help="choose NCCL fabric settings by measurement",
                         description="Measure candidate values of NCCL settings on the target "
                         "fabric at the workload's message sizes and keep the best, if any "
                         "beats the hosts' current value.", epilog=SWEEP_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_change_target(cmd)
    add_sweep_options(cmd)


PROFILE_EPILOG = """examples:
  exemplar-tune profile list                    the shipped profiles
  exemplar-tune profile show h100-x86           a shipped profile
  exemplar-tune profile show site.yaml          a site profile, its 'extends' chain merged

A site profile holds only what differs from the one it extends:

  extends: h100-x86            # a shipped name, or a path relative to this file
  cpu: {governor: performance}
  fabric: {nccl: {NCCL_IB_QPS_PER_CONNECTION: "2"}}

Mappings merge key by key, lists and values are replaced, null deletes a key the parent has.
"""


def _add_profile(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("profile", help="list profiles; show one merged and validated",
                         description="The shipped profiles, and any profile as the commands "
                         "see it: its extends chain merged, validated.", epilog=PROFILE_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = cmd.add_subparsers(dest="step", required=True, metavar="list|show")
    steps.add_parser("list", help="the shipped profiles").set_defaults(func=cmd_profile_list)
    show = steps.add_parser("show", help="one profile, merged and validated")
    show.add_argument("profile", metavar="NAME|FILE")
    show.add_argument("--format", choices=("yaml", "json"), default="yaml")
    show.set_defaults(func=cmd_profile_show)


def cmd_profile_list(args: argparse.Namespace) -> int:
    """``exemplar-tune profile list``."""
    del args
    for name in shipped_profiles():
        print(name)
    return EXIT_OK


def cmd_profile_show(args: argparse.Namespace) -> int:
    """``exemplar-tune profile show``: the merged, validated profile."""
    profile = load_profile(args.profile)
    if args.format == "json":
        print(json.dumps(profile, indent=2))
    else:
        print(yaml.safe_dump(profile, sort_keys=False), end="")
    return EXIT_OK


def _add_resume(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("resume", help="continue an experiment whose controller died",
                         description="Continue an interrupted tune/apply experiment: the layer "
                         "it was measuring is restored from the host journals and measured "
                         "again, decided layers stay as they are, the remaining layers follow.")
    cmd.add_argument("--run", metavar="EXPERIMENT",
                     help="the experiment (default: the only one whose controller died)")
    cmd.add_argument("--allow-reboot", action="store_true", default=None,
                     help="allow reboots this time even if the experiment did not")
    cmd.add_argument("--ledger", type=Path)
    cmd.set_defaults(func=cmd_resume)


def _add_history(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("history", help="past experiments from the ledger",
                         description="The newest experiments in the ledger (tune, apply, "
                         "sweep), one per line: id, kind, status, start, profile.")
    cmd.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    cmd.add_argument("--format", choices=("table", "json"), default="table")
    cmd.add_argument("--ledger", type=Path)
    cmd.set_defaults(func=cmd_history)
    show = sub.add_parser("show", help="one experiment: layers, samples, decisions",
                          description="One experiment as the ledger holds it: its layers and "
                          "their status, the hosts changed, every benchmark run, the decisions "
                          "and the events. 'latest' is the newest experiment.")
    show.add_argument("experiment", metavar="EXPERIMENT|latest")
    show.add_argument("--format", choices=("table", "json"), default="table")
    show.add_argument("--ledger", type=Path)
    show.set_defaults(func=cmd_show)
    report = sub.add_parser("report", help="an experiment as Markdown or HTML",
                            description="Render one experiment: decisions with their numbers, "
                            "a waterfall of the gap closed per layer, step-time distributions.")
    report.add_argument("experiment", metavar="EXPERIMENT|latest")
    report.add_argument("--format", choices=("markdown", "html"), default="markdown")
    report.add_argument("--output", type=Path, metavar="FILE")
    report.add_argument("--ledger", type=Path)
    report.set_defaults(func=cmd_report)


RESTORE_EPILOG = """examples:
  exemplar-tune rollback --run latest                   the newest experiment, every layer
  exemplar-tune restore --run 20261202T141901-8d17      one experiment or apply run by id
  exemplar-tune restore --run EXP -i hosts.yml --limit node07   one host that came back

Each host's journal holds the exact previous bytes, owner, group and mode of what changed;
side effects (bootloader rebuilds, daemon reloads) are undone too. Hosts whose journal is
already restored are left alone; a host the ledger saw change whose journal is missing fails.
"""


def _add_restore(sub: argparse._SubParsersAction) -> None:
    """``restore`` and its synonym ``rollback`` (the word used for a killed experiment)."""
    for name, summary in (("restore", "put back what a run changed"),
                          ("rollback", "the same as restore: every layer of an experiment")):
        cmd = sub.add_parser(name, help=summary,
                             description="Restore every host a run touched (also one whose "
                             "controller died), newest change first, from the host journals.",
                             epilog=RESTORE_EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        _add_change_target(cmd)
        cmd.add_argument("--run", required=True, metavar="EXPERIMENT|latest")
        cmd.add_argument("--ledger", type=Path)
        cmd.set_defaults(func=cmd_restore)
    cmd = sub.add_parser("abandon", help="close an experiment that cannot be rolled back",
                         description="Close an unfinished experiment whose hosts are gone for "
                         "good (rollback cannot reach them): it is marked failed, with who "
                         "abandoned it, and no longer reported as unfinished. Nothing on any host "
                         "changes; a host that comes back keeps its journal, and 'rollback --run "
                         "EXPERIMENT' still restores it then.")
    cmd.add_argument("--run", required=True, metavar="EXPERIMENT")
    cmd.add_argument("--yes", action="store_true",
                     help="do not ask (needed when stdin is not a terminal)")
    cmd.add_argument("--ledger", type=Path)
    cmd.set_defaults(func=cmd_abandon)


def _add_audit(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("audit", help="drift report: the roles in check mode with diff",
                         description="Compare hosts with the profile's targets, knob by knob, "
                         "without changing anything. Exit 1 on drift.", epilog=AUDIT_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_change_target(cmd, ("table", "json", "prometheus"))
    cmd.add_argument("--diff", action="store_true",
                     help="table format: every changed file as a full unified diff")
    cmd.add_argument("--details", action="store_true",
                     help="table format: add one line per host (sorted) naming its drift")
    cmd.add_argument("--output", type=Path, metavar="FILE",
                     help="prometheus: write the metrics to FILE, replaced in one rename")
    cmd.add_argument("--layer", action="append", choices=ROLE_LAYERS, metavar="LAYER",
                     help=f"only these layers (repeatable): {', '.join(ROLE_LAYERS)}")
    cmd.add_argument("--profile", default=AUTO, metavar="NAME|FILE", help=PROFILE_HELP)
    cmd.set_defaults(func=cmd_audit)


def _add_change_target(cmd: argparse.ArgumentParser,
                       formats: tuple[str, ...] = ("table", "json")) -> None:
    target = cmd.add_mutually_exclusive_group()
    target.add_argument("--sysroot", metavar="DIR",
                        help="work inside DIR (a directory mirroring /) as a one-host inventory")
    target.add_argument("-i", "--inventory", metavar="INVENTORY", help="Ansible inventory")
    cmd.add_argument("--limit", metavar="PATTERN",
                     help="only these inventory hosts: an Ansible pattern or a hostlist "
                     "('node[01-04],!node03', 'gpu*', 'rack1')")
    cmd.add_argument("--forks", type=int, default=10, metavar="N",
                     help="hosts worked on at once (default 10)")
    cmd.add_argument("--timeout", type=float, default=1800, metavar="SECONDS",
                     help="give up on an Ansible run after this long (default 1800)")
    cmd.add_argument("--format", choices=formats, default="table")


def _add_diagnose(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("diagnose", help="analyse captured signals (turbostat, perf, logs ...)",
                         description="Analyse files captured on a node or from a job and map "
                         "what they show to layers and checks.", epilog=DIAGNOSE_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("files", nargs="+", metavar="FILE")
    cmd.add_argument("--format", choices=("table", "json"), default="table")
    cmd.add_argument("--compare", action="store_true",
                     help="with two nccl-tests files: busbw ratio per size (second / first); "
                     "with two nsys reports: mean NCCL kernel time per collective")
    cmd.set_defaults(func=cmd_diagnose)


def _add_snapshot(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("snapshot", help="capture this host into one archive",
                         description="Capture what the fact readers need from this host into "
                         "one .tar.gz, to be read later with --sysroot.", epilog=SNAPSHOT_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("-o", "--output", required=True, type=Path, metavar="FILE.tar.gz")
    cmd.set_defaults(func=cmd_snapshot)


def _add_target_options(cmd: argparse.ArgumentParser) -> None:
    target = cmd.add_mutually_exclusive_group()
    target.add_argument("--sysroot", metavar="PATH",
                        help="read a captured host: a directory mirroring / or a snapshot archive")
    target.add_argument("-i", "--inventory", metavar="INVENTORY",
                        help="Ansible inventory (file, directory or host list); default: this host")
    cmd.add_argument("--limit", metavar="PATTERN",
                     help="only these hosts of -i: an Ansible pattern or a hostlist "
                     "('node[01-04],!node03')")
    cmd.add_argument("--forks", type=int, default=10, metavar="N",
                     help="hosts worked on in parallel (default 10)")
    cmd.add_argument("--timeout", type=float, default=600, metavar="SECONDS",
                     help="give up on the whole Ansible run after this long (default 600)")


def _check_layers(names: list[str] | None) -> None:
    for name in names or []:
        if name not in LAYER_NAMES:
            raise UnknownLayer(f"unknown layer {name!r}; choose from {', '.join(LAYER_NAMES)}")


def _runner(args: argparse.Namespace) -> AnsibleRun:
    return AnsibleRun(args.inventory or local_inventory(), limit=args.limit, forks=args.forks,
                      timeout=args.timeout)


def cmd_facts(args: argparse.Namespace) -> int:
    """``exemplar-tune facts``."""
    _check_layers(args.layer)
    hosts, missing = collect_facts(args.sysroot, _runner(args), args.layer)
    if args.format == "json":
        single = args.inventory is None and len(hosts) == 1 and not missing
        doc = next(iter(hosts.values())) if single else {"hosts": hosts, "unreachable": missing}
        print(json.dumps(doc, indent=2))
    else:
        for host, facts in hosts.items():
            print(f"### {host}\n{facts_table(facts, args.sources)}")
        for host, reason in missing.items():
            print(f"### {host}: NOT GATHERED: {reason}")
    return EXIT_FINDINGS if missing else EXIT_OK


def cmd_preflight(args: argparse.Namespace) -> int:
    """``exemplar-tune preflight``."""
    _check_layers(args.layer)
    hosts, missing = collect_facts(args.sysroot, _runner(args), None)
    profile = load_profile(_profile_name(args.profile, hosts))
    extras = {"container": probe_container(args.launcher) if args.launcher else None,
              "results": _read_results(args.results) if args.results else None}
    for facts in hosts.values():
        if extras["container"] is not None:
            facts["runtime"]["container"] = extras["container"]
        if extras["results"] is not None:
            facts["workload"]["results"] = extras["results"]
    doc = preflight_hosts(hosts, profile, args.layer, args.stop_at_first_failing_layer, missing)
    _emit(doc, args)
    return exit_status(doc)


def _profile_name(requested: str, hosts: dict) -> str:
    return profile_for_hosts(requested, hosts.values())


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
    text = {"json": lambda: json.dumps(doc, indent=2), "markdown": lambda: markdown(doc),
            "html": lambda: html_report(doc),
            "table": lambda: table(doc, stream_colour, args.details),
            "prometheus": lambda: preflight_text(doc)}[args.format]()
    if args.output is None:
        print(text, end="" if text.endswith("\n") else "\n")
        return
    if args.format == "prometheus":
        write_atomically(args.output, text)
        return
    try:
        args.output.write_text(text + ("" if text.endswith("\n") else "\n"))
    except OSError as exc:
        raise UserError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"wrote {args.output}")


def cmd_diagnose(args: argparse.Namespace) -> int:
    """``exemplar-tune diagnose``."""
    reports, errors = diagnose_paths(args.files)
    if not reports:
        raise UserError(errors[0] if len(errors) == 1 else
                        f"none of the {len(errors)} files could be read: {'; '.join(errors)}")
    for error in errors:
        print(f"exemplar-tune: skipped {error}", file=sys.stderr)
    try:
        comparison = compare_reports(reports) if args.compare else None
    except DiagnoseError as exc:
        raise UserError(str(exc)) from None
    docs = [r.to_dict() for r in reports]
    if args.format == "json":
        print(json.dumps({"reports": docs, "comparison": comparison, "skipped": errors},
                         indent=2))
    else:
        print(_diagnose_table(docs, comparison) + "".join(f"\n== skipped: {e}" for e in errors))
    failing = any(d["status"] == "fail" for d in docs)
    return EXIT_FINDINGS if failing or errors else EXIT_OK


def _diagnose_table(docs: list[dict], comparison: dict | None) -> str:
    lines = []
    for doc in docs:
        lines.append(f"== {doc['source']} ({doc['kind']}): {doc['status'].upper()}")
        for f in doc["findings"]:
            lines.append(f"  {f['status']:<4}  {f['check_id']}: {f['message']}")
            lines += [f"        evidence {e}" for e in f["evidence"]]
    lines += [f"== warning: {w}" for w in (comparison or {}).get("warnings", [])]
    for coll in (comparison or {}).get("collectives", []):
        lines.append(f"== {coll['text']}" if "text" in coll else f"== {coll['collective']}: "
                     f"busbw ratio (geometric mean) {coll['geomean_ratio']}")
    return "\n".join(lines)


def cmd_snapshot(args: argparse.Namespace) -> int:
    """``exemplar-tune snapshot``."""
    manifest = take_snapshot(args.output)
    skipped = [name for name, c in manifest["commands"].items() if not c["captured"]]
    print(f"wrote {args.output}: {manifest['entries']} entries, "
          f"{len(manifest['commands']) - len(skipped)} command outputs"
          + (f" (not captured: {', '.join(skipped)})" if skipped else ""))
    return EXIT_OK


def _warn_unfinished(args: argparse.Namespace) -> None:
    """Point at experiments whose controller died, so nothing stays half-applied unnoticed."""
    path = getattr(args, "ledger", None) or default_ledger_path()
    quiet = ("rollback", "resume", "abandon", "history", "show", "report", "sim")
    if args.command in quiet or not Path(path).exists():
        return
    with Ledger(path) as ledger:
        for exp in ledger.unfinished():
            if exp.get("controller_alive") is False:
                print(f"exemplar-tune: experiment {exp['id']} did not finish (its controller "
                      f"died): 'exemplar-tune rollback --run {exp['id']}' restores it, "
                      f"'exemplar-tune resume --run {exp['id']}' continues it", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``exemplar-tune`` script: every outcome is one line and an exit code
    (``--help`` epilog), never a traceback."""
    parser = build_parser()
    args = parser.parse_args(argv)
    set_quiet(args.quiet)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        _warn_unfinished(args)
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except (UserError, UnknownLayer) as exc:
        _error(str(exc))
        return EXIT_USAGE
    except StoppedAtOnce as exc:
        _error(f"stopped at once ({exc}): hosts left as they were; 'exemplar-tune resume' "
               "continues, 'exemplar-tune rollback --run EXPERIMENT' restores")
        return exc.exit_code
    except Interrupted as exc:
        _error(f"interrupted ({exc})" + (f": {exc.note}" if exc.note else ""))
        return exc.exit_code
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError as exc:
        if not _stdout_closed():
            _error(f"internal error: {crash_report(exc)}")
            return EXIT_INTERNAL
        return EXIT_BROKEN_PIPE  # the reader went away (``| head``): no more output, no noise
    except Exception as exc:  # a bug: one line, the traceback in a file
        _error(f"internal error: {crash_report(exc)}")
        return EXIT_INTERNAL


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader went away (``poll`` reports an error on it); if
    so, stdout now points at /dev/null, so that the interpreter's last flush stays quiet."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        closed = any(event & select.POLLERR for _fd, event in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False
    if closed:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return closed


def _error(message: str) -> None:
    with contextlib.suppress(OSError):
        print(f"exemplar-tune: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
