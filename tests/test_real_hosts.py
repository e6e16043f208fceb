"""Every command on hosts captured from real machines by other people (``tests/realhosts.py``:
AMD Genoa, Intel Granite Rapids-D, Kunpeng 920 and Graviton2 arm64, NVIDIA GB10, three KVM
guests - one with the haltpoll idle driver -, an RT host with isolcpus/nohz_full), all in
one inventory, with ``--profile auto`` and with a site profile that turns every host-side cpu
and vm knob on.

Invariants, per tree: every command exits 0 or 1 with no internal error; no layer fails on a
value the host itself reported; check mode writes nothing; after ``apply`` of every layer
``audit`` shows no drift (so a second apply has nothing left to change); ``restore`` of every
run, newest first, gives back the tree byte for byte (content, mode, owner).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.exemplar.tune.plugins.module_utils.layers import ROLE_LAYERS

from tests.helpers import tree_state
from tests.realhosts import KINDS, unpack
from tests.test_cli import cli

pytestmark = pytest.mark.system  # slow: real Ansible over eight trees, every command


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict[str, Path]:
    """Each real tree by name, and ``inventory``: all of them as one inventory."""
    work = tmp_path_factory.mktemp("realhosts")
    trees = {name: unpack(name, work) for name in sorted(KINDS)}
    base = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = work / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        name: {**base, "exemplar_sysroot": str(root)} for name, root in trees.items()}}}))
    old = os.environ.get("EXEMPLAR_TUNE_STATE_DIR")
    os.environ["EXEMPLAR_TUNE_STATE_DIR"] = str(work / "state")
    yield {"inventory": inventory, **trees}
    if old is None:
        os.environ.pop("EXEMPLAR_TUNE_STATE_DIR", None)
    else:
        os.environ["EXEMPLAR_TUNE_STATE_DIR"] = old


def run(*args: str) -> dict:
    """The command's JSON; it must exit 0 or 1 without an internal error."""
    out = cli(*args, "--format", "json")
    assert out.returncode in (0, 1), (args, out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr, out.stderr
    return json.loads(out.stdout)


JOURNAL = "var/lib/exemplar-tune"  # stays on the host: the record of what was changed


def _content(root: Path) -> dict:
    """Paths with type, mode, owner, group and bytes (no mtimes), outside the journal and the
    directories made to hold it."""
    return {p: (v[0], v[1], v[2], v[4]) for p, v in tree_state(root).items()
            if not (p.startswith(JOURNAL) or JOURNAL.startswith(p + "/"))}


def test_facts_and_preflight_read_every_tree(fleet):
    inventory = str(fleet["inventory"])
    facts = run("facts", "-i", inventory)
    assert sorted(facts["hosts"]) == sorted(KINDS)
    doc = run("preflight", "-i", inventory)
    assert sorted(doc["hosts"]) == sorted(KINDS) and doc["unreachable"] == {}
    for host, data in doc["hosts"].items():
        broken = [r["id"] for r in data["results"]
                  if r["detail"].startswith("check could not run")]
        assert broken == [], (host, broken)
        assert data["profile"] == "generic", host  # none of them has an NVIDIA GPU


SITE = {"name": "site", "vm": {"iommu_default_domain": "identity"},
        "cpu": {"deep_cstates": True, "governor": "performance", "turbo": True,
                "numa_balancing": 0, "sched_autogroup": 0}}


@pytest.mark.parametrize("profile", ["auto", "site"])
def test_audit_apply_audit_restore_on_every_tree(fleet, tmp_path, profile):
    inventory = str(fleet["inventory"])
    if profile == "site":
        (tmp_path / "site.yaml").write_text(yaml.safe_dump(SITE))
        profile = str(tmp_path / "site.yaml")
    trees = {name: fleet[name] for name in KINDS}
    before = {name: _content(root) for name, root in trees.items()}
    audit = run("audit", "-i", inventory, "--profile", profile)
    assert audit["not_audited"] == [], audit["not_audited"]  # no layer failed on host data
    for layer in ROLE_LAYERS:
        check = run("apply", "--layer", layer, "--check", "-i", inventory, "--profile", profile)
        assert check["failed"] == {} and check["unreachable"] == {}, (layer, check["failed"])
    assert {name: _content(root) for name, root in trees.items()} == before  # check mode

    runs, changed = [], {}
    for layer in ROLE_LAYERS:
        applied = run("apply", "--layer", layer, "-i", inventory, "--profile", profile,
                      "--run-id", f"real-{layer}-{tmp_path.name}")
        assert applied["failed"] == {}, (layer, applied["failed"])
        runs.append(applied["experiment"])
        changed[layer] = {h: [k["knob"] for k in d["changed"]]
                          for h, d in applied["hosts"].items() if d["changed"]}
    assert changed["cpu"], "the cpu layer changes something on these hosts (governors)"
    after = run("audit", "-i", inventory, "--profile", profile)
    assert after["drift"] == [] and after["not_audited"] == [], after["drift"]

    for experiment in reversed(runs):
        restored = run("restore", "--run", experiment)
        assert not restored.get("failed"), restored
    assert {name: _content(root) for name, root in trees.items()} == before
