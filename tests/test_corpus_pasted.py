"""Captures as operators paste them (tests/fixtures/realworld/pasted/): a shell prompt or the
command line first, a grepped ``nvidia-smi -q`` Fabric section that still holds a verdict,
``nvidia-smi topo -m`` of older drivers (NIC columns named ``mlx5_N``) and of a damaged paste.

Each is read as ``exemplar-tune diagnose`` reads it; its ``check`` in readings.yaml is the
reading its source supports (which GPU reaches which NIC at which distance, whether the
fabric is healthy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exemplar_tune.diagnose import DiagnoseError, diagnose_text
from tests.corpus import cases, diagnosed, mismatches


@pytest.mark.parametrize(("path", "entry"), cases("pasted"))
def test_a_pasted_capture_reads_as_its_source_says(path: Path, entry: dict[str, Any]) -> None:
    doc, error = diagnosed(path)
    assert mismatches(doc, error, entry["check"]) == []


def test_a_fabric_section_without_a_verdict_is_refused_in_one_line():
    with pytest.raises(DiagnoseError, match=r"^x: a Fabric section without a State, Status or "
                                            r"Health the gpu\.fabric-state check can judge$"):
        diagnose_text("Fabric\n    CliqueId : 2\n    ClusterUUID : abc\n", "x")
