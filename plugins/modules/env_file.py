#!/usr/bin/python
"""exemplar.tune.env_file: set or unset KEY=VALUE lines, keeping every other byte."""

from __future__ import annotations

DOCUMENTATION = r"""
module: env_file
short_description: Set or unset KEY=VALUE lines in a configuration file, journaled
description:
  - Edits C(/etc/nccl.conf) with NCCL's own rules (C(syntax=nccl) - C(#) only at column 0, no
    whitespace trimming, first definition wins) or C(/etc/default/*)-style files
    (C(syntax=shell) - quoted values, last definition wins).
  - Only the effective line of each key is rewritten (or one is appended); a key set to null
    is removed everywhere. Comments, other keys and line endings stay byte for byte.
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  path:
    description: Host path of the file; created when a key must be set and it is absent.
    type: path
    required: true
  settings:
    description: Key -> value; a null value removes the key.
    type: dict
    required: true
  syntax:
    description: Line rules of the file.
    type: str
    choices: [nccl, shell]
    default: shell
  mode:
    description: Mode of a newly created file, as an octal string.
    type: str
    default: "0644"
extends_documentation_fragment:
  - exemplar.tune.knob
"""

EXAMPLES = r"""
- name: Four QPs per connection on this fabric (chosen by sweep)
  exemplar.tune.env_file:
    path: /etc/nccl.conf
    syntax: nccl
    settings:
      NCCL_IB_QPS_PER_CONNECTION: "4"
    layer: fabric
    knob: nccl_conf
    run_id: "{{ exemplar_run_id }}"
"""

RETURN = r"""
changes:
  description: The file's content before and after, when it changed.
  returned: always
  type: list
  elements: dict
"""

from dataclasses import replace

from ansible_collections.exemplar.tune.plugins.module_utils.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.changes import Change
from ansible_collections.exemplar.tune.plugins.module_utils.envfile import plan_env_file
from ansible_collections.exemplar.tune.plugins.module_utils.knob_module import (
    knob_module,
    run_knob,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def main() -> None:
    """Module entry point."""
    module = knob_module({
        "path": {"type": "path", "required": True},
        "settings": {"type": "dict", "required": True},
        "syntax": {"type": "str", "choices": ["nccl", "shell"], "default": "shell"},
        "mode": {"type": "str", "default": "0644"},
    })
    params = module.params
    settings = {str(k): None if v is None else str(v) for k, v in params["settings"].items()}

    def plan(root: Sysroot) -> list[Change]:
        mode = root.file_mode(params["path"]) or int(params["mode"], 8)
        return [replace(c, mode=mode) for c in
                plan_env_file(root, params["path"], settings, params["syntax"])]

    run_knob(module, plan)


if __name__ == "__main__":
    main()
