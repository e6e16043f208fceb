"""The command groups of ``exemplar-tune``, one module per group.

Each module registers its commands with ``add_parsers(subparsers)`` and holds their handlers
(``cmd_*``: arguments in, an exit code out). ``exemplar_tune.cli`` only wires the groups and
turns every error into one line and an exit code. Handlers call the libraries (facts,
preflight, playbook runs, the tuning loop, the ledger, reports); no library imports a command
module.
"""
