#!/usr/bin/python
"""exemplar.tune.host_claim: take or give back a controller's claim on a host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: host_claim
short_description: Take or give back the claim that lets one exemplar-tune controller change a host
description:
  - The host keeps one claim, in C(/var/lib/exemplar-tune/claim.json), naming the controller
    that changes it now; M(exemplar.tune.layer) and M(exemplar.tune.restore) change nothing on
    a host another controller has claimed.
  - C(state=present) takes C(claim) for a controller whose work spans several runs (a measured
    experiment, a sweep) - it fails with C(claimed_by) when another controller holds the host.
  - C(state=absent) gives back the claim whose token is C(claim.token) or one of
    C(claim.replace) (C(exemplar-tune unlock) lists there the claims it found whose holders
    are gone); left without C(claim), it removes any claim.
version_added: "0.2.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  state:
    description: Take (C(present)) or give back (C(absent)) the claim.
    type: str
    choices: [present, absent]
    default: present
  sysroot:
    description:
      - Directory that mirrors C(/) of the host (the claim lives inside it).
      - Left out, the host variable C(exemplar_sysroot), else C(/).
    type: path
    default: /
extends_documentation_fragment:
  - exemplar.tune.claim
attributes:
  check_mode:
    description: Reports the claim it finds and what would be taken or given back; writes
      nothing.
    support: full
  diff_mode:
    description: Only the claim file changes; its holder is in C(claimed_by).
    support: none
  platform:
    description: Linux hosts (or a sysroot tree of one).
    platforms: posix
notes:
  - C(claim) is required with C(state=present).
"""

EXAMPLES = r"""
- name: Give back whatever claim the host holds (its controller is gone)
  exemplar.tune.host_claim:
    state: absent
"""

RETURN = r"""
claimed_by:
  description: The claim found on the host (its holder's fields), or null - for C(state=absent),
    the claim removed.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.host_claim import (
    CLAIM_OPTION,
    read_claim,
    release,
    take,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def main() -> None:
    """Module entry point."""
    module = AnsibleModule(argument_spec={
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "sysroot": {"type": "path", "default": "/"},
        "claim": CLAIM_OPTION,
    }, required_if=[("state", "present", ["claim"])], supports_check_mode=True)
    root, claim = Sysroot(module.params["sysroot"]), module.params["claim"]
    tokens = [claim["token"], *(claim["replace"] or [])] if claim else None
    try:
        current = read_claim(root)
        held = bool(current) and (tokens is None or current.get("token") in tokens)
        if module.params["state"] == "absent":
            if not module.check_mode:
                release(root, tokens)
            module.exit_json(changed=held, claimed_by=current if held else None)
        if module.check_mode:
            module.exit_json(changed=not held, claimed_by=current)
        take(root, claim)
    except HostStateError as exc:
        module.fail_json(msg=str(exc), claimed_by=getattr(exc, "holder", None))
    module.exit_json(changed=not current or current.get("token") != claim["token"],
                     claimed_by=current)


if __name__ == "__main__":
    main()
