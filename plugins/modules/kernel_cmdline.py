#!/usr/bin/python
"""exemplar.tune.kernel_cmdline: remove or add kernel arguments in the bootloader config."""

from __future__ import annotations

DOCUMENTATION = r"""
module: kernel_cmdline
short_description: Remove or add kernel command-line arguments for the next boot, journaled
description:
  - Edits C(GRUB_CMDLINE_LINUX) and C(GRUB_CMDLINE_LINUX_DEFAULT) in C(/etc/default/grub)
    (removal from both, additions to C(GRUB_CMDLINE_LINUX)), then regenerates the bootloader
    configuration on a live host (C(update-grub), else C(grub2-mkconfig)).
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
    description: Command that rebuilds the bootloader configuration (live hosts only); default
      C(update-grub) when present, else C(grub2-mkconfig -o /boot/grub2/grub.cfg).
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

import shutil

from ansible_collections.exemplar.tune.plugins.module_utils.changes import FileChange
from ansible_collections.exemplar.tune.plugins.module_utils.errors import NotSupported
from ansible_collections.exemplar.tune.plugins.module_utils.grub import edit_grub
from ansible_collections.exemplar.tune.plugins.module_utils.knob_module import (
    knob_module,
    run_knob,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot, run_command


def regenerate_command(params: dict) -> list[str] | None:
    """The bootloader rebuild command for a live host, or ``None`` when none is known."""
    if params["regenerate"]:
        return params["regenerate"]
    if shutil.which("update-grub"):
        return ["update-grub"]
    if shutil.which("grub2-mkconfig"):
        return ["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"]
    return None


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
    live = params["sysroot"] == "/"

    def plan(root: Sysroot) -> list[FileChange]:
        try:
            text = root.read_text(params["path"], strip=False)
        except NotSupported:
            if not add:
                return []  # no bootloader defaults: nothing to remove
            raise
        new = edit_grub(text, params["remove"], add)
        return [FileChange(params["path"], new.encode(), root.file_mode(params["path"]) or 0o644)]

    def regenerate() -> dict[str, str | None]:
        argv = regenerate_command(params) if live else None
        if argv is None:
            return {"regenerated": None}
        out = run_command(argv)
        if out.rc != 0:
            module.warn(f"{' '.join(argv)} failed (exit {out.rc}); run it before rebooting")
        return {"regenerated": " ".join(argv)}

    run_knob(module, plan, after_change=regenerate, regenerated=None)


if __name__ == "__main__":
    main()
