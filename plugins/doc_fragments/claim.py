"""The ``claim`` option of the exemplar.tune modules that change a host."""

from __future__ import annotations


class ModuleDocFragment:
    """Which controller may change the host: the host's own claim file."""

    DOCUMENTATION = r"""
options:
  claim:
    description:
      - The controller's claim on this host, kept in C(/var/lib/exemplar-tune/claim.json)
        (inside C(sysroot)) so that one controller at a time changes the host, whatever machine
        or state directory it runs from. exemplar-tune sets it (host variable
        C(exemplar_claim)); a playbook run by hand leaves it out.
      - Given, the claim is taken before anything changes - the same C(token) refreshes it, a
        claim whose token is in C(replace) (its controller is gone) is replaced, and a claim of
        another controller fails the host with C(claimed_by) in the result, nothing changed.
      - Left out, the host is changed only when no controller has claimed it.
      - Not read or written in check mode.
    type: dict
    suboptions:
      token:
        description: The controller's random token.
        type: str
        required: true
      holder:
        description: Who claims it, shown to others - C(machine) (the controller's machine
          id), C(controller) (its host name), C(pid), C(created) (the pid's start time),
          C(command), C(started).
        type: dict
      release:
        description: Give the claim back when the task ends.
        type: bool
        default: false
      replace:
        description: Tokens of stale claims that may be replaced.
        type: list
        elements: str
"""
