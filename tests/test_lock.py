"""The host lock: claims by host identity, refused overlaps, stale claims of dead controllers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exemplar_tune.errors import UserError
from exemplar_tune.fleet.lock import hold_hosts, live_claims, registry_path
from tests.conftest import REPO
from tests.test_ledger import child, sigkill

CHILD_CLAIM = """
import sys, time
from exemplar_tune.fleet.lock import hold_hosts
with hold_hosts(sys.argv[1], sys.argv[2].split(","), "tune"):
    print("claimed", flush=True)
    time.sleep(120)
"""


def test_an_overlapping_claim_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with child(CHILD_CLAIM, str(tmp_path), "gpu01,gpu02,gpu03") as (proc, line):
        assert line == "claimed"
        with pytest.raises(UserError) as error, hold_hosts(tmp_path, ["gpu03", "gpu09"], "apply"):
            pass
        message = str(error.value)
        assert message.startswith(f"another exemplar-tune (pid {proc.pid} on ")
        assert "'tune'" in message and "is changing gpu03;" in message
        assert "\n" not in message
        with hold_hosts(tmp_path, ["gpu04"], "apply"):  # other hosts: no conflict
            assert {c["command"] for c in live_claims(tmp_path)} == {"tune", "apply"}
    assert [c["command"] for c in live_claims(tmp_path)] == []


def test_the_claim_of_a_sigkilled_controller_is_taken_over(tmp_path: Path) -> None:
    with child(CHILD_CLAIM, str(tmp_path), "gpu01") as (proc, line):
        assert line == "claimed"
        sigkill(proc)
        assert json.loads(registry_path(tmp_path).read_text())[0]["pid"] == proc.pid
        with hold_hosts(tmp_path, ["gpu01"], "rollback"):
            claims = json.loads(registry_path(tmp_path).read_text())
            assert [(c["pid"], c["command"]) for c in claims] == [(os.getpid(), "rollback")]


def test_a_reused_pid_does_not_keep_a_stale_claim(tmp_path: Path) -> None:
    """The pid is alive but started later than the claim's controller: another process."""
    registry_path(tmp_path).parent.mkdir(parents=True)
    registry_path(tmp_path).write_text(json.dumps([{
        "token": "x", "pid": os.getpid(), "host": os.uname().nodename, "created": 1.0,
        "command": "tune", "started": "2026-01-01T00:00:00Z", "hosts": ["gpu01"]}]))
    with hold_hosts(tmp_path, ["gpu01"], "apply"):
        assert [c["command"] for c in live_claims(tmp_path)] == ["apply"]


def test_claims_are_exclusive_within_one_process_and_released(tmp_path: Path) -> None:
    with hold_hosts(tmp_path, ["a", "b"], "tune"), \
            pytest.raises(UserError, match=f"pid {os.getpid()}.*changing b;"), \
            hold_hosts(tmp_path, ["b"], "apply"):
        pass
    with hold_hosts(tmp_path, ["b"], "apply"):
        pass


def test_many_hosts_are_named_briefly(tmp_path: Path) -> None:
    hosts = [f"gpu{i:03d}" for i in range(40)]
    with hold_hosts(tmp_path, hosts, "tune"), pytest.raises(UserError) as error, \
            hold_hosts(tmp_path, hosts, "apply"):
        pass
    assert "gpu000, gpu001, gpu002, gpu003, gpu004 and 35 more;" in str(error.value)


def test_a_torn_registry_is_refused_not_read_as_empty(tmp_path: Path) -> None:
    """Reading it as empty would drop the claims of live controllers."""
    registry_path(tmp_path).parent.mkdir(parents=True)
    registry_path(tmp_path).write_text('[{"pid": 1, "hos')
    with pytest.raises(UserError, match="lock registry .* is unreadable"), \
            hold_hosts(tmp_path, ["gpu01"], "apply"):
        pass
    assert registry_path(tmp_path).read_text() == '[{"pid": 1, "hos'


def test_a_claim_from_another_machine_is_kept_and_explained(tmp_path: Path) -> None:
    registry_path(tmp_path).parent.mkdir(parents=True)
    registry_path(tmp_path).write_text(json.dumps([{
        "token": "x", "pid": 1, "host": "other-controller", "created": 1.0,
        "command": "tune", "started": "2026-01-01T00:00:00Z", "hosts": ["gpu01"]}]))
    with pytest.raises(UserError, match="a claim from another machine: if that controller is "
                       "gone, remove its entry from .*hosts.json"), \
            hold_hosts(tmp_path, ["gpu01"], "apply"):
        pass


def test_concurrent_claimers_never_both_win(tmp_path: Path) -> None:
    """Eight processes race for the same host: exactly one holds it at any time."""
    script = ("import sys, time\nfrom exemplar_tune.fleet.lock import hold_hosts\n"
              "from exemplar_tune.errors import UserError\n"
              "try:\n    with hold_hosts(sys.argv[1], ['gpu01'], 'apply'):\n"
              "        print('won', flush=True); time.sleep(2)\n"
              "except UserError:\n    print('refused', flush=True)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(8)]
    outcomes = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outcomes == ["refused"] * 7 + ["won"]
