"""Repeat offenders: ``preflight --record`` keeps each host's failing checks in the ledger,
``offenders`` names the hosts that failed the same health check in N of their last M runs
within a window (tuning checks only with ``--include-tuning``), the thresholds are profile
settings, and the Prometheus output carries the counts, each series with its class."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import yaml

from exemplar_tune.checks.base import check_class
from exemplar_tune.ledger import Ledger
from exemplar_tune.offenders import DEFAULTS, offenders, thresholds
from tests.conftest import SYSROOTS
from tests.test_cli import cli

CHECK = "gpu.remapped-rows"  # a health check: fails on the h100-x86 fixture (a pending remap)
TUNING = "cpu.deep-cstates-disabled"  # a tuning check: fails there too
REMAP = ".exemplar/commands/nvidia-smi-q-x.xml"


@pytest.fixture
def hosts(tmp_path: Path) -> dict[str, Path]:
    """Two copies of the h100-x86 fixture, gpu01 and gpu02 (both fail CHECK and TUNING)."""
    return {name: Path(shutil.copytree(SYSROOTS / "h100-x86", tmp_path / name, symlinks=True))
            for name in ("gpu01", "gpu02")}


def record(host: Path, ledger: Path, *extra: str, layers: tuple[str, ...] = ("gpu", "cpu")):
    out = cli("preflight", "--sysroot", str(host), "--profile", "h100-x86",
              *(arg for layer in layers for arg in ("--layer", layer)),
              "--record", "--ledger", str(ledger), *extra)
    assert out.returncode in (0, 1), out.stderr
    return out


def rows(out) -> list[list[str]]:
    """The offender lines of ``offenders``' table, split into words."""
    return [line.split() for line in out.stdout.splitlines() if line.startswith(("gpu.", "cpu."))]


