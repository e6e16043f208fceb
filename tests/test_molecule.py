"""Each role's molecule scenario: check mode writes nothing, converge, idempotence, verify
(the layer's checks pass), restore byte-identical and idempotent. Real molecule, real Ansible."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.system  # slow: real Ansible/Slurm/SSH end to end

SCENARIOS = sorted(p.name for p in (REPO / "extensions" / "molecule").iterdir()
                   if (p / "molecule.yml").is_file())


def test_every_role_has_a_scenario():
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
    assert roles and set(roles) <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario, tmp_path):
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}",
               EXEMPLAR_COLLECTIONS_PATH=os.environ["ANSIBLE_COLLECTIONS_PATH"],
               EXEMPLAR_TUNE_STATE_DIR=str(tmp_path / "state"), NO_COLOR="1")
    # scenarios have no create/destroy: reset any state a previous run left behind
    subprocess.run([f"{bindir}/molecule", "reset", "-s", scenario], cwd=REPO, env=env,
                   capture_output=True, text=True, timeout=300, check=False)
    out = subprocess.run([f"{bindir}/molecule", "test", "-s", scenario], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]
    for step in ("prepare", "converge", "idempotence", "verify", "side_effect"):
        assert f"{step}: Executed: Successful" in out.stdout + out.stderr, step
