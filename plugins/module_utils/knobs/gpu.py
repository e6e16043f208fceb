"""The gpu layer's knob: persistence mode (planned in ``planners/gpu.py``)."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import Knob, Setting

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
    Knob("gpu", "persistence_mode", "persistence mode on every GPU", "plan_persistence",
         {"persistence_mode": {"type": "boolean",
                               "description": "persistence mode wanted (true - on)"}},
         (Setting("gpu_persistence_gpus", [], "PCI addresses of the GPUs to change; empty: "
                  "every GPU nvidia-smi lists."),),
         facts=("gpu.present",), after="check_persistence",
         doc="C(persistence_mode) turns persistence mode on (or off) on each GPU whose state "
             "differs, with C(nvidia-smi -i <bdf> -pm 1); the journal keeps C(-pm 0) as the "
             "undo command. Without persistence the driver tears the GPU state down whenever "
             "no client holds it, and every job start pays the re-initialisation."),
)
