"""``exemplar-tune sim create|bench|coll-log|boot``: the simulated cluster on the command line."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from exemplar_tune.commands import SUMMARIES
from exemplar_tune.errors import EXIT_OK, UserError
from exemplar_tune.orchestration.tune import HOSTS_VARIABLE
from exemplar_tune.sim.bench import bench_lines
from exemplar_tune.sim.boot import boot
from exemplar_tune.sim.cluster import cluster_info, create_cluster
from exemplar_tune.sim.coll_log import coll_log_lines
from exemplar_tune.sim.fabric import parse_size
from exemplar_tune.sim.hosts import FAULTS
from exemplar_tune.sim.model import load_scenario, shipped_scenarios
from exemplar_tune.terminal import escape, join_lines

SIM_EPILOG = """examples:
  exemplar-tune sim create /tmp/c --scenario gb300-exemplar-gap --hosts 4 --seed 1
  exemplar-tune preflight -i /tmp/c/inventory.yml --profile /tmp/c/profile.yaml
  exemplar-tune sim bench /tmp/c --workload moe
  exemplar-tune sim bench /tmp/c --workload nccl-allgather -b 1M -e 1G -f 2
  exemplar-tune sim coll-log /tmp/c --workload dense --steps 2
  exemplar-tune tune -i /tmp/c/inventory.yml --profile /tmp/c/profile.yaml \\
      --bench /tmp/c/bench.yaml --allow-reboot
  exemplar-tune sim boot /tmp/c node01

