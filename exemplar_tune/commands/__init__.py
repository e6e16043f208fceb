"""The command groups of ``exemplar-tune``, one module per group.

Each module registers its commands with ``add_parsers(subparsers)`` and holds their handlers
(``cmd_*``: arguments in, an exit code out). ``exemplar_tune.cli`` only wires the groups and
turns every error into one line and an exit code. Handlers call the libraries (facts,
preflight, playbook runs, the tuning loop, the ledger, reports); no library imports a command
module.

:data:`COMMANDS` names every command's group and summary, so that a run imports only the group
of the command it runs (``--help`` lists the others from here).
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

# command -> (its group's module in this package, the summary --help lists), in --help order
COMMANDS: dict[str, tuple[str, str]] = {
    "facts": ("facts", "print the facts of each layer"),
    "snapshot": ("facts", "capture this host into one archive"),
    "preflight": ("preflight", "check every layer against a profile"),
    "offenders": ("preflight", "hosts that fail the same check again and again"),
    "apply": ("change", "apply one layer's fixes (journaled, restorable)"),
    "audit": ("change", "drift report: the roles in check mode with diff"),
    "restore": ("change", "put back what a run changed"),
    "rollback": ("change", "the same as restore: every layer of an experiment"),
    "abandon": ("change", "close an experiment that cannot be rolled back"),
    "unlock": ("unlock", "remove host claims that controllers which are gone left"),
    "tune": ("experiments", "walk every layer: measure, keep or restore"),
    "resume": ("experiments", "continue an experiment whose controller died"),
    "history": ("experiments", "past experiments from the ledger"),
    "show": ("experiments", "one experiment: layers, samples, decisions"),
    "report": ("experiments", "an experiment as Markdown or HTML"),
    "sweep": ("sweep", "choose NCCL fabric settings by measurement"),
    "slow-nodes": ("slow_nodes", "hosts slower than the fleet, and the facts that differ"),
    "profile": ("profile", "list profiles; show one merged and validated"),
    "schema": ("schema", "the JSON Schema of a machine-readable output"),
    "diagnose": ("diagnose", "analyse captured signals (turbostat, perf, logs ...)"),
    "sim": ("sim", "a simulated GPU cluster: create, benchmark, COLL log, boot"),
    "demo": ("demo", "see it all on a simulated cluster (about 2 minutes)"),
    "slurm": ("slurm", "drain or resume Slurm nodes from a preflight result"),
}
SUMMARIES = {command: summary for command, (_group, summary) in COMMANDS.items()}


def groups(commands: list[str] | None = None) -> list[ModuleType]:
    """The group modules of ``commands`` (default every command), imported, in order."""
    names = [COMMANDS[c][0] for c in (COMMANDS if commands is None else commands)]
    return [import_module(f"{__name__}.{name}") for name in dict.fromkeys(names)]
