"""The real-world corpus: captures written by others, and the reading a correct parser gives.

Each family lives in ``tests/fixtures/realworld/<family>/`` with a ``readings.yaml``: one
entry per file with its ``source``, ``author``, ``trimmed``, the reading in words
(``expected``) and ``check``, the part of it a test asserts on the parser's JSON document:

* ``"a.b.0.c": value`` — the value at that path (numbers equal within ``REL_TOL``, or
  ``{approx: x, rel: r}``; ``{contains: text}`` for a substring; ``{len: n}`` for a length);
* ``findings: ["layer.check:status", ...]`` — each must be among the document's findings;
* ``no_findings: ["layer.check", ...]`` — none of these may be a finding;
* ``refused: text`` — the parser must refuse the file with a one-line message containing text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from exemplar_tune.diagnose import DiagnoseError, diagnose_paths, diagnose_text

REALWORLD = Path(__file__).parent / "fixtures" / "realworld"
REL_TOL = 1e-3


def read_paths(paths: list[str]) -> list[Any]:
    """``diagnose_paths`` for files that must all be read: the first refusal raises."""
    reports, errors = diagnose_paths(paths)
    if errors:
        raise DiagnoseError(errors[0])
    return reports


def diagnosed(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(document, None)`` of a capture as ``exemplar-tune diagnose`` reads it (normalisation
    and format detection included), or ``(None, the one-line refusal)``."""
    try:
        return diagnose_text(path.read_text(errors="replace"), path.name).to_dict(), None
    except DiagnoseError as exc:
        return None, str(exc)


def readings(family: str) -> list[dict[str, Any]]:
    """The family's readings.yaml entries."""
    return yaml.safe_load((REALWORLD / family / "readings.yaml").read_text())


def cases(family: str) -> list[Any]:
    """One ``pytest.param(path, entry)`` per file that has a ``check``, named by the file."""
    return [pytest.param(REALWORLD / family / e["file"], e, id=e["file"])
            for e in readings(family) if e.get("check")]


def mismatches(doc: dict[str, Any] | None, error: str | None, check: dict[str, Any]) -> list[str]:
    """What differs between a reading (``doc``, or the refusal ``error``) and ``check``."""
    if "refused" in check:
        if doc is not None:
            return [f"read, but should be refused ({check['refused']!r})"]
        return [] if check["refused"] in (error or "") else [f"refused with {error!r}"]
    if doc is None:
        return [f"refused: {error}"]
    found = {f"{f['check_id']}:{f['status']}" for f in doc.get("findings", [])}
    ids = {f["check_id"] for f in doc.get("findings", [])}
    wrong = [f"missing finding {f}" for f in check.get("findings", []) if f not in found]
    wrong += [f"unexpected finding {i}" for i in check.get("no_findings", []) if i in ids]
    for path, want in check.items():
        if path in ("findings", "no_findings"):
            continue
        got = _at(doc, path)
        if not _matches(got, want):
            wrong.append(f"{path}: got {got!r}, expected {want!r}")
    return wrong


_MISSING = object()


def _at(doc: Any, path: str) -> Any:
    for key in path.split("."):
        if isinstance(doc, list) and key.lstrip("-").isdigit() and -len(doc) <= int(key) < len(doc):
            doc = doc[int(key)]
        elif isinstance(doc, dict) and key in doc:
            doc = doc[key]
        else:
            return _MISSING
    return doc


def _matches(got: Any, want: Any) -> bool:
    if got is _MISSING:
        return False
    if isinstance(want, dict) and "approx" in want:
        return isinstance(got, (int, float)) and abs(got - want["approx"]) <= abs(
            want["approx"]) * want.get("rel", REL_TOL)
    if isinstance(want, dict) and "contains" in want:
        return want["contains"] in str(got)
    if isinstance(want, dict) and "len" in want:
        return hasattr(got, "__len__") and len(got) == want["len"]
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return abs(got - want) <= abs(want) * REL_TOL
    return got == want
