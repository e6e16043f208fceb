"""Turn nested facts into readable terminal lines (``--format table``); what a host's files
hold is shown escaped (:func:`exemplar_tune.terminal.escape`), one fact a line."""

from __future__ import annotations

import json
from typing import Any

from exemplar_tune.terminal import join_lines

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


def _count(number: int, word: str) -> str:
    return f"{number} {word}" if number == 1 else f"{number} {word}s"


def processor_line(proc: dict[str, Any] | None) -> str | None:
    """The cpu layer's ``processor`` fact in one line, e.g. ``Intel(R) Xeon(R) Platinum 8460H
    (Intel family 6 model 143 stepping 8), 2 sockets x 4 cores x 1 thread, 8 CPUs online``;
    ``None`` when nothing about the CPU is known."""
    if not proc or not any(proc.get(k) for k in ("model_name", "vendor", "cpus_online")):
        return None
    ids = ("family", "model", "stepping", "implementer", "part")
    vendor = [proc["vendor"]] if proc.get("vendor") else []
    detail = " ".join(vendor + [f"{k} {proc[k]}" for k in ids if proc.get(k) is not None])
    head = proc.get("model_name") or "unknown model"
    parts = [f"{head} ({detail})" if detail else head]
    if proc.get("sockets"):
        parts.append(" x ".join([_count(proc["sockets"], "socket"),
                                 _count(proc["cores_per_socket"], "core"),
                                 _count(proc["threads_per_core"], "thread")]))
    if proc.get("cpus_online"):
        parts.append(f"{_count(proc['cpus_online'], 'CPU')} online")
    soc_name = (proc.get("soc") or {}).get("name")
    return ", ".join(parts) + (f" [{soc_name}]" if soc_name else "")


def facts_table(facts: dict[str, dict[str, Any]], show_sources: bool = False) -> str:
    """One block per layer: ``key  value`` lines, then the errors met (if any). The cpu
    block starts with the processor in one line (:func:`processor_line`). Every line is
    escaped: a value never starts a line nor moves the cursor."""
    lines: list[str] = []
    for layer, data in facts.items():
        lines.append(f"== {layer}")
        cpu = processor_line(data.get("processor")) if layer == "cpu" else None
        if cpu:
            lines.append(f"  CPU: {cpu}")
        body = {k: v for k, v in data.items() if k not in ("sources", "errors")}
        if show_sources:
            body["sources"] = data.get("sources", {})
        rows = flatten(body)
        width = max((len(key) for key, _ in rows), default=0)
        lines += [f"  {key.ljust(width)}  {value}" for key, value in rows]
        lines += [f"  ! {e['fact']}: {e['path']}: {e['error']}" for e in data.get("errors", [])]
    return join_lines(lines)
