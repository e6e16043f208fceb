"""The measured loop end to end: real Ansible on sysroot hosts, a benchmark whose output
follows the host's state (the simulated cluster's model), the SQLite ledger."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import yaml

from exemplar_tune.orchestration.stats import MIN_RUNS
from exemplar_tune.sim.cluster import create_cluster
from exemplar_tune.sim.model import load_scenario
from tests.helpers import cli_env, tree_hash
from tests.test_cli import cli

PROFILE = {"name": "swept", "fabric": {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4"}}}


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A one-host simulated cluster whose only problem is one QP per connection."""
    monkeypatch.setenv("EXEMPLAR_TUNE_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "profile.yaml").write_text(yaml.safe_dump(PROFILE))
    return tmp_path, tmp_path / "cluster" / "hosts" / "node01"


def other_fabric(penalty):
    """A fabric response where 1 QP per connection is best and 4 cost ``penalty`` on every
    collective, at every size."""
    return {"NCCL_IB_QPS_PER_CONNECTION": {
        "unset": 1, "factors": {1: {0: 1.0}, 4: {0: 1.0 + penalty}}}}


def bench_file(tmp_path, host, fabric="cx8", penalty=0.02, command=None):
    """Create the cluster for ``fabric`` (off CX-8, QPS 4 costs ``penalty``); its bench file."""
    scenario = load_scenario("healthy")
    scenario.update(hosts=1, faults=["nccl_qps_1"])
    if fabric != "cx8":
        scenario["fabric_response"] = other_fabric(penalty)
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    create_cluster(tmp_path / "cluster", str(tmp_path / "scenario.yaml"))
    command = command or [sys.executable, "-m", "exemplar_tune.cli", "sim", "bench",
                          str(tmp_path / "cluster"), "--workload", "dense", "--steps", "40"]
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump({"shapes": [
        {"name": "dense", "command": command, "parser": "megatron", "warmup": 5}]}))
    return path


def apply_measured(tmp_path, host, bench, *options):
    return cli("apply", "--layer", "fabric", "--sysroot", str(host), "--profile",
               str(tmp_path / "profile.yaml"), "--bench", str(bench), "--max-runs", "5",
               *options)


def show(experiment):
    return json.loads(cli("show", experiment, "--format", "json").stdout)


def test_a_helpful_layer_is_kept(setup):
    tmp_path, host = setup
    out = apply_measured(tmp_path, host, bench_file(tmp_path, host), "--confidence", "0.95")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "fabric   KEEP" in out.stdout
    assert "NCCL_IB_QPS_PER_CONNECTION=4" in (host / "etc/nccl.conf").read_text()
    doc = show("latest")
    assert doc["experiment"]["options"]["confidence"] == 0.95
    decision = doc["decisions"][0]
    assert decision["action"] == "keep"
    assert decision["comparisons"][0]["ci_low"] > 0
    assert decision["comparisons"][0]["confidence"] == 0.95
    arms = {s["arm"] for s in doc["samples"]}
    assert arms == {"baseline", "candidate"}
    plan = cli("tune", "--sysroot", str(host), "--profile", str(tmp_path / "profile.yaml"),
               "--bench", str(tmp_path / "bench.yaml"), "--layer", "fabric", "--dry-run")
    assert re.search(r"; about \d+ s at most from past runs in the ledger", plan.stdout), \
        plan.stdout

    page = tmp_path / "report.html"
    out = cli("report", "latest", "--format", "html", "--output", str(page))
    assert out.returncode == 0, out.stderr
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text
    assert ">fabric</text>" in text  # the waterfall's step of the kept layer
    assert "dense step time (ms), lower is better" in text
    assert text.count("<svg") == 2  # waterfall + the layer's step-time distributions
    markdown = cli("report", "latest").stdout
    assert "| fabric | kept | dense |" in markdown


def test_a_harmful_layer_is_restored_byte_exact(setup):
    tmp_path, host = setup
    bench = bench_file(tmp_path, host, fabric="other", penalty=0.2)
    pristine = tree_hash(host / "etc")
    out = apply_measured(tmp_path, host, bench)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "fabric   RESTORE  worse" in out.stdout
    assert tree_hash(host / "etc") == pristine


def test_a_layer_without_real_effect_is_restored(setup):
    tmp_path, host = setup
    bench = bench_file(tmp_path, host, fabric="other", penalty=0.0)
    pristine = tree_hash(host / "etc")
    out = apply_measured(tmp_path, host, bench)
    assert "fabric   RESTORE" in out.stdout, out.stdout + out.stderr
    assert tree_hash(host / "etc") == pristine


