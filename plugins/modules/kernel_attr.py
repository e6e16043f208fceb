#!/usr/bin/python
"""exemplar.tune.kernel_attr: set sysfs/procfs attributes, journaled."""

from __future__ import annotations

DOCUMENTATION = r"""
module: kernel_attr
short_description: Set kernel attributes (sysfs, procfs) at runtime, with journal and restore
description:
  - Writes C(value) to the file C(attribute) in every directory matching C(glob), optionally
    only where a sibling file (C(where_file)) holds one of C(where_in).
  - "Example: C(glob=sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*),
    C(attribute=disable), C(value=0), C(where_file=name), C(where_in=[C6]) enables C6 on every
    CPU, matched by state name, never by index."
  - Runtime only; these writes do not survive a reboot (pair them with a persistent form).
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  glob:
    description: Shell-style pattern of directories, relative to C(/) (each component matched).
    type: str
    required: true
  attribute:
    description: File name inside each matching directory.
    type: str
    required: true
  value:
    description: Value to write; compared with the stripped read-back.
    type: str
    required: true
  where_file:
    description: Sibling file that selects the directories (with C(where_in)).
    type: str
  where_in:
    description: Values of C(where_file) that select a directory.
    type: list
    elements: str
  required:
    description: Fail when nothing matches (otherwise nothing to do is success).
    type: bool
    default: false
extends_documentation_fragment:
  - exemplar.tune.knob
"""

EXAMPLES = r"""
- name: Allow C6 on every CPU now
  exemplar.tune.kernel_attr:
    glob: sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*
    attribute: disable
    value: "0"
    where_file: name
    where_in: [C6]
    layer: cpu
    knob: deep_cstates
    run_id: "{{ exemplar_run_id }}"
"""

RETURN = r"""
changes:
  description: Each changed attribute with its value before and after.
  returned: always
  type: list
  elements: dict
matched:
  description: Number of attribute files selected.
  returned: always
  type: int
"""

from ansible_collections.exemplar.tune.plugins.module_utils.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.changes import AttrChange
from ansible_collections.exemplar.tune.plugins.module_utils.errors import NotSupported
from ansible_collections.exemplar.tune.plugins.module_utils.knob_module import (
    knob_module,
    run_knob,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def select(root: Sysroot, params: dict) -> list[str]:
    """Attribute paths of the matching directories (filtered by ``where_file``)."""
    paths = []
    for directory in root.glob(params["glob"]):
        selector = params["where_file"]
        if selector and root.read_optional(f"{directory}/{selector}") not in params["where_in"]:
            continue
        if root.exists(f"{directory}/{params['attribute']}"):
            paths.append(f"{directory}/{params['attribute']}")
    if params["required"] and not paths:
        raise NotSupported(f"/{params['glob']}/{params['attribute']}", "nothing matches")
    return paths


def main() -> None:
    """Module entry point."""
    module = knob_module(
        {"glob": {"type": "str", "required": True},
         "attribute": {"type": "str", "required": True},
         "value": {"type": "str", "required": True},
         "where_file": {"type": "str"},
         "where_in": {"type": "list", "elements": "str"},
         "required": {"type": "bool", "default": False}},
        required_together=[("where_file", "where_in")])
    found: list[str] = []

    def plan(root: Sysroot) -> list[AttrChange]:
        found.extend(select(root, module.params))
        return [AttrChange(path, module.params["value"]) for path in found]

    run_knob(module, plan, matched=lambda: len(found))


if __name__ == "__main__":
    main()
