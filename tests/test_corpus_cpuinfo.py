"""The cpu layer's ``processor`` fact on real /proc/cpuinfo captures (tests/fixtures/realworld/
cpuinfo): each capture becomes the ``proc/cpuinfo`` of an otherwise empty sysroot, so the
counts come from /proc/cpuinfo alone, and the fact must match the entry's ``check``. A capture
the reader refuses is one ``errors`` entry naming the file, and the fact holds no guess."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import (
    cpu_processor as layer_cpu_processor,
)
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.corpus import cases, mismatches


def read_capture(capture: Path, tmp_path: Path) -> dict[str, Any]:
    """The cpu layer's sheet for a sysroot whose only file is ``capture`` as /proc/cpuinfo."""
    (tmp_path / "proc").mkdir()
    shutil.copyfile(capture, tmp_path / "proc" / "cpuinfo")
    sheet = FactSheet()
    layer_cpu_processor.gather_into(sheet, Sysroot(str(tmp_path)))
    return sheet.result()


@pytest.mark.parametrize(("path", "entry"), cases("cpuinfo"))
def test_capture_reading(path: Path, entry: dict, tmp_path: Path) -> None:
    result = read_capture(path, tmp_path)
    errors = [f"{e['path']}: {e['error']}" for e in result["errors"]]
    assert len(errors) <= 1 and all("\n" not in e for e in errors), errors
    doc = None if errors else result["processor"]
    assert mismatches(doc, errors[0] if errors else None, entry["check"]) == []


def test_refused_capture_leaves_no_guess(tmp_path: Path) -> None:
    """lscpu output under a .cpuinfo name: refused, and no lscpu value leaks into the fact."""
    capture = next(p for p, e in (c.values for c in cases("cpuinfo"))
                   if "refused" in e["check"])
    result = read_capture(capture, tmp_path)
    assert [e["path"] for e in result["errors"]] == ["/proc/cpuinfo"]
    fact = result["processor"]
    assert fact["model_name"] is None and fact["vendor"] is None
    assert fact["cpus_online"] is None and fact["sockets"] is None
