"""The configuration file of NCCL's example tuner plugin (``nccl_tuner.conf``): checked rows,
rendered, read back and matched.

The format is the one the example plugin of NVIDIA/nccl reads (``plugins/tuner/example``,
``README.md`` and ``plugin.c``): one comma-separated row per line,
``collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks``, ``#`` comments
and blank lines ignored. A collective call of ``nBytes`` takes the first row whose collective
matches, ``min_bytes <= nBytes <= max_bytes`` and whose ``nNodes``/``nRanks`` are ``-1`` or
equal the communicator's; ``channels`` ``-1`` keeps NCCL's channel count.

A row is a mapping (``collective``, ``min_bytes``, ``max_bytes``, ``algorithm``,
``protocol``, ``channels``, ``nodes``, ``ranks`` and an optional one-line ``note`` written as
a comment above it). :func:`check_rows` refuses anything that could change the file's syntax
before :func:`render` writes a byte.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import KnobInputError
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import (
    ONE_LINE_PATTERN,
    one_line,
)

COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
FIELDS = ("collective", "min_bytes", "max_bytes", "algorithm", "protocol", "channels",
          "nodes", "ranks")
MAX_BYTES = 2**64 - 1
# nccl-tests' and NCCL's names of a collective -> the plugin's
NCCL_NAMES = {"all_gather": "allgather", "reduce_scatter": "reducescatter",
              "all_reduce": "allreduce", "broadcast": "broadcast", "reduce": "reduce"}
# the profile schema of one row (the knob's target)
ROW_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "required": list(FIELDS),
    "properties": {
        "collective": {"enum": list(COLLECTIVES)},
        "min_bytes": {"type": "integer", "minimum": 0, "maximum": MAX_BYTES},
        "max_bytes": {"type": "integer", "minimum": 0, "maximum": MAX_BYTES},
        "algorithm": {"enum": list(ALGORITHMS)},
        "protocol": {"enum": list(PROTOCOLS)},
        "channels": {"type": "integer", "minimum": -1, "maximum": 64, "not": {"const": 0}},
        "nodes": {"type": "integer", "minimum": -1, "not": {"const": 0}},
        "ranks": {"type": "integer", "minimum": -1, "not": {"const": 0}},
        "note": {"type": "string", "pattern": ONE_LINE_PATTERN},
    },
}


def check_rows(rows: Any, what: str) -> list[dict[str, Any]]:
    """``rows`` as checked rows (see the module docstring); ``KnobInputError`` naming the row
    and field for anything else."""
    if not isinstance(rows, list):
        raise KnobInputError(what, "must be a list of rows")
    return [_check_row(row, f"{what}[{index}]") for index, row in enumerate(rows)]


def _check_row(row: Any, what: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise KnobInputError(what, "must be a mapping with " + ", ".join(FIELDS))
    unknown = sorted(set(row) - set(FIELDS) - {"note"})
    if unknown:
        raise KnobInputError(what, f"unknown field {unknown[0]!r}")
    missing = [f for f in FIELDS if f not in row]
    if missing:
        raise KnobInputError(what, f"missing {missing[0]}")
    for field, names in (("collective", COLLECTIVES), ("algorithm", ALGORITHMS),
                         ("protocol", PROTOCOLS)):
        if row[field] not in names:
            raise KnobInputError(f"{what}.{field}", f"{row[field]!r} is not one of "
                                 + ", ".join(names))
    checked = {f: row[f] for f in FIELDS}
    for field in ("min_bytes", "max_bytes", "channels", "nodes", "ranks"):
        low = 0 if field.endswith("bytes") else -1
        value = row[field]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_BYTES \
                or (low == -1 and value == 0):
            raise KnobInputError(f"{what}.{field}", f"{value!r} is not "
                                 + ("a byte count" if low == 0 else "-1 or a positive count"))
    if row["min_bytes"] > row["max_bytes"]:
        raise KnobInputError(what, "min_bytes is above max_bytes")
    if "note" in row:
        checked["note"] = one_line(row["note"], f"{what}.note")
    return checked


def render(rows: list[dict[str, Any]], header: str) -> str:
    """The file for checked ``rows`` (in order: the plugin takes the first match), each row
    after its note, below the one-line ``header`` comment."""
    lines = [f"# {one_line(header, 'header')}",
             "# " + ",".join(("collective_type", *FIELDS[1:6], "nNodes", "nRanks"))]
    for row in rows:
        if row.get("note"):
            lines.append(f"# {row['note']}")
        lines.append(",".join(str(row[f]) for f in FIELDS))
    return "\n".join(lines) + "\n"


def parse(text: str) -> list[dict[str, Any]]:
    """The rows of a file in the format, as the plugin reads them: a line with fewer than 8
    fields, an unknown name or a number that does not parse is skipped (the plugin logs and
    skips it too); the optional numPipeOps and regBuff fields are ignored."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < len(FIELDS):
            continue
        try:
            row = {f: (v if f in ("collective", "algorithm", "protocol") else int(v))
                   for f, v in zip(FIELDS, fields, strict=False)}
            rows.append(_check_row(row, "row"))
        except (ValueError, KnobInputError):
            continue
    return rows


def match(rows: list[dict[str, Any]], collective: str, size: int, nodes: int,
          ranks: int) -> dict[str, Any] | None:
    """The first row that applies to a ``collective`` call of ``size`` bytes on a communicator
    of ``nodes`` and ``ranks`` (None: NCCL chooses)."""
    name = NCCL_NAMES.get(collective, collective)
    for row in rows:
        if row["collective"] == name and row["min_bytes"] <= size <= row["max_bytes"] \
                and row["nodes"] in (-1, nodes) and row["ranks"] in (-1, ranks):
            return row
    return None