def test_a_host_failing_the_same_health_check_again_and_again_is_named(hosts,
                                                                         tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    for _ in range(3):
        record(hosts["gpu01"], ledger)
    for _ in range(2):
        record(hosts["gpu02"], ledger)  # two failures: under the default three
    out = cli("offenders", "--ledger", str(ledger))
    assert out.returncode == 1
    # the tuning check failed as often on gpu01, and is no reason to pull the node
    assert rows(out) == [[CHECK, "health", "3/5", "runs", "1", "host(s)", "gpu01"]]
    doc = json.loads(cli("offenders", "--ledger", str(ledger), "--failures", "2",
                         "--format", "json").stdout)
    assert doc["schema_version"] == 1 and doc["classes"] == ["health"]
    assert doc["rule"] == {"failures": 2, "runs": 5, "days": 7}
    assert [(g["check"], g["class"], g["failures"], g["hostlist"]) for g in doc["offenders"]] == [
        (CHECK, "health", 3, "gpu01"), (CHECK, "health", 2, "gpu02")]
    both = json.loads(cli("offenders", "--ledger", str(ledger), "--failures", "2",
                          "--include-tuning", "--format", "json").stdout)
    assert both["classes"] == ["health", "tuning"]
    found = {(g["check"], g["failures"]): (g["class"], g["hostlist"]) for g in both["offenders"]}
    assert found[(CHECK, 3)] == ("health", "gpu01") and found[(CHECK, 2)] == ("health", "gpu02")
    assert found[(TUNING, 3)] == ("tuning", "gpu01") and found[(TUNING, 2)] == ("tuning", "gpu02")
    assert {g["class"] for g in both["offenders"]} == {"health", "tuning"}


def test_a_host_failing_only_tuning_checks_is_no_offender_unless_tuning_is_included(
        hosts, tmp_path: Path) -> None:
    """The cpu layer of h100-x86 fails tuning checks only: a node that works, slower."""
    ledger = tmp_path / "ledger.sqlite3"
    for _ in range(3):
        out = record(hosts["gpu01"], ledger, "--format", "json", layers=("cpu",))
        results = json.loads(out.stdout)["hosts"]["gpu01"]["results"]
        assert {r["class"] for r in results if r["status"] == "fail"} == {"tuning"}
    out = cli("offenders", "--ledger", str(ledger))
    assert out.returncode == 0 and out.stdout == (
        "no repeat offender (3 failures of the last 5 recorded runs in 7 days; health checks)\n")
    assert json.loads(cli("offenders", "--ledger", str(ledger), "--format", "json").stdout
                      )["offenders"] == []
    tuning = cli("offenders", "--ledger", str(ledger), "--include-tuning")
    assert tuning.returncode == 1
    assert [CHECK, "health"] not in [row[:2] for row in rows(tuning)]
    assert [TUNING, "tuning", "3/5", "runs", "1", "host(s)", "gpu01"] in rows(tuning)
    assert {row[1] for row in rows(tuning)} == {"tuning"}
    # its recorded preflight carries no repeat series either: nothing to page on
    metrics = record(hosts["gpu01"], ledger, "--format", "prometheus", layers=("cpu",)).stdout
    assert "exemplar_tune_repeat_offender" not in metrics
    assert "exemplar_tune_check_repeat_failures" not in metrics


def test_only_the_last_runs_within_the_window_count(hosts, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    for _ in range(3):
        record(hosts["gpu01"], ledger)
    # the host was repaired (its GPU reset: no remap pending): three passing runs after
    xml = hosts["gpu01"] / REMAP
    text = xml.read_text()
    assert text.count("<remapped_row_pending>Yes</remapped_row_pending>") == 1
    xml.write_text(text.replace("<remapped_row_pending>Yes</remapped_row_pending>",
                                "<remapped_row_pending>No</remapped_row_pending>"))
    for _ in range(3):
        doc = json.loads(record(hosts["gpu01"], ledger, "--format", "json").stdout)
        assert next(r for r in doc["hosts"]["gpu01"]["results"] if r["id"] == CHECK
                    )["status"] == "pass"

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
    assert out.returncode == 1 and rows(out) == [
        [CHECK, "health", "2/3", "runs", "1", "host(s)", "gpu02"]]
    bad = cli("offenders", "--ledger", str(ledger), "--failures", "6")
    assert bad.returncode == 2 and bad.stderr.strip().endswith(
        "offenders: 6 failures of 5 runs in 7 days cannot hold: 1 <= failures <= runs, "
        "days > 0")
    profile.write_text(yaml.safe_dump({"name": "site", "offenders": {"failures": "many"}}))
    wrong = cli("offenders", "--ledger", str(ledger), "--profile", str(profile))
    assert wrong.returncode == 2 and "offenders" in wrong.stderr


def test_the_metrics_carry_the_repeat_counts_of_health_checks(hosts, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    for _ in range(2):
        record(hosts["gpu01"], ledger)
    out = record(hosts["gpu01"], ledger, "--format", "prometheus")
    assert (f'exemplar_tune_check_repeat_failures{{host="gpu01",check="{CHECK}",'
            'class="health"} 3\n') in out.stdout
    assert f'exemplar_tune_repeat_offender{{host="gpu01",check="{CHECK}",class="health"}} 1\n' \
        in out.stdout
    # the tuning check failed as often: it is counted nowhere by default
    assert f'check="{TUNING}",class=' not in out.stdout
    assert 'class="tuning"}' not in "".join(
        line for line in out.stdout.splitlines() if "repeat" in line)
    plain = cli("preflight", "--sysroot", str(hosts["gpu01"]), "--profile", "h100-x86",
                "--layer", "gpu", "--format", "prometheus")
    assert "repeat" not in plain.stdout  # only with --record


def test_no_ledger_means_no_offender(tmp_path: Path) -> None:
    out = cli("offenders", "--ledger", str(tmp_path / "none.sqlite3"))
    assert out.returncode == 0 and out.stdout == (
        "no repeat offender (3 failures of the last 5 recorded runs in 7 days; health checks)\n")
    both = cli("offenders", "--ledger", str(tmp_path / "none.sqlite3"), "--include-tuning")
    assert both.returncode == 0 and both.stdout == (
        "no repeat offender (3 failures of the last 5 recorded runs in 7 days; health and "
        "tuning checks)\n")


def test_the_rule_in_the_library() -> None:
    assert thresholds(None) == DEFAULTS
    assert thresholds({"offenders": {"runs": 10}}, failures=4) == {"failures": 4, "runs": 10,
                                                                    "days": 7}
    assert check_class(CHECK) == "health" and check_class(TUNING) == "tuning"
    assert check_class("no.such-check") == "tuning"  # an id no longer registered never drains


def test_one_record_per_host_per_run(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        ledger.record_preflight({"a": ("p", [CHECK, CHECK, TUNING]), "b": ("p", [])})
        ledger.record_preflight({"a": ("p", [CHECK, TUNING]), "c": ("p", [TUNING])})
        ledger.record_preflight({"c": ("p", [TUNING])})
        history = ledger.preflight_history(5, "2000-01-01")
        assert [sorted(run["failing"]) for run in history["a"]] == [sorted([CHECK, TUNING])] * 2
        assert history["b"] == [{"at": history["b"][0]["at"], "failing": []}]
        rule = {"failures": 2, "runs": 5, "days": 1}
        assert [(g["check"], g["class"], g["hostlist"]) for g in offenders(ledger, rule)] == [
            (CHECK, "health", "a")]  # c failed only a tuning check, twice
        assert [(g["check"], g["class"], g["hostlist"])
                for g in offenders(ledger, rule, ("health", "tuning"))] == [
            (TUNING, "tuning", "a,c"), (CHECK, "health", "a")]  # equal counts: by check id
