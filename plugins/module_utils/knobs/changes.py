"""The one engine every knob goes through: read -> journal -> write -> verify (-> restore).

A knob module only says what the host should look like, as a list of changes:

* :class:`FileChange` -- a whole file with exact content (or absent), written atomically;
* :class:`AttrChange` -- a kernel attribute (sysfs/procfs) written in place;
* :class:`CommandChange` -- a command with its undo command (live hosts only), for state that
  only a tool can change (``tuned-adm profile``, ``nvidia-smi -pm``);
* :class:`RedfishChange` -- BIOS attributes behind the host's BMC, staged over Redfish for the
  next boot (the journal keeps the BMC address and the previous values, never credentials);
* :class:`Regenerate` -- a side effect of the changes before it (``update-grub`` after
  ``/etc/default/grub``): journaled like the others, run after them, and run again after they
  have been put back.

:func:`apply_changes` skips what is already right (idempotence), records the previous state of
each change in the run's journal *before* making it, writes, reads back and compares, and on
any failure puts back what this call already changed, newest first. :func:`apply_knobs` does
the same for the changes of several knobs at once (one layer: all or nothing). Check mode
computes the same plan and diff and writes nothing, journal included. Files keep their owner,
group and mode; the journal records all three. :func:`restore_entries` replays a journal
newest first and is idempotent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.knobs.journal import (
    Journal,
    created_here,
    decode,
    encode,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotSupported,
    UnsafePath,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.values import selected_choice
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot, run_command


@dataclass(frozen=True)
class FileChange:
    """File ``path`` must hold exactly ``content`` (``None``: must not exist)."""

    path: str
    content: bytes | None
    mode: int = 0o644
    owner: tuple[int, int] | None = None  # (uid, gid); None: keep the file's own
    # a file of exemplar-tune's own (a generated file at a configurable path): what is there
    # already must be one exemplar-tune made (see :func:`check_destination`)
    own: bool = False


@dataclass(frozen=True)
class AttrChange:
    """Kernel attribute ``path`` must read back as ``value``."""

    path: str
    value: str
    exact: bool = False  # write ``value`` as it is (no newline added): restore


@dataclass(frozen=True)
class Regenerate:
    """Rebuild what derives from the changes before it (``update-grub``), with argv ``argv``.

    Pending whenever a change before it in the same plan is. ``run`` false: journaled and
    reported but not run (a sysroot, where no bootloader command was given).
    """

    label: str
    argv: tuple[str, ...]
    run: bool = True


@dataclass(frozen=True)
class CommandChange:
    """State only a command can change: ``apply`` moves ``current`` to ``desired``."""

    label: str
    current: str
    desired: str
    apply: list[str]
    undo: list[str]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RedfishChange:
    """BIOS attributes must read ``desired`` for the next boot (pending, else current).

    ``target`` reads and stages them (``bios.BiosSettings``: ``effective(names)``,
    ``stage(values)``, ``bmc_url``, ``system``); it holds the connection and is never journaled.
    """

    label: str
    desired: dict[str, Any]
    target: Any = field(compare=False, repr=False)


Change = FileChange | AttrChange | CommandChange | RedfishChange | Regenerate


def service_step(unit: str, action: str, root: Sysroot) -> Regenerate:
    """``systemctl ACTION UNIT`` (``daemon-reload`` when ``unit`` is empty) as a journaled step
    after the files it depends on: run on a live host, recorded in a sysroot; restore runs it
    again once the files are back."""
    argv = ("systemctl", action, unit) if unit else ("systemctl", action)
    return Regenerate(" ".join(argv), argv, run=root.live)
# Builds the ``target`` of a journaled Redfish entry at restore time (``None``: cannot).
Connect = Callable[[dict[str, Any]], Any]


class ApplyFailed(HostStateError):
    """A change failed; what this call had changed was put back (``not_restored`` says what not)."""

    def __init__(self, path: str, reason: str, not_restored: list[str],
                 knob: str | None = None) -> None:
        tail = f"; NOT restored: {', '.join(not_restored)}" if not_restored else \
            "; everything this step changed was restored"
        super().__init__(path, reason + tail)
        self.not_restored = not_restored
        self.knob = knob


def read_current(root: Sysroot, change: Change) -> bytes | str | dict[str, Any] | None:
    """The present state that ``change`` compares with."""
    if isinstance(change, RedfishChange):
        return change.target.effective(list(change.desired))
    if isinstance(change, FileChange):
        try:
            return root.read_bytes(change.path)
        except NotSupported:
            return None
    if isinstance(change, AttrChange):
        return selected_choice(root.read_text(change.path))
    if isinstance(change, Regenerate):
        return None
    return change.current


def is_satisfied(root: Sysroot, change: Change) -> bool:
    """True when the host already looks like ``change`` asks."""
    if isinstance(change, Regenerate):
        return True  # pending only through the changes before it (see plan_pending)
    current = read_current(root, change)
    if isinstance(change, FileChange):
        return current == change.content and (current is None or (
            root.file_mode(change.path) == change.mode
            and change.owner in (None, root.file_owner(change.path))))
    if isinstance(change, AttrChange):
        return current == change.value.strip()
    return current == change.desired  # a command's state, or a BIOS attribute dict


def describe(root: Sysroot, change: Change) -> dict[str, str]:
    """Ansible's ``diff`` form of one change."""
    before, after = read_current(root, change), None
    if isinstance(change, FileChange):
        after = change.content
        header = root.display(change.path)
    elif isinstance(change, AttrChange):
        after, header = change.value, root.display(change.path)
    elif isinstance(change, Regenerate):
        after = " ".join(change.argv) + ("" if change.run else "  (recorded, not run here)")
        header = change.label
    else:
        after, header = change.desired, change.label
    return {"before_header": header, "after_header": header,
            "before": _text(before), "after": _text(after)}


