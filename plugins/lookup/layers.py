"""exemplar.tune.layers: the layer names, in preflight order, from the layer registry."""

from __future__ import annotations

DOCUMENTATION = r"""
name: layers
short_description: The exemplar-tune layers in preflight order
description:
  - Returns the layer names from the collection's layer registry, so playbooks never keep a
    list of their own.
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  with_role:
    description: Only the layers that have a role (the ones C(apply) can change).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Apply every layer in order
  ansible.builtin.include_role:
    name: "exemplar.tune.{{ item }}"
  loop: "{{ lookup('exemplar.tune.layers', with_role=true, wantlist=true) }}"
"""

RETURN = r"""
_raw:
  description: Layer names.
  type: list
  elements: str
"""

from ansible.plugins.lookup import LookupBase
from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYER_NAMES,
    ROLE_LAYERS,
)


class LookupModule(LookupBase):
    """Lookup plugin body."""

    def run(self, terms, variables=None, **kwargs):  # noqa: D102 - Ansible's signature
        self.set_options(var_options=variables, direct=kwargs)
        return list(ROLE_LAYERS if self.get_option("with_role") else LAYER_NAMES)