Each host is a sysroot tree in the kernel's layout (DIR/hosts/NAME) that Ansible reaches with
a local connection; the benchmark reads the hosts' current state, so what a role changes is
what the next benchmark run sees. The model and every parameter: DIR/scenario.yaml.
"""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``sim`` and its subcommands."""
    sim = sub.add_parser("sim", help=SUMMARIES["sim"],
                         description="Build and drive a simulated cluster.", epilog=SIM_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = sim.add_subparsers(dest="sim_command", metavar="STEP", required=True)
    create = steps.add_parser("create", help="build a cluster in a new directory")
    create.add_argument("directory", type=Path, metavar="DIR",
                        help="the new simulated cluster's directory")
    create.add_argument("--scenario", default="gb300-exemplar-gap", metavar="NAME|FILE",
                        help=f"{', '.join(shipped_scenarios())} or a scenario YAML file "
                        "(default gb300-exemplar-gap)")
    create.add_argument("--hosts", type=int, metavar="N", help="number of hosts (scenario's "
                        "default otherwise)")
    create.add_argument("--seed", type=int, metavar="S", help="noise seed (scenario's default)")
    create.add_argument("--fault", action="append", default=[], metavar="HOST=FAULT",
                        help="a fault on one host only, on top of the scenario's (repeatable), "
                        "e.g. node05=deep_cstate_disabled: a host made slow through a fact")
    create.set_defaults(func=cmd_sim_create)
    bench = steps.add_parser("bench", help="one benchmark run on every host of a cluster")
    bench.add_argument("directory", type=Path, metavar="DIR",
                       help="a simulated cluster's directory (sim create)")
    bench.add_argument("--workload", required=True, metavar="NAME",
                       help="dense, moe (Megatron lines), nccl-allgather, nccl-reducescatter "
                       "(nccl-tests table)")
    bench.add_argument("--steps", type=int, default=40, help="training iterations (default 40)")
    bench.add_argument("--per-rank", action="store_true",
                       help="training: every host's own iteration lines, prefixed 'HOST: ' (the "
                       "time of its own work, as per-rank timers log it), instead of the job's")
    bench.add_argument("--hosts", nargs="+", metavar="NAME",
                       help="only these hosts (default: $EXEMPLAR_TUNE_HOSTS, which tune sets "
                       "to the hosts it measures, else every host)")
    bench.add_argument("-b", "--minbytes", default="1M", metavar="SIZE",
                       help="collectives: smallest size, bytes or 64K/1M/1G (default 1M)")
    bench.add_argument("-e", "--maxbytes", default="16G", metavar="SIZE",
                       help="collectives: largest size (default 16G)")
    bench.add_argument("-f", "--stepfactor", type=int, default=2, metavar="N",
                       help="collectives: multiply the size by N each row (default 2)")
    bench.set_defaults(func=cmd_sim_bench)
    coll = steps.add_parser("coll-log", help="the NCCL_DEBUG=INFO COLL log of a training job",
                            description="Print what NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL "
                            "prints for the collective calls of a training workload, every "
                            "rank of every host.")
    coll.add_argument("directory", type=Path, metavar="DIR",
                      help="a simulated cluster's directory (sim create)")
    coll.add_argument("--workload", required=True, metavar="NAME", help="dense or moe")
    coll.add_argument("--steps", type=int, default=1, help="training steps (default 1)")
    coll.add_argument("--hosts", nargs="+", metavar="NAME", help="only these hosts (default: "
                      "every host)")
    coll.set_defaults(func=cmd_sim_coll_log)
    boot_cmd = steps.add_parser("boot", help="boot hosts: apply their boot-time settings")
    boot_cmd.add_argument("directory", type=Path, metavar="DIR",
                          help="a simulated cluster's directory (sim create)")
    boot_cmd.add_argument("hosts", nargs="*", metavar="NAME", help="default: every host")
    boot_cmd.set_defaults(func=cmd_sim_boot)


def _hosts(directory: Path, wanted: list[str] | None) -> list[str]:
    names = cluster_info(directory)["hosts"]
    unknown = [h for h in wanted or [] if h not in names]
    if unknown:
        raise UserError(f"host {unknown[0]!r} is not in {directory} ({', '.join(names)})")
    return wanted or names


def cmd_sim_create(args: argparse.Namespace) -> int:
    """``exemplar-tune sim create``."""
    host_faults: dict[str, list[str]] = {}
    for text in args.fault:
        host, sep, fault = text.partition("=")
        if not sep or fault not in FAULTS:
            raise UserError(f"--fault {text!r}: write HOST=FAULT with FAULT one of "
                            f"{', '.join(FAULTS)}")
        host_faults.setdefault(host, []).append(fault)
    try:
        info = create_cluster(args.directory, args.scenario, hosts=args.hosts, seed=args.seed,
                              host_faults=host_faults)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    faults = load_scenario(args.directory / "scenario.yaml")["faults"]
    print(join_lines([
        f"created {args.directory}: scenario {info['scenario']}, {len(info['hosts'])} host(s) "
        f"({info['hosts'][0]} .. {info['hosts'][-1]}), seed {info['seed']}",
        f"  inventory {args.directory / 'inventory.yml'}, profile "
        f"{args.directory / 'profile.yaml'}, benchmarks {args.directory / 'bench.yaml'}",
        f"  faults: {', '.join(faults) or 'none'} (known: {', '.join(FAULTS)})",
        *(f"  {host} also: {', '.join(extra)}" for host, extra in host_faults.items())]))
    return EXIT_OK


def cmd_sim_bench(args: argparse.Namespace) -> int:
    """``exemplar-tune sim bench``."""
    try:
        from_env = [h for h in os.environ.get(HOSTS_VARIABLE, "").split(",") if h]
        hosts = _hosts(args.directory, args.hosts or from_env)
        scenario = load_scenario(args.directory / "scenario.yaml")
        sizes = (parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor)
        for line in bench_lines(args.directory, scenario, hosts, args.workload, args.steps,
                                sizes, per_rank=args.per_rank):
            print(line)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return EXIT_OK


def cmd_sim_coll_log(args: argparse.Namespace) -> int:
    """``exemplar-tune sim coll-log``."""
    try:
        hosts = _hosts(args.directory, args.hosts)
        scenario = load_scenario(args.directory / "scenario.yaml")
        for line in coll_log_lines(scenario, hosts, args.workload, args.steps):
            print(line)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return EXIT_OK


def cmd_sim_boot(args: argparse.Namespace) -> int:
    """``exemplar-tune sim boot``."""
    try:
        hosts = _hosts(args.directory, args.hosts)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    for host in hosts:
        print(escape(f"{host}: booted: {boot(args.directory / 'hosts' / host)}"))
    return EXIT_OK
