"""The AnsibleModule side shared by every knob module: common options, the engine, results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
    Change,
    apply_changes,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.journal import Journal
from ansible_collections.exemplar.tune.plugins.module_utils.layers import JOURNAL_SCOPES
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

COMMON_OPTIONS: dict[str, dict[str, Any]] = {
    "run_id": {"type": "str"},
    "layer": {"type": "str", "required": True, "choices": list(JOURNAL_SCOPES)},
    "knob": {"type": "str", "required": True},
    "sysroot": {"type": "path", "default": "/"},
    "reboot_required": {"type": "bool", "default": False},
}


def knob_module(options: dict[str, dict[str, Any]], **kwargs: Any) -> AnsibleModule:
    """An AnsibleModule with the knob options added; supports check mode."""
    return AnsibleModule(argument_spec={**COMMON_OPTIONS, **options}, supports_check_mode=True,
                         **kwargs)


def open_journal(module: AnsibleModule, root: Sysroot) -> Journal | None:
    """The run's journal (``None`` in check mode); fails the module without a run id.

    A corrupted journal raises ``JournalError`` here, before anything is written.
    """
    if module.check_mode:
        return None
    if not module.params["run_id"]:
        module.fail_json(msg="run_id is required to change anything (it names the journal "
                         "that restore uses)")
    journal = Journal(root, module.params["run_id"])
    journal.load()
    return journal


def run_knob(module: AnsibleModule, plan: Callable[[Sysroot], list[Change]],
             after_change: Callable[[], dict[str, Any]] | None = None, **extra: Any) -> None:
    """Plan the changes, apply them through the journal, and exit with the standard result.

    Result keys: ``changed``, ``diff`` (one per changed path), ``changes`` (path, before,
    after), ``journal`` (its path), ``journal_entries`` (seq, kind, path),
    ``reboot_required`` (the change only takes effect after a reboot), ``knob``, ``layer``,
    and ``extra`` (a callable's value is taken after planning). ``after_change`` runs once
    something really changed (not in check mode) and adds its keys to the result.
    """
    params = module.params
    root = Sysroot(params["sysroot"])
    try:
        changes = plan(root)
        journal = open_journal(module, root)
        result = apply_changes(root, changes, journal, params["layer"], params["knob"],
                               module.check_mode)
    except HostStateError as exc:
        module.fail_json(msg=str(exc), knob=params["knob"], layer=params["layer"])
    if after_change and result["changed"] and not module.check_mode:
        extra.update(after_change())
    module.exit_json(
        changed=result["changed"], diff=result["diff"], knob=params["knob"],
        layer=params["layer"],
        changes=[{"path": d["before_header"], "before": d["before"], "after": d["after"]}
                 for d in result["diff"]],
        journal=journal.display if journal else None,
        journal_entries=[{k: e[k] for k in ("seq", "kind", "path")} for e in result["entries"]],
        reboot_required=bool(result["changed"] and params["reboot_required"]),
        **{key: value() if callable(value) else value for key, value in extra.items()},
    )
