"""The experiment ledger, on real SQLite files and real processes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from exemplar_tune.errors import UserError
from exemplar_tune.ledger import SCHEMA_VERSION, Ledger
from tests.conftest import REPO

TARGET = {"inventory": "/srv/inv.yml", "limit": "gpu[0:3]", "sysroot": None}

CHILD_EXPERIMENT = """
import sys
from exemplar_tune.ledger import Ledger
with Ledger(sys.argv[1]) as ledger:
    exp = ledger.start_experiment("tune", "h100", {"inventory": "inv.yml"}, {"runs": 5})
    ledger.add_layer(exp, "cpu", 0, "20261129T101500-aaaa")
    ledger.set_layer_status(exp, "cpu", "baseline")
    print(exp, flush=True)
    index = 0
    while True:
        ledger.add_sample(exp, "cpu", "baseline", "gemm", index, 1.0 + index, "ms",
                          [0.5] * 2000, None, 0.1)
        ledger.log_event(exp, "info", f"run {index}")
        index += 1
"""

@contextmanager
def child(script: str, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A Python child running ``script``; yields it and its first stdout line; kills it after."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout is not None
        yield proc, proc.stdout.readline().strip()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def sigkill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL ``proc`` and reap it (so its pid is really gone, not a zombie)."""
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(tmp_path / "state" / "ledger.sqlite3") as opened:
        yield opened


def run_layer(ledger: Ledger, exp: str, layer: str, position: int, action: str) -> None:
    """One layer through baseline -> applied -> measuring -> kept/restored, with records."""
    ledger.add_layer(exp, layer, position, f"run-{layer}")
    ledger.set_layer_status(exp, layer, "baseline")
    for index, value in enumerate((10.0, 10.2, 9.9)):
        ledger.add_sample(exp, layer, "baseline", "gemm", index, value, "ms",
                          [value, value + 0.1], f"/logs/{layer}-b{index}.log", 31.5)
    ledger.set_layer_status(exp, layer, "applied", reboot_required=True)
    ledger.record_hosts(exp, layer, {
        "gpu1": {"status": "changed", "changed": ["cpu_governor"], "error": None},
        "gpu0": {"status": "failed", "changed": [], "error": "sysfs write refused"},
    })
    ledger.set_layer_status(exp, layer, "measuring")
    for index, value in enumerate((9.0, 9.1)):
        ledger.add_sample(exp, layer, "candidate", "gemm", index, value, "ms", [value], None,
                          None)
    ledger.record_decision(exp, layer, action, "p=0.01", [{"shape": "gemm", "delta": -0.1}])
    ledger.set_layer_status(exp, layer, "kept" if action == "keep" else "restored")


def test_full_lifecycle(ledger: Ledger) -> None:
    exp = ledger.start_experiment("tune", "h100-sxm", TARGET, {"runs": 3, "alpha": 0.05})
    ledger.log_event(exp, "info", "baseline started")
    run_layer(ledger, exp, "cpu", 0, "keep")
    run_layer(ledger, exp, "gpu", 1, "restore")
    ledger.finish(exp, "finished")

    have = ledger.show(exp)
    assert have["experiment"]["id"] == exp
    assert have["experiment"]["status"] == "finished"
    assert have["experiment"]["finished_at"] >= have["experiment"]["started_at"]
    assert have["experiment"]["target"] == TARGET
    assert have["experiment"]["options"] == {"runs": 3, "alpha": 0.05}
    assert have["experiment"]["controller_pid"] == os.getpid()
    assert [(lay["layer"], lay["status"]) for lay in have["layers"]] == [
        ("cpu", "kept"), ("gpu", "restored")]
    cpu = have["layers"][0]
    assert cpu["run_id"] == "run-cpu" and cpu["reboot_required"] is True
    assert cpu["started_at"] <= cpu["finished_at"]
    assert [(h["layer"], h["host"], h["status"]) for h in have["hosts"]] == [
        ("cpu", "gpu0", "failed"), ("cpu", "gpu1", "changed"),
        ("gpu", "gpu0", "failed"), ("gpu", "gpu1", "changed")]
    assert have["hosts"][0]["error"] == "sysfs write refused"
    assert have["hosts"][1]["changed"] == ["cpu_governor"]
    assert len(have["samples"]) == 10
    assert have["samples"][0]["samples"] == [10.0, 10.1]
    assert [d["action"] for d in have["decisions"]] == ["keep", "restore"]
    assert have["decisions"][0]["comparisons"] == [{"shape": "gemm", "delta": -0.1}]
    assert [e["message"] for e in have["events"]] == ["baseline started"]
    assert ledger.samples_for(exp, "cpu") == {"baseline": {"gemm": [10.0, 10.2, 9.9]},
                                              "candidate": {"gemm": [9.0, 9.1]}}
    assert ledger.unfinished() == []


