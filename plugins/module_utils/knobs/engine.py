"""Plan and apply whole layers: every knob of a layer in one process, all or nothing.

:func:`run_layer` reads the layer's facts in-process, builds every enabled knob's target
(profile section + role variables), plans each knob in order, then hands the whole layer to
``changes.apply_knobs``: one journal, each change read back, and if any knob fails every change
of that layer on this host is put back before the error (which names the knob and the path).
Knobs planned later see the files that earlier knobs of the layer will write
(:class:`PlannedRoot`), so two knobs may edit one file. A knob whose planner finds the setting
does not apply to the host (``NotApplicable``: no bootloader configuration, a guest's idle
states) is skipped with that reason; the rest of the layer goes on.

A knob that takes effect at the next boot (``Knob.reboot``) and really changed the host is
noted in the host's pending-reboot record (``knobs/pending_reboot.py``); so is one whose
changes :func:`restore_run` put back. The layer's ``pending_reboot`` fact reads it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import Knob, Target, flag
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
    ApplyFailed,
    Change,
    FileChange,
    apply_knobs,
    check_destination,
    restore_entries,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.journal import Journal
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.pending_reboot import (
    PendingRebootError,
    record_pending,
)
from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    ROLE_LAYERS,
    Layer,
    get_layer,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotApplicable,
    NotSupported,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import MAX_READ, Sysroot


class LayerFailed(HostStateError):
    """A knob of ``layer`` could not be planned or applied; the layer was put back."""

    def __init__(self, knob: str, path: str, reason: str) -> None:
        super().__init__(f"{knob}: {path}", reason)
        self.knob = knob


class Planned(NamedTuple):
    """One enabled knob of a layer: its target, its changes, and why it does not apply to
    this host (``None``: it does; then ``changes`` may still be empty, nothing to do)."""

    knob: Knob
    target: Target
    changes: list[Change]
    not_applicable: str | None = None


class PlannedRoot(Sysroot):
    """``root`` as it will be once the files planned so far are written."""

    def __init__(self, root: Sysroot) -> None:
        super().__init__(root.root)
        self._links = root._links  # the same tree: share what was already resolved
        self.planned: dict[str, FileChange] = {}

    def add(self, changes: list[Change]) -> None:
        """Remember the file changes of a knob for the knobs planned after it."""
        for change in changes:
            if isinstance(change, FileChange):
                self.planned[self.display(change.path)] = change

    def read_bytes(self, rel: str, limit: int = MAX_READ) -> bytes:  # noqa: D102
        change = self.planned.get(self.display(rel))
        if change is None:
            return super().read_bytes(rel, limit)
        if change.content is None:
            raise NotSupported(self.display(rel))
        return change.content[:limit]

    def exists(self, rel: str) -> bool:  # noqa: D102
        change = self.planned.get(self.display(rel))
        return super().exists(rel) if change is None else change.content is not None

    def file_mode(self, rel: str) -> int | None:  # noqa: D102
        change = self.planned.get(self.display(rel))
        if change is None:
            return super().file_mode(rel)
        return None if change.content is None else change.mode


def enabled_knobs(layer: Layer, variables: dict[str, Any], only: list[str] | None) -> list[Knob]:
    """The layer's knobs that are switched on (and named in ``only``, when given)."""
    return [k for k in layer.knobs
            if flag(variables.get(k.switch, True), k.switch)
            and (not only or k.name in only or k.id in only)]


def plan_layer(root: Sysroot, layer: Layer, profile: dict[str, Any],
               variables: dict[str, Any], only: list[str] | None = None,
               bmc: Any = None) -> list[Planned]:
    """Every enabled knob of ``layer`` with its target and its changes (or why it does not
    apply here)."""
    knobs = enabled_knobs(layer, variables, only)
    facts = layer.gather(root) if any(k.facts for k in knobs) else {}
    section = profile.get(layer.name) or {}
    view = PlannedRoot(root)
    planned = []
    for knob in knobs:
        target = knob.target(section, variables, facts, bmc)
        try:
            changes = knob.plan(view, target)
            for change in changes:
                check_destination(root, change)
        except NotApplicable as exc:
            planned.append(Planned(knob, target, [], f"{exc.path}: {exc.reason}"))
            continue
        except HostStateError as exc:
            raise LayerFailed(knob.id, exc.path, exc.reason + "; nothing was changed") from None
        view.add(changes)
        planned.append(Planned(knob, target, changes))
    return planned


