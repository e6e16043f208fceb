"""The host-local record of boot-time changes that wait for the next boot.

A knob declared with ``reboot=True`` (kernel arguments in the bootloader defaults, BIOS
settings staged through the BMC) changes what the *next* boot does; the running state, which
the facts and the preflight read, stays as it was until then. The engine notes every such
knob it changed (apply) or put back (restore) in one JSON file,
``/var/lib/exemplar-tune/pending-reboot.json`` (inside the sysroot when one is used)::

    {"format": 1,
     "boot_id": "<the kernel's boot id when written, or null>",
     "knobs": {"vm.cmdqv_params": {"run_id": "r1", "change": "apply",
                                   "at": "2026-11-29T10:15:00Z"}}}

The boot id is the kernel's ``/proc/sys/kernel/random/boot_id`` (a new one every boot; a
sysroot without it has ``null``, equal to a recorded ``null``). A record written on another
boot is stale: the reboot it waited for happened, so :func:`pending_knobs` reports nothing
from it and :func:`record_pending` drops its knobs before adding the new ones.

The file is rewritten whole through :meth:`Sysroot.write_bytes` (temp file, fsync, rename:
never half written) and never through a symbolic link: a link in its place is an error.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotSupported,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

PENDING_REBOOT = "var/lib/exemplar-tune/pending-reboot.json"
BOOT_ID = "proc/sys/kernel/random/boot_id"
PENDING_FACT = "pending_reboot"  # the fact of each layer with knobs (``Layer.gather``)
FORMAT = 1
CHANGES = ("apply", "restore")
MAX_RECORD = 1024 * 1024  # a few hundred bytes per knob; anything larger is not a record


class PendingRebootError(HostStateError):
    """The pending-reboot record cannot be read (corrupt, not a file) or written."""


def pending_source(root: Sysroot) -> str:
    """Where :func:`pending_knobs` reads from: the record and the boot id (fact source)."""
    return f"{root.display(PENDING_REBOOT)}, {root.display(BOOT_ID)}"


def read_boot_id(root: Sysroot) -> str | None:
    """The kernel's boot id (``/proc/sys/kernel/random/boot_id``); ``None`` when absent."""
    return root.read_optional(BOOT_ID) or None


def read_record(root: Sysroot) -> dict[str, Any] | None:
    """The record as written (validated), ``None`` when there is none;
    :class:`PendingRebootError` when it is a symbolic link, unreadable or corrupt."""
    display = root.display(PENDING_REBOOT)
    if root.readlink(PENDING_REBOOT) is not None:
        raise PendingRebootError(display, "is a symbolic link (not followed)")
    try:
        data = root.read_bytes(PENDING_REBOOT, limit=MAX_RECORD + 1)
    except NotSupported as exc:
        if exc.reason == "not present":
            return None
        raise PendingRebootError(display, exc.reason) from None
    if len(data) > MAX_RECORD:
        raise PendingRebootError(display, f"corrupted (larger than {MAX_RECORD} bytes)")
    try:
        doc = json.loads(data.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError included
        raise PendingRebootError(display, "corrupted (not JSON)") from None
    problem = _invalid(doc)
    if problem:
        raise PendingRebootError(display, f"corrupted ({problem})")
    return doc


def _invalid(doc: Any) -> str | None:
    """Why ``doc`` is not a record (``None``: it is one)."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    if doc.get("format") != FORMAT:
        return f"format {doc.get('format')!r}, expected {FORMAT}"
    if "boot_id" not in doc or not isinstance(doc["boot_id"], (str, type(None))):
        return "boot_id is not a string or null"
    knobs = doc.get("knobs")
    if not isinstance(knobs, dict):
        return "knobs is not an object"
    for knob, note in knobs.items():
        if not isinstance(note, dict) or note.get("change") not in CHANGES:
            return f"knob {knob!r}: not an object with change apply or restore"
    return None


def pending_knobs(root: Sysroot) -> list[str]:
    """Knob ids (``vm.cmdqv_params``) whose change waits for a reboot of this boot, sorted.

    ``[]`` without a record or when the record was written on another boot (that reboot
    happened); :class:`PendingRebootError` when the record is corrupt. Reads one small file,
    and the boot id only when there is a record.
    """
    doc = read_record(root)
    if doc is None or doc["boot_id"] != read_boot_id(root):
        return []
    return sorted(doc["knobs"])


def record_pending(root: Sysroot, knob_ids: Iterable[str], run_id: str, change: str) -> None:
    """Note that ``knob_ids`` changed the next boot (``change``: ``apply`` or ``restore``,
    by run ``run_id``).

    The record of another boot is replaced (its knobs dropped: that boot happened); one that
    cannot be read (corrupt) is replaced too, as it tells nothing that can be trusted. A knob
    already noted on this boot is noted again with this run. Nothing is written when
    ``knob_ids`` is empty. :class:`PendingRebootError` when the record cannot be written.
    """
    if change not in CHANGES:
        raise ValueError(f"change {change!r}: one of {', '.join(CHANGES)}")
    knob_ids = sorted(set(knob_ids))
    if not knob_ids:
        return
    display = root.display(PENDING_REBOOT)
    if root.readlink(PENDING_REBOOT) is not None:
        raise PendingRebootError(display, "is a symbolic link (not followed): not written")
    boot_id = read_boot_id(root)
    try:
        doc = read_record(root)
    except PendingRebootError:
        doc = None
    knobs = doc["knobs"] if doc is not None and doc["boot_id"] == boot_id else {}
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    knobs = {**knobs, **{knob: {"run_id": run_id, "change": change, "at": at}
                         for knob in knob_ids}}
    data = json.dumps({"format": FORMAT, "boot_id": boot_id, "knobs": knobs}, indent=1,
                      sort_keys=True) + "\n"
    try:
        root.write_bytes(PENDING_REBOOT, data.encode(), mode=0o644)
    except OSError as exc:
        raise PendingRebootError(display, "could not record the pending reboot: "
                                 f"{exc.strerror or exc}") from None
