#!/usr/bin/python
"""exemplar.tune.gpu_facts: the gpu layer's facts."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_facts
short_description: Gather the gpu layer's exemplar-tune facts
description:
  - GPU health, covering count, model, driver, persistence, ECC, remapped rows, retired pages,
    XIDs, PCIe link, clock-event reasons.
  - Same data as M(exemplar.tune.facts) with C(layers=[gpu]).
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
extends_documentation_fragment:
  - exemplar.tune.facts
"""

EXAMPLES = r"""
- name: Gather the gpu layer
  exemplar.tune.gpu_facts:
"""

RETURN = r"""
ansible_facts:
  description: C(exemplar_tune.gpu) holds the layer's facts, C(sources) and C(errors).
  returned: always
  type: dict
"""

from ansible_collections.exemplar.tune.plugins.module_utils.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.facts_module import run_facts_module


def main() -> None:
    """Module entry point."""
    run_facts_module(["gpu"])


if __name__ == "__main__":
    main()