def _text(value: bytes | str | dict[str, Any] | None) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return "".join(f"{name}={value[name]}\n" for name in sorted(value))
    text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value
    return text if text.endswith("\n") or not text else text + "\n"


def entry_for(root: Sysroot, change: Change, layer: str, knob: str) -> dict[str, Any]:
    """The journal entry that lets :func:`restore_entries` undo ``change``."""
    base = {"layer": layer, "knob": knob}
    if isinstance(change, FileChange):
        previous = read_current(root, change)
        owner = root.file_owner(change.path)
        return dict(base, kind="file", path=root.display(change.path),
                    existed=previous is not None, previous=encode(previous),
                    mode=root.file_mode(change.path), owner=list(owner) if owner else None,
                    after=encode(change.content),
                    created_dirs=_missing_parents(root, change.path))
    if isinstance(change, Regenerate):
        return dict(base, kind="regenerate", path=change.label, argv=list(change.argv),
                    ran=change.run, previous=None, after=" ".join(change.argv))
    if isinstance(change, AttrChange):
        text = root.read_text(change.path, strip=False)
        choice = selected_choice(text)  # a choice list is put back as the choice in force
        previous = text if choice == text.strip() else choice + "\n"
        return dict(base, kind="attr", path=root.display(change.path),
                    previous=previous, after=change.value)
    if isinstance(change, RedfishChange):
        return dict(base, kind="redfish", path=change.label, bmc=change.target.bmc_url,
                    system=change.target.system, previous=read_current(root, change),
                    after=change.desired)
    return dict(base, kind="command", path=change.label, previous=change.current,
                after=change.desired, undo=change.undo)


def _missing_parents(root: Sysroot, path: str) -> list[str]:
    """Parent directories of ``path`` that do not exist yet, deepest first."""
    missing = []
    parent = root.display(path).rsplit("/", 1)[0]
    while parent and not root.exists(parent):
        missing.append(parent)
        parent = parent.rsplit("/", 1)[0]
    return missing


def _write(root: Sysroot, change: Change) -> None:
    if isinstance(change, FileChange):
        if change.content is None:
            root.remove(change.path)
        else:
            root.write_bytes(change.path, change.content, change.mode, change.owner)
    elif isinstance(change, AttrChange):
        root.write_attr(change.path, change.value, change.exact)
    elif isinstance(change, Regenerate):
        if change.run:
            _run(list(change.argv))
    elif isinstance(change, RedfishChange):
        change.target.stage(change.desired)
    else:
        _run(change.apply)


def _run(argv: list[str]) -> None:
    out = run_command(argv)
    if out.rc != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        raise HostStateError(" ".join(argv), f"exit {out.rc}: {lines[-1] if lines else ''}")


