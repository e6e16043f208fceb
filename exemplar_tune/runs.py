"""The controller's index of apply runs, so that ``restore --run latest`` knows where to go.

One JSON line per run in ``$EXEMPLAR_TUNE_STATE_DIR/runs.jsonl`` (default
``$XDG_STATE_HOME/exemplar-tune`` or ``~/.local/state/exemplar-tune``): the run id, when, the
layer, and the target (inventory path and limit, or sysroot) needed to reach the same hosts.
The authoritative record of what changed stays in each host's journal.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from exemplar_tune.errors import UserError


def state_dir() -> Path:
    """Where the controller keeps its state."""
    if os.environ.get("EXEMPLAR_TUNE_STATE_DIR"):
        return Path(os.environ["EXEMPLAR_TUNE_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "exemplar-tune"


def new_run_id() -> str:
    """``20261129T101500-3fa2``: sortable, unique enough, a safe file name."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def record_run(run: dict[str, Any]) -> None:
    """Append one run to the index (creating the state directory)."""
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "runs.jsonl", "a") as handle:
        handle.write(json.dumps(run, sort_keys=True) + "\n")


def load_runs() -> list[dict[str, Any]]:
    """Every recorded run, oldest first; unreadable lines are reported, not guessed at."""
    path = state_dir() / "runs.jsonl"
    if not path.exists():
        return []
    runs = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            runs.append(json.loads(line))
        except ValueError:
            raise UserError(f"{path}:{number}: corrupted run index line") from None
    return runs


def find_run(run_id: str) -> dict[str, Any]:
    """The run ``run_id`` (or the newest for ``latest``); ``UserError`` when unknown."""
    runs = load_runs()
    if run_id == "latest":
        if not runs:
            raise UserError(f"no run recorded yet in {state_dir() / 'runs.jsonl'}")
        return runs[-1]
    for run in reversed(runs):
        if run["run_id"] == run_id:
            return run
    raise UserError(f"no run {run_id!r} in {state_dir() / 'runs.jsonl'}; "
                    "'exemplar-tune restore --run latest' takes the newest")
