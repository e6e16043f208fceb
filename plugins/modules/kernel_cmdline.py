#!/usr/bin/python
"""exemplar.tune.kernel_cmdline: remove or add kernel arguments in the bootloader config."""

from __future__ import annotations

DOCUMENTATION = r"""
module: kernel_cmdline
short_description: Remove or add kernel command-line arguments for the next boot, journaled
description:
  - Edits C(GRUB_CMDLINE_LINUX) and C(GRUB_CMDLINE_LINUX_DEFAULT) in C(/etc/default/grub)
    (removal from both, additions to C(GRUB_CMDLINE_LINUX)), then rebuilds the bootloader
    configuration (C(update-grub), else C(grub2-mkconfig)) as a journaled step that
    M(exemplar.tune.restore) runs again once the defaults file is back.
  - Always reports C(reboot_required) when something changed; the running kernel keeps its
    arguments until the host reboots.
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  path:
    description: The bootloader defaults file.
    type: path
    default: /etc/default/grub
  remove:
    description: Parameter names to remove (C(name) and C(name=value) forms).
    type: list
    elements: str
    default: []
  add:
    description: Parameters to set (name -> value; null for a bare flag).
    type: dict
    default: {}
  regenerate:
    description: Command that rebuilds the bootloader configuration; default on a live host
      C(update-grub) when present, else C(grub2-mkconfig -o /boot/grub2/grub.cfg). With a
      C(sysroot) it runs only when given (otherwise the rebuild is recorded, not run).
    type: list
    elements: str
extends_documentation_fragment:
  - exemplar.tune.knob
"""

EXAMPLES = r"""
- name: Let intel_idle use every C-state after the next boot
  exemplar.tune.kernel_cmdline:
    remove: [intel_idle.max_cstate, processor.max_cstate, idle, intel_idle.states_off]
    layer: cpu
    knob: cstate_cmdline
    run_id: "{{ exemplar_run_id }}"
"""

RETURN = r"""
reboot_required:
  description: True when the file changed.
  returned: always
  type: bool
"""

from ansible_collections.exemplar.tune.plugins.module_utils.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.grub import plan_cmdline
from ansible_collections.exemplar.tune.plugins.module_utils.knob_module import (
    knob_module,
    run_knob,
)


def main() -> None:
    """Module entry point."""
    module = knob_module({
        "path": {"type": "path", "default": "/etc/default/grub"},
        "remove": {"type": "list", "elements": "str", "default": []},
        "add": {"type": "dict", "default": {}},
        "regenerate": {"type": "list", "elements": "str"},
    })
    params = module.params
    params["reboot_required"] = True
    add = {str(k): None if v is None else str(v) for k, v in params["add"].items()}
    run_knob(module, lambda root: plan_cmdline(root, params["path"], params["remove"], add,
                                               params["regenerate"]))


if __name__ == "__main__":
    main()
