"""``exemplar-tune demo``: the whole product on a simulated cluster, in two to three minutes.

Builds a simulated cluster (default: scenario ``gb300-exemplar-gap``, 4 hosts), runs the
preflight, tunes every layer but the fabric with reboots allowed (the simulated hosts boot in
an instant), writes the report, then chooses the fabric's QPS per connection by a sweep at the
training job's message sizes (from its simulated NCCL COLL log) and validates the winner on
the training shapes. Everything, the ledger and Ansible's temporary files included, stays inside
the cluster directory: a temporary one removed at the end, or ``--keep DIR``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ansible_collections.exemplar.tune.plugins.module_utils.layers import ROLE_LAYERS

from exemplar_tune.commands import SUMMARIES
from exemplar_tune.errors import EXIT_OK, UserError
from exemplar_tune.ledger import Ledger
from exemplar_tune.orchestration.experiments import print_gap
from exemplar_tune.progress import say, show_ansible_steps
from exemplar_tune.sim.cluster import create_cluster
from exemplar_tune.sim.coll_log import coll_log_lines
from exemplar_tune.sim.model import load_scenario, shipped_scenarios
from exemplar_tune.terminal import join_lines

SLOW_FLEET_SCENARIO = "h100-qps-incumbent"
SLOW_FLEET_HOSTS = 8
SLOW_HOST, SLOW_FAULT = "node05", "deep_cstate_disabled"
DEMO_EPILOG = """examples:
  exemplar-tune demo                         build, preflight, tune, report; then clean up
  exemplar-tune demo --keep /tmp/demo        keep the cluster, ledger and report.html
  exemplar-tune demo --scenario healthy      nothing to fix: tune keeps nothing

