"""``fabric.link-flaps`` and the kernel log's NIC link changes, on real logs by others
(``tests/fixtures/realworld/link-events/SOURCES.md``): an mlx5 pair going down (LKML), an mlx5
port coming up four times in 45 s (bigstack-oss/cubecos#733, syslog form), cables plugged in at
boot; read from a sysroot's captured ``dmesg`` as a host's would be."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.link_events import (
    parse_link_events,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, PASS, SKIP, WARN
from tests.corpus import REALWORLD
from tests.helpers import captured_host

EVENTS = REALWORLD / "link-events"
LKML = EVENTS / "lkml-acme-20241204-dmesg-tail-mlx5-link-down.txt"
CUBECOS = EVENTS / "bigstack-oss-cubecos-issue733-journalctl-mlx5-link-up-repeated.txt"
PLUGGED = EVENTS / "jishuzhan-mlx5-cable-plugged-link-up.txt"
CHECK = next(c for c in CHECKS if c.id == "fabric.link-flaps")


def judge(tmp_path: Path, log: str | None, profile: dict | None = None):
    root = captured_host(tmp_path / "host", {"dmesg.txt": log})
    facts = gather_facts(Sysroot(str(root)), ["fabric"])
    return CHECK.func(facts, profile or {})


def test_real_logs_read_each_link_change():
    assert [(e["iface"], e["state"], e["t"]) for e in parse_link_events(LKML.read_text())] == [
        ("enp1s0f0np0", "down", 18865.848172), ("enp1s0f1np1", "down", 18866.05799)]
    ups = parse_link_events(CUBECOS.read_text())
    assert [(e["device"], e["iface"], e["state"]) for e in ups] == [
        ("0000:01:00.1", "eth1", "up")] * 4
    assert [e["state"] for e in parse_link_events(PLUGGED.read_text())] == [
        "plugged", "plugged", "up", "up"]


@pytest.mark.parametrize(("log", "status", "words"), [
    (PLUGGED, PASS, "no NIC link went down this boot"),
    (LKML, WARN, "0000:01:00.0 enp1s0f0np0: down; 0000:01:00.1 enp1s0f1np1: down"),
    (CUBECOS, FAIL, "link flapping (2+ changes within 300 s) on 0000:01:00.1 eth1: 3 changes"),
])
def test_real_logs_are_judged(tmp_path, log, status, words):
    outcome = judge(tmp_path, log.read_text())
    assert outcome.status == status and words in outcome.detail, outcome.detail


def test_the_window_and_the_repeats_are_profile_settings(tmp_path):
    """The LKML link down repeated 400 s later: two downs, not within 300 s (a warning); with
    a 600 s window, a flap."""
    lines = LKML.read_text().splitlines()
    again = lines[2].replace("[18865.848172]", "[19265.848172]")
    log = "\n".join([*lines[:6], again, *lines[6:]]) + "\n"  # in time order
    assert judge(tmp_path / "a", log).status == WARN
    outcome = judge(tmp_path / "b", log, {"fabric": {"flap_window_s": 600}})
    assert outcome.status == FAIL and "enp1s0f0np0: 2 changes (down, down)" in outcome.detail


def test_an_older_boot_does_not_count_and_no_log_is_a_skip(tmp_path):
    old = LKML.read_text() + "[    0.000000] Linux version 6.8.0-49-generic\n"
    assert judge(tmp_path / "a", old).status == PASS
    assert judge(tmp_path / "b", None).status == SKIP
