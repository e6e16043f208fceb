"""cpu-layer facts: the processor (model, vendor, sockets, cores, threads), power policy
(C-states, PM-QoS, tuned, frequency), placement (NUMA, device locality, cpusets, isolation,
IRQs) and the BIOS C-state policy behind the BMC, gathered into one sheet."""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import (
    cpu_bios,
    cpu_placement,
    cpu_power,
    cpu_processor,
)
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bmc import BmcConfig
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def gather(root: Sysroot, bmc: BmcConfig | None = None) -> dict[str, Any]:
    """Facts of the cpu layer (``processor``, power, placement and ``bios`` keys side by side).

    ``bmc`` names the host's BMC; without one, ``bios`` comes from a captured Redfish file
    inside a sysroot, or says ``present: false``.
    """
    sheet = FactSheet()
    cpu_processor.gather_into(sheet, root)
    cpu_power.gather_into(sheet, root)
    cpu_placement.gather_into(sheet, root)
    cpu_bios.gather_into(sheet, root, bmc)
    return sheet.result()
