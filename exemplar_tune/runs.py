"""Where the controller keeps its state, and how runs are named.

The state directory is ``$EXEMPLAR_TUNE_STATE_DIR``, else ``$XDG_STATE_HOME/exemplar-tune``,
else ``~/.local/state/exemplar-tune``; the ledger, the locks and benchmark logs live there.
What changed on a host is always recorded in that host's own journal.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path


def state_dir() -> Path:
    """Where the controller keeps its state."""
    if os.environ.get("EXEMPLAR_TUNE_STATE_DIR"):
        return Path(os.environ["EXEMPLAR_TUNE_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "exemplar-tune"


def new_run_id() -> str:
    """``20261129T101500-3fa2``: sortable, unique enough, a safe file name."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)
