#!/usr/bin/python
"""exemplar.tune.gpu_persistence: turn GPU persistence mode on (or off), journaled."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_persistence
short_description: Set NVIDIA GPU persistence mode, per GPU, with journal and restore
description:
  - "Live host (C(sysroot=/)): reads each GPU's state with
    C(nvidia-smi --query-gpu=pci.bus_id,persistence_mode --format=csv,noheader) and runs
    C(nvidia-smi -i <bdf> -pm 1) (C(-pm 0) to turn it off) for each GPU whose state differs; the
    journal records C(nvidia-smi -i <bdf> -pm 0) (or C(1)) as the undo command."
  - "Sysroot (tests, captured hosts): no command is ever run. The module edits the captured
    report C(<sysroot>/.exemplar/commands/nvidia-smi-q-x.xml) instead - only the
    C(<persistence_mode>) text of the selected C(<gpu id=...>) blocks changes, every other byte
    is kept - so the facts read afterwards show the new state and a restore is byte-exact."
  - A live host where nvidia-smi is installed but reports no GPU, no driver or no NVML has
    nothing to do. A live host without nvidia-smi fails with one line (persistence mode can
    only be set through nvidia-smi).
  - Runtime state; it does not survive a reboot or a driver reload. Where
    C(nvidia-persistenced) runs, it keeps persistence on across restarts of the tools, and its
    C(--persistence-mode) option is the persistent form.
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  enabled:
    description: Persistence mode wanted on the selected GPUs.
    type: bool
    default: true
  gpus:
    description:
      - PCI addresses of the GPUs to change, in any form (C(0000:c2:00.0),
        C(00000000:C2:00.0)); empty means every GPU nvidia-smi lists.
      - A listed address that nvidia-smi does not show fails the task.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - exemplar.tune.attributes.changes
  - exemplar.tune.knob
notes:
  - Needs root on a live host (nvidia-smi -pm); the failure is reported in one line and
    whatever this task had already changed is put back.
"""

EXAMPLES = r"""
- name: Keep every GPU initialised between jobs
  exemplar.tune.gpu_persistence:
    enabled: true
    layer: gpu
    knob: persistence_mode
    run_id: "{{ exemplar_run_id }}"

- name: Only one GPU, on a captured host tree
  exemplar.tune.gpu_persistence:
    gpus: ["0000:c2:00.0"]
    layer: gpu
    knob: persistence_mode
    run_id: r1
    sysroot: /tmp/h100-x86
"""

RETURN = r"""
gpus:
  description: Each selected GPU with its persistence mode before (C(Enabled), C(Disabled),
    or C(null) when the GPU does not report it) and the mode wanted.
  returned: always
  type: list
  elements: dict
note:
  description: Why nothing was planned (no GPU), when that is the case.
  returned: always
  type: str
"""

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.glue.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.glue.knob_module import (
    knob_module,
    run_knob,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import Change
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.persistence import (
    live_plan,
    live_states,
    sysroot_plan,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def main() -> None:
    """Module entry point."""
    module = knob_module({
        "enabled": {"type": "bool", "default": True},
        "gpus": {"type": "list", "elements": "str", "default": []},
    })
    params = module.params
    want = "Enabled" if params["enabled"] else "Disabled"
    seen: dict[str, str | None] = {}
    note: list[str] = []

    def plan(root: Sysroot) -> list[Change]:
        if root.live:
            seen.update(live_states(params, note))
            return live_plan(seen, params["enabled"])
        changes, states = sysroot_plan(root, params)
        seen.update(states)
        return changes

    def verify() -> dict[str, Any]:
        """nvidia-smi -pm exits 0 even where the driver keeps the old mode: read it back."""
        if params["sysroot"] != "/":
            return {}
        try:
            after = live_states({**params, "gpus": list(seen)}, [])
        except HostStateError as exc:
            module.fail_json(msg=f"could not read persistence mode back: {exc}")
        wrong = sorted(bdf for bdf, state in after.items() if state not in (want, None))
        if wrong:
            module.fail_json(msg=f"persistence mode still not {want} on {', '.join(wrong)} "
                             f"after nvidia-smi -pm; restore run {params['run_id']} to undo")
        return {}

    run_knob(module, plan, after_change=verify,
             gpus=lambda: [{"bdf": bdf, "before": state, "wanted": want}
                           for bdf, state in seen.items()],
             note=lambda: note[0] if note else None)


if __name__ == "__main__":
    main()
