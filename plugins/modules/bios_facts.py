#!/usr/bin/python
"""exemplar.tune.bios_facts: the BIOS C-state/turbo/profile settings behind the host's BMC."""

from __future__ import annotations

DOCUMENTATION = r"""
module: bios_facts
short_description: Read the BIOS C-state, C1E, turbo and profile settings over Redfish
description:
  - Reads C(/redfish/v1/Systems/<id>/Bios) (current C(Attributes)) and its
    C(@Redfish.Settings) object (pending values) from the host's BMC and returns them in
    normalised terms through the vendor attribute map (Dell iDRAC, HPE iLO, Lenovo XCC,
    Supermicro); another vendor gives C(vendor=unknown) and the raw attributes.
  - The same data is the C(bios) key of the cpu layer of M(exemplar.tune.facts).
  - Without C(bmc), reads C(<sysroot>/.exemplar/commands/redfish-bios.json) inside a sysroot,
    else returns C(present=false).
  - Read-only; the Redfish requests are made from where the module runs.
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  sysroot:
    description: Directory that mirrors C(/) of the host (only used for a captured
      C(redfish-bios.json)).
    type: path
    default: /
extends_documentation_fragment:
  - exemplar.tune.attributes.reads
  - exemplar.tune.bmc
notes:
  - Supports check mode (it changes nothing in either mode).
"""

EXAMPLES = r"""
- name: Read the BIOS C-state policy from the BMC
  exemplar.tune.bios_facts:
    bmc: "{{ lookup('exemplar.tune.bmc') }}"
  register: bios
"""

RETURN = r"""
bios:
  description: Normalised BIOS settings.
  returned: success
  type: dict
  contains:
    present:
      description: False when no BMC is configured (then C(reason) says so).
      type: bool
    vendor:
      description: C(dell), C(hpe), C(lenovo), C(supermicro) or C(unknown).
      type: str
    core_cstates:
      description: C(enabled), C(disabled) or C(C1E); null when the BIOS does not offer it.
      type: str
    package_cstate:
      description: Package C-state limit in normalised terms.
      type: str
    c1e:
      description: C(enabled) or C(disabled).
      type: str
    turbo:
      description: C(enabled) or C(disabled).
      type: str
    profile:
      description: Power/performance profile (C(performance), C(custom) ...).
      type: str
    pending:
      description: Normalised fields whose value changes at the next reset.
      type: dict
    pending_raw:
      description: Vendor attributes staged for the next reset that differ from now.
      type: dict
    raw:
      description: The vendor attributes behind the fields (all attributes for an unknown
        vendor).
      type: dict
  sample: {"present": true, "vendor": "dell", "core_cstates": "disabled", "pending": {}}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.exemplar.tune.plugins.module_utils.glue.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.cpu_bios import gather_into
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bmc import BMC_OPTION, BmcConfig
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def main() -> None:
    """Module entry point."""
    module = AnsibleModule(argument_spec={"bmc": dict(BMC_OPTION),
                                          "sysroot": {"type": "path", "default": "/"}},
                           supports_check_mode=True)
    sheet = FactSheet()
    gather_into(sheet, Sysroot(module.params["sysroot"]),
                BmcConfig.from_params(module.params["bmc"]))
    if sheet.errors:
        module.fail_json(msg=f"{sheet.errors[0]['path']}: {sheet.errors[0]['error']}")
    module.exit_json(changed=False, bios=sheet.facts["bios"], source=sheet.sources["bios"])


if __name__ == "__main__":
    main()
