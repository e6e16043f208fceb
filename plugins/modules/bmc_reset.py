#!/usr/bin/python
"""exemplar.tune.bmc_reset: restart a host through its BMC (Redfish ComputerSystem.Reset)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: bmc_reset
short_description: Restart a host through its BMC with Redfish ComputerSystem.Reset
description:
  - POSTs C(ComputerSystem.Reset) to the first system of the BMC. With C(reset_type=auto)
    the type is chosen from the values the system allows, in this order
    C(GracefulRestart), C(ForceRestart), C(PowerCycle) (C(On) for a powered-off system).
  - Pending BIOS settings (see M(exemplar.tune.bios_settings)) take effect with this reset.
  - Does not wait for the operating system; the C(exemplar.tune.reboot) playbook does.
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  reset_type:
    description: Reset type to use, or C(auto) to choose from the allowed values.
    type: str
    default: auto
    choices: [auto, GracefulRestart, ForceRestart, PowerCycle, On]
attributes:
  check_mode:
    description: Reads the power state and the reset types and says which it would use.
    support: full
  diff_mode:
    description: A restart has no before and after to show.
    support: none
  platform:
    description: Runs where the BMC is reachable (the controller or the host); any POSIX system.
    platforms: posix
extends_documentation_fragment:
  - exemplar.tune.bmc
notes:
  - Check mode posts nothing and reports C(changed).
"""

EXAMPLES = r"""
- name: Restart through the BMC so that pending BIOS settings apply
  exemplar.tune.bmc_reset:
    bmc: "{{ lookup('exemplar.tune.bmc') }}"
  delegate_to: localhost
"""

RETURN = r"""
reset_type:
  description: The reset type posted (or that would be, in check mode).
  returned: success
  type: str
system:
  description: URI of the system that was reset.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.exemplar.tune.plugins.module_utils.glue.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.readers.bios import (
    choose_reset_type,
    read_snapshot,
    reset_system,
    reset_types,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bmc import BMC_OPTION, BmcConfig
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.redfish import RedfishClient


def main() -> None:
    """Module entry point."""
    module = AnsibleModule(argument_spec={
        "bmc": dict(BMC_OPTION),
        "reset_type": {"type": "str", "default": "auto",
                       "choices": ["auto", "GracefulRestart", "ForceRestart", "PowerCycle", "On"]},
    }, supports_check_mode=True)
    bmc = BmcConfig.from_params(module.params["bmc"])
    if bmc is None:
        module.fail_json(msg="no BMC configured: set exemplar_bmc_address (and user, password)")
    try:
        client = RedfishClient(bmc)
        if module.check_mode:
            snapshot = read_snapshot(client)
            chosen = choose_reset_type(snapshot, reset_types(client, snapshot),
                                       module.params["reset_type"])
            module.exit_json(changed=True, reset_type=chosen, system=snapshot.system_uri)
        result = reset_system(client, module.params["reset_type"])
    except HostStateError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
