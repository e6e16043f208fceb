"""Progress on stderr: plain lines per step off a terminal, a live bar on one, nothing with
``--quiet``; stdout (the result) is the same in every case."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest
import yaml

from tests.conftest import SYSROOTS
from tests.helpers import cli_env
from tests.test_cli import cli


@pytest.fixture
def fleet(tmp_path):
    inventory = {"all": {"vars": {"ansible_connection": "local",
                                  "ansible_python_interpreter": sys.executable},
                         "hosts": {f"n{i}": {"exemplar_sysroot": str(SYSROOTS / "h100-x86")}
                                   for i in range(1, 4)}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return ["preflight", "-i", str(path), "--profile", "h100-x86"]


def test_plain_lines_off_a_terminal_and_silence_with_quiet(fleet):
    out = cli(*fleet)
    lines = out.stderr.splitlines()
    assert lines[0] == "facts: exemplar.tune.facts ..."
    assert lines[1].startswith("facts: exemplar.tune.facts: 3 host(s) answered in ")
    assert len(lines) == 2
    for quiet in ([*fleet, "--quiet"], ["-q", *fleet]):
        silent = cli(*quiet)
        assert silent.stderr == "" and silent.stdout == out.stdout


def test_a_live_bar_on_a_terminal(fleet):
    """stderr on a pseudo-terminal: rich draws the bar, hosts done of the total, elapsed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "exemplar_tune.cli", *fleet],
                            stdout=subprocess.PIPE, stderr=follower, env=cli_env())
    os.close(follower)
    stdout, _ = proc.communicate(timeout=300)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        drawn += chunk
    os.close(leader)
    text = drawn.decode(errors="replace")
    assert "3/3" in text and " hosts " in text and "\x1b[" in text  # drawn, not printed
    assert "host(s) answered" not in text  # the plain lines are for logs only
    assert b"FAIL" in stdout and b"\x1b[" not in stdout
