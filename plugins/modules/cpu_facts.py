#!/usr/bin/python
"""exemplar.tune.cpu_facts: the cpu layer's facts."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_facts
short_description: Gather the cpu layer's exemplar-tune facts
description:
  - CPU power and placement, covering C-states, PM-QoS holders, tuned, frequency policy, NUMA,
    device locality, cpusets, isolation, IRQs.
  - Same data as M(exemplar.tune.facts) with C(layers=[cpu]).
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
extends_documentation_fragment:
  - exemplar.tune.facts
"""

EXAMPLES = r"""
- name: Gather the cpu layer
  exemplar.tune.cpu_facts:
"""

RETURN = r"""
ansible_facts:
  description: C(exemplar_tune.cpu) holds the layer's facts, C(sources) and C(errors).
  returned: always
  type: dict
"""

from ansible_collections.exemplar.tune.plugins.module_utils.facts_module import run_facts_module


def main() -> None:
    """Module entry point."""
    run_facts_module(["cpu"])


if __name__ == "__main__":
    main()