def test_show_and_export_round_trip_through_json(ledger: Ledger) -> None:
    first = ledger.start_experiment("apply", None, TARGET, {})
    second = ledger.start_experiment("tune", "h100", TARGET, {"runs": 2})
    run_layer(ledger, second, "cpu", 0, "keep")
    assert json.loads(json.dumps(ledger.show("latest"))) == ledger.show(second)
    everything = ledger.export()
    assert json.loads(json.dumps(everything)) == everything
    assert everything["schema_version"] == SCHEMA_VERSION
    assert [e["experiment"]["id"] for e in everything["experiments"]] == [first, second]
    assert ledger.export(first)["experiments"] == [ledger.show(first)]


def test_history_is_newest_first_and_limited(ledger: Ledger) -> None:
    ids = [ledger.start_experiment("apply", f"p{n}", TARGET, {}) for n in range(4)]
    ledger.add_layer(ids[3], "cpu", 0, "r")
    have = ledger.history(limit=3)
    assert [row["id"] for row in have] == ids[::-1][:3]
    assert have[0]["layers"] == 1 and have[1]["layers"] == 0
    assert [row["profile_name"] for row in ledger.history()] == ["p3", "p2", "p1", "p0"]


def test_unknown_experiment_and_layer_are_user_errors(ledger: Ledger) -> None:
    with pytest.raises(UserError, match="no experiment recorded yet"):
        ledger.show("latest")
    with pytest.raises(UserError) as error:
        ledger.show("20990101T000000-dead")
    assert str(error.value) == f"no experiment '20990101T000000-dead' in {ledger.path}"
    with pytest.raises(UserError, match="no experiment"):
        ledger.log_event("nope", "info", "x")
    exp = ledger.start_experiment("tune", None, TARGET, {})
    with pytest.raises(UserError, match="no layer 'cpu'"):
        ledger.add_sample(exp, "cpu", "baseline", "gemm", 0, 1.0, "ms", [], None, None)
    assert ledger.show(exp)["samples"] == []


def test_a_restore_is_recorded_and_the_layer_restored_once_every_changed_host_is(
        ledger: Ledger) -> None:
    """An apply changed gpu1 and gpu2 (gpu3 had nothing to change): a restore that reached
    only gpu1 leaves the layer applied; one that reaches gpu2 makes it restored. A change
    after a restore needs a restore again."""
    exp = ledger.start_experiment("apply", "h100", TARGET, {"layer": "cpu"})
    ledger.add_layer(exp, "cpu", 0, "my-run")
    knob = {"layer": "cpu", "knob": "governor", "changes": [], "reboot_required": False}
    ledger.record_hosts(exp, "cpu", {h: {"status": "ok", "changed": [knob] if h != "gpu3" else [],
                                         "error": None} for h in ("gpu1", "gpu2", "gpu3")})
    ledger.set_layer_status(exp, "cpu", "applied")
    assert ledger.record_restore(exp, "cpu", {"gpu1": None, "gpu2": "unreachable: refused"}) \
        is False
    assert ledger.show(exp)["layers"][0]["status"] == "applied"
    assert ledger.record_restore(exp, "cpu", {"gpu2": None}) is True
    have = ledger.show(exp)
    assert have["layers"][0]["status"] == "restored" and have["layers"][0]["finished_at"]
    assert [(h["host"], h["status"], h["changed"], h["error"]) for h in have["hosts"][3:]] == [
        ("gpu1", "restored", [], None), ("gpu2", "not restored", [], "unreachable: refused"),
        ("gpu2", "restored", [], None)]
    ledger.record_hosts(exp, "cpu", {"gpu1": {"status": "ok", "changed": [knob], "error": None}})
    assert ledger.record_restore(exp, "cpu", {"gpu2": None}) is False


