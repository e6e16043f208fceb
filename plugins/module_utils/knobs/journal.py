"""The host-local journal: what each run changed, recorded before the change is made.

One JSON file per run id under ``/var/lib/exemplar-tune/journal/`` (inside the sysroot when
one is used). Every append rewrites the whole file atomically (temp file, fsync, rename), so a
crash leaves either the previous or the new version, never a truncated one. An entry holds
the exact previous bytes (base64) of a file or the previous value of a kernel attribute, or
the command that undoes a command; ``restore`` replays entries newest first.
"""

from __future__ import annotations

import base64
import json
import re
import time
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

JOURNAL_DIR = "var/lib/exemplar-tune/journal"
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
FORMAT = 1


class JournalError(HostStateError):
    """A journal that is missing, unreadable or not in the expected format."""


def check_run_id(run_id: str) -> str:
    """``run_id`` if it is a safe file name; ``JournalError`` otherwise."""
    if not RUN_ID.match(run_id or ""):
        raise JournalError(f"run id {run_id!r}", "use letters, digits, '.', '_' or '-'")
    return run_id


def encode(data: bytes | None) -> str | None:
    """Bytes as base64 text (``None`` stays ``None``: the file did not exist)."""
    return None if data is None else base64.b64encode(data).decode()


def decode(text: str | None) -> bytes | None:
    """The inverse of :func:`encode`."""
    return None if text is None else base64.b64decode(text.encode())


class Journal:
    """The journal of one run on one host."""

    def __init__(self, root: Sysroot, run_id: str) -> None:
        self.root = root
        self.run_id = check_run_id(run_id)
        self.rel = f"{JOURNAL_DIR}/{run_id}.json"

    @property
    def display(self) -> str:
        """The journal's host path, for messages."""
        return self.root.display(self.rel)

    def exists(self) -> bool:
        """True when this run recorded something on this host."""
        return self.root.exists(self.rel)

    def load(self) -> dict[str, Any]:
        """The journal document; an empty one when the run changed nothing here."""
        if not self.exists():
            return {"format": FORMAT, "run_id": self.run_id, "entries": [], "restored": []}
        text = self.root.read_text(self.rel)
        try:
            doc = json.loads(text)
        except ValueError:
            raise JournalError(self.display, "corrupted (not JSON); nothing was changed") from None
        if not isinstance(doc, dict) or doc.get("run_id") != self.run_id or not isinstance(
                doc.get("entries"), list):
            raise JournalError(self.display, "corrupted (unexpected content); nothing changed")
        doc.setdefault("restored", [])
        return doc

    def append(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Record ``entry`` (before the change it describes is made); returns it numbered."""
        doc = self.load()
        entry = dict(entry, seq=len(doc["entries"]) + 1,
                     recorded_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        doc["entries"].append(entry)
        self._save(doc)
        return entry

    def mark_restored(self, seqs: list[int]) -> None:
        """Note which entries have been put back (restore is idempotent)."""
        doc = self.load()
        doc["restored"] = sorted(set(doc["restored"]) | set(seqs))
        self._save(doc)

    def _save(self, doc: dict[str, Any]) -> None:
        data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
        self.root.write_bytes(self.rel, data, mode=0o600)


def list_runs(root: Sysroot) -> list[str]:
    """Run ids that have a journal on this host, oldest first by name."""
    return [name[:-5] for name in root.listdir(JOURNAL_DIR) if name.endswith(".json")]


def created_here(root: Sysroot, path: str) -> bool:
    """True when a journal on this host records that a run created host path ``path`` (an
    entry for a file that did not exist before)."""
    for run_id in list_runs(root):
        try:
            entries = Journal(root, run_id).load()["entries"]
        except HostStateError:
            continue
        if any(isinstance(e, dict) and e.get("kind") == "file" and e.get("path") == path
               and not e.get("existed", True) for e in entries):
            return True
    return False
