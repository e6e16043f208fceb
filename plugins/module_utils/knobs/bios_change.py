"""The BIOS knob's one change: the vendor attributes that move the BMC's next-boot values to a
target given in normalised terms (kept apart from the readers, so reading needs no engine)."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.cpu_bios import bios_facts
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import RedfishChange
from ansible_collections.exemplar.tune.plugins.module_utils.readers import bios_attributes
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bios import BiosSettings
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bmc import BmcConfig
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError


def plan_change(bmc: BmcConfig | None, target: dict, apply_time: str) -> RedfishChange:
    """The one Redfish change that moves the BMC's next-boot BIOS values to ``target``."""
    if bmc is None:
        raise HostStateError("bmc", "no BMC configured: set exemplar_bmc_address (and user, "
                             "password) for this host")
    settings = BiosSettings(bmc, apply_time)
    facts = bios_facts(settings.snapshot)
    if not facts["vendor_known"]:
        raise HostStateError(settings.bmc_url, f"BMC vendor unknown (manufacturer "
                             f"{facts['manufacturer']!r}): BIOS attributes are reported raw "
                             "but not changed without an attribute map for this vendor")
    vmap = bios_attributes.VENDORS[facts["vendor"]]
    desired = bios_attributes.translate(vmap, settings.snapshot.effective, target,
                                        settings.bmc_url)
    return RedfishChange(settings.label, desired, settings)
