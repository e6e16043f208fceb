#!/usr/bin/env python3
"""Wall time of ``facts``, ``preflight``, ``audit`` and ``apply`` per host, local and over real
SSH, against ``ping``.

For each inventory size it runs ``ansible all -m ping``, ``exemplar-tune facts`` (every
layer), ``exemplar-tune facts --differ`` (the same facts, compared host against host),
``exemplar-tune slow-nodes`` (the facts and three runs of the node benchmark on every host in
one pass, then the judging; the benchmark is ``true``, so what it costs beyond its own run
time is its whole wall time),
``exemplar-tune preflight`` (all layers), ``exemplar-tune audit`` (every layer in
check mode: one module call per host) and ``exemplar-tune apply --layer cpu`` (one layer,
journaled; the hosts already match, so it plans, compares and writes nothing) on the same
inventory, in turn (interleaved, ``--repeat`` rounds, median kept), and prints wall times,
time per host and the ratio to ping. Two transports:

* ``local``: N local-connection hosts: the module cost.
* ``ssh``: N network namespaces with their own sshd (``tests/sshfleet.py``; root needed).
  Every command starts with cold SSH connections (the ControlPersist masters are closed).

Each host reads its own sysroot: the hosts of ``exemplar-tune sim create DIR --scenario
healthy --hosts N`` (checked and audited against that scenario's profile) where that command
exists, otherwise hard-linked copies of the fixture trees ``h100-x86`` and ``healthy-h100``
(against ``PROFILE``; both commands only read, so nothing is written through the links).

``--mitogen`` adds every measurement again under the ``mitogen_linear`` strategy (only when
the ``mitogen`` package is importable; it is not a dependency); ``--no-bytecode-cache`` adds
it again with the modules' bytecode cache off (``EXEMPLAR_TUNE_BYTECODE_CACHE=off``: every
host compiles the collection's code on every run, as without the cache). Every command must
reach every host: the benchmark stops with the command's output otherwise.

    python bench/fleet.py                                  # local 16, 64, 256; SSH 4, 16
    python bench/fleet.py --hosts 16 --ssh-hosts 4
    python bench/fleet.py --hosts 64 --ssh-hosts 0 --repeat 3 --mitogen
    python bench/fleet.py --hosts 256 --ssh-hosts 0 --commands facts,differ,slow-nodes
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.sshfleet import Fleet, start_fleet  # noqa: E402  (the fleet machinery of the tests)

TREES = ("h100-x86", "healthy-h100")
PROFILE = {"name": "bench-h100",
           "gpu": {"count": 8, "product_contains": "H100", "persistence_mode": True},
           "cpu": {"deep_cstates": True, "governor": "performance", "turbo": True,
                   "housekeeping_confined": True, "housekeeping_cpus": "0,4",
                   "numa_balancing": 0},
           "fabric": {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4"}}}
# the fixture trees keep their Slurm job under system.slice: allow confining it (as the tests)
HOSTVARS = {"cpu_housekeeping_allow_job_units": True, "exemplar_node_bench_command": ["true"]}
COMMANDS = ("ping", "facts", "differ", "slow-nodes", "preflight", "audit", "apply")
BIN = Path(sys.executable).parent


@dataclass
class Target:
    """One inventory to measure: how it is reached, its size, and what runs before each command."""

    transport: str
    count: int
    inventory: Path
    before_each: Callable[[], None] | None = None


# -- sysroots and inventories -----------------------------------------------------------------


def linked_trees(directory: Path, count: int) -> list[Path]:
    """``count`` sysroots: hard-linked copies of the fixture trees, symlinks kept."""
    roots = []
    for index in range(count):
        roots.append(directory / f"host{index:04d}")
        shutil.copytree(REPO / "tests/fixtures/sysroots" / TREES[index % len(TREES)],
                        roots[-1], symlinks=True, copy_function=os.link)
    return roots


def simulated_trees(directory: Path, count: int, env: dict[str, str]
                    ) -> tuple[list[Path], Path] | None:
    """``count`` sysroots and the profile of ``exemplar-tune sim create --scenario healthy``,
    or None where that command does not exist."""
    tool = str(BIN / "exemplar-tune")
    if subprocess.run([tool, "sim", "create", "--help"], env=env, capture_output=True,
                      check=False).returncode != 0:
        return None
    subprocess.run([tool, "sim", "create", str(directory), "--scenario", "healthy", "--hosts",
                    str(count)], env=env, capture_output=True, check=True)
    hosts = yaml.safe_load((directory / "inventory.yml").read_text())["all"]["hosts"]
    return [Path(h["exemplar_sysroot"]) for h in hosts.values()], directory / "profile.yaml"


def sysroots(directory: Path, count: int, env: dict[str, str]) -> tuple[list[Path], Path]:
    """``count`` sysroots and the profile to check and audit them against."""
    simulated = simulated_trees(directory, count, env)
    if simulated is not None:
        return simulated
    directory.mkdir(parents=True)
    profile = directory / "profile.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    return linked_trees(directory, count), profile


def local_inventory(path: Path, roots: list[Path]) -> Path:
    """Local-connection hosts run by this Python, one per sysroot."""
    base = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            **HOSTVARS}
    inventory = {"all": {"vars": base, "hosts": {
        f"h{index:04d}": {"exemplar_sysroot": str(root)} for index, root in enumerate(roots)}}}
    path.write_text(yaml.safe_dump(inventory))
    return path


def ssh_inventory(path: Path, fleet: Fleet, roots: list[Path]) -> Path:
    """The fleet's hosts, one per sysroot."""
    path.write_text(yaml.safe_dump(fleet.inventory(dict(zip(fleet.names, roots, strict=True)),
                                                   HOSTVARS)))
    return path


