"""The real-world ``dcgmi nvlink`` corpus (``tests/fixtures/realworld/dcgm-nvlink/``: link
states and error counters by others, and one ``dcgmi diag`` table), read as ``exemplar-tune
diagnose`` reads it; plus edge cases of the reader: disabled and NVSwitch links, a capture
cut short, one that holds no GPU, and a ``dcgmi diag`` table cut short."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exemplar_tune.diagnose import DiagnoseError, diagnose_text
from tests.corpus import cases, diagnosed, mismatches, readings

FAMILY = "dcgm-nvlink"
KEY = "\nKey: Up=U, Down=D, Disabled=X, Not Supported=_"
BOX = "+----------------------+\n|  NvLink Link Status  |\n+----------------------+\n"



def test_every_entry_has_a_check() -> None:
    assert all(e.get("check") for e in readings(FAMILY))


@pytest.mark.parametrize(("path", "entry"), [c.values for c in cases(FAMILY)],
                         ids=[c.id for c in cases(FAMILY)])
def test_corpus_reading(path: Path, entry: dict[str, Any]) -> None:
    doc, error = diagnosed(path)
    assert mismatches(doc, error, entry["check"]) == []


def _status(body: str) -> dict[str, Any]:
    return diagnose_text(BOX + body, "s.txt").to_dict()


def test_a_disabled_link_warns_and_a_down_one_fails() -> None:
    doc = _status("GPUs:\n    gpuId 0:\n        U U X _\n    gpuId 1:\n        U D U _\n"
                  "NvSwitches:\n    No NvSwitches found.\n" + KEY)
    found = {(f["check_id"], f["status"]): f["message"] for f in doc["findings"]}
    assert "GPU 1: link 1 inactive" in found["gpu.nvlink-links", "fail"]
    assert "GPU 0 link 2" in found["gpu.nvlink-links", "warn"]


def test_nvswitch_ports_down_fail_and_unwired_ones_do_not() -> None:
    doc = _status("GPUs:\n    gpuId 0:\n        U U\nNvSwitches:\n    physicalId 8:\n"
                  "        U D _ _\n    physicalId 9:\n        U U _ _\n" + KEY)
    (down,) = [f for f in doc["findings"] if f["status"] == "fail"]
    assert down["message"] == "NVSwitch links down: NVSwitch 8 port 1"
    assert doc["summary"]["nvswitches"][1]["not_supported"] == 2


def test_a_status_capture_cut_short_is_not_called_clean() -> None:
    doc = _status("GPUs:\n    gpuId 0:\n        U U U U\n    gpuId 1:\n")
    (links,) = doc["findings"]
    assert links["status"] == "info" and "cut short" in links["message"]
    assert "unknown" in links["message"] and doc["summary"]["complete"] is False


def test_a_status_box_without_gpu_states_is_refused_in_one_line() -> None:
    with pytest.raises(DiagnoseError, match="no 'gpuId N:' line") as err:
        diagnose_text(BOX + "GPUs:\n    No GPUs found.\n" + KEY, "s.txt")
    assert "\n" not in str(err.value)


def test_error_counters_over_the_threshold_warn() -> None:
    text = ("+----+----+\n| NVLINK Error Counts |\n| GPU 3 |\n+====+====+\n| Link 5 | |\n"
            "| -> CRC FLIT Error | 7 |\n| -> Replay Error | 2 |\n+----+----+\n")
    doc = diagnose_text(text, "e.txt").to_dict()
    (errors,) = doc["findings"]
    assert errors["status"] == "warn" and "GPU 3 link 5 replay errors 2" in errors["message"]


def test_json_cut_short_is_refused_naming_what_it_looked_for() -> None:
    with pytest.raises(DiagnoseError, match="no whole JSON object"):
        diagnose_text('{\n "body" : {\n  "Link 0" : {\n   "children" : {\n', "j.txt")


def test_a_dcgmi_diag_table_cut_short_never_passes() -> None:
    text = ("+-----+-----+\n| Diagnostic | Result |\n+=====+=====+\n"
            "|-----  Deployment  --------+------|\n| Denylist | Pass |\n| NVML Library | Pass |\n")
    doc = diagnose_text(text, "d.txt").to_dict()
    assert [f["status"] for f in doc["findings"]] == ["info"]
    assert "incomplete" in doc["findings"][0]["message"]
    assert doc["summary"]["complete"] is False
