"""Style gates that are part of the test command: ruff (Python) and ansible-lint (production)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def _tool(name):
    return os.path.join(os.path.dirname(sys.executable), name)


def test_ruff_is_clean():
    out = subprocess.run([_tool("ruff"), "check", "."], cwd=REPO, capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ansible_lint_production_profile_is_clean():
    out = subprocess.run([_tool("ansible-lint"), "--nocolor"], cwd=REPO, capture_output=True,
                         text=True, check=False, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert "passed" in out.stderr + out.stdout
