"""cpu-layer facts (placeholder until its readers land)."""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def gather(root: Sysroot) -> dict[str, Any]:
    """Facts of the cpu layer."""
    return FactSheet().result()
