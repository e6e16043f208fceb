"""A facts command that fails (non-zero exit, missing binary, unreadable output) is ``None``
plus one ``errors`` line naming the command, its exit status and the first line of its stderr.

The live cases run the real gatherers on ``Sysroot("/")`` inside bubblewrap (``bwrap``,
``.ci/packages.txt``): ``PATH`` holds only a directory of real executable scripts, so a
command is either such a script or missing, and ``/run`` is a fresh tmpfs that holds
``/run/systemd/system`` (sd_booted(3): systemd is the init system) or not. The scripts print
messages captured from the real tools, sources named next to them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import (
    cpu_placement as layer_cpu_placement,
)
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import CommandFailed
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.helpers import copy_sysroot

BWRAP = shutil.which("bwrap")
SHOW = "systemctl show --property=Id,AllowedCPUs,EffectiveCPUs system.slice user.slice init.scope"
UNITS = ("system.slice", "user.slice", "init.scope")
# systemd 252 (Debian 12): the real systemctl in a namespace with /run/systemd/system and no bus.
NO_BUS = "Failed to connect to bus: No such file or directory"
# systemd 252 (Debian 12) in a container whose PID 1 is not systemd (both lines, in order).
NOT_BOOTED = ("System has not been booted with systemd as init system (PID 1). Can't operate.\n"
              "Failed to connect to bus: Host is down")
# util-linux dmesg with kernel.dmesg_restrict=1, run by a non-root user.
DMESG_EPERM = "dmesg: read kernel buffer failed: Operation not permitted"
GATHER = ("import json, sys\n"
          "from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts\n"
          "from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot\n"
          "print(json.dumps(gather_facts(Sysroot('/'), sys.argv[1:])))\n")


def failing(stderr: str, rc: int = 1) -> str:
    """A shell script that prints ``stderr`` on stderr and exits ``rc``."""
    lines = "".join(f"printf '%s\\n' '{line}' >&2\n" for line in stderr.splitlines())
    return f"#!/bin/sh\n{lines}exit {rc}\n"


def live_facts(tmp_path: Path, commands: dict[str, str], layers: list[str],
               booted: bool) -> dict:
    """``gather_facts(Sysroot("/"), layers)`` in a bwrap namespace whose ``PATH`` holds only
    ``commands`` (name -> script) and whose ``/run`` has ``systemd/system`` when ``booted``."""
    if not BWRAP:
        pytest.fail("bubblewrap not installed: apt-get install -y bubblewrap (.ci/packages.txt)")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in commands.items():
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    argv = [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/run"]
    argv += ["--dir", "/run/systemd/system"] if booted else []
    env = {"PATH": str(bindir), "LANG": "C",
           "PYTHONPATH": os.environ["ANSIBLE_COLLECTIONS_PATH"]}
    run = subprocess.run([*argv, sys.executable, "-c", GATHER, *layers], capture_output=True,
                         text=True, env=env, check=False, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def errors_of(layer: dict, prefix: str) -> list[dict]:
    return [e for e in layer["errors"] if e["fact"].startswith(prefix)]


def test_systemctl_exit_1_is_one_error_line(tmp_path):
    cpu = live_facts(tmp_path, {"systemctl": failing(NO_BUS)}, ["cpu"], booted=True)["cpu"]
    assert cpu["systemd_show"] == dict.fromkeys(UNITS)
    assert errors_of(cpu, "systemd_show") == [
        {"fact": "systemd_show", "path": SHOW, "error": f"exit status 1: {NO_BUS}"}]


def test_missing_systemctl_on_a_systemd_host_is_an_error(tmp_path):
    cpu = live_facts(tmp_path, {}, ["cpu"], booted=True)["cpu"]
    assert cpu["systemd_show"] == dict.fromkeys(UNITS)
    assert errors_of(cpu, "systemd_show") == [
        {"fact": "systemd_show", "path": SHOW, "error": "command not found"}]


@pytest.mark.parametrize("commands", [{}, {"systemctl": failing(NOT_BOOTED)}])
def test_no_systemd_as_init_is_an_answer_not_an_error(tmp_path, commands):
    """Without systemd as PID 1 there is nothing to show: ``None``, no error."""
    cpu = live_facts(tmp_path, commands, ["cpu"], booted=False)["cpu"]
    assert cpu["systemd_show"] == dict.fromkeys(UNITS)
    assert errors_of(cpu, "systemd_show") == []


SHOWN = "".join(f"Id={unit}\nAllowedCPUs=\nEffectiveCPUs=0\n\n" for unit in UNITS)


@pytest.mark.parametrize("booted", [True, False])
def test_systemctl_is_asked_only_on_a_systemd_host(tmp_path, booted):
    """A host without systemd as PID 1 is not asked (the answer is known), however its
    ``systemctl`` would answer."""
    script = f"#!/bin/sh\nprintf '%s' '{SHOWN}'\n"
    cpu = live_facts(tmp_path, {"systemctl": script}, ["cpu"], booted=booted)["cpu"]
    shown = {"allowed_cpus": "", "effective_cpus": "0"}
    assert cpu["systemd_show"] == (dict.fromkeys(UNITS, shown) if booted
                                   else dict.fromkeys(UNITS))
    assert errors_of(cpu, "systemd_show") == []


def test_failing_dmesg_is_the_same_line_in_gpu_and_vm(tmp_path):
    facts = live_facts(tmp_path, {"dmesg": failing(DMESG_EPERM)}, ["gpu", "vm"], booted=True)
    line = {"path": "dmesg", "error": f"exit status 1: {DMESG_EPERM}"}
    assert facts["gpu"]["xids"] is None
    assert errors_of(facts["gpu"], "xids") == [{"fact": "xids", **line}]
    assert facts["vm"]["cmdqv"]["dmesg"] is None
    assert errors_of(facts["vm"], "cmdqv.dmesg") == [{"fact": "cmdqv.dmesg", **line}]


def test_empty_systemctl_output_is_a_parse_error(tmp_path):
    root = copy_sysroot("healthy-h100", tmp_path)
    (root / ".exemplar/commands/systemctl-show-slices.txt").write_text("")
    sheet = FactSheet()
    layer_cpu_placement.gather_into(sheet, Sysroot(str(root)))
    have = sheet.result()
    assert have["systemd_show"] == dict.fromkeys(UNITS)
    assert have["errors"] == [{"fact": "systemd_show",
                               "path": "/.exemplar/commands/systemctl-show-slices.txt",
                               "error": "no unit block with an 'Id=' line: ''"}]


@pytest.mark.parametrize(("rc", "output", "reason"), [
    (1, NOT_BOOTED, "exit status 1: System has not been booted with systemd as init system "
                    "(PID 1). Can't operate."),
    (255, "", "exit status 255"),
])
def test_command_failed_reason_is_the_first_line(rc, output, reason):
    assert CommandFailed(SHOW, rc, output).reason == reason
