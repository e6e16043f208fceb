"""The supervisor every child of a changing command runs under: real processes, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from exemplar_tune.fleet import reaper
from tests.helpers import cli_env

PY = sys.executable


def gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_the_command_status_and_signal_death_pass_through() -> None:
    assert subprocess.run(reaper.command([PY, "-c", "raise SystemExit(7)"]), env=cli_env(),
                          check=False).returncode == 7
    killed = subprocess.run(reaper.command([PY, "-c", "import os; os.kill(os.getpid(), 9)"]),
                            env=cli_env(), check=False)
    assert killed.returncode == -signal.SIGKILL


def test_a_missing_program_is_one_line_and_127() -> None:
    out = subprocess.run(reaper.command(["/nonexistent/prog"]), env=cli_env(),
                         capture_output=True, text=True, check=False)
    assert out.returncode == 127
    assert out.stderr == "exemplar-tune: cannot start /nonexistent/prog: No such file or " \
                         "directory\n"


def test_when_the_parent_dies_the_whole_tree_ends(tmp_path) -> None:
    """A middle process starts a supervised command that leaves a grandchild in its own
    session (as Ansible's module processes are); SIGKILL of the middle one ends them all."""
    pids = tmp_path / "pids"
    grandchild = (f"import os, subprocess, sys, time; p = subprocess.Popen([{PY!r}, '-c', "
                  f"'import time; time.sleep(300)'], start_new_session=True); "
                  f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{p.pid}}'); "
                  f"time.sleep(300)")
    middle = ("import subprocess, sys, time; from exemplar_tune.fleet import reaper; "
              f"subprocess.Popen(reaper.command([{PY!r}, '-c', {grandchild!r}])); "
              "time.sleep(300)")
    parent = subprocess.Popen([PY, "-c", middle], env=cli_env())
    deadline = time.monotonic() + 30
    while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    command, orphan = map(int, pids.read_text().split())
    supervisor = psutil.Process(command).parent()
    assert "exemplar_tune.fleet.reaper" in supervisor.cmdline()
    assert reaper.tagged_processes("nothing") == []
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    assert gone(supervisor.pid) and gone(command) and gone(orphan)


def test_processes_of_an_experiment_are_found_by_tag_and_ended() -> None:
    with reaper.tagged("20261202T000000-abcd"):
        proc = subprocess.Popen(reaper.command([PY, "-c", "import time; time.sleep(300)"]),
                                env=cli_env())
    assert os.environ.get(reaper.TAG_VARIABLE) is None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found_now = reaper.tagged_processes("20261202T000000-abcd")
        if found_now and found_now[0].children():
            break
        time.sleep(0.05)
    (found,) = reaper.tagged_processes("20261202T000000-abcd")
    assert found.pid == proc.pid
    sleeper = found.children()[0]
    reaper.end_tree(found)
    assert gone(found.pid) and gone(sleeper.pid)
