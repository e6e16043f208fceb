"""``fabric.ib-errors`` and the port error counters, on a real ``/sys/class/infiniband`` tree
(prometheus/procfs's fixtures: Omni-Path, ConnectX-3 and ConnectX ports, every error counter 0;
``tests/fixtures/realworld/sysfs-infiniband/SOURCES.md``), copied and changed one counter at a
time; the sampling window read twice from a tree that changes in between, as a live host's
does."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.infiniband import (
    ERROR_COUNTERS,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, PASS, SKIP, WARN
from tests.corpus import REALWORLD
from tests.test_cli import cli

TREE = REALWORLD / "sysfs-infiniband" / "prometheus-procfs"
CHECK = next(c for c in CHECKS if c.id == "fabric.ib-errors")
COUNTERS = "sys/class/infiniband/mlx4_0/ports/2/counters"


def host(tmp_path: Path, **counters: int) -> Path:
    root = tmp_path / "host"
    shutil.copytree(TREE, root)
    for name, value in counters.items():
        (root / COUNTERS / name).write_text(f"{value}\n")
    return root


def judge(root: Path, window: float = 0.0, profile: dict | None = None):
    facts = gather_facts(Sysroot(str(root)), ["fabric"], {"counter_window": window})
    return CHECK.func(facts, profile or {}), facts["fabric"]


def test_the_real_tree_reads_every_error_counter_of_every_port(tmp_path):
    outcome, facts = judge(TREE)
    ports = {f"{d['name']}/{p['port']}": p["counters"] for d in facts["ib_devices"]
             for p in d["ports"]}
    assert sorted(ports) == ["hfi1_0/1", "mlx4_0/1", "mlx4_0/2", "mlx5_0/1"]
    assert set(ports["mlx4_0/1"]) == set(ERROR_COUNTERS) and not any(ports["mlx4_0/1"].values())
    assert outcome.status == PASS and "every error counter of 4 ports within" in outcome.detail
    assert facts["counter_window_s"] is None


@pytest.mark.parametrize(("counters", "status", "words"), [
    ({"symbol_error": 10}, PASS, "within its threshold"),
    ({"symbol_error": 11}, WARN, "mlx4_0/2 symbol_error 11 (--counter-window SECONDS"),
    ({"port_xmit_discards": 150, "link_downed": 3}, WARN, "mlx4_0/2 port_xmit_discards 150"),
])
def test_counters_since_last_cleared_warn_above_ibqueryerrors_thresholds(tmp_path, counters,
                                                                         status, words):
    outcome, _ = judge(host(tmp_path, **counters))
    assert outcome.status == status and words in outcome.detail, outcome.detail


def test_the_profile_sets_a_threshold(tmp_path):
    outcome, _ = judge(host(tmp_path, symbol_error=5), profile={
        "fabric": {"ib_error_thresholds": {"symbol_error": 0}}})
    assert outcome.status == WARN and "symbol_error 5" in outcome.detail


def _raise_later(root: Path, name: str, value: int, delay: float) -> threading.Timer:
    timer = threading.Timer(delay, lambda: (root / COUNTERS / name).write_text(f"{value}\n"))
    timer.start()
    return timer


@pytest.mark.parametrize(("name", "later", "status", "words"), [
    ("symbol_error", 503, WARN, "in 0.4 s, below their thresholds: mlx4_0/2 symbol_error 3"),
    ("symbol_error", 540, FAIL, "in 0.4 s: mlx4_0/2 symbol_error 40"),
    ("link_downed", 1, FAIL, "in 0.4 s: mlx4_0/2 link_downed 1"),
])
def test_a_window_judges_what_the_counters_gained(tmp_path, name, later, status, words):
    """Old errors (symbol_error 500 since boot) do not count in a window; what rose in it
    does, and a link down in the window fails however small."""
    root = host(tmp_path, symbol_error=500)
    _raise_later(root, name, later, 0.1)
    outcome, facts = judge(root, window=0.4)
    assert facts["counter_window_s"] == 0.4
    assert outcome.status == status and words in outcome.detail, outcome.detail


def test_nothing_rising_in_a_window_passes_and_no_ports_skip(tmp_path):
    outcome, _ = judge(host(tmp_path, symbol_error=500), window=0.2)
    assert outcome.status == PASS and "rose in 0.2 s" in outcome.detail
    empty = tmp_path / "none"
    empty.mkdir()
    outcome, _ = judge(empty)
    assert outcome.status == SKIP


def test_preflight_takes_the_window_and_refuses_a_negative_one(tmp_path):
    root = host(tmp_path, link_downed=2)
    out = cli("preflight", "--sysroot", str(root), "--layer", "fabric", "--profile", "generic",
              "--counter-window", "0.2", "--format", "json")
    assert out.returncode in (0, 1), out.stderr
    assert '"fabric.ib-errors"' in out.stdout
    bad = cli("preflight", "--sysroot", str(root), "--counter-window", "-1")
    assert bad.returncode == 2 and bad.stderr.strip().endswith("seconds, 0 or more")
