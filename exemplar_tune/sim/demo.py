"""``exemplar-tune demo``: the whole product on a simulated cluster, in under two minutes.

Builds a simulated cluster (default: scenario ``gb300-exemplar-gap``, 4 hosts), runs the
preflight, tunes every layer with reboots allowed (the simulated hosts boot in an instant) and
writes the report. Everything, the ledger and Ansible's temporary files included, stays inside
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

from exemplar_tune.errors import EXIT_OK, UserError
from exemplar_tune.sim.cluster import create_cluster
from exemplar_tune.sim.model import shipped_scenarios

DEMO_EPILOG = """examples:
  exemplar-tune demo                         build, preflight, tune, report; then clean up
  exemplar-tune demo --keep /tmp/demo        keep the cluster, ledger and report.html
  exemplar-tune demo --scenario healthy      nothing to fix: tune keeps nothing

The same seed gives the same decisions. The pieces: exemplar-tune sim --help.
"""


def add_demo_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``demo``."""
    cmd = sub.add_parser("demo", help="see it all on a simulated cluster (under 2 minutes)",
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
    try:
        return _demo(directory, args)
    finally:
        if args.keep is None:
            shutil.rmtree(directory.parent, ignore_errors=True)


def _demo(directory: Path, args: argparse.Namespace) -> int:
    from exemplar_tune.cli import build_parser  # the demo drives the real commands

    start = time.monotonic()
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
    steps = [
        ("preflight", ["preflight", *common]),
        ("tune (every layer, reboots allowed)", ["tune", *common, "--bench",
                                                 str(directory / "bench.yaml"),
                                                 "--allow-reboot", *ledger]),
        ("report", ["report", "latest", "--format", "html", "--output",
                    str(directory / "report.html"), *ledger]),
        ("report", ["report", "latest", "--output", str(directory / "report.md"), *ledger]),
    ]
    parser = build_parser()
    with _environment({"EXEMPLAR_TUNE_STATE_DIR": str(state),
                       "ANSIBLE_HOME": str(state / "ansible"),
                       "ANSIBLE_REMOTE_TMP": str(state / "ansible" / "tmp")}):
        for title, argv in steps:
            print(f"\n== {title}: exemplar-tune {' '.join(argv)}", flush=True)
            command = parser.parse_args(argv)
            status = command.func(command)
            if title.startswith("tune") and status != EXIT_OK:
                print(f"\n== tune did not finish cleanly (exit {status}): see above")
                return status
    print(f"\n== done in {time.monotonic() - start:.0f} s")
    print((directory / "report.md").read_text())
    if args.keep:
        print(f"report: {directory / 'report.html'} (and report.md); ledger: "
              f"{state / 'ledger.sqlite3'}")
    else:
        print("(the cluster is removed now; --keep DIR keeps it and the HTML report)")
    return EXIT_OK
