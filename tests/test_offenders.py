"""Repeat offenders: ``preflight --record`` keeps each host's failing checks in the ledger,
``offenders`` names the hosts that failed the same check in N of their last M runs within a
window, the thresholds are profile settings, and the Prometheus output carries the counts."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import yaml

from exemplar_tune.ledger import Ledger
from exemplar_tune.offenders import DEFAULTS, offenders, thresholds
from tests.conftest import SYSROOTS
from tests.test_cli import cli

CHECK = "cpu.deep-cstates-disabled"  # fails on the h100-x86 fixture


@pytest.fixture
def hosts(tmp_path: Path) -> dict[str, Path]:
    """Two copies of the h100-x86 fixture, gpu01 and gpu02 (both fail CHECK)."""
    return {name: Path(shutil.copytree(SYSROOTS / "h100-x86", tmp_path / name, symlinks=True))
            for name in ("gpu01", "gpu02")}


def record(host: Path, ledger: Path, *extra: str):
    out = cli("preflight", "--sysroot", str(host), "--profile", "h100-x86", "--layer", "cpu",
              "--record", "--ledger", str(ledger), *extra)
    assert out.returncode in (0, 1), out.stderr
    return out


def test_a_host_failing_the_same_check_again_and_again_is_named(hosts, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    for _ in range(3):
        record(hosts["gpu01"], ledger)
    for _ in range(2):
        record(hosts["gpu02"], ledger)  # two failures: under the default three
    out = cli("offenders", "--ledger", str(ledger))
    assert out.returncode == 1
    assert [line.split() for line in out.stdout.splitlines() if line.startswith(CHECK)] == [
        [CHECK, "3/5", "runs", "1", "host(s)", "gpu01"]]
    doc = json.loads(cli("offenders", "--ledger", str(ledger), "--failures", "2",
                         "--format", "json").stdout)
    assert doc["rule"] == {"failures": 2, "runs": 5, "days": 7}
    assert [(g["check"], g["failures"], g["hostlist"]) for g in doc["offenders"]
            if g["check"] == CHECK] == [(CHECK, 3, "gpu01"), (CHECK, 2, "gpu02")]


def test_only_the_last_runs_within_the_window_count(hosts, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    for _ in range(3):
        record(hosts["gpu01"], ledger)
    # the host was repaired: two passing runs after the failures
    cstate = hosts["gpu01"] / "sys/devices/system/cpu"
    for disable in cstate.glob("cpu*/cpuidle/state*/disable"):
        disable.write_text("0\n")
    for _ in range(3):
        record(hosts["gpu01"], ledger)
    def named(*args: str) -> bool:
        out = cli("offenders", "--ledger", str(ledger), *args)
        assert out.returncode in (0, 1), out.stderr
        return CHECK in out.stdout

    assert not named("--runs", "3")  # the last three runs pass it
    assert named("--runs", "6")
    with sqlite3.connect(ledger) as raw:  # the failures were long ago
        raw.execute("UPDATE preflight_runs SET at = '2000-01-01T00:00:00.000000Z' "
                    "WHERE id <= 3")
    assert not named("--runs", "6")
    assert named("--runs", "6", "--days", "100000")


def test_thresholds_come_from_the_profile_and_are_checked(hosts, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    for _ in range(2):
        record(hosts["gpu02"], ledger)
    profile = tmp_path / "site.yaml"
    profile.write_text(yaml.safe_dump({"name": "site", "extends": "h100-x86",
                                       "offenders": {"failures": 2, "runs": 3}}))
    assert cli("offenders", "--ledger", str(ledger)).returncode == 0
    out = cli("offenders", "--ledger", str(ledger), "--profile", str(profile))
    assert out.returncode == 1 and out.stdout.split()[:2] == [CHECK, "2/3"]
    bad = cli("offenders", "--ledger", str(ledger), "--failures", "6")
    assert bad.returncode == 2 and bad.stderr.strip().endswith(
        "offenders: 6 failures of 5 runs in 7 days cannot hold: 1 <= failures <= runs, "
        "days > 0")
    profile.write_text(yaml.safe_dump({"name": "site", "offenders": {"failures": "many"}}))
    wrong = cli("offenders", "--ledger", str(ledger), "--profile", str(profile))
    assert wrong.returncode == 2 and "offenders" in wrong.stderr


def test_the_metrics_carry_the_repeat_counts(hosts, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    for _ in range(2):
        record(hosts["gpu01"], ledger)
    out = record(hosts["gpu01"], ledger, "--format", "prometheus")
    assert f'exemplar_tune_check_repeat_failures{{host="gpu01",check="{CHECK}"}} 3\n' \
        in out.stdout
    assert f'exemplar_tune_repeat_offender{{host="gpu01",check="{CHECK}"}} 1\n' in out.stdout
    plain = cli("preflight", "--sysroot", str(hosts["gpu01"]), "--profile", "h100-x86",
                "--layer", "cpu", "--format", "prometheus")
    assert "repeat" not in plain.stdout  # only with --record


def test_no_ledger_means_no_offender(tmp_path: Path) -> None:
    out = cli("offenders", "--ledger", str(tmp_path / "none.sqlite3"))
    assert out.returncode == 0 and out.stdout.startswith("no repeat offender (3 failures of "
                                                         "the last 5 recorded runs in 7 days)")


def test_the_rule_in_the_library() -> None:
    assert thresholds(None) == DEFAULTS
    assert thresholds({"offenders": {"runs": 10}}, failures=4) == {"failures": 4, "runs": 10,
                                                                    "days": 7}


def test_one_record_per_host_per_run(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        ledger.record_preflight({"a": ("p", ["x", "x", "y"]), "b": ("p", [])})
        ledger.record_preflight({"a": ("p", ["x"])})
        history = ledger.preflight_history(5, "2000-01-01")
        assert [sorted(run["failing"]) for run in history["a"]] == [["x"], ["x", "y"]]
        assert history["b"] == [{"at": history["b"][0]["at"], "failing": []}]
        assert [g["hostlist"] for g in offenders(ledger, {"failures": 2, "runs": 5,
                                                          "days": 1})] == ["a"]