MARK = b"exemplar-tune"  # the first line of every file exemplar-tune generates names it


def check_destination(root: Sysroot, change: Change) -> None:
    """Refuse (``UnsafePath``, nothing changed yet) a file or attribute change whose path is
    not a regular file, and a change of one of exemplar-tune's own files (``own``) whose path
    holds another file that exemplar-tune did not make: neither marked (:data:`MARK` on its
    first line) nor recorded as created in a journal on this host."""
    if not isinstance(change, (FileChange, AttrChange)):
        return
    root.writable_path(change.path)
    if not (isinstance(change, FileChange) and change.own) or root.kind(change.path) is None:
        return
    current = root.read_bytes(change.path)
    if current != change.content and MARK not in current.split(b"\n", 1)[0] \
            and not created_here(root, root.display(change.path)):
        raise UnsafePath(root.display(change.path), "holds a file exemplar-tune did not create "
                         "(no journal on this host records it); refusing to replace it: name an "
                         "absent path, or move that file away first")


def plan_pending(root: Sysroot, changes: list[Change]) -> list[Change]:
    """The changes not yet true on the host; a :class:`Regenerate` when one before it is.
    ``UnsafePath`` when one of them may not be made (:func:`check_destination`)."""
    pending: list[Change] = []
    for change in changes:
        check_destination(root, change)
        if isinstance(change, Regenerate):
            if any(not isinstance(c, Regenerate) for c in pending):
                pending.append(change)
        elif not is_satisfied(root, change):
            pending.append(change)
    return pending


def apply_changes(root: Sysroot, changes: list[Change], journal: Journal | None, layer: str,
                  knob: str, check_mode: bool) -> dict[str, Any]:
    """Make ``changes`` true on the host; returns ``{changed, diff, entries}``.

    ``journal`` may be ``None`` only in check mode.
    """
    return apply_knobs(root, {knob: changes}, journal, layer, check_mode)[knob]


def apply_knobs(root: Sysroot, plans: dict[str, list[Change]], journal: Journal | None,
                layer: str, check_mode: bool) -> dict[str, dict[str, Any]]:
    """Make every knob's changes true, all or nothing; per knob ``{changed, diff, entries}``.

    Every pending change of every knob is planned and diffed first; then each is journaled,
    written and read back in order, the :class:`Regenerate` steps last (after every file
    they derive from) and each command run once. If one fails, everything this call changed
    (all knobs) is put back, newest first, and :class:`ApplyFailed` names the knob and the
    path. ``journal`` may be ``None`` only in check mode.
    """
    pending = {knob: plan_pending(root, changes) for knob, changes in plans.items()}
    results = {knob: {"changed": bool(todo), "diff": [describe(root, c) for c in todo],
                      "entries": []} for knob, todo in pending.items()}
    if check_mode:
        return results
    entries: list[dict[str, Any]] = []
    targets = {c.label: c.target for changes in plans.values() for c in changes
               if isinstance(c, RedfishChange)}
    order = sorted(((knob, index, change) for knob, todo in pending.items()
                    for index, change in enumerate(todo)),
                   key=lambda item: isinstance(item[2], Regenerate))  # stable: rebuilds last
    ran: set[tuple[str, ...]] = set()
    for knob, index, change in order:
        entry = journal.append(entry_for(root, change, layer, knob))
        entries.append(entry)
        results[knob]["entries"].append(entry)
        try:
            if not (isinstance(change, Regenerate) and change.argv in ran):
                _write(root, change)
                _verify(root, change)
            if isinstance(change, Regenerate):
                ran.add(change.argv)
        except (OSError, HostStateError) as exc:
            reason = exc.reason if isinstance(exc, HostStateError) else (
                exc.strerror or str(exc))
            failed = restore_entries(root, journal, entries, check_mode=False,
                                     connect=lambda e: targets.get(e["path"]))["failed"]
            raise ApplyFailed(results[knob]["diff"][index]["before_header"], reason,
                              [f["path"] for f in failed], knob) from None
    return results


