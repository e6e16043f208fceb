"""Switching tuned's active profile: ``tuned-adm`` on a live host, its files in a sysroot
(kept apart from the readers in ``tuned.py``, so reading needs no engine)."""

from __future__ import annotations

import re

from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
    Change,
    CommandChange,
    FileChange,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    NotSupported,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.tuned import (
    ACTIVE_PROFILE,
    PROFILE_MODE,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot, run_command

ACTIVE_LINE = re.compile(r"^Current active profile:\s*(.*?)\s*$", re.MULTILINE)


def parse_tuned_adm_active(text: str) -> str | None:
    """``tuned-adm active`` output -> the active profile(s); ``None`` when none is active."""
    found = ACTIVE_LINE.search(text)
    if found is None:
        if "No current active profile" in text:
            return None
        raise ParseError("tuned-adm active", text, "no 'Current active profile:' line")
    return " ".join(found.group(1).split()) or None


def live_active() -> str | None:
    """The active profile(s) of the running TuneD."""
    out = run_command(["tuned-adm", "active"])
    if out.rc != 0 and "No current active profile" not in out.stdout:
        lines = (out.stderr or out.stdout).strip().splitlines()
        raise NotSupported("tuned-adm active", f"exit {out.rc}: {lines[-1] if lines else ''}")
    return parse_tuned_adm_active(out.stdout)


def sysroot_changes(root: Sysroot, profile: str) -> list[Change]:
    """The files ``tuned-adm profile`` writes, as the engine's file changes."""
    return [FileChange(ACTIVE_PROFILE, f"{profile}\n".encode(),
                       root.file_mode(ACTIVE_PROFILE) or 0o644),
            FileChange(PROFILE_MODE, b"manual\n", root.file_mode(PROFILE_MODE) or 0o644)]


def active_profile(root: Sysroot) -> str | None:
    """The active profile(s) written in a sysroot (``None``: none)."""
    text = root.read_optional(ACTIVE_PROFILE)
    return " ".join(text.split()) if text else None


def plan_switch(root: Sysroot, names: list[str]) -> list[Change]:
    """The changes that make ``names`` tuned's active profile: the files ``tuned-adm profile``
    writes in a sysroot; live, ``tuned-adm profile`` itself, undone by the previous profile
    (or ``tuned-adm off``). tuned keeps running either way."""
    profile = " ".join(names)
    if not root.live:
        return sysroot_changes(root, profile)
    previous = live_active()
    undo = ["tuned-adm", "profile", *previous.split()] if previous else ["tuned-adm", "off"]
    return [CommandChange("tuned-adm profile", previous or "", profile,
                          ["tuned-adm", "profile", *names], undo)]
