"""Style gates that are part of the test command: ruff (Python) and ansible-lint (production)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import yaml
from packaging.specifiers import SpecifierSet

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


def test_requires_ansible_is_the_ansible_core_range_of_the_package():
    """meta/runtime.yml and pyproject.toml name the same ansible-core versions."""
    runtime = yaml.safe_load((REPO / "meta/runtime.yml").read_text())["requires_ansible"]
    core = next(d for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
                ["dependencies"] if d.startswith("ansible-core"))
    wanted = SpecifierSet(core.removeprefix("ansible-core"))
    assert SpecifierSet(runtime) == SpecifierSet(
        ",".join(f"{s.operator}{s.version}.0" for s in wanted))
