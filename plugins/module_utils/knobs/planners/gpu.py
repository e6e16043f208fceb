"""How the gpu layer's knob plans and reads back persistence mode (declared in
``knobs/gpu.py``)."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import Target
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import Change
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.persistence import (
    live_plan,
    live_states,
    sysroot_plan,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def _params(target: Target) -> dict:
    return {"enabled": bool(target.want["persistence_mode"]),
            "gpus": list(target.settings["gpu_persistence_gpus"])}


def plan_persistence(root: Sysroot, target: Target) -> list[Change]:
    """Persistence mode on every selected GPU: ``nvidia-smi -pm`` live, the captured report
    in a sysroot. Nothing on a host without GPUs."""
    if target.want.get("persistence_mode") is None or target.facts.get("present") is False:
        return []
    if root.live:
        return live_plan(live_states(_params(target), []), _params(target)["enabled"])
    return sysroot_plan(root, _params(target))[0]


def check_persistence(root: Sysroot, target: Target, changes: list[Change]) -> None:
    """``nvidia-smi -pm`` exits 0 even where the driver keeps the old mode: read it back."""
    if not root.live or not changes:
        return
    want = "Enabled" if target.want["persistence_mode"] else "Disabled"
    after = live_states(_params(target), [])
    wrong = sorted(bdf for bdf, state in after.items() if state not in (want, None))
    if wrong:
        raise HostStateError(", ".join(wrong), f"persistence mode still not {want} after "
                             "nvidia-smi -pm")
