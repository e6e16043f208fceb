"""The ``exemplar-tune`` command line: parsing, dispatch, errors and exit codes.

Exit codes (stable, for scripts, Slurm prologs and CI gates):
  0  success, nothing to report
  1  findings: failing checks, drift, or hosts that could not be reached
  2  usage or input error (bad option, unknown layer, unreadable bundle ...)
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import sys
from pathlib import Path

from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYERS, UnknownLayer

from exemplar_tune import __version__
from exemplar_tune.commands import COMMANDS, SUMMARIES, groups
from exemplar_tune.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERNAL,
    EXIT_USAGE,
    UserError,
    crash_report,
)
from exemplar_tune.ledger import Ledger, default_path as default_ledger_path, next_steps
from exemplar_tune.progress import set_quiet
from exemplar_tune.signals import Interrupted, StoppedAtOnce
from exemplar_tune.terminal import EscapingFormatter, escape, guarded

QUIET_HELP = ("no progress on stderr (bars on a terminal, a line per step elsewhere); "
              "results and errors still print")
LAYER_HELP = "; ".join(f"{layer.name} = {layer.title}" for layer in LAYERS)


def build_parser(commands: list[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser: every command in full, or only ``commands`` (and the rest of their
    groups) in full and the others by name and summary, so that a run imports one group."""
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
    parser.set_defaults(command_parser=build_parser)  # the demo runs the commands it parses
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    loaded = {group.__name__.rpartition(".")[2]: group for group in groups(commands)}
    for name, (group, summary) in COMMANDS.items():
        if name in sub.choices:
            continue
        if group in loaded:
            loaded[group].add_parsers(sub)
        else:
            sub.add_parser(name, help=summary, add_help=False)
    _add_quiet(sub)
    return parser


def _add_quiet(sub: argparse._SubParsersAction) -> None:
    """``--quiet`` after any command too (it only sets what the global option sets)."""
    for cmd in {id(p): p for p in sub.choices.values()}.values():
        cmd.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                         help=QUIET_HELP)
        for action in cmd._subparsers._group_actions if cmd._subparsers else ():
            _add_quiet(action)


def _warn_unfinished(args: argparse.Namespace) -> None:
    """Point at experiments whose controller died, so nothing stays half-applied unnoticed."""
    path = getattr(args, "ledger", None) or default_ledger_path()
    quiet = ("rollback", "resume", "abandon", "history", "show", "report", "sim")
    if args.command in quiet or not Path(path).exists():
        return
    try:
        with Ledger(path, read_only=True) as ledger:
            unfinished = ledger.unfinished()
    except UserError:  # a ledger this user cannot open (read-only home, a container): no hint
        return
    for exp in unfinished:
        if exp.get("controller_alive") is False:
            print(escape(f"exemplar-tune: experiment {exp['id']} did not finish (its "
                         f"controller died): {next_steps(exp)}"), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``exemplar-tune`` script: every outcome is one line and an exit code
    (``--help`` epilog), never a traceback. Standard output and error are guarded for the whole
    run (:func:`exemplar_tune.terminal.guarded`): no control character but newline and tab
    reaches them except the tool's own colours and bars."""
    with guarded():
        return _run(argv)


def _run(argv: list[str] | None) -> int:
    parser = build_parser(_command(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    set_quiet(args.quiet)
    handler = logging.StreamHandler()
    handler.setFormatter(EscapingFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        handlers=[handler])
    try:
        _warn_unfinished(args)
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except (UserError, UnknownLayer) as exc:
        _error(str(exc))
        return EXIT_USAGE
    except StoppedAtOnce as exc:
        _error(f"stopped at once ({exc}): hosts left as they were"
               + (f"; {exc.note}" if exc.note else ""))
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


def _command(argv: list[str]) -> list[str]:
    """The command ``argv`` names, as a list (empty when it names none we know): the first
    word that is not an option (the global options take no value)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return [word] if word in SUMMARIES else []


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
    """``message`` as the one line of an error: whatever file name, host name or claim field
    it carries is escaped (:func:`~exemplar_tune.terminal.escape`)."""
    with contextlib.suppress(OSError):
        print(f"exemplar-tune: error: {escape(message)}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
