"""The gpu layer's knob: persistence mode."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.changes import Change
from ansible_collections.exemplar.tune.plugins.module_utils.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import Knob, Setting, Target
from ansible_collections.exemplar.tune.plugins.module_utils.persistence import (
    live_plan,
    live_states,
    sysroot_plan,
)
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


ROLE_SUMMARY = "Set GPU persistence mode as the profile says"
ROLE_NOTES = (
    "Runtime state - it is lost at reboot or driver reload; keep C(nvidia-persistenced) "
    "enabled for the persistent form.",
    "Nothing is done when the GPU facts show no GPU (no driver, nothing listed). A live host "
    "with GPUs but no nvidia-smi fails with one line.",
    "With C(exemplar_sysroot) no command runs; the captured "
    "C(.exemplar/commands/nvidia-smi-q-x.xml) of the tree is edited instead (tests, captured "
    "hosts).",
)

KNOBS: tuple[Knob, ...] = (
    Knob("gpu", "persistence_mode", "persistence mode on every GPU", plan_persistence,
         {"persistence_mode": {"type": "boolean",
                               "description": "persistence mode wanted (true - on)"}},
         {"gpu_persistence_mode": "persistence_mode"},
         (Setting("gpu_persistence_gpus", [], "PCI addresses of the GPUs to change; empty: "
                  "every GPU nvidia-smi lists."),),
         facts=("gpu.present",), after=check_persistence, switched=False,
         doc="C(persistence_mode) turns persistence mode on (or off) on each GPU whose state "
             "differs, with C(nvidia-smi -i <bdf> -pm 1); the journal keeps C(-pm 0) as the "
             "undo command. Without persistence the driver tears the GPU state down whenever "
             "no client holds it, and every job start pays the re-initialisation."),
)