def test_a_failing_benchmark_restores_and_records_why(setup):
    tmp_path, host = setup
    failing = [sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]
    bench = bench_file(tmp_path, host, command=failing)
    pristine = tree_hash(host / "etc")
    out = apply_measured(tmp_path, host, bench)
    assert out.returncode == 1
    assert "FAILED   no measurement: benchmark dense: exit status 3: boom" in out.stdout
    assert tree_hash(host / "etc") == pristine
    assert show("latest")["experiment"]["status"] == "failed"


def test_dry_run_changes_nothing(setup):
    tmp_path, host = setup
    bench = bench_file(tmp_path, host)
    before = tree_hash(host)
    out = cli("tune", "--sysroot", str(host), "--profile", str(tmp_path / "profile.yaml"),
              "--bench", str(bench), "--layer", "fabric", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "fabric: node01 (nccl_conf)" in out.stdout
    # one shape, one changing layer: 10 + 10 runs at most (a reboot layer: 3 + 10), 3 final
    assert "at most 20 benchmark runs in all, plus 3 for the final measurement" in out.stdout
    timeout = yaml.safe_load(bench.read_text())["shapes"][0].get("timeout", 3600)
    assert f"time: at most {23 * timeout / 3600:.1f} h by the benchmark timeouts" in out.stdout
    assert tree_hash(host) == before


def kill_during_candidate_run(tmp_path, host):
    """Start ``apply --bench`` and SIGKILL it while its first candidate run is going."""
    marker = tmp_path / "candidate-started"
    # the benchmark announces itself; its second run (the first candidate) waits to be killed
    slow = [sys.executable, "-c", "import pathlib, sys, time; p = pathlib.Path(sys.argv[1]);"
            " n = int(p.read_text()) + 1 if p.exists() else 1; p.write_text(str(n));"
            " time.sleep(60 if n == 2 else 0); print('value: 1.0')", str(marker)]
    bench = tmp_path / "bench.yaml"
    bench.write_text(yaml.safe_dump({"shapes": [{"name": "dense", "command": slow,
                                                 "parser": "regex", "pattern": "value: ([0-9.]+)",
                                                 "higher_is_better": False}]}))
    env = dict(cli_env(), EXEMPLAR_TUNE_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.Popen([sys.executable, "-m", "exemplar_tune.cli", "apply", "--layer",
                             "fabric", "--sysroot", str(host), "--profile",
                             str(tmp_path / "profile.yaml"), "--bench", str(bench)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not (marker.exists() and marker.read_text() == "2") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert marker.read_text() == "2", "the candidate run never started"
    assert "NCCL_IB_QPS_PER_CONNECTION=4" in (host / "etc/nccl.conf").read_text()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_killed_controller_is_reported_and_rolled_back(setup):
    """SIGKILL the controller while the layer is applied; rollback restores every byte."""
    tmp_path, host = setup
    bench_file(tmp_path, host)
    pristine = tree_hash(host / "etc")
    kill_during_candidate_run(tmp_path, host)
    warned = cli("audit", "--sysroot", str(host), "--profile", str(tmp_path / "profile.yaml"))
    assert "did not finish (its controller died)" in warned.stderr
    assert "'exemplar-tune resume --run" in warned.stderr
    out = cli("rollback", "--run", "latest")
    assert out.returncode == 0, out.stdout + out.stderr
    assert tree_hash(host / "etc") == pristine
    assert show("latest")["experiment"]["status"] == "rolled_back"


def test_a_killed_controller_is_resumed(setup):
    """``resume`` restores the interrupted layer, measures it again and decides, even for an
    experiment recorded before ``--confidence`` existed (its options lack it)."""
    tmp_path, host = setup
    bench_file(tmp_path, host)
    kill_during_candidate_run(tmp_path, host)
    with sqlite3.connect(tmp_path / "state" / "ledger.sqlite3") as db:
        (options,) = db.execute("SELECT options_json FROM experiments").fetchone()
        older = {k: v for k, v in json.loads(options).items() if k != "confidence"}
        db.execute("UPDATE experiments SET options_json = ?", (json.dumps(older),))
    out = cli("resume")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "resumed" in out.stdout and "fabric: restoring what the interrupted run" in out.stderr
    doc = show("latest")
    assert doc["experiment"]["status"] == "finished"
    assert doc["decisions"][0]["action"] == "restore"  # a constant benchmark: no effect
    # measured anew: the first look, from run 0
    assert {s["run_index"] for s in doc["samples"]} == set(range(MIN_RUNS))
    assert "NCCL_IB_QPS_PER_CONNECTION=1" in (host / "etc/nccl.conf").read_text()
    assert cli("resume").returncode == 2  # nothing left to resume
