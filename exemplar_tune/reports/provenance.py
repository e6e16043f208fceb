"""When, where and by what a report was made: every JSON, Markdown and HTML report says so."""

from __future__ import annotations

import socket
import time
from typing import Any

from exemplar_tune import __version__


def made(profile: str | None = None) -> dict[str, Any]:
    """``{at, host, version, profile}``: now (UTC), this machine, this exemplar-tune."""
    return {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": socket.gethostname(), "version": __version__, "profile": profile}


def made_line(stamp: dict[str, Any]) -> str:
    """``made 2026-12-05T07:40:00Z on ctl01 by exemplar-tune 0.2.0, profile h100-x86``."""
    profile = f", profile {stamp['profile']}" if stamp.get("profile") else ""
    return (f"made {stamp['at']} on {stamp['host']} by exemplar-tune {stamp['version']}"
            f"{profile}")
