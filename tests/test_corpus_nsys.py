"""The nsys corpus: each real ``nsys stats`` capture read as its readings.yaml ``check`` says."""

from __future__ import annotations

import pytest

from exemplar_tune.diagnose import DiagnoseError
from tests.corpus import cases, mismatches, read_paths


@pytest.mark.parametrize(("path", "entry"), cases("nsys"))
def test_nsys_capture_reads_as_expected(path, entry):
    try:
        doc, error = read_paths([str(path)])[0].to_dict(), None
    except DiagnoseError as exc:
        doc, error = None, str(exc)
    assert mismatches(doc, error, entry["check"]) == []


def test_every_nsys_capture_has_a_check():
    from tests.corpus import readings
    assert len(cases("nsys")) == len(readings("nsys")) == 10
