"""Run a command so that it, and everything it starts, ends when the controller ends.

Every process the controller starts (``ansible-playbook`` and ``ansible`` for every command,
a benchmark command, a Slurm launcher) runs under a small supervisor,
``python -m exemplar_tune.fleet.reaper --parent PID [--tag EXPERIMENT] -- COMMAND...``, which

* asks the kernel for SIGTERM when its parent (the controller) dies, even by SIGKILL
  (``PR_SET_PDEATHSIG``), and checks right after that the parent is still the one it was
  started by;
* is a child subreaper (``PR_SET_CHILD_SUBREAPER``): processes its command leaves behind,
  including those that start their own session (Ansible's module processes do), become its
  children instead of init's, so it can always find them;
* on any SIGTERM, SIGINT or SIGHUP ends its whole tree (SIGTERM, then SIGKILL after
  :data:`GRACE_S`) and exits ``128 + signal``; otherwise it exits as its command did (with
  its status, or by the same signal), leaving alone what the command meant to outlive it
  (an SSH ControlPersist master, say).

The ``--tag`` (from :data:`TAG_VARIABLE`, see :func:`tagged`) names the experiment the
process works for: ``rollback`` and ``resume`` look for live supervisors with that tag
(:func:`tagged_processes`) and end them before they touch a host. Linux only; elsewhere
(no ``prctl``) the command simply runs as a child.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 5.0
TAG_OPTION = "--tag"
TAG_VARIABLE = "EXEMPLAR_TUNE_EXPERIMENT"  # set while a command works for an experiment


@contextlib.contextmanager
def tagged(experiment: str) -> Iterator[None]:
    """Within the block, supervised children carry ``experiment`` as their tag."""
    before = os.environ.get(TAG_VARIABLE)
    os.environ[TAG_VARIABLE] = experiment
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(TAG_VARIABLE, None)
        else:
            os.environ[TAG_VARIABLE] = before


def command(argv: list[str]) -> list[str]:
    """``argv`` wrapped in the supervisor, for a child of this process."""
    tag = os.environ.get(TAG_VARIABLE)
    tagged = [TAG_OPTION, tag] if tag else []
    return [*_python(), "-m", "exemplar_tune.fleet.reaper", "--parent", str(os.getpid()), *tagged,
            "--", *argv]


def _python() -> list[str]:
    """This interpreter, isolated from the command's directory and ``PYTHON*`` variables
    (``-P -E``): a benchmark's working directory or environment cannot replace the
    supervisor's own modules."""
    return [sys.executable, "-P", "-E"]


def shim(real: str) -> str:
    """The text of an executable that runs ``real`` (with its arguments) supervised.

    Put first on ``PATH`` under ``real``'s name, it supervises programs that a library starts
    by name (ansible-runner starts ``ansible-playbook``). A shell script, so that no
    interpreter path has to fit a ``#!`` line; ``exec`` keeps the shell's pid, so the
    supervisor's parent is whoever started the shim: this controller.
    """
    tag = os.environ.get(TAG_VARIABLE)
    argv = [*_python(), "-m", "exemplar_tune.fleet.reaper", "--parent", "PPID",
            *([TAG_OPTION, tag] if tag else []), "--", real]
    quoted = " ".join('"$PPID"' if word == "PPID" else shlex.quote(word) for word in argv)
    return f'#!/bin/sh\nexec {quoted} "$@"\n'


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Live supervisors working for experiment ``tag`` (on this host)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        args = proc.info.get("cmdline") or []
        if "exemplar_tune.fleet.reaper" in args and _tag_of(args) == tag:
            found.append(proc)
    return found


def end_tree(root: psutil.Process, grace: float = GRACE_S) -> None:
    """SIGTERM ``root`` and its descendants, SIGKILL what is left after ``grace`` seconds."""
    with contextlib.suppress(psutil.NoSuchProcess):
        _end([root, *root.children(recursive=True)], grace)


def _end(procs: list[psutil.Process], grace: float) -> None:
    _signal_all(procs, signal.SIGTERM)
    _gone, alive = psutil.wait_procs(procs, timeout=grace)
    _signal_all(alive, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=grace)


def _tag_of(args: list[str]) -> str | None:
    """The supervisor's own ``--tag`` (before ``--``; the command's options are not ours)."""
    own = args[:args.index("--")] if "--" in args else args
    if TAG_OPTION in own:
        index = own.index(TAG_OPTION)
        if index + 1 < len(own):
            return own[index + 1]
    return None


def _signal_all(procs: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.send_signal(sig)


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _end_children(grace: float) -> None:
    """End every descendant of this process (its command and what the command left)."""
    me = psutil.Process()
    _end(me.children(recursive=True), grace)
    for orphan in me.children(recursive=True):  # started while we were ending the others
        with contextlib.suppress(psutil.NoSuchProcess):
            orphan.kill()


def _reap_orphans(child: int) -> None:
    """Collect the exit status of adopted orphans (never of ``child``: Popen waits for it)."""
    for proc in psutil.Process().children():
        if proc.pid != child:
            with contextlib.suppress(psutil.NoSuchProcess, ChildProcessError):
                if proc.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(proc.pid, os.WNOHANG)


def supervise(argv: list[str], parent: int) -> int:
    """Run ``argv`` as described in the module docstring; its exit status."""
    received: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: received.append(number))
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the controller died before the kernel watched it
        return 128 + signal.SIGTERM
    try:
        child = subprocess.Popen(argv)  # noqa: S603 - argv from the controller, no shell
    except OSError as exc:
        print(f"exemplar-tune: cannot start {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    ticks = 0
    while child.poll() is None and not received:
        time.sleep(0.05)
        ticks += 1
        if ticks % 20 == 0:
            _reap_orphans(child.pid)
    if received:
        _end_children(GRACE_S)
        return 128 + received[0]
    if child.returncode < 0:  # die the same way, so that our parent sees the signal
        with contextlib.suppress(OSError, ValueError):  # SIGKILL/SIGSTOP: no handler to reset
            signal.signal(-child.returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -child.returncode)
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


def main() -> None:
    """``python -m exemplar_tune.fleet.reaper --parent PID [--tag T] -- COMMAND...``."""
    parser = argparse.ArgumentParser(prog="python -m exemplar_tune.fleet.reaper",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument(TAG_OPTION)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        parser.error("no command")
    sys.exit(supervise(argv, args.parent))


if __name__ == "__main__":
    main()
