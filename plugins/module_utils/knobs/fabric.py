"""The fabric layer's knob: the NCCL settings the fabric is tuned for, in ``/etc/nccl.conf``
(planned in ``planners/fabric.py``)."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import Knob, Setting
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import (
    NCCL_KEY,
    ONE_LINE_PATTERN,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.kernel_params import (
    layer_params,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.nccl_tuner import ROW_SCHEMA

ROLE_SUMMARY = "Set the NCCL settings and per-size tuner table the fabric is tuned for"
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
    Knob("fabric", "nccl_tuner", "per-message-size NCCL tuner table found by sweep --per-size",
         "plan_nccl_tuner",
         {"nccl_tuner": {"type": "array",
                         "items": ROW_SCHEMA,
                         "description": "rows of NCCL's example tuner plugin configuration "
                                        "(collective, byte range, algorithm, protocol, "
                                        "channels, nodes, ranks; found by sweep --per-size)"}},
         (Setting("fabric_nccl_tuner_path", "/etc/nccl_tuner.conf",
                  "The tuner table the example tuner plugin reads (NCCL_TUNER_CONFIG_FILE)."),),
         doc="C(nccl_tuner) writes the profile's C(fabric.nccl_tuner) rows as the whole "
             "configuration file of NCCL's example tuner plugin (C(/etc/nccl_tuner.conf)); the "
             "profile's C(fabric.nccl) names the plugin and the file "
             "(C(NCCL_TUNER_PLUGIN), C(NCCL_TUNER_CONFIG_FILE)). The rows should come from "
             "C(exemplar-tune sweep --per-size) on this fabric."),
    *layer_params("fabric"),
)
