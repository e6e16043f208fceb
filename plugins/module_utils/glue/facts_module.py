"""The body of the facts module: argument handling, gathering, result shape."""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYER_NAMES,
    gather_facts,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bmc import BMC_OPTION, BmcConfig
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

SYSROOT_OPTION = {"type": "path", "default": "/"}


def facts_options() -> dict[str, Any]:
    """The argument spec of the facts a module reads: ``sysroot``, ``bmc``, ``layers``,
    ``counter_window``."""
    return {"sysroot": dict(SYSROOT_OPTION), "bmc": dict(BMC_OPTION),
            "layers": {"type": "list", "elements": "str", "default": list(LAYER_NAMES),
                       "choices": list(LAYER_NAMES)},
            "counter_window": {"type": "float", "default": 0.0}}


def module_facts(module: AnsibleModule) -> dict[str, Any]:
    """The facts of the layers ``module``'s ``layers`` option names, read under its
    ``sysroot`` (the task fails in one line when that is not a directory)."""
    sysroot = module.params["sysroot"]
    if sysroot != "/" and not os.path.isdir(sysroot):
        module.fail_json(msg=f"sysroot {sysroot} is not a directory")
    if module.params["counter_window"] < 0:
        module.fail_json(msg=f"counter_window {module.params['counter_window']}: seconds, 0 "
                         "or more")
    context = {"bmc": BmcConfig.from_params(module.params.get("bmc")),
               "counter_window": module.params["counter_window"]}
    return gather_facts(Sysroot(sysroot), module.params["layers"], context)


def run_facts_module() -> None:
    """Run ``exemplar.tune.facts``: the layers named by its ``layers`` option, one key each."""
    module = AnsibleModule(argument_spec={**facts_options(),
                                          "as_json": {"type": "bool", "default": False}},
                           supports_check_mode=True)
    names = module.params["layers"]
    facts = module_facts(module)
    if module.params["as_json"]:
        module.exit_json(changed=False, exemplar_tune_json=json.dumps(facts), layers=names)
    module.exit_json(changed=False, ansible_facts={"exemplar_tune": facts}, layers=names)
