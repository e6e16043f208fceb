#!/usr/bin/python
"""exemplar.tune.nccl_topo: install an NCCL topology file, refusing one NCCL would reject."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nccl_topo
short_description: Install an NCCL topology file (NCCL_TOPO_FILE) after validating it
description:
  - Parses C(content) as an NCCL topology (a C(<system version="1">) root, NCCL
    C(src/graph/xml.cc)) with a safe XML parser before anything is written; malformed XML,
    XML with entity declarations (billion laughs, XXE), another root element or another
    C(version) are refused with a one-line message and nothing is written.
  - A valid topology is written as a whole file with C(mode), through the journal, so
    M(exemplar.tune.restore) puts the previous file back (or removes it again).
  - GPUs and NICs the topology names that this host lacks (no C(/sys/bus/pci/devices/<BDF>))
    are reported as a warning; NCCL would merge a wrong topology without an error.
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  path:
    description: Host path of the topology file (the value NCCL_TOPO_FILE names).
    type: path
    default: /etc/nccl/topo.xml
  content:
    description: The topology XML to install.
    type: str
    required: true
  mode:
    description: Permission bits, as an octal string.
    type: str
    default: "0644"
extends_documentation_fragment:
  - exemplar.tune.knob
"""

EXAMPLES = r"""
- name: Install the site topology file
  exemplar.tune.nccl_topo:
    path: /etc/nccl/topo.xml
    content: "{{ lookup('ansible.builtin.file', 'files/topo-h100.xml') }}"
    layer: runtime
    knob: topo_file
    run_id: "{{ exemplar_run_id }}"
"""

RETURN = r"""
changes:
  description: The file's content before and after, when it changed.
  returned: always
  type: list
  elements: dict
topology:
  description: What the installed topology names (normalised PCI addresses, net names).
  returned: success
  type: dict
  sample: {gpus: ["0000:a4:00.0"], nics: ["0000:a3:00.0"], nets: [mlx5_0]}
missing_on_host:
  description: GPUs and NICs of the topology that this host lacks.
  returned: success
  type: dict
  sample: {gpus: [], nics: []}
"""

from ansible_collections.exemplar.tune.plugins.module_utils.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.changes import FileChange
from ansible_collections.exemplar.tune.plugins.module_utils.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.knob_module import (
    knob_module,
    run_knob,
)
from ansible_collections.exemplar.tune.plugins.module_utils.layer_runtime import (
    PCI_DEVICES,
    missing_on_host,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot
from ansible_collections.exemplar.tune.plugins.module_utils.topo_xml import parse_topo_xml


def main() -> None:
    """Module entry point."""
    module = knob_module({
        "path": {"type": "path", "default": "/etc/nccl/topo.xml"},
        "content": {"type": "str", "required": True},
        "mode": {"type": "str", "default": "0644"},
    })
    params = module.params
    try:
        mode = int(params["mode"], 8)
    except ValueError:
        module.fail_json(msg=f"mode {params['mode']!r} is not an octal number")
    try:
        parsed = parse_topo_xml(params["content"], f"topology for {params['path']}")
    except HostStateError as exc:
        module.fail_json(msg=f"refusing to install {params['path']}: {exc.reason}; "
                         "nothing was written")
    if not parsed["valid"]:
        module.fail_json(msg=f"refusing to install {params['path']}: {parsed['error']}; "
                         "nothing was written")
    topology = {key: parsed[key] for key in ("gpus", "nics", "nets")}
    root = Sysroot(params["sysroot"])
    missing = {}
    if root.is_dir(PCI_DEVICES):
        missing = {kind: missing_on_host(root, topology[kind]) for kind in ("gpus", "nics")}
        for kind, bdfs in missing.items():
            if bdfs:
                module.warn(f"{params['path']} names {kind.upper()[:-1]}s this host lacks: "
                            f"{', '.join(bdfs)}")
    content = params["content"].encode()
    run_knob(module, lambda _root: [FileChange(params["path"], content, mode)],
             topology=topology, missing_on_host=missing)


if __name__ == "__main__":
    main()