def _verify(root: Sysroot, change: Change) -> None:
    if isinstance(change, (CommandChange, Regenerate)):
        return  # the caller re-reads the state through the facts
    if isinstance(change, RedfishChange):
        have = read_current(root, change)
        if have != change.desired:
            raise HostStateError(change.label, f"reads back {_text(have).strip()!r} after "
                                 "PATCH: the BMC did not stage the values")
        return
    if not is_satisfied(root, change):
        have = read_current(root, change)
        raise HostStateError(root.display(change.path), f"read back {_text(have).strip()!r} "
                             "after writing: the kernel or another process refused the value")


def restore_entries(root: Sysroot, journal: Journal, entries: list[dict[str, Any]],
                    check_mode: bool, connect: Connect | None = None) -> dict[str, Any]:
    """Put back ``entries`` newest first; skip those already restored or already in place.

    ``connect`` opens the BMC of a Redfish entry (without it such an entry fails). Returns
    ``{changed, diff, restored: [seq], failed: [{path, error}]}``; never raises for one entry,
    so a single stuck file (or BMC) does not stop the others from being put back.
    """
    done = set(journal.load()["restored"]) if journal.exists() else set()
    result: dict[str, Any] = {"changed": False, "diff": [], "restored": [], "failed": []}
    todo = sorted((e for e in entries if e["seq"] not in done), key=lambda e: e["seq"],
                  reverse=True)
    # side effects run after what they derive from is back (each command once: see below)
    todo = [e for e in todo if e["kind"] != "regenerate"] + sorted(
        (e for e in todo if e["kind"] == "regenerate"), key=lambda e: e["seq"])
    for entry in todo:
        try:
            _restore_one(root, entry, result, check_mode, connect)
        except (OSError, HostStateError) as exc:
            reason = exc.reason if isinstance(exc, HostStateError) else (exc.strerror or str(exc))
            result["failed"].append({"path": entry["path"], "error": reason})
    if not check_mode and result["restored"]:
        journal.mark_restored(result["restored"])
    return result


def _restore_one(root: Sysroot, entry: dict[str, Any], result: dict[str, Any],
                 check_mode: bool, connect: Connect | None) -> None:
    if entry["kind"] == "regenerate":
        _regenerate_again(root, entry, result, check_mode)
        return
    change = _undo_change(entry, connect)
    if is_satisfied(root, change):
        result["restored"].append(entry["seq"])
        return
    result["changed"] = True
    result["diff"].append(describe(root, change))
    if check_mode:
        return
    _write(root, change)
    for directory in entry.get("created_dirs", []) if change_removes(change) else []:
        root.remove_empty_dir(directory)
    result["restored"].append(entry["seq"])


def _regenerate_again(root: Sysroot, entry: dict[str, Any], result: dict[str, Any],
                      check_mode: bool) -> None:
    """Rerun a side effect now that the files it derives from are back (as apply ran it)."""
    change = Regenerate(entry["path"], tuple(entry["argv"]), entry.get("ran", True))
    if any(r["command"] == " ".join(change.argv) for r in result.get("regenerated", [])):
        result["restored"].append(entry["seq"])  # already rerun by this restore
        return
    result["changed"] = True
    result["diff"].append(describe(root, change))
    if not check_mode:
        _write(root, change)
        result.setdefault("regenerated", []).append(
            {"command": " ".join(change.argv), "ran": change.run})
    result["restored"].append(entry["seq"])


def change_removes(change: Change) -> bool:
    """True for a file change that deletes the file."""
    return isinstance(change, FileChange) and change.content is None


def _undo_change(entry: dict[str, Any], connect: Connect | None = None) -> Change:
    if entry["kind"] == "redfish":
        target = connect(entry) if connect else None
        if target is None:
            raise HostStateError(entry["path"], "needs the BMC to put BIOS attributes back: "
                                 "set exemplar_bmc_address/user/password for this host")
        return RedfishChange(entry["path"], entry["previous"], target)
    if entry["kind"] == "file":
        owner = entry.get("owner")
        return FileChange(entry["path"], decode(entry["previous"]),
                          entry["mode"] if entry["mode"] is not None else 0o644,
                          tuple(owner) if owner else None)
    if entry["kind"] == "attr":
        return AttrChange(entry["path"], entry["previous"], exact=True)
    return CommandChange(entry["path"], entry["after"], entry["previous"], entry["undo"], [])
