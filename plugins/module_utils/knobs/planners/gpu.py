"""How the gpu layer's knob plans and reads back persistence mode (declared in
``knobs/gpu.py``).

The knob does not apply (``NotApplicable``, with the reason) to a host without an NVIDIA GPU:
no GPU answers nvidia-smi and none is on the PCI bus; nor where the driver shows no
persistence mode for any GPU selected. A host whose PCI bus has NVIDIA GPUs that nvidia-smi
does not list (no driver, driver down) fails the knob with one line: it cannot be set or
judged there, and an audit must not call that "no drift"."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import Target
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import Change
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.persistence import (
    live_plan,
    live_states,
    sysroot_plan,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotApplicable,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.pci import (
    PCI_DEVICES,
    list_gpus,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def _params(target: Target) -> dict:
    return {"enabled": bool(target.want["persistence_mode"]),
            "gpus": list(target.settings["gpu_persistence_gpus"])}


def pci_gpus(root: Sysroot) -> int | None:
    """How many NVIDIA GPUs the PCI bus shows; ``None`` when it cannot be read."""
    try:
        return len(list_gpus(root))
    except HostStateError:
        return None


def plan_persistence(root: Sysroot, target: Target) -> list[Change]:
    """Persistence mode on every selected GPU: ``nvidia-smi -pm`` live, the captured report
    in a sysroot. ``NotApplicable`` on a host without GPUs."""
    if target.want.get("persistence_mode") is None:
        return []
    on_bus = pci_gpus(root)
    if target.facts.get("present") is False and on_bus == 0:
        raise NotApplicable(root.display(PCI_DEVICES), "no NVIDIA GPU on the PCI bus ("
                            f"{target.facts.get('reason') or 'nvidia-smi lists none'})")
    params = _params(target)
    note: list[str] = []
    if root.live:
        states = live_states(params, note)
        changes = live_plan(states, params["enabled"])
    else:
        changes, states = sysroot_plan(root, params)
    if not states:
        said = note[0] if note else "nvidia-smi lists no GPU"
        if on_bus:
            raise HostStateError("nvidia-smi", f"{said}, yet the PCI bus has {on_bus} NVIDIA "
                                 "GPU(s): persistence mode cannot be read or set (is the "
                                 "NVIDIA driver loaded?)")
        raise NotApplicable("nvidia-smi", said)
    if all(state is None for state in states.values()):
        raise NotApplicable("nvidia-smi", "no persistence mode shown for GPU "
                            f"{', '.join(states)}: the driver does not offer it there")
    return changes


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
