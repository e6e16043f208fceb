"""cpu-layer facts: the processor (model, vendor, sockets, cores, threads), power policy
(C-states, PM-QoS, tuned, frequency), placement (NUMA, device locality, cpusets, isolation,
IRQs) and the BIOS C-state policy behind the BMC, gathered into one sheet."""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils import (
    layer_cpu_bios,
    layer_cpu_placement,
    layer_cpu_power,
    layer_cpu_processor,
)
from ansible_collections.exemplar.tune.plugins.module_utils.bmc import BmcConfig
from ansible_collections.exemplar.tune.plugins.module_utils.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def gather(root: Sysroot, bmc: BmcConfig | None = None) -> dict[str, Any]:
    """Facts of the cpu layer (``processor``, power, placement and ``bios`` keys side by side).

    ``bmc`` names the host's BMC; without one, ``bios`` comes from a captured Redfish file
    inside a sysroot, or says ``present: false``.
    """
    sheet = FactSheet()
    layer_cpu_processor.gather_into(sheet, root)
    layer_cpu_power.gather_into(sheet, root)
    layer_cpu_placement.gather_into(sheet, root)
    layer_cpu_bios.gather_into(sheet, root, bmc)
    return sheet.result()