def run_layer(root: Sysroot, name: str, profile: dict[str, Any], variables: dict[str, Any],
              journal: Journal | None, check_mode: bool, only: list[str] | None = None,
              bmc: Any = None, connect: Any = None) -> dict[str, Any]:
    """Plan and apply (or, in check mode, only plan and diff) one layer on this host.

    Returns ``{layer, changed, reboot_required, knobs: [...], manual_actions}``; each knob
    entry has ``layer, knob, changed, diff, changes, reboot_required, journal_entries`` and
    ``not_applicable`` (the reason, or ``None``). The knobs that changed the next boot are
    noted in the pending-reboot record (not in check mode); when it cannot be written, the
    result's ``warnings`` say so (the changes stay made, as reported).
    Raises :class:`LayerFailed` with the layer put back.
    """
    layer = get_layer(name)
    planned = plan_layer(root, layer, profile, variables, only, bmc)
    try:
        results = apply_knobs(root, {p.knob.name: p.changes for p in planned}, journal, name,
                              check_mode)
    except ApplyFailed as exc:
        raise LayerFailed(f"{name}.{exc.knob}", exc.path, exc.reason) from None
    if not check_mode:
        _read_back(root, journal, planned, results, connect)
    warnings = [] if check_mode else _note_pending(
        root, [p.knob.id for p in planned if p.knob.reboot and results[p.knob.name]["changed"]],
        journal.run_id, "apply")
    knobs = [_knob_result(p, results[p.knob.name]) for p in planned]
    return {"layer": name, "changed": any(k["changed"] for k in knobs),
            "reboot_required": any(k["reboot_required"] for k in knobs), "knobs": knobs,
            "manual_actions": [action for p in planned
                               if p.knob.advice and p.not_applicable is None
                               for action in p.knob.resolve(p.knob.advice)(p.target)],
            "warnings": warnings}


def _note_pending(root: Sysroot, knob_ids: list[str], run_id: str, change: str) -> list[str]:
    """:func:`record_pending`; its error as a warning (the changes themselves were made)."""
    try:
        record_pending(root, knob_ids, run_id, change)
    except PendingRebootError as exc:
        return [f"{exc}; the change of {', '.join(knob_ids)} waits for the next boot all the "
                "same"]
    return []


def _read_back(root: Sysroot, journal: Journal | None, planned: list[Planned], results: dict,
               connect: Any) -> None:
    """Each knob's own read-back (state only a tool reports); a failure puts the layer back."""
    for knob, target, changes, _reason in planned:
        if knob.after is None or not results[knob.name]["changed"]:
            continue
        try:
            knob.resolve(knob.after)(root, target, changes)
        except HostStateError as exc:
            entries = [e for r in results.values() for e in r["entries"]]
            restore_entries(root, journal, entries, check_mode=False, connect=connect)
            raise LayerFailed(knob.id, exc.path, exc.reason + "; the layer was put back") \
                from None


def _knob_result(planned: Planned, result: dict[str, Any]) -> dict[str, Any]:
    knob = planned.knob
    return {"layer": knob.layer, "knob": knob.name, "changed": result["changed"],
            "not_applicable": planned.not_applicable,
            "diff": result["diff"],
            "changes": [{"path": d["before_header"], "before": d["before"], "after": d["after"]}
                        for d in result["diff"]],
            "reboot_required": bool(result["changed"] and knob.reboot),
            "journal_entries": [{k: e[k] for k in ("seq", "kind", "path")}
                                for e in result["entries"]]}


def restore_run(root: Sysroot, journal: Journal, entries: list[dict[str, Any]],
                check_mode: bool, connect: Any = None) -> dict[str, Any]:
    """``changes.restore_entries`` (same arguments, same result), then, unless in check mode,
    the knobs taking effect at the next boot whose entries it really put back (not those
    found already in place) noted in the pending-reboot record as ``restore``; the result
    lists them in ``pending_reboot`` (``[]`` in check mode), and in ``warnings`` why the
    record could not be written.
    """
    result = restore_entries(root, journal, entries, check_mode, connect=connect)
    result["pending_reboot"] = [] if check_mode else put_back_reboot_knobs(entries, result)
    result["warnings"] = _note_pending(root, result["pending_reboot"], journal.run_id,
                                       "restore")
    return result


def put_back_reboot_knobs(entries: list[dict[str, Any]], result: dict[str, Any]) -> list[str]:
    """Ids of the knobs with ``reboot=True`` of which ``result`` (``restore_entries``') really
    put back an entry: restored and in its diff (an entry already in place has no diff)."""
    written = {d["before_header"] for d in result["diff"]}
    restored = set(result["restored"])
    ids = {f"{e['layer']}.{e['knob']}" for e in entries
           if e["seq"] in restored and e["path"] in written}
    layers = {knob_id.split(".", 1)[0] for knob_id in ids} & set(ROLE_LAYERS)
    reboot = {knob.id for name in layers for knob in get_layer(name).knobs if knob.reboot}
    return sorted(ids & reboot)