def test_an_experiment_is_found_by_the_run_id_its_layer_journaled_under(
        ledger: Ledger) -> None:
    """``apply --run-id NAME`` journals under NAME: show and restore take NAME too."""
    exp = ledger.start_experiment("apply", "h100", TARGET, {"layer": "cpu"})
    ledger.add_layer(exp, "cpu", 0, "my-run")
    assert ledger.show("my-run")["experiment"]["id"] == exp
    assert ledger.show(exp)["experiment"]["id"] == exp
    with pytest.raises(UserError, match="no experiment 'other-run' in "):
        ledger.show("other-run")


@pytest.mark.parametrize(("call", "want"), [
    (lambda led, exp: led.set_layer_status(exp, "cpu", "done"), "layer status 'done'"),
    (lambda led, exp: led.set_layer_status(exp, "cpu", "kept", colour=1), "unknown field"),
    (lambda led, exp: led.add_sample(exp, "cpu", "other", "s", 0, 1.0, "ms", [], None, None),
     "arm 'other'"),
    (lambda led, exp: led.add_sample(exp, "cpu", "baseline", "s", 0, 1.0, "ms", [], None, None),
     "already recorded"),
    (lambda led, exp: led.record_decision(exp, "cpu", "keep", "again", {}), "already has"),
    (lambda led, exp: led.add_layer(exp, "cpu", 1, "r2"), "already in experiment"),
    (lambda led, exp: led.finish(exp, "running"), "final status 'running'"),
], ids=["status", "field", "arm", "duplicate-sample", "duplicate-decision", "duplicate-layer",
        "finish-running"])
def test_invalid_writes_are_value_errors(ledger: Ledger, call, want: str) -> None:
    exp = ledger.start_experiment("tune", None, TARGET, {})
    ledger.add_layer(exp, "cpu", 0, "r")
    ledger.add_sample(exp, "cpu", "baseline", "s", 0, 1.0, "ms", [], None, None)
    ledger.record_decision(exp, "cpu", "keep", "first", {})
    with pytest.raises(ValueError, match=want):
        call(ledger, exp)


