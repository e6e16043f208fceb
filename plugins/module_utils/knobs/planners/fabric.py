"""How the fabric layer's knobs plan the NCCL settings in ``/etc/nccl.conf`` and the tuner
table (declared in ``knobs/fabric.py``)."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import (
    KnobInputError,
    Target,
    nccl_tuner,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import Change, FileChange
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.envfile import plan_env_file
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import (
    NCCL_KEY,
    clean_path,
    matching,
    one_line,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def nccl_settings(values: dict, what: str) -> dict[str, str | None]:
    """``NCCL_*`` keys with one-line values (``None``: remove the key)."""
    if not isinstance(values, dict):
        raise KnobInputError(what, "must be a mapping of NCCL_* keys to values")
    return {matching(key, NCCL_KEY, what): None if value is None else
            one_line(value, f"{what}.{key}") for key, value in values.items()}


def plan_nccl_conf(root: Sysroot, target: Target) -> list[Change]:
    """Each ``fabric.nccl`` setting in the system NCCL configuration (null removes a key)."""
    wanted = target.want.get("nccl") or {}
    if not wanted:
        return []
    path = clean_path(target.settings["fabric_nccl_conf_path"], "fabric_nccl_conf_path")
    return plan_env_file(root, path, nccl_settings(wanted, "fabric.nccl"), "nccl")


def plan_nccl_tuner(root: Sysroot, target: Target) -> list[Change]:
    """The ``fabric.nccl_tuner`` rows as the whole tuner table file (mode and owner kept)."""
    wanted = target.want.get("nccl_tuner")
    if not wanted:
        return []
    rows = nccl_tuner.check_rows(wanted, "fabric.nccl_tuner")
    path = clean_path(target.settings["fabric_nccl_tuner_path"], "fabric_nccl_tuner_path")
    text = nccl_tuner.render(rows, "NCCL tuner table written by exemplar-tune (fabric.nccl_tuner);"
                             " the first matching row applies")
    return [FileChange(path, text.encode(), root.file_mode(path) or 0o644, own=True)]