# -- running -----------------------------------------------------------------------------------


def environment(directory: Path) -> dict[str, str]:
    """Quiet Ansible, private temporary and state directories, this venv first on PATH."""
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                ANSIBLE_LOAD_CALLBACK_PLUGINS="0",
                ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal",
                ANSIBLE_LOCAL_TEMP=str(directory / "tmp"),
                ANSIBLE_HOME=str(directory / "ansible-home"),
                EXEMPLAR_TUNE_STATE_DIR=str(directory / "state"))


def mitogen_env() -> dict[str, str] | None:
    """Settings that switch Ansible to ``mitogen_linear``, or None if mitogen is missing."""
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or not spec.submodule_search_locations:
        return None
    strategy = Path(next(iter(spec.submodule_search_locations))) / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(strategy), "ANSIBLE_STRATEGY": "mitogen_linear",
            "ANSIBLE_HOST_KEY_CHECKING": "False"}


def argv_for(command: str, inventory: Path, profile: Path, forks: int) -> list[str]:
    """The command line of ``command`` on ``inventory``."""
    if command == "ping":
        return [str(BIN / "ansible"), "all", "-i", str(inventory), "-m", "ansible.builtin.ping",
                "-f", str(forks), "-o"]
    if command == "differ":
        return [str(BIN / "exemplar-tune"), "facts", "--differ", "-i", str(inventory),
                "--format", "json", "--forks", str(forks)]
    if command == "slow-nodes":
        return [str(BIN / "exemplar-tune"), "slow-nodes", "-i", str(inventory), "--runs", "3",
                "--format", "json", "--forks", str(forks)]
    layer = ["--layer", "cpu"] if command == "apply" else []
    target = [] if command == "facts" else ["--profile", str(profile)]
    return [str(BIN / "exemplar-tune"), command, *layer, "-i", str(inventory), "--format",
            "json", "--forks", str(forks), *target]


def check_output(command: str, count: int, out: subprocess.CompletedProcess[str]) -> None:
    """Stop the benchmark unless every one of ``count`` hosts answered."""
    if command == "ping":
        ok = out.returncode == 0
    else:
        try:
            doc: dict[str, Any] = json.loads(out.stdout)
        except ValueError:
            doc = {}
        hosts = doc.get("hosts", {})  # differ: the number of hosts compared
        ok = ((hosts if isinstance(hosts, int) else len(hosts)) == count
              and not doc.get("unreachable") and not doc.get("failed"))
    if not ok:
        raise SystemExit(f"{command} did not reach all {count} hosts (rc {out.returncode}):\n"
                         f"{out.stdout[-1500:]}\n{out.stderr[-1500:]}")


def time_command(command: str, target: Target, profile: Path, forks: int,
                 env: dict[str, str]) -> float:
    """Wall seconds of one run of ``command`` on ``target`` (checked to reach every host)."""
    if target.before_each is not None:
        target.before_each()
    argv = argv_for(command, target.inventory, profile, forks)
    start = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    check_output(command, target.count, out)
    return seconds


