"""Every error is one line with exit 2 (input) or 1 (findings, unreachable), never a traceback;
nothing is recorded for a target that does not exist; restores never report a missing journal
as success. Each case reproduces a failure seen before it was fixed."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest
import yaml

from exemplar_tune.ledger import Ledger
from tests.helpers import cli_env
from tests.test_cli import cli
from tests.test_remediate import (
    copy,
    state as state,  # noqa: F401,PLW0127 - the fixture
)


def one_line_error(out: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert out.returncode == code, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("exemplar-tune: error: "), out.stderr
    return lines[0]


def test_a_missing_inventory_is_an_input_error_not_a_host_name(tmp_path, state):
    out = cli("apply", "--layer", "fabric", "-i", str(tmp_path / "missing.yml"), "--profile",
              str(state))
    assert "inventory " in one_line_error(out) and "missing.yml not found" in out.stderr


@pytest.mark.parametrize("what", ["--sysroot file", "empty inventory", "limit matches none"])
def test_no_ghost_experiment_for_a_target_that_does_not_exist(tmp_path, state, what):
    host = copy(tmp_path, "h100-x86")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node01": {
        "exemplar_sysroot": str(host), "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable}}}}))
    target = {"--sysroot file": ["--sysroot", str(state)],
              "empty inventory": ["-i", str(tmp_path / "empty.yml")],
              "limit matches none": ["-i", str(inventory), "--limit", "node99"]}[what]
    (tmp_path / "empty.yml").write_text("all: {}\n")
    out = cli("apply", "--layer", "fabric", *target, "--profile", str(state))
    one_line_error(out)
    history = cli("history", "--format", "json")
    assert json.loads(history.stdout or "[]") == []
    assert "did not finish" not in cli("audit", "--sysroot", str(host), "--profile",
                                       str(state)).stderr


def test_a_deleted_journal_fails_the_restore_of_a_changed_host(tmp_path, state):
    host = copy(tmp_path, "h100-x86")
    out = cli("apply", "--layer", "fabric", "--sysroot", str(host), "--profile", str(state))
    assert out.returncode == 0, out.stderr
    (journal,) = (host / "var/lib/exemplar-tune/journal").iterdir()
    journal.unlink()
    out = cli("rollback", "--run", "latest")
    assert out.returncode == 1
    assert f"fabric h100-x86: FAILED: no journal for run {journal.stem}" in out.stdout
    assert "NCCL_IB_QPS_PER_CONNECTION=4" in (host / "etc/nccl.conf").read_text()
    doc = json.loads(cli("show", "latest", "--format", "json").stdout)
    assert doc["experiment"]["status"] == "failed"


def test_an_unreachable_host_is_reported_whatever_its_layer_has_to_do(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"ghost": {
        "ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_connection": "ssh",
        "ansible_ssh_common_args": "-o ConnectTimeout=3"}}}}))
    empty = tmp_path / "empty-profile.yaml"
    empty.write_text(yaml.safe_dump({"name": "nothing-to-do"}))
    for args in (["apply", "--layer", "gpu"], ["audit"]):
        out = cli(*args, "-i", str(inventory), "--profile", str(empty))
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert "ghost: UNREACHABLE" in out.stdout
        assert "no drift" not in out.stdout and "changed nothing" not in out.stdout


@pytest.mark.parametrize("kind", ["profile", "bench"])
def test_a_file_that_is_not_utf8_is_an_input_error(tmp_path, state, kind):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: caf\xe9\n")
    host = copy(tmp_path, "h100-x86")
    args = (["--profile", str(bad)] if kind == "profile" else
            ["--profile", str(state), "--bench", str(bad)])
    out = cli("apply", "--layer", "fabric", "--sysroot", str(host), *args)
    assert "is not UTF-8 text (byte 9: b'\\xe9')" in one_line_error(out)


def test_report_into_a_missing_directory_is_an_input_error(tmp_path, state):
    host = copy(tmp_path, "h100-x86")
    cli("apply", "--layer", "fabric", "--sysroot", str(host), "--profile", str(state))
    out = cli("report", "latest", "--output", str(tmp_path / "no" / "such" / "r.md"))
    assert "No such file or directory" in one_line_error(out)


def test_diagnose_of_an_endless_device_is_refused():
    assert "/dev/zero is a device, not a regular file" in one_line_error(
        cli("diagnose", "/dev/zero"))


def test_a_corrupt_ledger_record_is_one_line(tmp_path, state):
    host = copy(tmp_path, "h100-x86")
    cli("apply", "--layer", "fabric", "--sysroot", str(host), "--profile", str(state))
    with sqlite3.connect(tmp_path / "state" / "ledger.sqlite3") as db:
        db.execute("UPDATE experiments SET options_json = '{not json'")
    assert "a ledger record is corrupt" in one_line_error(cli("show", "latest"))


def test_an_empty_ledger_file_is_not_silently_reinitialised(tmp_path):
    ledger = tmp_path / "ledger.sqlite3"
    ledger.touch()
    assert "the ledger is empty (0 bytes)" in one_line_error(
        cli("history", "--ledger", str(ledger)))
    assert ledger.stat().st_size == 0


def test_a_foreign_sqlite_file_is_refused_before_anything_is_written(tmp_path):
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE t (x)")
    before = foreign.read_bytes()
    assert "not an exemplar-tune ledger" in one_line_error(
        cli("history", "--ledger", str(foreign)))
    assert foreign.read_bytes() == before  # still in rollback-journal mode (not WAL)
    assert not (tmp_path / "other.db-wal").exists()


@pytest.mark.parametrize("command", ["facts", "preflight"])
def test_output_into_a_closed_pipe_ends_quietly(tmp_path, command):
    """More output than a pipe holds (three hosts' JSON, well over 64 KiB), and a reader that
    stops after 10 bytes (``| head``)."""
    hosts = {f"node{i}": {"exemplar_sysroot": str(copy(tmp_path, "h100-x86", f"n{i}")),
                          "ansible_connection": "local",
                          "ansible_python_interpreter": sys.executable} for i in range(3)}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    args = [command, "-i", str(inventory), "--format", "json"]
    proc = subprocess.Popen([sys.executable, "-m", "exemplar_tune.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    progress = [line for line in err.splitlines() if line.startswith("facts: ")]
    assert err.splitlines() == progress and proc.returncode == 141, (proc.returncode, err)


def test_abandon_asks_and_closes_an_experiment_whose_hosts_are_gone(tmp_path, state):
    host = copy(tmp_path, "h100-x86")
    with Ledger(tmp_path / "state" / "ledger.sqlite3") as ledger:
        experiment = ledger.start_experiment("apply", "x", {"inventory": None, "limit": None,
                                                            "sysroot": str(host)}, {})
        db_path = ledger.path
    with sqlite3.connect(db_path) as db:  # its controller is gone
        db.execute("UPDATE experiments SET controller_pid = 999999999")
    warned = cli("audit", "--sysroot", str(host), "--profile", str(state))
    assert "did not finish (its controller died)" in warned.stderr
    assert "add --yes" in one_line_error(cli("abandon", "--run", experiment))
    out = cli("abandon", "--run", experiment, "--yes")
    assert out.returncode == 0 and "abandoned (marked failed)" in out.stdout
    doc = json.loads(cli("show", experiment, "--format", "json").stdout)
    assert doc["experiment"]["status"] == "failed"
    assert any(e["message"].startswith("abandoned by ") for e in doc["events"])
    assert "did not finish" not in cli("audit", "--sysroot", str(host), "--profile",
                                       str(state)).stderr
