"""One layer's facts, with where each came from and what could not be read.

A gatherer fills a :class:`FactSheet` key by key. ``attempt()`` runs a reader and, when the
reader raises a :class:`HostStateError`, stores ``None`` for that key and records the error, so
that one unreadable or malformed file never hides the other facts nor crashes the module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotSupported,
)


class FactSheet:
    """Facts of one layer: ``facts[key]``, ``sources[key]`` (path or command), ``errors``."""

    def __init__(self) -> None:
        self.facts: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.errors: list[dict[str, str]] = []

    def put(self, key: str, value: Any, source: str | list[str]) -> Any:
        """Store one fact and its source (a host path, ``"cmd args"`` or a list of them)."""
        self.facts[key] = value
        self.sources[key] = source if isinstance(source, str) else ", ".join(source)
        return value

    def attempt(self, key: str, source: str, reader: Callable[..., Any], *args: Any) -> Any:
        """``put(key, reader(*args), source)``; on a reader error store ``None`` and log it."""
        try:
            value = reader(*args)
        except HostStateError as exc:
            self.error(key, exc)
            value = None
        return self.put(key, value, source)

    def attempt_command(self, key: str, source: str, reader: Callable[..., Any],
                        *args: Any, wanted: Any = True) -> Any:
        """:meth:`attempt` for a reader of a command the host may lack: where the command is
        not installed (or a capture lacks it), ``None`` with the reason in ``<key>_missing``
        rather than an error. Not ``wanted``: nothing runs, both keys are ``None``."""
        missing = None
        if not wanted:
            self.put(f"{key}_missing", None, source)
            return self.put(key, None, source)
        try:
            value = reader(*args)
        except NotSupported as exc:
            value, missing = None, f"{exc.path}: {exc.reason}"
        except HostStateError as exc:
            self.error(key, exc)
            value = None
        self.put(f"{key}_missing", missing, source)
        return self.put(key, value, source)

    def error(self, key: str, exc: HostStateError) -> None:
        """Record that ``key`` could not be read, with the offending path and the reason."""
        self.errors.append({"fact": key, "path": exc.path, "error": exc.reason})

    def result(self) -> dict[str, Any]:
        """The layer's JSON form: the facts, plus ``sources`` and ``errors``."""
        return {**self.facts, "sources": dict(self.sources), "errors": list(self.errors)}
