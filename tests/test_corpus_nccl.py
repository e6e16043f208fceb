"""The real-world NCCL corpus: nccl-tests outputs, NCCL debug logs and topology XML files.

Each file in tests/fixtures/realworld/{nccl-tests,nccl-log,topology}/ was written by others
(sources in each family's SOURCES.md and readings.yaml); its ``check`` says what a correct
reading shows. nccl-tests outputs and NCCL logs are read as ``exemplar-tune diagnose`` reads
them (:func:`diagnose_text`, normalisation and format detection included); topology files
through ``topo_xml.parse_topo_xml``, the parser the runtime facts and the ``nccl_topo`` module
validate ``NCCL_TOPO_FILE`` content with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.topo_xml import parse_topo_xml

from tests.corpus import cases, diagnosed, mismatches, readings


def _topology(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        return parse_topo_xml(path.read_text(), path.name), None
    except HostStateError as exc:
        return None, f"{exc.path}: {exc.reason}"


READERS = {"nccl-tests": diagnosed, "nccl-log": diagnosed, "topology": _topology}


@pytest.mark.parametrize("family", sorted(READERS))
def test_every_entry_has_a_check(family: str) -> None:
    entries = readings(family)
    assert entries and all(e.get("check") for e in entries), family


@pytest.mark.parametrize(("family", "path", "entry"), [
    pytest.param(family, *case.values, id=f"{family}/{case.id}")
    for family in sorted(READERS) for case in cases(family)])
def test_corpus_reading(family: str, path: Path, entry: dict[str, Any]) -> None:
    doc, error = READERS[family](path)
    assert mismatches(doc, error, entry["check"]) == []


@pytest.mark.parametrize("path", [c.values[0] for c in cases("nccl-log")],
                         ids=[c.id for c in cases("nccl-log")])
def test_every_nccl_warn_line_is_in_a_finding(path: Path) -> None:
    """No WARN line is only counted: each one is evidence of an ``fabric.nccl-errors``
    finding (topology WARN lines belong to the topology finding instead)."""
    doc, _ = diagnosed(path)
    assert doc is not None
    cited = {n for f in doc["findings"] if f["check_id"] == "fabric.nccl-errors"
             for n in f["values"]["lines"]}
    warn_lines = {n for n, line in enumerate(path.read_text().splitlines(), start=1)
                  if " NCCL WARN " in line and "XML" not in line}
    assert warn_lines <= cited
