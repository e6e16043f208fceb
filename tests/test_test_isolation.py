"""The test suite never touches the operator's machine state (tests/isolation.py): the session
has its own home and state directory, a test that changes the operator's state fails, and
the session leaves no temporary directory behind.

Before, the suite wrote ``apply`` experiments into ``~/.local/state/exemplar-tune`` (tests
that ran the CLI without a state directory of their own: ``test_errors.py::
test_an_unreachable_host_is_reported_whatever_its_layer_has_to_do`` and the host states of
``test_verdict_channels.py``) and left ``/tmp/exemplar-colls-*`` after every run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import isolation
from tests.conftest import REPO, SESSION
from tests.helpers import cli_env

INNER = '''
import os
from pathlib import Path


def test_writes_to_the_operators_state():
    state = Path(os.environ["OPERATOR_HOME"], ".local", "state", "exemplar-tune")
    state.mkdir(parents=True)
    (state / "ledger.sqlite3").write_text("a test's experiment")


def test_leaves_it_alone():
    assert Path(os.environ["HOME"]) != Path(os.environ["OPERATOR_HOME"])
    assert os.environ["EXEMPLAR_TUNE_STATE_DIR"].startswith(os.environ["TMPDIR"])
'''


def test_the_session_has_its_own_home_and_state_directory():
    for name in ("HOME", "EXEMPLAR_TUNE_STATE_DIR"):
        assert Path(os.environ[name]).is_relative_to(SESSION), name
    assert "XDG_STATE_HOME" not in os.environ  # the state home is the session HOME's
    code = "from exemplar_tune.runs import state_dir; print(state_dir())"
    for dropped in ((), ("EXEMPLAR_TUNE_STATE_DIR",)):
        env = {k: v for k, v in cli_env().items() if k not in dropped}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, check=True)
        assert Path(out.stdout.strip()).is_relative_to(SESSION), (dropped, out.stdout)


def test_a_test_that_changes_the_operators_state_fails_and_the_session_leaves_nothing(
        tmp_path):
    """A session of two tests in a subprocess, the operator's home a temporary directory:
    the test that writes there fails (an error at its teardown) naming what it created, the
    other passes, and the session's directory is gone afterwards."""
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    operator, temp = tmp_path / "operator-home", tmp_path / "tmp"
    operator.mkdir()
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "EXEMPLAR_TUNE_STATE_DIR"}
    env.update(HOME=str(operator), OPERATOR_HOME=str(operator), TMPDIR=str(temp),
               PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                          "tests.conftest", "--rootdir", str(tmp_path), "-c",
                          str(tmp_path / "pytest.ini"), str(tmp_path / "test_inner.py")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
                         check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "2 passed, 1 error" in out.stdout, out.stdout  # the writer fails at its teardown
    assert "ERROR test_inner.py::test_writes_to_the_operators_state" in out.stdout
    state = operator / ".local" / "state" / "exemplar-tune"
    assert "changed the operator's exemplar-tune state" in out.stdout
    assert f"{state}: created (dir); {state / 'ledger.sqlite3'}: created (file)" in out.stdout
    assert list(temp.iterdir()) == [], "the session left its directory behind"


def test_directories_of_sessions_that_are_gone_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    gone = tmp_path / f"{isolation.SESSION_PREFIX}{dead}-abc"
    alive = tmp_path / f"{isolation.SESSION_PREFIX}{os.getpid()}-abc"
    old = tmp_path / f"{isolation.LEGACY_PREFIX}old"
    recent = tmp_path / f"{isolation.LEGACY_PREFIX}new"
    for path in (gone, alive, old, recent):
        (path / "ansible_collections").mkdir(parents=True)
    (gone / "ansible_collections" / "tune").symlink_to(REPO)  # removed, never followed
    day_ago = os.stat(old).st_mtime - isolation.LEGACY_AGE_S - 60
    for path in (old, old / "ansible_collections"):
        os.utime(path, (day_ago, day_ago))
    isolation.remove_stale_sessions()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, recent.name])
    assert (REPO / "pyproject.toml").is_file()
