"""A state directory on a read-only filesystem (a read-only home, a container's image layer):
the commands that only read work from it, the ones that must write say so in one line.

The commands run inside bubblewrap (``bwrap``, ``.ci/packages.txt``) with the state directory
bound read-only over itself: the kernel's own EROFS, as on a read-only mount.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from exemplar_tune.sim.cluster import create_cluster
from tests.helpers import cli_env

BWRAP = shutil.which("bwrap")


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A one-host cluster and a state directory holding one applied experiment."""
    base = tmp_path_factory.mktemp("ro")
    create_cluster(base / "c", "gb300-exemplar-gap", hosts=1)
    host, profile, state = base / "c/hosts/node01", base / "c/profile.yaml", base / "ro/state"
    applied = run_cli(state, None, "apply", "--layer", "fabric", "--sysroot", str(host),
                      "--profile", str(profile))
    assert applied.returncode == 0, applied.stderr
    return host, profile, state


def run_cli(state: Path, read_only: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with ``state`` as its state directory, ``read_only`` bound read-only."""
    if not BWRAP:
        pytest.fail("bwrap is needed: apt-get install bubblewrap (.ci/packages.txt lists it)")
    bind = ["--ro-bind", str(read_only), str(read_only)] if read_only else []
    argv = [BWRAP, "--bind", "/", "/", *bind, "--dev", "/dev", "--proc", "/proc",
            sys.executable, "-m", "exemplar_tune.cli", *args, "--quiet"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          env=dict(cli_env(), EXEMPLAR_TUNE_STATE_DIR=str(state)))


def test_reading_commands_work_from_a_read_only_state_directory(setup):
    host, profile, state = setup
    ro = state.parent
    history = run_cli(state, ro, "history", "--format", "json")
    assert history.returncode == 0, history.stderr
    [experiment] = json.loads(history.stdout)
    assert experiment["kind"] == "apply" and experiment["status"] == "finished"
    for args in (("show", "latest"), ("report", "latest"),
                 ("preflight", "--sysroot", str(host), "--profile", str(profile)),
                 ("facts", "--sysroot", str(host), "--layer", "fabric"),
                 ("history", "--ledger", str(ro / "none.sqlite3"))):
        out = run_cli(state, ro, *args)
        assert out.returncode in (0, 1) and out.stderr == "", (args, out.stderr)
    assert sorted(p.name for p in state.iterdir()) == ["ledger.sqlite3", "locks"]


def test_changing_commands_say_in_one_line_that_they_cannot_write(setup):
    host, profile, state = setup
    ro = state.parent
    target = ("apply", "--layer", "fabric", "--sysroot", str(host), "--profile", str(profile))
    before = (host / "etc/nccl.conf").read_bytes()
    refused = run_cli(state, ro, *target)
    assert refused.returncode == 2
    assert refused.stderr == (f"exemplar-tune: error: state directory {state}: Read-only file "
                              "system; a command that changes hosts records there which hosts "
                              "it holds (EXEMPLAR_TUNE_STATE_DIR names another)\n")
    elsewhere = state.parent.parent / "writable"
    ledger = run_cli(elsewhere, ro, *target, "--ledger", str(ro / "new.sqlite3"))
    assert ledger.returncode == 2
    assert ledger.stderr == (f"exemplar-tune: error: {ro / 'new.sqlite3'}: the ledger's "
                             "directory is not writable (a read-only filesystem?); --ledger "
                             "names another place\n")
    assert (host / "etc/nccl.conf").read_bytes() == before
