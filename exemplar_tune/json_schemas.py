"""The JSON Schemas of exemplar-tune's machine-readable outputs, shipped in the package.

:data:`SCHEMAS` names each document (``exemplar-tune schema NAME`` prints it). Every JSON
document a command prints goes through :func:`checked`: with ``EXEMPLAR_TUNE_VALIDATE_JSON``
set (the test suite sets it), a document that does not match its schema is an error, so
the tests validate every JSON output they produce.
"""

from __future__ import annotations

import functools
import json
import os
from importlib import resources
from typing import Any

import jsonschema

# name -> (file in exemplar_tune/schemas/, what it describes)
SCHEMAS: dict[str, tuple[str, str]] = {
    "preflight": ("preflight-result.schema.json", "preflight --format json"),
    "audit": ("audit-result.schema.json", "audit --format json"),
    "slow-nodes": ("slow-nodes-result.schema.json", "slow-nodes --format json"),
    "slow-nodes-fabric": ("slow-nodes-fabric-result.schema.json",
                          "slow-nodes --fabric --format json"),
    "benchmark": ("benchmark.schema.json", "a benchmark file (--bench FILE.yaml)"),
}
VALIDATE_ENV = "EXEMPLAR_TUNE_VALIDATE_JSON"


@functools.cache
def schema(name: str) -> dict[str, Any]:
    """The schema called ``name`` (one of :data:`SCHEMAS`)."""
    file = resources.files("exemplar_tune") / "schemas" / SCHEMAS[name][0]
    return json.loads(file.read_text())


def checked(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """``doc``, validated against schema ``name`` when :data:`VALIDATE_ENV` is set
    (``jsonschema.ValidationError`` when it does not match)."""
    if os.environ.get(VALIDATE_ENV):
        jsonschema.validate(doc, schema(name))
    return doc
