"""The ``bmc`` option shared by every exemplar.tune module that talks to a BMC over Redfish."""

from __future__ import annotations


class ModuleDocFragment:
    """Address, credentials and TLS settings of the host's BMC."""

    DOCUMENTATION = r"""
options:
  bmc:
    description:
      - The host's BMC, reached over Redfish (HTTPS, basic authentication) from where the module
        runs - the node itself for remote hosts, the controller for local-connection hosts.
      - Left out, C(exemplar.tune.facts), C(layer) and C(restore) fill it on the controller
        from the inventory variables C(exemplar_bmc_address), C(exemplar_bmc_user),
        C(exemplar_bmc_password) (Ansible Vault, or the controller's environment variable
        C(EXEMPLAR_BMC_PASSWORD)), C(exemplar_bmc_ca) and C(exemplar_bmc_validate_certs), as
        the C(exemplar.tune.bmc) lookup does; the other modules take it from that lookup.
      - Absent, or without C(address), means no BMC is configured.
    type: dict
    suboptions:
      address:
        description: C(host), C(host:port) or C(https://host[:port]); C(http://) only when
          written explicitly. Credentials in the address are refused.
        type: str
      user:
        description: BMC user name.
        type: str
      password:
        description: BMC password; never logged, never returned, never written to a journal.
        type: str
      ca:
        description: CA bundle (PEM) that signs the BMC's certificate; only it is trusted then.
        type: path
      validate_certs:
        description: Verify the BMC's TLS certificate. Switch off only for a lab BMC.
        type: bool
        default: true
      timeout:
        description: Seconds to wait for each Redfish request.
        type: int
        default: 15
"""
