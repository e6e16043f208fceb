"""``numactl -H`` of hosts with CXL memory expanders (tests/fixtures/realworld/numa-cxl/, by
their authors): a node with memory and no CPUs is a memory tier near a socket, not remote
allocation; one with 0 MB has no memory online. Each file's ``check`` is the reading its
source states."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.corpus import cases, diagnosed, mismatches, readings


def test_every_capture_has_a_check() -> None:
    assert all(e.get("check") for e in readings("numa-cxl"))


@pytest.mark.parametrize(("path", "entry"), cases("numa-cxl"))
def test_a_memory_only_node_reads_as_a_tier(path: Path, entry: dict[str, Any]) -> None:
    doc, error = diagnosed(path)
    assert mismatches(doc, error, entry["check"]) == []
    assert doc["kind"] == "numactl -H" and doc["status"] == "pass"  # information, no fault
