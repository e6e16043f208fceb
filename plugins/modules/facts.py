#!/usr/bin/python
"""exemplar.tune.facts: gather the facts of several layers in one round-trip."""

from __future__ import annotations

DOCUMENTATION = r"""
module: facts
short_description: Gather exemplar-tune facts of several layers at once
description:
  - Reads the host state that matters for AI-training throughput, layer by layer (GPU health,
    Grace/VM readiness, CPU power and placement, runtime topology, fabric), in one call, like
    C(ansible.builtin.setup) with C(gather_subset).
  - "One layer alone is C(layers) with one name (C(layers: [cpu])); the per-layer facts
    modules of earlier versions are gone."
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  layers:
    description:
      - Layers to gather, in any order; the result is always in preflight order.
      - Left out, the host variable C(exemplar_layers), else every layer.
    type: list
    elements: str
    choices: [gpu, vm, cpu, runtime, fabric, workload]
    default: [gpu, vm, cpu, runtime, fabric, workload]
  as_json:
    description:
      - Return the facts as one JSON text in C(exemplar_tune_json) instead of as
        C(ansible_facts). Ansible then carries one string per host instead of walking a
        nested result (facts cleaning, copies for every callback), which a controller that
        parses the facts itself, such as C(exemplar-tune facts), pays on every host.
    type: bool
    default: false
extends_documentation_fragment:
  - exemplar.tune.attributes.reads
  - exemplar.tune.facts
  - exemplar.tune.bmc
"""

EXAMPLES = r"""
- name: Gather every layer
  exemplar.tune.facts:

- name: Gather every layer, BIOS settings too where the host sets exemplar_bmc_address
  exemplar.tune.facts:

- name: Gather the cpu and runtime layers of a captured host
  exemplar.tune.facts:
    layers: [cpu, runtime]
    sysroot: /var/tmp/node07-bundle
"""

RETURN = r"""
ansible_facts:
  description: Facts under C(exemplar_tune), one key per gathered layer.
  returned: unless I(as_json)
  type: dict
  contains:
    exemplar_tune:
      description: Layer name -> that layer's facts, plus C(sources) and C(errors) per layer.
      type: dict
      sample: {"cpu": {"cpuidle": {"driver": "intel_idle"}, "sources": {}, "errors": []}}
exemplar_tune_json:
  description: The same facts as C(ansible_facts.exemplar_tune), as one JSON text.
  returned: when I(as_json)
  type: str
layers:
  description: The layers gathered.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.exemplar.tune.plugins.module_utils.glue.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.glue.facts_module import (
    run_facts_module,
)


def main() -> None:
    """Module entry point."""
    run_facts_module()


if __name__ == "__main__":
    main()
