"""The fabric layer's knob: the NCCL settings the fabric is tuned for, in ``/etc/nccl.conf``."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.changes import Change
from ansible_collections.exemplar.tune.plugins.module_utils.envfile import plan_env_file
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import (
    Knob,
    KnobInputError,
    Setting,
    Target,
)
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


ROLE_SUMMARY = "Set the NCCL settings the fabric is tuned for"
ROLE_NOTES: tuple[str, ...] = ()

KNOBS: tuple[Knob, ...] = (
    Knob("fabric", "nccl_conf", "NCCL settings found by sweep, in the system NCCL configuration",
         plan_nccl_conf,
         {"nccl": {"type": "object", "propertyNames": {"pattern": NCCL_KEY.pattern},
                   "additionalProperties": {"type": ["string", "null"],
                                            "pattern": "^[^\\x00-\\x1f\\x7f]{0,1023}$"},
                   "description": "NCCL_* settings the fabric is tuned for (found by sweep): "
                                  "one-line values; null removes the key"}},
         {"fabric_nccl_settings": "nccl"},
         (Setting("fabric_nccl_conf_path", "/etc/nccl.conf",
                  "The system-wide NCCL configuration file."),),
         doc="C(nccl_conf) writes the profile's C(fabric.nccl) keys into C(/etc/nccl.conf) with "
             "NCCL's own line rules, keeping every other line and comment byte for byte. The "
             "values should come from a sweep on this fabric (for example "
             "C(NCCL_IB_QPS_PER_CONNECTION)), never be copied blindly."),
)
