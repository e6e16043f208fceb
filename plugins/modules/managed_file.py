#!/usr/bin/python
"""exemplar.tune.managed_file: a file with exact content (or absent), journaled."""

from __future__ import annotations

DOCUMENTATION = r"""
module: managed_file
short_description: Make a file hold exact content (or be absent), with journal and restore
description:
  - Writes the whole file atomically with its mode, or removes it with C(state=absent).
  - Used for drop-ins, udev rules, enroot C(environ.d)/C(mounts.d) entries, tuned child
    profiles and topology files.
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  path:
    description: Host path of the file.
    type: path
    required: true
  content:
    description: Exact content; required with C(state=present).
    type: str
  state:
    description: C(present) writes C(content); C(absent) removes the file.
    type: str
    choices: [present, absent]
    default: present
  mode:
    description: Permission bits, as an octal string.
    type: str
    default: "0644"
extends_documentation_fragment:
  - exemplar.tune.attributes.changes
  - exemplar.tune.knob
"""

EXAMPLES = r"""
- name: Carry the topology file into every enroot container
  exemplar.tune.managed_file:
    path: /etc/enroot/mounts.d/50-nccl-topo.fstab
    content: "/etc/nccl/topo.xml /etc/nccl/topo.xml none x-create=file,bind,ro,nosuid,nodev\n"
    layer: runtime
    knob: enroot_topo
    run_id: "{{ exemplar_run_id }}"
"""

RETURN = r"""
changes:
  description: Each changed path with its content before and after.
  returned: always
  type: list
  elements: dict
journal:
  description: Host path of the journal that recorded the previous state (null in check mode).
  returned: always
  type: str
reboot_required:
  description: True when something changed and the option C(reboot_required) was set.
  returned: always
  type: bool
"""

from ansible_collections.exemplar.tune.plugins.module_utils.glue.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.glue.knob_module import (
    knob_module,
    run_knob,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import FileChange


def main() -> None:
    """Module entry point."""
    module = knob_module(
        {"path": {"type": "path", "required": True}, "content": {"type": "str"},
         "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
         "mode": {"type": "str", "default": "0644"}},
        required_if=[("state", "present", ["content"])])
    params = module.params
    try:
        mode = int(params["mode"], 8)
    except ValueError:
        module.fail_json(msg=f"mode {params['mode']!r} is not an octal number")
    content = None if params["state"] == "absent" else params["content"].encode()
    run_knob(module, lambda root: [FileChange(params["path"], content, mode)])


if __name__ == "__main__":
    main()