def test_sigkilled_controller_leaves_a_consistent_running_experiment(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with child(CHILD_EXPERIMENT, str(path)) as (proc, exp):
        time.sleep(0.5)  # let it write samples and events continuously
        sigkill(proc)
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
    with Ledger(path) as ledger:
        unfinished = ledger.unfinished()
        assert [row["id"] for row in unfinished] == [exp]
        assert unfinished[0]["controller_pid"] == proc.pid
        assert unfinished[0]["controller_alive"] is False
        assert unfinished[0]["options"] == {"runs": 5}
        have = ledger.show(exp)
    assert have["experiment"]["status"] == "running"
    assert have["layers"][0]["status"] == "baseline"
    indices = [sample["run_index"] for sample in have["samples"]]
    assert indices and indices == list(range(len(indices)))
    assert len(have["events"]) in (len(indices) - 1, len(indices))


def test_unfinished_reports_other_hosts_and_skips_live_local(ledger: Ledger) -> None:
    live = ledger.start_experiment("tune", None, TARGET, {})
    remote = ledger.start_experiment("tune", None, TARGET, {})
    done = ledger.start_experiment("apply", None, TARGET, {})
    ledger.finish(done, "failed")
    with sqlite3.connect(ledger.path) as raw:
        raw.execute("UPDATE experiments SET controller_host = 'elsewhere' WHERE id = ?",
                    (remote,))
    have = ledger.unfinished()
    assert [(row["id"], row["controller_alive"]) for row in have] == [(remote, None)]
    assert live not in [row["id"] for row in have]


def test_resume_takes_over_an_unfinished_experiment(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with child(CHILD_EXPERIMENT, str(path)) as (proc, exp):
        sigkill(proc)
    with Ledger(path) as ledger:
        ledger.resume_experiment(exp)
        assert ledger.unfinished() == []
        assert ledger.show(exp)["experiment"]["controller_pid"] == os.getpid()


@pytest.mark.parametrize("content", [b"garbage bytes, not sqlite\n" * 200, os.urandom(8192)],
                         ids=["text", "random"])
def test_corrupted_file_is_one_line_user_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "ledger.sqlite3"
    path.write_bytes(content)
    with pytest.raises(UserError) as error:
        Ledger(path)
    assert str(path) in str(error.value)
    assert "\n" not in str(error.value)


def test_foreign_or_newer_database_is_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.sqlite3"
    with sqlite3.connect(foreign) as raw:
        raw.execute("CREATE TABLE experiments (x)")
    with pytest.raises(UserError, match="not an exemplar-tune ledger"):
        Ledger(foreign)
    newer = tmp_path / "newer.sqlite3"
    Ledger(newer).close()
    with sqlite3.connect(newer) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(UserError, match="newer than this exemplar-tune"):
        Ledger(newer)


def test_opening_twice_migrates_once_and_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as ledger:
        exp = ledger.start_experiment("apply", None, TARGET, {})
    with Ledger(path) as ledger, Ledger(path) as other:
        assert ledger.show(exp) == other.show(exp)
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert sorted(tables) == ["decisions", "events", "experiments", "hosts", "layers",
                              "preflight_failures", "preflight_runs", "samples"]


def test_default_path_is_in_the_state_dir(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("EXEMPLAR_TUNE_STATE_DIR", str(tmp_path / "state"))
    with Ledger() as ledger:
        assert ledger.path == tmp_path / "state" / "ledger.sqlite3"
    assert ledger.path.is_file()


def test_a_v2_ledger_is_upgraded_with_its_records(tmp_path: Path) -> None:
    """A ledger written before sweeps (schema v2) keeps every record through the rebuild of
    its experiments and samples tables; afterwards it takes sweeps and their arms, and its
    foreign keys still hold."""
    from exemplar_tune.ledger import APPLICATION_ID, MIGRATIONS

    path = tmp_path / "v2.sqlite3"
    raw = sqlite3.connect(path, isolation_level=None)
    for statement in (s for version in MIGRATIONS[:2] for s in version):
        raw.execute(statement)
    raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    raw.execute("PRAGMA user_version = 2")
    raw.execute("INSERT INTO experiments (id, kind, started_at, status, target_json, "
                "controller_pid, controller_host, options_json, summary_json) VALUES "
                "('e1', 'tune', 't', 'finished', '{}', 1, 'h', '{}', '{\"gap\": 1}')")
    raw.execute("INSERT INTO layers (experiment_id, layer, position, run_id) "
                "VALUES ('e1', 'cpu', 3, 'e1-cpu')")
    raw.execute("INSERT INTO samples (experiment_id, layer, arm, shape, run_index, value, unit, "
                "samples_json, recorded_at) VALUES ('e1', 'cpu', 'baseline', 'dense', 0, 1.5, "
                "'ms', '[1.5]', 't')")
    raw.close()
    with Ledger(path) as ledger:
        doc = ledger.show("e1")
        assert doc["experiment"]["summary"] == {"gap": 1}
        assert [(s["arm"], s["value"]) for s in doc["samples"]] == [("baseline", 1.5)]
        exp = ledger.start_experiment("sweep", None, TARGET, {})
        ledger.add_layer(exp, "fabric", 5, f"{exp}-fabric")
        ledger.add_sample(exp, "fabric", "NCCL_IB_QPS_PER_CONNECTION=4", "allgather", 0, 2.0,
                          "GB/s", [2.0], None, 1.0)
        with pytest.raises(ValueError, match="neither baseline nor candidate"):
            ledger.add_sample(exp, "fabric", "4; DROP", "allgather", 1, 2.0, "GB/s", [], None,
                              1.0)
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        raw.execute("PRAGMA foreign_keys=ON")
        with pytest.raises(sqlite3.IntegrityError):
            raw.execute("INSERT INTO layers (experiment_id, layer, position, run_id) "
                        "VALUES ('nope', 'cpu', 3, 'x')")
        with pytest.raises(sqlite3.IntegrityError):
            raw.execute("INSERT INTO experiments (id, kind, started_at, status, target_json, "
                        "controller_pid, controller_host, options_json) VALUES "
                        "('e2', 'other', 't', 'running', '{}', 1, 'h', '{}')")
