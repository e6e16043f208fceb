"""The real-world Fabric Manager corpus: ``fabricmanager.log``, its journal and ``systemctl
status`` text, read as ``exemplar-tune diagnose`` reads them (normalisation and format detection
included); each file's ``check`` in tests/fixtures/realworld/fabric-manager-log/readings.yaml
states the operator's reading. Then edge cases the corpus lacks: a fatal NVSwitch error, a
failed start, a cut start, and a capture that cannot be read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exemplar_tune.diagnose import DiagnoseError, diagnose_text
from exemplar_tune.diagnose.fabric_manager_log import ANALYZER, analyze
from tests.corpus import cases, diagnosed, mismatches, readings

FAMILY = "fabric-manager-log"



def test_every_entry_has_a_check() -> None:
    assert all(e.get("check") for e in readings(FAMILY))


@pytest.mark.parametrize(("path", "entry"), [c.values for c in cases(FAMILY)],
                         ids=[c.id for c in cases(FAMILY)])
def test_corpus_reading(path: Path, entry: dict[str, Any]) -> None:
    doc, error = diagnosed(path)
    assert mismatches(doc, error, entry["check"]) == []


def _read(text: str) -> dict[str, Any]:
    return diagnose_text(text, "fm.log").to_dict()


def _statuses(doc: dict[str, Any]) -> set[str]:
    return {f"{f['check_id']}:{f['status']}" for f in doc["findings"]}


def test_a_fatal_switch_error_fails_naming_switch_and_port() -> None:
    doc = _read("[Jan 02 2025 10:00:00] [ERROR] [tid 7] detected NVSwitch fatal error 20034 on "
                "fid 0 on NVSwitch pci bus id 00000000:05:00.0 physical id 1 port 12\n")
    assert doc["kind"] == "fabric manager log"
    bad = next(f for f in doc["findings"] if f["check_id"] == "gpu.nvlink-errors")
    assert bad["status"] == "fail"
    assert "switch 1 (00000000:05:00.0) port 12" in bad["message"]


def test_a_failed_start_fails_and_a_later_healthy_start_passes() -> None:
    failed = ("Jan 02 10:00:00 h systemd[1]: Starting NVIDIA fabric manager service...\n"
              "Jan 02 10:00:01 h nv-fabricmanager[9]: fabric manager NVLink version mismatch\n"
              "Jan 02 10:00:01 h systemd[1]: nvidia-fabricmanager.service: Control process "
              "exited, code=exited, status=1/FAILURE\n"
              "Jan 02 10:00:01 h systemd[1]: Failed to start NVIDIA fabric manager service.\n")
    assert "gpu.fabric-manager:fail" in _statuses(_read(failed))
    healed = failed + ("Jan 02 10:05:00 h systemd[1]: Starting NVIDIA fabric manager service...\n"
                       "Jan 02 10:05:02 h nv-fabricmanager[12]: Successfully configured all the "
                       "available NVSwitches to route GPU NVLink traffic.\n"
                       "Jan 02 10:05:02 h systemd[1]: Started NVIDIA fabric manager service.\n")
    assert _statuses(_read(healed)) == {"gpu.fabric-manager:pass"}


def test_a_start_cut_before_configuration_is_unknown_not_pass() -> None:
    doc = _read("Fabric Manager Log initializing at: 1/2/2025 10:00:00.000\n"
                "[Jan 02 2025 10:00:00] [INFO] [tid 5] Fabric Manager version 550.54.15 is "
                "running with the following configuration options\n")
    found = doc["findings"]
    assert [(f["check_id"], f["status"]) for f in found] == [("gpu.fabric-manager", "info")]
    assert "unknown" in found[0]["message"]


def test_systemctl_status_failed_unit_fails() -> None:
    doc = _read("● nvidia-fabricmanager.service - NVIDIA fabric manager service\n"
                "     Loaded: loaded (/lib/systemd/system/nvidia-fabricmanager.service; enabled)\n"
                "     Active: failed (Result: exit-code) since Mon 2025-01-06 10:00:00 UTC; 1h "
                "ago\n")
    assert _statuses(doc) == {"gpu.fabric-manager:fail"}


def test_a_capture_it_cannot_read_is_one_line_naming_what_it_looked_for() -> None:
    with pytest.raises(DiagnoseError) as err:
        analyze("nvidia-fabricmanager\nnothing else here\n", "fm.txt", {})
    assert "\n" not in str(err.value) and "looked for" in str(err.value)


def test_sniffer_leaves_imex_and_kernel_logs_alone() -> None:
    assert not ANALYZER.sniff("[Mar 25 2025 10:41:54] [INFO] [tid 38] IMEX version 570.00 is "
                              "running with the following configuration options\n")
    assert not ANALYZER.sniff("[  12.3] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off\n")
