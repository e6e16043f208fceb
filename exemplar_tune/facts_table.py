"""Turn nested facts into readable terminal lines (``--format table``)."""

from __future__ import annotations

import json
from typing import Any

WIDTH = 100


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """``{"a": {"b": 1}, "c": [1, 2]}`` -> ``[("a.b", "1"), ("c", "[1, 2]")]``.

    Lists of dictionaries are expanded with their index (``gpus[0].bdf``).
    """
    if isinstance(value, dict) and value:
        rows: list[tuple[str, str]] = []
        for key, item in value.items():
            rows += flatten(item, f"{prefix}.{key}" if prefix else str(key))
        return rows
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        rows = []
        for index, item in enumerate(value):
            rows += flatten(item, f"{prefix}[{index}]")
        return rows
    return [(prefix, _scalar(value))]


def _scalar(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."


def facts_table(facts: dict[str, dict[str, Any]], show_sources: bool = False) -> str:
    """One block per layer: ``key  value`` lines, then the errors met (if any)."""
    lines: list[str] = []
    for layer, data in facts.items():
        lines.append(f"== {layer}")
        body = {k: v for k, v in data.items() if k not in ("sources", "errors")}
        if show_sources:
            body["sources"] = data.get("sources", {})
        rows = flatten(body)
        width = max((len(key) for key, _ in rows), default=0)
        lines += [f"  {key.ljust(width)}  {value}" for key, value in rows]
        lines += [f"  ! {e['fact']}: {e['path']}: {e['error']}" for e in data.get("errors", [])]
    return "\n".join(lines)
