"""The facts modules through real ansible-runner runs on localhost, with fixture sysroots."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYER_NAMES,
    gather_facts,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.ansible_run import AnsibleRun, local_inventory
from tests.conftest import REPO, SYSROOTS
from tests.helpers import FIXTURE_HOSTS


def _run(module, args, inventory=None):
    return AnsibleRun(inventory or local_inventory(), timeout=120).module(module, args)


def _facts(outcome, host="localhost"):
    result = outcome.hosts[host]
    assert result.status == "ok", result.message
    return result.tasks[-1]["result"]["ansible_facts"]["exemplar_tune"]


def test_one_call_per_host_matches_the_in_process_readers():
    """Three hosts, each reading its own sysroot through a host variable, in one run."""
    hostvars = {h: {"fixture_root": str(SYSROOTS / h)} for h in FIXTURE_HOSTS}
    outcome = _run("exemplar.tune.facts", {"sysroot": "{{ fixture_root }}"},
                   local_inventory(list(FIXTURE_HOSTS), hostvars))
    assert outcome.status == "successful"
    for host in FIXTURE_HOSTS:
        assert _facts(outcome, host) == gather_facts(Sysroot(str(SYSROOTS / host)))


@pytest.mark.parametrize("host", FIXTURE_HOSTS)
def test_facts_module_on_fixture_sysroot(host):
    outcome = _run("exemplar.tune.facts", {"sysroot": str(SYSROOTS / host)})
    facts = _facts(outcome)
    assert list(facts) == list(LAYER_NAMES)
    for layer in LAYER_NAMES:
        assert set(facts[layer]) >= {"sources", "errors"}
        assert not facts[layer]["errors"], facts[layer]["errors"]


@pytest.mark.parametrize("layer", [name for name in LAYER_NAMES if name != "workload"])
def test_per_layer_module_returns_only_its_layer(layer):
    outcome = _run(f"exemplar.tune.{layer}_facts", {"sysroot": str(SYSROOTS / "h100-x86")})
    assert list(_facts(outcome)) == [layer]


def test_layers_option_keeps_preflight_order():
    outcome = _run("exemplar.tune.facts", {"layers": ["fabric", "gpu"],
                                           "sysroot": str(SYSROOTS / "h100-x86")})
    assert list(_facts(outcome)) == ["gpu", "fabric"]


def test_unknown_layer_fails_with_one_line():
    outcome = _run("exemplar.tune.facts", {"layers": ["disk"]})
    result = outcome.hosts["localhost"]
    assert result.status == "failed"
    assert "layers" in result.message and "disk" in result.message


def test_sysroot_that_is_not_a_directory_fails_cleanly(tmp_path):
    outcome = _run("exemplar.tune.facts", {"sysroot": str(tmp_path / "absent")})
    result = outcome.hosts["localhost"]
    assert result.status == "failed"
    assert result.message == f"sysroot {tmp_path / 'absent'} is not a directory"


def test_live_localhost_facts_have_every_layer():
    facts = _facts(_run("exemplar.tune.facts", {}))
    assert list(facts) == list(LAYER_NAMES)


def test_modules_are_documented():
    bindir = os.path.dirname(sys.executable)
    for layer in ("facts", *(f"{name}_facts" for name in LAYER_NAMES if name != "workload")):
        out = subprocess.run([f"{bindir}/ansible-doc", "-t", "module", f"exemplar.tune.{layer}"],
                             capture_output=True, text=True, check=False, cwd=REPO)
        assert out.returncode == 0, out.stderr
        assert "sysroot" in out.stdout
