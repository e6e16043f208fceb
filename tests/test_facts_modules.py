"""The facts modules through real ansible-runner runs on localhost, with fixture sysroots."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYER_NAMES,
    gather_facts,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from exemplar_tune.fleet.collection import link_collection
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
def test_one_layer_is_the_layers_option_with_one_name(layer):
    outcome = _run("exemplar.tune.facts", {"layers": [layer],
                                           "sysroot": str(SYSROOTS / "h100-x86")})
    assert list(_facts(outcome)) == [layer]


@pytest.mark.parametrize(("module", "instead"), [("cpu_facts", "exemplar.tune.facts with layers"),
                                                 ("kernel_attr", "use exemplar.tune.layer")])
def test_removed_modules_say_what_replaces_them(tmp_path, module, instead):
    """meta/runtime.yml tombstones: a playbook still naming one fails, saying what to use."""
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(link_collection(tmp_path))}
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost",
                          "-c", "local", "-m", f"exemplar.tune.{module}"],
                         capture_output=True, text=True, check=False, env=env, cwd=tmp_path)
    assert out.returncode != 0 and "has been removed" in out.stdout and instead in out.stdout


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


@pytest.mark.parametrize("module", sorted(p.stem for p in (REPO / "plugins/modules").glob("*.py")))
def test_every_module_is_documented_with_its_attributes(module):
    bindir = os.path.dirname(sys.executable)
    out = subprocess.run([f"{bindir}/ansible-doc", "-j", "-t", "module", f"exemplar.tune.{module}"],
                         capture_output=True, text=True, check=False, cwd=REPO)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)[f"exemplar.tune.{module}"]["doc"]
    attributes = doc["attributes"]
    assert attributes["check_mode"]["support"] == "full"
    assert attributes["diff_mode"]["support"] in ("full", "none")
    assert attributes["platform"]["platforms"] == "posix"


def test_omitted_options_come_from_the_host_variables():
    """No task argument at all: each host's exemplar_sysroot and exemplar_layers are read by
    the module's action on the controller; an option the task gives wins over the host's."""
    hostvars = {h: {"exemplar_sysroot": str(SYSROOTS / h), "exemplar_layers": ["vm", "cpu"]}
                for h in FIXTURE_HOSTS}
    inventory = local_inventory(list(FIXTURE_HOSTS), hostvars)
    outcome = _run("exemplar.tune.facts", {}, inventory)
    for host in FIXTURE_HOSTS:
        assert _facts(outcome, host) == gather_facts(Sysroot(str(SYSROOTS / host)), ["vm", "cpu"])
    given = FIXTURE_HOSTS[0]
    outcome = _run("exemplar.tune.facts", {"sysroot": str(SYSROOTS / given), "layers": ["gpu"]},
                   inventory)
    for host in FIXTURE_HOSTS:
        assert _facts(outcome, host) == gather_facts(Sysroot(str(SYSROOTS / given)), ["gpu"])


def test_as_json_returns_the_same_facts_as_one_text():
    root = str(SYSROOTS / FIXTURE_HOSTS[0])
    plain = _facts(_run("exemplar.tune.facts", {"sysroot": root}))
    result = _run("exemplar.tune.facts", {"sysroot": root, "as_json": True}).hosts["localhost"]
    res = result.tasks[-1]["result"]
    assert "ansible_facts" not in res and json.loads(res["exemplar_tune_json"]) == plain


def test_async_runs_through_the_action(tmp_path):
    """``async`` with ``poll`` works as for any module: the action hands the wrapped module on."""
    playbook = tmp_path / "async.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - exemplar.tune.facts: {layers: [vm]}\n      async: 60\n      poll: 1\n"
        "      register: got\n"
        "    - ansible.builtin.assert:\n"
        "        that: got.ansible_facts.exemplar_tune.vm.sources | length > 0\n")
    host = FIXTURE_HOSTS[0]
    inventory = local_inventory([host], {host: {"exemplar_sysroot": str(SYSROOTS / host)}})
    outcome = AnsibleRun(inventory, timeout=120).playbook(playbook)
    assert outcome.status == "successful", outcome.hosts[host].message
