"""exemplar.tune.bmc: the host's BMC connection, from its inventory variables."""

from __future__ import annotations

DOCUMENTATION = r"""
name: bmc
short_description: The host's BMC connection (the C(bmc) option of exemplar.tune modules)
description:
  - Builds the C(bmc) dictionary (address, user, password, ca, validate_certs) from the host's
    variables C(exemplar_bmc_address), C(exemplar_bmc_user), C(exemplar_bmc_password),
    C(exemplar_bmc_ca) and C(exemplar_bmc_validate_certs), on the controller.
  - The password comes from C(exemplar_bmc_password) (keep it in Ansible Vault) or, when that
    is not set, from the controller's environment variable C(EXEMPLAR_BMC_PASSWORD).
  - Returns an empty dictionary when the host has no C(exemplar_bmc_address) (no BMC
    configured), so the option can always be passed.
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
notes:
  - The modules mark the password C(no_log); do not print this lookup's value yourself.
"""

EXAMPLES = r"""
- name: Read the cpu layer, BIOS settings included
  exemplar.tune.facts:
    layers: [cpu]
    bmc: "{{ lookup('exemplar.tune.bmc') }}"
"""

RETURN = r"""
_raw:
  description: One dictionary with C(address), C(user), C(password), C(ca), C(validate_certs);
    empty when no BMC is configured.
  type: list
  elements: dict
"""

import os

from ansible.plugins.lookup import LookupBase

PASSWORD_ENV = "EXEMPLAR_BMC_PASSWORD"  # noqa: S105 - the variable's name, not a secret


class LookupModule(LookupBase):
    """Lookup plugin body."""

    def run(self, terms, variables=None, **kwargs):  # noqa: D102 - Ansible's signature
        variables = variables or {}
        address = self._var(variables, "exemplar_bmc_address")
        if not address:
            return [{}]
        password = self._var(variables, "exemplar_bmc_password")
        if password in (None, ""):
            password = os.environ.get(PASSWORD_ENV, "")
        validate = self._var(variables, "exemplar_bmc_validate_certs")
        return [{
            "address": str(address),
            "user": str(self._var(variables, "exemplar_bmc_user") or ""),
            "password": str(password),
            "ca": self._var(variables, "exemplar_bmc_ca") or None,
            "validate_certs": validate is None or str(validate).lower() not in (
                "false", "no", "0", "off"),
        }]

    def _var(self, variables, name):
        """A host variable, templated (vaulted values decrypted); ``None`` when undefined."""
        if name not in variables:
            return None
        return self._templar.template(variables[name])
