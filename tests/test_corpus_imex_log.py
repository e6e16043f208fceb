"""The real-world IMEX corpus: ``nvidia-imex`` daemon logs and DCGM's IMEX status
(tests/fixtures/realworld/imex-log, each file's ``check`` in its readings.yaml) and the
``nvidia-imex-ctl -N`` captures of tests/fixtures/realworld/imex, read as ``exemplar-tune
diagnose`` reads them. A daemon log never reads "ready": the log has no line that says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exemplar_tune.diagnose import DiagnoseError, diagnose_text
from exemplar_tune.diagnose.imex_log import analyze
from tests.corpus import REALWORLD, cases, diagnosed, mismatches, readings

FAMILY = "imex-log"



def test_every_entry_has_a_check() -> None:
    assert all(e.get("check") for e in readings(FAMILY))


@pytest.mark.parametrize(("path", "entry"), [c.values for c in cases(FAMILY)],
                         ids=[c.id for c in cases(FAMILY)])
def test_corpus_reading(path: Path, entry: dict[str, Any]) -> None:
    doc, error = diagnosed(path)
    assert mismatches(doc, error, entry["check"]) == []


@pytest.mark.parametrize("path", sorted((REALWORLD / FAMILY).glob("*.txt")),
                         ids=lambda p: p.name)
def test_no_daemon_log_reads_ready(path: Path) -> None:
    doc, _ = diagnosed(path)
    assert doc is not None
    assert all(f["status"] != "pass" for f in doc["findings"])


@pytest.mark.parametrize(("name", "status", "nodes"), [
    ("aws-parallelcluster-guide-gb200-p6e-18node-imex-ctl-N.txt", "pass", 18),
    ("jgehrcke-jpsnips-nv-gh200-1node-imex-ctl-q-N.txt", "pass", 1),
    ("jgehrcke-jpsnips-nv-gh200-2node-imex-ctl-q-N.txt", "pass", 2),
    ("bottlerocket-kernel-kit-pr204-imex-ctl-no-config.txt", "info", 0),
])
def test_imex_ctl_captures(name: str, status: str, nodes: int) -> None:
    doc, error = diagnosed(REALWORLD / "imex" / name)
    assert error is None and doc["summary"]["format"] == "nvidia-imex-ctl -N"
    assert [(f["check_id"], f["status"]) for f in doc["findings"]] == [("gpu.imex", status)]
    assert len(doc["summary"]["nodes"]["nodes"]) == nodes


def test_a_node_not_ready_or_not_connected_fails() -> None:
    text = (REALWORLD / "imex" / "jgehrcke-jpsnips-nv-gh200-2node-imex-ctl-q-N.txt").read_text()
    broken = text.replace("10.136.206.48   - READY", "10.136.206.48   - UNAVAILABLE").replace(
        "       1        C  C", "       1        N  C").replace("Domain State: UP",
                                                               "Domain State: DEGRADED")
    doc = diagnose_text(broken, "imex-N.txt").to_dict()
    (found,) = doc["findings"]
    assert found["status"] == "fail" and "node 1 (10.136.206.48) UNAVAILABLE" in found["message"]
    assert "1->0 N" in found["message"]


def test_a_version_mismatch_in_the_log_fails() -> None:
    doc = diagnose_text("[Mar 25 2025 10:41:54] [INFO] [tid 38] IMEX version 570.00 is running "
                        "with the following configuration options\n[Mar 25 2025 10:41:55] "
                        "[WARNING] [tid 40] Version mismatch with node 3, communication "
                        "disabled\n", "imex.log").to_dict()
    assert [(f["check_id"], f["status"]) for f in doc["findings"]] == [("gpu.imex", "fail")]


def test_a_capture_it_cannot_read_is_one_line_naming_what_it_looked_for() -> None:
    with pytest.raises(DiagnoseError) as err:
        analyze("nvidia-imex\nno log lines here\n", "imex.txt", {})
    assert "\n" not in str(err.value) and "Domain State" in str(err.value)
