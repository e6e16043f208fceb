"""Test set-up: the session's own machine state, and the repository importable as the
collection ``exemplar.tune``.

Before anything imports the product, the session gets one private directory
(``<tmp>/exemplar-tests-<pid>-*``, removed at the end: tests/isolation.py) with its own
``HOME`` (``XDG_STATE_HOME`` unset: below it) and ``EXEMPLAR_TUNE_STATE_DIR``; a test after
which the operator's real state directory (``~/.local/state/exemplar-tune``) changed fails
(an error at its teardown). A symlink
``<session>/collections/ansible_collections/exemplar/tune -> <repo>`` is put on ``sys.path``
(for in-process imports) and exported as ``ANSIBLE_COLLECTIONS_PATH`` (for ansible-runner
and ansible-playbook subprocesses).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests import isolation

if TYPE_CHECKING:
    from tests.slurmcluster import SlurmCluster
    from tests.sshfleet import Fleet

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SYSROOTS = FIXTURES / "sysroots"
SAMPLES = FIXTURES / "samples"

_OPERATOR_STATE_DIRS = isolation.operator_state_dirs(os.environ)  # before isolate() changes it
SESSION = isolation.isolate()
_operator_state = isolation.OperatorState(_OPERATOR_STATE_DIRS)
_COLLECTIONS = SESSION / "collections"
_link = _COLLECTIONS / "ansible_collections" / "exemplar" / "tune"
_link.parent.mkdir(parents=True)
_link.symlink_to(REPO, target_is_directory=True)
sys.path.insert(0, str(_COLLECTIONS))
os.environ["ANSIBLE_COLLECTIONS_PATH"] = str(_COLLECTIONS)
os.environ.setdefault("ANSIBLE_LOCAL_TEMP", str(_COLLECTIONS / "tmp"))
os.environ.setdefault("ANSIBLE_HOME", str(_COLLECTIONS / "ansible-home"))
# The SSH fleet's hosts share this machine's filesystem: their module payloads go here, not
# under the remote user's real ~/.ansible/tmp.
os.environ.setdefault("ANSIBLE_REMOTE_TEMP", str(SESSION / "remote-tmp"))
# async jobs' status files too (the module and async_status must agree on one directory)
os.environ.setdefault("ANSIBLE_ASYNC_DIR", str(SESSION / "async"))
# Module payloads keep their bytecode here, not in the home of whoever runs the tests (the SSH
# fleet's sshd passes it to its sessions: tests/sshfleet.py).
os.environ.setdefault("EXEMPLAR_TUNE_BYTECODE_CACHE", str(_COLLECTIONS / "bytecode"))
# Every JSON document a command prints in the tests is validated against its shipped schema
# (exemplar_tune.json_schemas.checked): a mismatch fails the test that produced it.
os.environ["EXEMPLAR_TUNE_VALIDATE_JSON"] = "1"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when the operator's state changed after the last test (a module
    fixture's teardown), then remove the session directory."""
    changed = _operator_state.changes()
    if changed:
        print("\nthe operator's exemplar-tune state changed during the test session's last "
              "teardown: " + "; ".join(changed), file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    isolation.remove_session_dir(SESSION)


@pytest.fixture(autouse=True)
def operator_state_untouched() -> Iterator[None]:
    """Fail the test (at its teardown) when the operator's real state directories changed
    since the previous test ended: its fixtures' setup included."""
    yield
    changed = _operator_state.changes()
    if changed:
        pytest.fail("this test (or its fixtures) changed the operator's exemplar-tune state; "
                    "give the CLI the session's environment (tests.helpers.cli_env) or an "
                    "EXEMPLAR_TUNE_STATE_DIR: " + "; ".join(changed[:5]), pytrace=False)


@pytest.fixture
def ssh_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three real SSH hosts ``xtf1..3`` (network namespaces, own address and sshd each), torn
    down afterwards whatever happens. Fails, saying why, where the machine cannot create
    namespaces or has no sshd (.ci/packages.txt installs openssh-server and iproute2).
    See tests/sshfleet.py."""
    from tests.sshfleet import FleetUnavailable, start_fleet

    try:
        fleet = start_fleet(3, tmp_path_factory.mktemp("sshfleet"))
    except FleetUnavailable as exc:
        pytest.fail(f"SSH fleet unavailable on this machine: {exc}")
    try:
        yield fleet
    finally:
        fleet.teardown()


@pytest.fixture
def gated_cluster(slurm_cluster, tmp_path: Path):
    """The module's Slurm cluster with fresh node trees (``cluster.trees``); every node back in
    service and no exemplar-tune reservation left after the test."""
    from exemplar_tune.slurm import gate
    from tests.slurmcluster import node_sysroots

    slurm_cluster.trees = node_sysroots(tmp_path / "nodes")
    yield slurm_cluster
    for node in slurm_cluster.node_names:
        slurm_cluster.run(gate.unreserve_argv(node), check=False)
    slurm_cluster.resume_all()


@pytest.fixture(scope="module")
def slurm_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[SlurmCluster]:
    """A real Slurm cluster on this machine for one test module: slurmctld and 4 slurmd
    nodes (tests/slurmcluster.py; a module's ``SLURM_CLUSTER`` dict adds options such as
    ``fake_gpus``); every process it started is ended afterwards, also when a test fails, and
    the teardown fails if any is left. Fails, saying why, where Slurm is not installed
    (.ci/packages.txt) or the tests do not run as root (SlurmdUser=root)."""
    from tests.slurmcluster import SlurmCluster, require_slurm

    require_slurm()
    if os.geteuid() != 0:
        pytest.fail("the Slurm test cluster runs slurmd as root: run these tests as root")
    options = getattr(request.module, "SLURM_CLUSTER", {})
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), **options) as cluster:
        yield cluster
