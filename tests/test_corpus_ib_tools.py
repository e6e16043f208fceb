"""The real-world InfiniBand tool corpus (ibstat, ibstatus, ibdev2netdev, perfquery) and the
edge cases of its readers.

Each file in tests/fixtures/realworld/ib-tools/ was written by others (SOURCES.md,
readings.yaml); its ``check`` says what a correct reading shows, read as ``exemplar-tune
diagnose`` reads it (:func:`diagnose_text`). The pasted ``ibstat | grep`` fragment is
checked with the pasted/ family.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exemplar_tune.diagnose import DiagnoseError, diagnose_text
from tests.corpus import cases, mismatches, readings

FAMILY = "ib-tools"


def _diagnose(text: str, name: str = "capture") -> tuple[dict[str, Any] | None, str | None]:
    try:
        return diagnose_text(text, name).to_dict(), None
    except DiagnoseError as exc:
        return None, str(exc)


def test_every_entry_has_a_check() -> None:
    entries = readings(FAMILY)
    assert entries and all(e.get("check") for e in entries)


@pytest.mark.parametrize(("path", "entry"), cases(FAMILY))
def test_corpus_reading(path: Path, entry: dict[str, Any]) -> None:
    doc, error = _diagnose(path.read_text(errors="replace"), path.name)
    assert mismatches(doc, error, entry["check"]) == []


def _ibstat(*ports: tuple[str, str, str, int, str, str]) -> str:
    """ibstat text of (name, state, physical state, rate, link layer, CA type) ports."""
    return "".join(f"CA '{name}'\n\tCA type: {model}\n\tNumber of ports: 1\n\tPort 1:\n"
                   f"\t\tState: {state}\n\t\tPhysical state: {phys}\n\t\tRate: {rate}\n"
                   f"\t\tLink layer: {layer}\n"
                   for name, state, phys, rate, layer, model in ports)


def _findings(doc: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    assert doc is not None
    return [(f["check_id"], f["status"], f["message"]) for f in doc["findings"]]


def test_polling_rail_fails_and_slow_rail_warns() -> None:
    doc, _ = _diagnose(_ibstat(("mlx5_0", "Active", "LinkUp", 400, "InfiniBand", "MT4129"),
                               ("mlx5_1", "Down", "Polling", 10, "InfiniBand", "MT4129"),
                               ("mlx5_2", "Active", "LinkUp", 200, "InfiniBand", "MT4129")))
    got = _findings(doc)
    assert got[0][1] == "fail" and "mlx5_1 port 1" in got[0][2] and "Polling" in got[0][2]
    assert got[1][1] == "warn" and "mlx5_2" in got[1][2] and "below its peers' 400" in got[1][2]


def test_ethernet_port_down_beside_infiniband_is_not_a_rail_down() -> None:
    doc, _ = _diagnose(_ibstat(("mlx5_0", "Active", "LinkUp", 400, "InfiniBand", "MT4129"),
                               ("mlx5_1", "Down", "Disabled", 40, "Ethernet", "MT4125"),
                               ("mlx5_2", "Active", "LinkUp", 25, "Ethernet", "MT4125")))
    assert doc is not None and doc["status"] == "pass"
    assert ("fabric.ports", "info") in {f[:2] for f in _findings(doc)}


def test_roce_port_down_of_unknown_model_cannot_be_told() -> None:
    text = "".join(f"Infiniband device 'mlx5_{i}' port 1 status:\n\tstate:\t{s}\n"
                   f"\tphys state:\t{p}\n\trate:\t400 Gb/sec (4X NDR)\n\tlink_layer:\tEthernet\n\n"
                   for i, (s, p) in enumerate([("4: ACTIVE", "5: LinkUp"),
                                               ("1: DOWN", "3: Disabled")]))
    doc, _ = _diagnose(text)
    assert doc is not None and doc["kind"] == "ibstatus"
    assert [f[1] for f in _findings(doc)] == ["warn", "pass"]
    assert "cannot tell" in _findings(doc)[0][2]


def test_ibdev2netdev_v_link_state_is_judged() -> None:
    text = ("0000:1a:00.0 mlx5_0 (MT4129 - MCX75310AAS-NEAT) fw 28.39.1002 port 1 (ACTIVE) "
            "==> ibp26s0 (Down)\n"
            "0000:3c:00.0 mlx5_1 (MT4129 - MCX75310AAS-NEAT) fw 28.39.1002 port 1 (DOWN) "
            "==> ibp60s0 (Down)\n")
    doc, _ = _diagnose(text)
    assert doc is not None and doc["summary"]["format"] == "ibdev2netdev -v"
    got = _findings(doc)
    assert got[0][1] == "fail" and got[0][2].startswith("mlx5_1 port 1 (InfiniBand compute")


PERF = ("# Port extended counters: Lid 7 port 1 (CapMask: 0x5300)\nPortSelect:......1\n"
        "SymbolErrorCounter:......{sym}\nLinkDownedCounter:......{down}\n"
        "PortXmitDiscards:......0\nPortXmitWait:......99\n")


def test_perfquery_two_samples_judge_the_gain() -> None:
    doc, _ = _diagnose(PERF.format(sym=50, down=2) + PERF.format(sym=50, down=3))
    assert [f[1] for f in _findings(doc)] == ["fail"]
    assert "LinkDownedCounter +1" in _findings(doc)[0][2]
    doc, _ = _diagnose(PERF.format(sym=50, down=2) + PERF.format(sym=50, down=2))
    assert [f[1] for f in _findings(doc)] == ["pass"]


def test_perfquery_one_sample_over_threshold_warns() -> None:
    doc, _ = _diagnose(PERF.format(sym=50, down=0))
    assert [f[:2] for f in _findings(doc)] == [("fabric.ib-errors", "warn")]


def test_perfquery_mad_failure_alone_is_no_fault() -> None:
    doc, _ = _diagnose("ibwarn: [299010] mad_rpc_open_port: client_register for mgmt 1 failed\n"
                       "perfquery: iberror: failed: Failed to open '(null)' port '0'\n")
    assert doc is not None and doc["kind"] == "perfquery" and doc["status"] == "pass"
    assert "not a fault" in _findings(doc)[0][2]


def test_unreadable_perfquery_is_one_line() -> None:
    doc, error = _diagnose("perfquery: iberror: [pid 1] unexpected\n")
    assert doc is None and error is not None and "\n" not in error
    assert "perfquery output without a counters block" in error
