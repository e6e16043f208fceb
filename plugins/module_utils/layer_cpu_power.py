"""cpu-layer power facts (placeholder until its readers land)."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def gather_into(sheet: FactSheet, root: Sysroot) -> None:
    """Add the power facts to ``sheet``."""
