"""The claim each host keeps on itself: the layer, restore and host_claim modules through real
ansible-runner on fixture sysroot copies, and the claim file under racing processes.

The controller-level cases (a second controller with another state directory during a measured
run, a SIGKILLed holder, ``unlock``) are in ``test_faults.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from exemplar_tune.fleet.host_claims import machine_id
from tests.conftest import REPO
from tests.helpers import copy_sysroot, tree_state

CLAIM = "var/lib/exemplar-tune/claim.json"
PROFILE = {"name": "t", "fabric": {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4"}}}
OTHER = {"token": "t-other", "machine": "another-machine", "controller": "ctl9", "pid": 4242,
         "created": 1.0, "command": "tune", "started": "2026-12-05T07:00:00Z"}


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return copy_sysroot("h100-x86", tmp_path)


def claim(token: str = "t-mine", release: bool = False, replace: list[str] | None = None) -> dict:
    return {"token": token, "release": release, "replace": replace or [],
            "holder": {"machine": machine_id(), "controller": "here", "pid": os.getpid(),
                       "created": 2.0, "command": "apply", "started": "2026-12-05T08:00:00Z"}}


def layer(root: Path, check: bool = False, **extra):
    args = {"layers": ["fabric"], "profile": PROFILE, "sysroot": str(root), **extra}
    if not check:
        args["run_id"] = "r1"
    return AnsibleRun(local_inventory(), timeout=300, check=check).module(
        "exemplar.tune.layer", args).hosts["localhost"]


def changed(result) -> bool | None:
    """True or False for a host that answered without failing; None otherwise."""
    return result.changed if result.status == "ok" else None


def claimed_by(root: Path, holder: dict) -> None:
    (root / CLAIM).parent.mkdir(parents=True, exist_ok=True)
    (root / CLAIM).write_text(json.dumps(holder))


def outside_claim(state: dict) -> dict:
    """Everything but the journal and claim directory and the parents it was made in."""
    return {k: v for k, v in state.items()
            if k not in ("var", "var/lib") and not k.startswith("var/lib/exemplar-tune")}


def test_a_change_takes_the_claim_and_gives_it_back_when_told(host: Path) -> None:
    assert changed(layer(host, claim=claim(release=True)))
    assert not (host / CLAIM).exists()
    assert changed(layer(host, claim=claim())) is False  # claim kept; nothing left to change
    kept = json.loads((host / CLAIM).read_text())
    assert kept["token"] == "t-mine" and kept["command"] == "apply"
    assert oct((host / CLAIM).stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("given", [claim(), None], ids=["with a claim", "by hand"])
def test_a_host_another_controller_holds_is_not_changed(host: Path, given) -> None:
    claimed_by(host, OTHER)
    before = tree_state(host)
    result = layer(host, **({"claim": given} if given else {}))
    assert result.status == "failed"
    assert result.message == (
        "/var/lib/exemplar-tune/claim.json: claimed by another exemplar-tune (pid 4242 on "
        "ctl9, 'tune', since 2026-12-05T07:00:00Z); nothing was changed. If that controller is "
        "gone: exemplar-tune unlock with the same hosts")
    assert result.tasks[-1]["result"]["claimed_by"]["token"] == "t-other"
    assert tree_state(host) == before  # the claim file included


def test_a_claim_named_stale_is_replaced_and_check_mode_never_looks(host: Path) -> None:
    claimed_by(host, OTHER)
    before = tree_state(host)
    assert changed(layer(host, check=True))  # the audit sees the drift
    assert tree_state(host) == before
    assert changed(layer(host, claim=claim(replace=["t-other"], release=True)))
    assert not (host / CLAIM).exists()


def test_restore_takes_the_claim_too(host: Path) -> None:
    pristine = outside_claim(tree_state(host))
    assert changed(layer(host, claim=claim(release=True)))
    claimed_by(host, OTHER)
    run = AnsibleRun(local_inventory(), timeout=300)
    refused = run.playbook(REPO / "playbooks/restore.yml", {
        "exemplar_run_id": "r1", "exemplar_sysroot": str(host),
        "exemplar_claim": claim(release=True)}).hosts["localhost"]
    assert refused.status == "failed" and "claimed by another exemplar-tune" in refused.message
    done = run.playbook(REPO / "playbooks/restore.yml", {
        "exemplar_run_id": "r1", "exemplar_sysroot": str(host),
        "exemplar_claim": claim(replace=["t-other"], release=True)}).hosts["localhost"]
    assert changed(done)
    assert _no_mtimes(outside_claim(tree_state(host))) == _no_mtimes(pristine)
    assert not (host / CLAIM).exists()


def _no_mtimes(state: dict) -> dict:
    return {k: v[:3] + v[4:] for k, v in state.items()}


def test_the_claim_playbook_takes_refuses_and_gives_back(host: Path) -> None:
    run = AnsibleRun(local_inventory(), timeout=300)
    extra = {"exemplar_sysroot": str(host), "exemplar_claim": claim()}
    assert changed(run.playbook(REPO / "playbooks/claim.yml", extra).hosts["localhost"])
    assert changed(run.playbook(REPO / "playbooks/claim.yml", extra).hosts["localhost"]) is False
    other = run.playbook(REPO / "playbooks/claim.yml", {
        **extra, "exemplar_claim": claim("t-second")}).hosts["localhost"]
    assert other.status == "failed" and "pid" in other.message
    gone = run.playbook(REPO / "playbooks/claim.yml", {
        **extra, "exemplar_claim_state": "absent"}).hosts["localhost"]
    assert changed(gone) and not (host / CLAIM).exists()


RACER = """
import sys
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.host_claim import take
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot
try:
    take(Sysroot(sys.argv[1]), {"token": sys.argv[2], "holder": {}, "replace": []})
    print("won")
except HostStateError:
    print("refused")
"""


def test_racing_controllers_never_both_take_a_host(host: Path) -> None:
    """Twelve processes take the same host's claim at once: exactly one gets it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(host), f"t{i}"], env=env,
                              stdout=subprocess.PIPE, text=True) for i in range(12)]
    outcomes = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outcomes == ["refused"] * 11 + ["won"]


def test_a_host_that_cannot_keep_a_claim_fails_in_one_line(host: Path) -> None:
    (host / "var/lib/exemplar-tune").parent.mkdir(parents=True, exist_ok=True)
    (host / "var/lib/exemplar-tune").write_text("not a directory")
    result = layer(host, claim=claim(release=True))
    assert result.status == "failed"
    assert result.message.startswith("/var/lib/exemplar-tune/claim.json: cannot claim the host")
