#!/usr/bin/python
"""exemplar.tune.restore: put back everything a run recorded in the host journal."""

from __future__ import annotations

DOCUMENTATION = r"""
module: restore
short_description: Put back what a run changed, newest change first, byte for byte
description:
  - Reads the host-local journal of C(run_id) and restores every entry (optionally only those
    of some layers), newest first - previous file bytes and modes, absent files removed again,
    previous kernel attribute values, undo commands, previous BIOS attribute values (staged
    again through the BMC recorded in the journal, with the credentials of C(bmc); they take
    effect at the next reset, so C(reboot_required) is then true).
  - Idempotent - entries already restored (or already back in place) are skipped.
  - An entry that cannot be put back does not stop the others; the task then fails and lists
    what was not restored.
  - A knob that takes effect at the next boot (kernel arguments, BIOS settings) whose entries
    were put back is noted in C(/var/lib/exemplar-tune/pending-reboot.json) (change
    C(restore)); the layer's C(pending_reboot) fact lists it until the host reboots.
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  run_id:
    description: The run to restore.
    type: str
    required: true
  layers:
    description: Only restore entries of these layers (default all).
    type: list
    elements: str
  sysroot:
    description:
      - Directory that mirrors C(/) of the host (the journal lives inside it).
      - Left out, the host variable C(exemplar_sysroot), else C(/).
    type: path
    default: /
  missing_ok:
    description: Succeed with nothing to do when this host has no journal for the run.
    type: bool
    default: true
extends_documentation_fragment:
  - exemplar.tune.attributes.changes
  - exemplar.tune.bmc
  - exemplar.tune.claim
notes:
  - Supports check mode and diff mode.
"""

EXAMPLES = r"""
- name: Put back run 20261129T101500-ab12
  exemplar.tune.restore:
    run_id: 20261129T101500-ab12

- name: Put back a run that also staged BIOS settings through the BMC
  exemplar.tune.restore:
    run_id: 20261129T101500-ab12
    bmc: "{{ lookup('exemplar.tune.bmc') }}"
"""

RETURN = r"""
restored:
  description: Journal sequence numbers restored (or found already in place).
  returned: always
  type: list
  elements: int
failed:
  description: Entries that could not be put back, with the reason.
  returned: always
  type: list
  elements: dict
reboot_required:
  description: True when BIOS attributes were staged again (they apply at the next reset).
  returned: always
  type: bool
pending_reboot:
  description: Knobs taking effect at the next boot (C(vm.cmdqv_params)) whose changes were
    put back; noted in C(/var/lib/exemplar-tune/pending-reboot.json) until the host reboots
    (empty in check mode).
  returned: always
  type: list
  elements: str
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.exemplar.tune.plugins.module_utils.glue.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.knobs.engine import restore_run
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.host_claim import (
    CLAIM_OPTION,
    HostClaimed,
    claimed,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.journal import Journal
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bios import bmc_connector
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bmc import BMC_OPTION, BmcConfig
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def _bios_staged(entries: list[dict[str, Any]], result: dict[str, Any]) -> bool:
    """True when a BIOS (Redfish) entry was really put back (not only found in place)."""
    labels = {e["path"] for e in entries if e["kind"] == "redfish"}
    return any(d["before_header"] in labels for d in result["diff"])


def main() -> None:
    """Module entry point."""
    module = AnsibleModule(argument_spec={
        "run_id": {"type": "str", "required": True},
        "layers": {"type": "list", "elements": "str"},
        "sysroot": {"type": "path", "default": "/"},
        "missing_ok": {"type": "bool", "default": True},
        "bmc": dict(BMC_OPTION),
        "claim": CLAIM_OPTION,
    }, supports_check_mode=True)
    params = module.params
    try:
        journal = Journal(Sysroot(params["sysroot"]), params["run_id"])
        if not journal.exists():
            if params["missing_ok"]:
                module.exit_json(changed=False, restored=[], failed=[], journal=None,
                                 reboot_required=False, pending_reboot=[])
            module.fail_json(msg=f"no journal for run {params['run_id']} at {journal.display}")
        entries = [e for e in journal.load()["entries"]
                   if not params["layers"] or e["layer"] in params["layers"]]
        with claimed(journal.root, params["claim"], module.check_mode):
            result = restore_run(journal.root, journal, entries, module.check_mode,
                                 connect=bmc_connector(BmcConfig.from_params(params["bmc"])))
    except HostClaimed as exc:
        module.fail_json(msg=str(exc), claimed_by=exc.holder)
    except HostStateError as exc:
        module.fail_json(msg=str(exc))
    for warning in result["warnings"]:
        module.warn(warning)  # the pending-reboot record could not be written
    output = {"changed": result["changed"], "diff": result["diff"],
              "restored": result["restored"], "failed": result["failed"],
              "journal": journal.display,
              "reboot_required": _bios_staged(entries, result),
              "pending_reboot": result["pending_reboot"]}
    if result["failed"]:
        paths = ", ".join(f"{f['path']} ({f['error']})" for f in result["failed"])
        module.fail_json(msg=f"could not restore: {paths}", **output)
    module.exit_json(**output)


if __name__ == "__main__":
    main()
