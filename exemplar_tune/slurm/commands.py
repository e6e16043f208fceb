"""Run the Slurm client programs: argv lists only, a deadline on each, one-line errors.

Every call inherits the caller's environment (``SLURM_CONF`` included), never goes through a
shell and gives :class:`SlurmError` with the program's last stderr line when it fails.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

DEFAULT_TIMEOUT_S = 60.0


class SlurmError(RuntimeError):
    """A Slurm client that could not run or failed: one line, naming the program."""


def run_client(argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """stdout of ``argv`` (a Slurm client); :class:`SlurmError` unless it exits 0."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} not found (is the Slurm client installed and on PATH?)"
                         ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {timeout:g} s") from None
    except OSError as exc:
        raise SlurmError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        raise SlurmError(f"{' '.join(argv[:3])}: exit {done.returncode}"
                         f"{last_line(done.stderr or done.stdout)}")
    return done.stdout


def program(name: str) -> str:
    """The absolute path of Slurm client ``name``; :class:`SlurmError` when not on PATH."""
    found = shutil.which(name)
    if not found:
        raise SlurmError(f"{name} not found (is the Slurm client installed and on PATH?)")
    return found


def expand_hostlist(expression: str) -> list[str]:
    """Node names of a Slurm hostlist (``node[1-3],gpu07``), in order, by ``scontrol``."""
    if not expression or expression in ("(null)", "None"):
        return []
    return run_client(["scontrol", "show", "hostnames", expression]).split()


def last_line(text: str) -> str:
    """``": <last non-empty line>"`` (at most 200 characters), or ``""``."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return f": {lines[-1][:200]}" if lines else ""
