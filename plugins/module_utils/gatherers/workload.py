"""Workload-layer host facts.

The workload layer is judged by benchmark results, which the controller records in its
ledger; a host has nothing of its own to report here. The gatherer says so explicitly, so
that every layer has a key in the facts output.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def gather(root: Sysroot) -> dict[str, Any]:
    """``{"host_facts": False}``: workload results come from benchmarks, not from the host."""
    sheet = FactSheet()
    sheet.put("host_facts", False, "controller ledger")
    return sheet.result()
