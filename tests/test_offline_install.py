"""The README's offline install works: a wheelhouse built on a connected machine installs
exemplar-tune into a fresh venv with no index and no network, and the CLI reads a sysroot.

The wheelhouse step uses the network (as ``pip install`` does in CI). The install runs in a
bubblewrap (``bwrap``, ``.ci/packages.txt``) network namespace with no interface up, with
``--no-index --find-links`` only, no pip configuration file, ``PIP_NO_INDEX=1`` and an
index URL nothing listens on: a wheel missing from the wheelhouse fails the install.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.conftest import SYSROOTS
from tests.helpers import run_ok, tracked_tree

pytestmark = pytest.mark.system  # slow: downloads and installs every runtime dependency

BWRAP = shutil.which("bwrap")
HOST = SYSROOTS / "h100-x86"


def offline_env(home: str) -> dict[str, str]:
    """pip with no configuration file, no index and an index URL nothing answers."""
    return {"PATH": "/usr/bin:/bin", "HOME": home, "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_INDEX": "1", "PIP_INDEX_URL": "http://127.0.0.1:9/",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def test_wheelhouse_installs_without_index_or_network(tmp_path):
    if not BWRAP:
        pytest.fail("bubblewrap not installed: apt-get install -y bubblewrap (.ci/packages.txt)")
    connected = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path),
                 "PIP_CACHE_DIR": str(tmp_path / "pipcache")}
    wheelhouse = tmp_path / "wheelhouse"
    run_ok([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheelhouse),
            str(tracked_tree(tmp_path / "src"))], connected)
    wheels = sorted(path.name for path in wheelhouse.glob("*.whl"))
    assert any(name.startswith("exemplar_tune-") for name in wheels)
    assert any(name.startswith("ansible_core-") for name in wheels)

    venv = tmp_path / "venv"
    offline = offline_env(str(tmp_path))
    no_network = [BWRAP, "--dev-bind", "/", "/", "--unshare-net"]
    run_ok([*no_network, sys.executable, "-m", "venv", str(venv)], offline)
    run_ok([*no_network, str(venv / "bin/pip"), "install", "-q", "--no-index", "--find-links",
            str(wheelhouse), "exemplar-tune"], offline)

    out = run_ok([*no_network, str(venv / "bin/exemplar-tune"), "facts", "--sysroot", str(HOST),
                  "--format", "json"], offline, cwd=tmp_path)
    want = json.loads(json.dumps(gather_facts(Sysroot(str(HOST)))))
    assert json.loads(out.stdout) == want
    assert want["gpu"]["count"] == 8