The same seed gives the same decisions. The pieces: exemplar-tune sim --help.
"""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``demo``, which runs the real commands as the command line's parser
    (``args.command_parser``) parses them."""
    cmd = sub.add_parser("demo", help=SUMMARIES["demo"],
                         description="Build a simulated GPU cluster, run preflight, tune every "
                         "layer and write the report.", epilog=DEMO_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("--keep", type=Path, metavar="DIR",
                     help="build in DIR (new or empty) and keep it; default: a temporary "
                     "directory, removed at the end")
    cmd.add_argument("--scenario", default="gb300-exemplar-gap", metavar="NAME|FILE",
                     help=f"{', '.join(shipped_scenarios())} or a scenario file")
    cmd.add_argument("--hosts", type=int, default=4, metavar="N", help="hosts (default 4)")
    cmd.add_argument("--seed", type=int, metavar="S", help="noise seed (scenario's default)")
    cmd.set_defaults(func=cmd_demo)


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def cmd_demo(args: argparse.Namespace) -> int:
    """``exemplar-tune demo``."""
    directory = args.keep or Path(tempfile.mkdtemp(prefix="exemplar-tune-demo-")) / "cluster"
    show_ansible_steps(False)  # the loop's steps on stderr, not every playbook task
    try:
        return _demo(directory, args)
    finally:
        show_ansible_steps(True)
        if args.keep is None:
            shutil.rmtree(directory.parent, ignore_errors=True)


def _demo(directory: Path, args: argparse.Namespace) -> int:
    start = time.monotonic()
    say(f"== creating the simulated cluster ({args.scenario}) in {directory} ...")
    try:
        info = create_cluster(directory, args.scenario, hosts=args.hosts, seed=args.seed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    print(f"== simulated cluster: scenario {info['scenario']}, {len(info['hosts'])} hosts, "
          f"seed {info['seed']} ({directory})", flush=True)
    state = directory / "state"
    common = ["-i", str(directory / "inventory.yml"), "--profile",
              str(directory / "profile.yaml")]
    ledger = ["--ledger", str(state / "ledger.sqlite3")]
    coll_log = directory / "coll.log"
    coll_log.write_text("".join(f"{line}\n" for line in coll_log_lines(
        load_scenario(directory / "scenario.yaml"), info["hosts"], "moe", 2)))
    layers = [arg for layer in ROLE_LAYERS if layer != "fabric" for arg in ("--layer", layer)]
    steps = [
        ("preflight", ["preflight", *common]),
        ("tune (every layer but the fabric, reboots allowed)",
         ["tune", *common, "--bench", str(directory / "bench.yaml"), *layers, "--allow-reboot",
          *ledger]),
        ("report", ["report", "latest", "--format", "html", "--output",
                    str(directory / "report.html"), *ledger]),
        ("report", ["report", "latest", "--output", str(directory / "report.md"), *ledger]),
        ("fabric: sweep QPS per connection at the training job's message sizes, then validate "
         "the winner on training", ["sweep", *common, "--bench", str(directory / "nccl.yaml"),
                                    "--knob", "NCCL_IB_QPS_PER_CONNECTION=1,2,4,8",
                                    "--sizes-from", str(coll_log), "--validate",
                                    str(directory / "bench.yaml"), *ledger]),
    ]
    parser = args.command_parser()
    with _environment({"EXEMPLAR_TUNE_STATE_DIR": str(state),
                       "ANSIBLE_HOME": str(state / "ansible"),
                       "ANSIBLE_REMOTE_TMP": str(state / "ansible" / "tmp"),
                       "EXEMPLAR_TUNE_BYTECODE_CACHE": str(state / "bytecode"),
                       "MPLCONFIGDIR": str(state / "matplotlib")}):
        for title, argv in steps:
            print(f"\n== {title}: exemplar-tune {' '.join(argv)}", flush=True)
            command = parser.parse_args(argv)
            command.ledger_removed_after = args.keep is None  # no hint that cannot work
            status = command.func(command)
            if title.startswith(("tune", "fabric")) and status != EXIT_OK:
                print(f"\n== {argv[0]} did not finish cleanly (exit {status}): see above")
                return status
        fleet = directory / "fleet"
        say(f"== creating a second simulated fleet ({SLOW_FLEET_HOSTS} hosts) in {fleet} ...")
        create_cluster(fleet, SLOW_FLEET_SCENARIO, hosts=SLOW_FLEET_HOSTS, seed=args.seed,
                       host_faults={SLOW_HOST: [SLOW_FAULT]})
        argv = ["slow-nodes", "-i", str(fleet / "inventory.yml")]
        print(f"\n== slow nodes: {SLOW_FLEET_HOSTS} hosts, {SLOW_HOST} made slow by a fact "
              f"({SLOW_FAULT}): exemplar-tune {' '.join(argv)}", flush=True)
        command = parser.parse_args(argv)
        command.func(command)  # exit 1: a slow host found, which is what this step shows
        sweep_report = directory / "sweep.html"
        command = parser.parse_args(["report", _latest_sweep(state), "--format", "html",
                                     "--output", str(sweep_report), *ledger])
        command.func(command)
    print(f"\n== done in {time.monotonic() - start:.0f} s")
    print((directory / "report.md").read_text())
    _fabric_summary(state)
    if args.keep:
        print(f"reports: {directory / 'report.html'} (and report.md), the sweep's "
              f"{directory / 'sweep.html'}; ledger: {state / 'ledger.sqlite3'}")
    else:
        print("(the cluster and its ledger are removed now; 'exemplar-tune demo --keep DIR' "
              "keeps them, with the HTML reports, for 'exemplar-tune show' and 'report')")
    return EXIT_OK


def _fabric_summary(state: Path) -> None:
    """The sweep's choice, its validation and the gap after it (the report above ends before
    the fabric)."""
    experiment = _latest_sweep(state)
    with Ledger(state / "ledger.sqlite3") as ledger:
        sweep = (ledger.show(experiment)["experiment"]["summary"] or {}).get("sweep") or {}
    validation = sweep.get("validation") or {}
    print(join_lines([f"## Fabric (sweep {experiment})", "",
                      f"Chosen: {sweep.get('chosen')}; on the training shapes: "
                      f"{validation.get('action', 'not validated')}."]))
    print_gap(validation.get("gap") or {})


def _latest_sweep(state: Path) -> str:
    """The id of the newest sweep in the demo's ledger."""
    with Ledger(state / "ledger.sqlite3") as ledger:
        return next(row["id"] for row in ledger.history(50) if row["kind"] == "sweep")