def measure(target: Target, variants: dict[str, dict[str, str]], profile: Path,
            args: argparse.Namespace, env: dict[str, str]) -> None:
    """Run every command under every variant ``--repeat`` times, interleaved; print rows."""
    walls: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeat):
        for variant, extra in variants.items():
            for command in args.commands:
                seconds = time_command(command, target, profile, args.forks, {**env, **extra})
                walls.setdefault((variant, command), []).append(seconds)
    for variant in variants:
        ping = statistics.median(walls[(variant, "ping")])
        for command in args.commands:
            wall = statistics.median(walls[(variant, command)])
            print(f"{target.transport:>9} {variant:>8} {target.count:>6} {command:>10} "
                  f"{wall:>8.1f} {1000 * wall / target.count:>12.0f} {wall / ping:>7.2f}",
                  flush=True)


def measure_local(directory: Path, count: int, variants: dict[str, dict[str, str]],
                  args: argparse.Namespace, env: dict[str, str]) -> None:
    """Measure ``count`` local-connection hosts."""
    roots, profile = sysroots(directory / f"local-{count}", count, env)
    target = Target("local", count, local_inventory(directory / f"local-{count}.yml", roots))
    measure(target, variants, profile, args, env)


def measure_ssh(directory: Path, count: int, variants: dict[str, dict[str, str]],
                args: argparse.Namespace, env: dict[str, str]) -> None:
    """Start a fleet of ``count`` SSH hosts, measure it, tear it down."""
    roots, profile = sysroots(directory / f"ssh-{count}", count, env)
    start = time.perf_counter()
    fleet = start_fleet(count, directory / f"fleet-{count}")
    try:
        up = time.perf_counter() - start
        inventory = ssh_inventory(directory / f"ssh-{count}.yml", fleet, roots)
        measure(Target("ssh", count, inventory, fleet.close_masters), variants, profile, args,
                env)
        print(f"{'':>9} {'':>8} {count:>6} {'(fleet up)':>10} {up:>8.1f}", flush=True)
    finally:
        fleet.teardown()


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, action="append",
                        help="local inventory sizes (repeatable; default 16, 64, 256; 0: none)")
    parser.add_argument("--ssh-hosts", type=int, action="append",
                        help="SSH fleet sizes (repeatable; default 4, 16; 0: none)")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds per size")
    parser.add_argument("--forks", type=int, default=8)
    parser.add_argument("--commands", default=",".join(COMMANDS[1:]), metavar="A,B",
                        help=f"what to measure besides ping (default {','.join(COMMANDS[1:])})")
    parser.add_argument("--mitogen", action="store_true",
                        help="also measure with the mitogen_linear strategy")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="also measure with the modules' bytecode cache off")
    return parser.parse_args()


def main() -> None:
    """Build the inventories, run the rounds and print the table."""
    args = parse_args()
    unknown = [c for c in args.commands.split(",") if c not in COMMANDS]
    if unknown:
        raise SystemExit(f"--commands: {unknown[0]} is not one of {', '.join(COMMANDS[1:])}")
    args.commands = ["ping", *(c for c in COMMANDS[1:] if c in args.commands.split(","))]
    variants: dict[str, dict[str, str]] = {"linear": {}}
    if args.mitogen:
        extra = mitogen_env()
        if extra is None:
            raise SystemExit("--mitogen: the mitogen package is not importable here")
        variants["mitogen"] = extra
    if args.no_bytecode_cache:
        variants["no-cache"] = {"EXEMPLAR_TUNE_BYTECODE_CACHE": "off"}
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        directory = Path(tmp)
        env = environment(directory)
        print(f"{'transport':>9} {'strategy':>8} {'hosts':>6} {'command':>10} {'wall s':>8} "
              f"{'per host ms':>12} {'x ping':>7}", flush=True)
        for count in [n for n in (args.hosts or [16, 64, 256]) if n > 0]:
            measure_local(directory, count, variants, args, env)
        for count in [n for n in (args.ssh_hosts or [4, 16]) if n > 0]:
            measure_ssh(directory, count, variants, args, env)


if __name__ == "__main__":
    main()
