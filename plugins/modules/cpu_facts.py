#!/usr/bin/python
"""exemplar.tune.cpu_facts: the cpu layer's facts."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_facts
short_description: Gather the cpu layer's exemplar-tune facts
description:
  - The processor (C(processor)), covering vendor, model, x86 family/model/stepping or arm64
    implementer/part, sockets, cores per socket, threads per core and online CPUs.
  - CPU power and placement, covering C-states, PM-QoS holders, tuned, frequency policy, NUMA,
    device locality, cpusets, isolation, IRQs.
  - With C(bmc), also C(bios) - the BIOS C-state, C1E, turbo and profile settings read over
    Redfish, current and pending, in normalised terms (vendor map for Dell iDRAC, HPE iLO,
    Lenovo XCC, Supermicro; raw attributes for another vendor).
  - Same data as M(exemplar.tune.facts) with C(layers=[cpu]).
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
extends_documentation_fragment:
  - exemplar.tune.facts
  - exemplar.tune.bmc
"""

EXAMPLES = r"""
- name: Gather the cpu layer
  exemplar.tune.cpu_facts:

- name: Gather the cpu layer with the BIOS settings behind the BMC
  exemplar.tune.cpu_facts:
    bmc: "{{ lookup('exemplar.tune.bmc') }}"
"""

RETURN = r"""
ansible_facts:
  description: C(exemplar_tune.cpu) holds the layer's facts, C(sources) and C(errors).
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
    run_facts_module(["cpu"])


if __name__ == "__main__":
    main()
