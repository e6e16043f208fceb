"""cpu-layer facts: power policy (C-states, PM-QoS, tuned, frequency) and placement
(NUMA, device locality, cpusets, isolation, IRQs), gathered into one sheet."""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils import (
    layer_cpu_placement,
    layer_cpu_power,
)
from ansible_collections.exemplar.tune.plugins.module_utils.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def gather(root: Sysroot) -> dict[str, Any]:
    """Facts of the cpu layer (power keys and placement keys side by side)."""
    sheet = FactSheet()
    layer_cpu_power.gather_into(sheet, root)
    layer_cpu_placement.gather_into(sheet, root)
    return sheet.result()
