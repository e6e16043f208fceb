"""The CPU-side analyzers read the real-world corpus as its readings.yaml says (issue 16).

Every capture in tests/fixtures/realworld/{turbostat,numastat,perf}/ is diagnosed through the
same path as ``exemplar-tune diagnose FILE --format json`` (normalisation, detection, analysis)
and its document compared with the entry's ``check``.
"""

from __future__ import annotations

import json

import pytest

from exemplar_tune.diagnose import DiagnoseError, diagnose_text
from tests.corpus import cases, mismatches, readings

FAMILIES = ("turbostat", "numastat", "perf")


def read(path):
    """The JSON document ``diagnose`` gives for the file, or its one-line refusal."""
    try:
        report = diagnose_text(path.read_text(encoding="utf-8"), path.name)
    except DiagnoseError as exc:
        return None, str(exc)
    return json.loads(json.dumps(report.to_dict())), None


@pytest.mark.parametrize(("path", "entry"),
                         [c for family in FAMILIES for c in cases(family)])
def test_corpus_reading(path, entry):
    doc, error = read(path)
    assert mismatches(doc, error, entry["check"]) == []


@pytest.mark.parametrize("family", FAMILIES)
def test_every_entry_has_a_check_and_a_file(family):
    entries = readings(family)
    assert entries and all(e.get("check") for e in entries)
    assert len(cases(family)) == len(entries)
    assert all(c.values[0].is_file() for c in cases(family))
