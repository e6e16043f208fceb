"""The fabric layer's knob: the NCCL settings the fabric is tuned for, in ``/etc/nccl.conf``
(planned in ``planners/fabric.py``)."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import Knob, Setting
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import (
    NCCL_KEY,
    ONE_LINE_PATTERN,
)

ROLE_SUMMARY = "Set the NCCL settings the fabric is tuned for"
ROLE_NOTES: tuple[str, ...] = ()

KNOBS: tuple[Knob, ...] = (
    Knob("fabric", "nccl_conf", "NCCL settings found by sweep, in the system NCCL configuration",
         "plan_nccl_conf",
         {"nccl": {"type": "object", "propertyNames": {"pattern": NCCL_KEY.pattern},
                   "additionalProperties": {"type": ["string", "null"],
                                            "pattern": ONE_LINE_PATTERN},
                   "description": "NCCL_* settings the fabric is tuned for (found by sweep): "
                                  "one-line values; null removes the key"}},
         (Setting("fabric_nccl_conf_path", "/etc/nccl.conf",
                  "The system-wide NCCL configuration file."),),
         former={"fabric_nccl_settings": "nccl"},
         doc="C(nccl_conf) writes the profile's C(fabric.nccl) keys into C(/etc/nccl.conf) with "
             "NCCL's own line rules, keeping every other line and comment byte for byte. The "
             "values should come from a sweep on this fabric (for example "
             "C(NCCL_IB_QPS_PER_CONNECTION)), never be copied blindly."),
)
