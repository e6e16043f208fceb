#!/usr/bin/python
"""exemplar.tune.bios_settings: stage BIOS C-state/turbo/profile settings through the BMC."""

from __future__ import annotations

DOCUMENTATION = r"""
module: bios_settings
short_description: Set the BIOS C-state, C1E, turbo and profile policy over Redfish, journaled
description:
  - Translates C(target), given in normalised terms, to the vendor's BIOS attribute names and
    values (Dell iDRAC, HPE iLO, Lenovo XCC, Supermicro) and stages them with C(PATCH) on the
    BIOS settings object (C(Bios/Settings)), with C(@Redfish.SettingsApplyTime) C(OnReset)
    where the BMC lists it. The values take effect at the next reset, so a change always
    reports C(reboot_required).
  - A value already staged (pending) counts as done, so a second run changes nothing.
  - The previous values (pending, else current) are recorded in the host journal before the
    PATCH, with the BMC address but never its credentials; M(exemplar.tune.restore) stages
    them again.
  - Where the vendor locks these settings behind a preset profile (Dell C(SysProfile), HPE
    C(WorkloadProfile), Lenovo operating mode, Supermicro Power Technology), the custom profile
    is set too, unless C(target.profile) names another one - then the task fails.
  - Refuses to change anything on a BMC of unknown vendor (no attribute map).
  - The Redfish requests are made from where the module runs.
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  target:
    description: Wanted settings in normalised terms; unset or null fields are left alone.
    type: dict
    required: true
    suboptions:
      core_cstates:
        description: Core C-states (C(C1E) limits cores to C1E, HPE only).
        type: str
        choices: [enabled, disabled, C1E]
      package_cstate:
        description: Package C-state limit.
        type: str
        choices: [enabled, disabled, C6-retention, C6-non-retention, C2, auto]
      c1e:
        description: C1E (enhanced halt state).
        type: str
        choices: [enabled, disabled]
      turbo:
        description: Turbo boost.
        type: str
        choices: [enabled, disabled]
      profile:
        description: System power/performance profile.
        type: str
        choices: [performance, balanced, efficiency, os-controlled, hpc, low-latency, dense, custom]
  apply_time:
    description: C(@Redfish.SettingsApplyTime) to request when the BMC supports it.
    type: str
    default: OnReset
    choices: [OnReset, Immediate, AtMaintenanceWindowStart, InMaintenanceWindowOnReset]
extends_documentation_fragment:
  - exemplar.tune.attributes.changes
  - exemplar.tune.knob
  - exemplar.tune.bmc
notes:
  - The BMC must be reachable from where the module runs; the password is C(no_log).
  - C(reboot_required) is always true when something changed; M(exemplar.tune.bmc_reset) or
    the C(exemplar.tune.reboot) playbook (C(exemplar_reboot_via=redfish)) applies the values.
"""

EXAMPLES = r"""
- name: Allow C-states and turbo in the BIOS from the next boot
  exemplar.tune.bios_settings:
    bmc: "{{ lookup('exemplar.tune.bmc') }}"
    target:
      core_cstates: enabled
      turbo: enabled
    layer: cpu
    knob: bios
    run_id: "{{ exemplar_run_id }}"
"""

RETURN = r"""
changes:
  description: The BIOS settings object with the attributes before and after (C(name=value)
    lines).
  returned: always
  type: list
  elements: dict
vendor:
  description: BMC vendor whose attribute map was used (C(dell), C(hpe), C(lenovo),
    C(supermicro)).
  returned: success
  type: str
desired:
  description: Vendor attribute names and the values staged for the next boot.
  returned: success
  type: dict
reboot_required:
  description: True when something was staged; the values apply at the next reset.
  returned: always
  type: bool
"""

from ansible_collections.exemplar.tune.plugins.module_utils.glue.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.cpu_bios import bios_facts
from ansible_collections.exemplar.tune.plugins.module_utils.glue.knob_module import (
    knob_module,
    run_knob,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.bios_change import plan_change
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import RedfishChange
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bmc import BMC_OPTION, BmcConfig
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

TARGET_OPTION = {"type": "dict", "required": True, "options": {
    "core_cstates": {"type": "str", "choices": ["enabled", "disabled", "C1E"]},
    "package_cstate": {"type": "str", "choices": ["enabled", "disabled", "C6-retention",
                                                  "C6-non-retention", "C2", "auto"]},
    "c1e": {"type": "str", "choices": ["enabled", "disabled"]},
    "turbo": {"type": "str", "choices": ["enabled", "disabled"]},
    "profile": {"type": "str", "choices": ["performance", "balanced", "efficiency",
                                           "os-controlled", "hpc", "low-latency", "dense",
                                           "custom"]},
}}


def main() -> None:
    """Module entry point."""
    module = knob_module({
        "bmc": dict(BMC_OPTION),
        "target": TARGET_OPTION,
        "apply_time": {"type": "str", "default": "OnReset",
                       "choices": ["OnReset", "Immediate", "AtMaintenanceWindowStart",
                                   "InMaintenanceWindowOnReset"]},
    })
    params = module.params
    params["reboot_required"] = True
    planned: list[RedfishChange] = []

    def plan(_root: Sysroot) -> list[RedfishChange]:
        planned.append(plan_change(BmcConfig.from_params(params["bmc"]), params["target"],
                                   params["apply_time"]))
        return planned

    run_knob(module, plan, vendor=lambda: _vendor(planned), desired=lambda: _desired(planned))


def _vendor(planned: list[RedfishChange]) -> str | None:
    return bios_facts(planned[0].target.snapshot)["vendor"] if planned else None


def _desired(planned: list[RedfishChange]) -> dict:
    return dict(planned[0].desired) if planned else {}


if __name__ == "__main__":
    main()
