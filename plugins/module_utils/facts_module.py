"""The body shared by the facts modules: argument handling, gathering, result shape."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.exemplar.tune.plugins.module_utils.bmc import BMC_OPTION, BmcConfig
from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYER_NAMES,
    gather_facts,
    get_layer,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

SYSROOT_OPTION = {"type": "path", "default": "/"}


def run_facts_module(fixed_layers: list[str] | None = None) -> None:
    """Run a facts module: ``facts`` (``layers`` option) or one layer's (``fixed_layers``)."""
    spec: dict = {"sysroot": dict(SYSROOT_OPTION)}
    if fixed_layers is None or any("bmc" in get_layer(n).options for n in fixed_layers):
        spec["bmc"] = dict(BMC_OPTION)
    if fixed_layers is None:
        spec["layers"] = {"type": "list", "elements": "str", "default": list(LAYER_NAMES),
                          "choices": list(LAYER_NAMES)}
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    names = fixed_layers or module.params["layers"]
    sysroot = module.params["sysroot"]
    if sysroot != "/" and not os.path.isdir(sysroot):
        module.fail_json(msg=f"sysroot {sysroot} is not a directory")
    context = {"bmc": BmcConfig.from_params(module.params.get("bmc"))}
    facts = gather_facts(Sysroot(sysroot), names, context)
    module.exit_json(changed=False, ansible_facts={"exemplar_tune": facts}, layers=names)
