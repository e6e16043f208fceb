"""Options several commands share: the hosts to read or change, the profile, the measured
loop."""

from __future__ import annotations

import argparse
from pathlib import Path

from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYER_NAMES, UnknownLayer

from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from exemplar_tune.fleet.inventory import check_source
from exemplar_tune.orchestration.stats import BLOCK_RUNS, CONFIDENCE, MAX_RUNS, MIN_EFFECT, MIN_RUNS

PROFILE_HELP = ("targets: a shipped profile, a YAML file, or 'auto' (the default: each host "
                "gets the shipped profile for its architecture, as preflight chooses)")


def add_host_options(cmd: argparse.ArgumentParser) -> None:
    """The hosts a reading command (``facts``, ``preflight``) looks at: this host, a capture
    (``--sysroot``) or an inventory, with ``--limit``, ``--forks`` and ``--timeout``."""
    _add_hosts(cmd, ("PATH", "read a captured host: a directory mirroring / or a snapshot "
                     "archive"),
               "Ansible inventory (file, directory or host list); default: this host", 600)


def add_change_target(cmd: argparse.ArgumentParser,
                      formats: tuple[str, ...] = ("table", "json")) -> None:
    """The hosts a changing command works on (a sysroot or an inventory, ``--limit``,
    ``--forks``, ``--timeout``) and its ``--format`` choices."""
    _add_hosts(cmd, ("DIR", "work inside DIR (a directory mirroring /) as a one-host inventory"),
               "Ansible inventory", 1800)
    cmd.add_argument("--format", choices=formats, default="table",
                     help="output format (default table)")


def _add_hosts(cmd: argparse.ArgumentParser, sysroot: tuple[str, str], inventory: str,
               timeout: int) -> None:
    target = cmd.add_mutually_exclusive_group()
    target.add_argument("--sysroot", metavar=sysroot[0], help=sysroot[1])
    target.add_argument("-i", "--inventory", metavar="INVENTORY", help=inventory)
    cmd.add_argument("--limit", metavar="PATTERN",
                     help="only these hosts: an Ansible pattern or a hostlist "
                     "('node[01-04],!node03', 'gpu*', 'rack1')")
    cmd.add_argument("--forks", type=int, default=10, metavar="N",
                     help="hosts worked on at once (default 10)")
    cmd.add_argument("--timeout", type=float, default=timeout, metavar="SECONDS",
                     help=f"give up on the whole Ansible run after this long (default {timeout})")


def check_layers(names: list[str] | None) -> None:
    """An ``UnknownLayer`` error for the first name in ``names`` that is not a layer."""
    for name in names or []:
        if name not in LAYER_NAMES:
            raise UnknownLayer(f"unknown layer {name!r}; choose from {', '.join(LAYER_NAMES)}")


def facts_runner(args: argparse.Namespace) -> AnsibleRun:
    """The Ansible run that reads facts from the hosts ``add_host_options`` parsed; a missing
    inventory file is one line (Ansible would take its path for a host name)."""
    if args.inventory:
        check_source(args.inventory)
    return AnsibleRun(args.inventory or local_inventory(), limit=args.limit, forks=args.forks,
                      timeout=args.timeout)


def add_loop_options(cmd: argparse.ArgumentParser) -> None:
    """Options of the measured loop (shared by ``tune`` and ``apply --bench``)."""
    cmd.add_argument("--min-effect", type=float, default=MIN_EFFECT, metavar="FRACTION",
                     help=f"smallest relative improvement worth keeping (default {MIN_EFFECT}: "
                     "any gain the statistics show clear of zero; e.g. 0.01 for a 1 %% floor)")
    cmd.add_argument("--confidence", type=float, default=CONFIDENCE, metavar="FRACTION",
                     help=f"interval that must lie beyond --min-effect for a keep (default "
                     f"{CONFIDENCE}: one-sided 95 %% bounds); the gain must also clear the "
                     "group-sequential boundary that spends this error over the looks")
    cmd.add_argument("--min-runs", type=int, default=MIN_RUNS,
                     help=f"runs per arm before the first decision (default {MIN_RUNS}; a "
                     f"baseline before a reboot has at least {BLOCK_RUNS})")
    cmd.add_argument("--max-runs", type=int, default=MAX_RUNS,
                     help=f"runs per arm at most; inconclusive then means restore (default "
                     f"{MAX_RUNS})")
    cmd.add_argument("--allow-reboot", action="store_true",
                     help="reboot hosts whose change needs it (otherwise stop and say so)")
    cmd.add_argument("--canary", type=int, default=0, metavar="N",
                     help="measure each layer on N of the changing hosts first; roll a kept "
                     "layer out to the rest afterwards")
    cmd.add_argument("--ledger", type=Path, help="SQLite ledger (default in the state dir)")
