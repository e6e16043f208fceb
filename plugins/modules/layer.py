#!/usr/bin/python
"""exemplar.tune.layer: plan and apply every knob of one or more layers in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: layer
short_description: Apply (or audit) every knob of exemplar-tune layers on a host in one call
description:
  - Reads each layer's facts, plans every knob of the layer from the exemplar-tune profile
    (and the role variables in C(variables)), and applies the whole layer through the change
    engine - one journal, each change read back - all or nothing per layer - if any knob fails,
    every change of that layer on this host is put back, the error names the knob and the
    path, and the task fails once the other layers have been applied (or audited) - one
    layer's failure never hides the others; C(layers) gives each layer's status.
  - A knob whose setting the host does not have or cannot take (no bootloader configuration,
    the idle states of a virtual machine) is skipped with the reason in its C(not_applicable);
    the rest of its layer goes on.
  - The knobs are declared once, in the collection's knob registry
    (C(plugins/module_utils/knobs/<layer>.py)); the layer roles (M(exemplar.tune.cpu) ...) and
    the C(exemplar.tune.apply) playbook call this module for one layer, and
    C(exemplar.tune.audit) calls it once per host for every layer in check mode.
  - Results keep per-knob detail - C(knobs) lists each knob with C(changed), C(diff),
    C(changes) and C(reboot_required).
version_added: "0.2.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  layers:
    description:
      - Layers to apply, in the order given; the layer registry's layers with knobs.
      - Left out, the host variable C(exemplar_layers), else every layer with knobs.
    type: list
    elements: str
    choices: [gpu, vm, cpu, runtime, fabric]
  profile:
    description:
      - The exemplar-tune profile; each layer reads its own section.
      - Left out, the host variable C(exemplar_profile).
    type: dict
    default: {}
  profile_candidates:
    description:
      - Used when C(profile) is empty - candidate profiles, each with its C(match) block (keys
        C(gpu), the product, and C(arch)); the host's hardware identity (its NVIDIA GPUs by
        PCI device ID, its architecture) picks the one matching the most keys. This is how
        C(exemplar-tune apply|audit --profile auto) reaches a mixed fleet; the profile
        chosen is C(profile) in the result.
      - Left out, the host variable C(exemplar_profile_candidates).
    type: list
    elements: dict
  profile_by_arch:
    description:
      - Used when C(profile) and C(profile_candidates) are empty - candidate profiles by
        machine architecture (C(aarch64), C(x86_64); C(*) for any other).
      - Left out, the host variable C(exemplar_profile_by_arch).
    type: dict
  variables:
    description:
      - Role variables - knob switches (C(cpu_governor=false)), target overrides
        (C(cpu_governor_target)) and settings (C(cpu_housekeeping_units)). Unset ones take the
        registry's defaults; see each role's argument specification. A variable given by
        an earlier name (C(vm_require_cmdqv) for C(vm_require_cmdqv_target)) is still read,
        with a deprecation warning.
      - Left out, the knob variables of the layers named that the host sets (the
        C(exemplar.tune.knob_variables) lookup, read on the controller).
    type: dict
    default: {}
  knobs:
    description: Only these knobs (C(governor) or C(cpu.governor)); default every knob switched on.
    type: list
    elements: str
  run_id:
    description:
      - Names the host-local journal (C(/var/lib/exemplar-tune/journal/<run_id>.json)).
        Required unless in check mode.
      - Left out, the host variable C(exemplar_run_id).
    type: str
  sysroot:
    description:
      - Directory that mirrors C(/) of the host to change instead of the live system.
      - Left out, the host variable C(exemplar_sysroot), else C(/).
    type: path
    default: /
extends_documentation_fragment:
  - exemplar.tune.attributes.changes
  - exemplar.tune.bmc
  - exemplar.tune.claim
notes:
  - Supports check mode (plans and diffs every knob, writes nothing, journal included) and
    diff mode.
  - M(exemplar.tune.restore) puts a run back, newest change first, byte for byte (owners
    included); a regenerated bootloader configuration is regenerated again.
"""

EXAMPLES = r"""
- name: Apply the cpu layer as the profile says
  exemplar.tune.layer:
    layers: [cpu]
    profile: "{{ exemplar_profile }}"
    run_id: "{{ exemplar_run_id }}"

- name: Drift of every layer, one call per host
  exemplar.tune.layer:
    layers: [gpu, vm, cpu, runtime, fabric]
    profile: "{{ exemplar_profile }}"
  check_mode: true
  diff: true
"""

RETURN = r"""
knobs:
  description: One entry per knob planned - layer, knob, changed, not_applicable (why the knob
    does not apply to this host, or null), diff, changes (path, before, after),
    reboot_required, journal_entries.
  returned: always
  type: list
  elements: dict
layers:
  description: Per layer - layer, status (C(ok) or C(failed)), error (the failure's one line,
    or null), changed, reboot_required.
  returned: always
  type: list
  elements: dict
reboot_required:
  description: True when a change only takes effect after a reboot.
  returned: always
  type: bool
manual_actions:
  description: Actions outside this host (the hypervisor's) that a layer needs, each with
    C(check), C(where), C(summary) and C(steps); each summary is also a warning.
  returned: always
  type: list
  elements: dict
profile:
  description: The name of the profile the layers were planned with (the one chosen from
    C(profile_candidates), when given).
  returned: always
  type: str
journal:
  description: Path of the host journal (null in check mode).
  returned: always
  type: str
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.exemplar.tune.plugins.module_utils.glue.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.glue.knob_module import open_journal
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.engine import (
    LayerFailed,
    run_layer,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.host_claim import (
    CLAIM_OPTION,
    claimed,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.journal import Journal
from ansible_collections.exemplar.tune.plugins.module_utils.layers import ROLE_LAYERS, get_layer
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bios import bmc_connector
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bmc import BMC_OPTION, BmcConfig
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.hypervisor import read_arch
from ansible_collections.exemplar.tune.plugins.module_utils.readers.identity import (
    choose_profile,
    read_identity,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def main() -> None:
    """Module entry point."""
    module = AnsibleModule(argument_spec={
        "layers": {"type": "list", "elements": "str", "default": list(ROLE_LAYERS),
                   "choices": list(ROLE_LAYERS)},
        "profile": {"type": "dict", "default": {}},
        "profile_candidates": {"type": "list", "elements": "dict"},
        "profile_by_arch": {"type": "dict"},
        "variables": {"type": "dict", "default": {}},
        "knobs": {"type": "list", "elements": "str"},
        "run_id": {"type": "str"},
        "sysroot": {"type": "path", "default": "/"},
        "bmc": dict(BMC_OPTION),
        "claim": CLAIM_OPTION,
    }, supports_check_mode=True)
    params = module.params
    for old, new in _renamed(params["layers"], params["variables"]):
        module.deprecate(f"{old} is renamed {new}", version="0.3.0",
                         collection_name="exemplar.tune")
    root = Sysroot(params["sysroot"])
    done: list[dict[str, Any]] = []
    journal = None
    try:
        journal = open_journal(module, root)
        bmc = BmcConfig.from_params(params["bmc"])
        profile = params["profile"] or (
            choose_profile(params["profile_candidates"], read_identity(root)) or {}
            if params["profile_candidates"] else _by_arch(root, params["profile_by_arch"] or {}))
    except HostStateError as exc:
        module.fail_json(msg=str(exc), **_summary(done, journal))
    try:
        with claimed(root, params["claim"], module.check_mode):
            for name in params["layers"]:
                try:
                    done.append(run_layer(root, name, profile, params["variables"], journal,
                                          module.check_mode, params["knobs"], bmc,
                                          bmc_connector(bmc)))
                except HostStateError as exc:
                    done.append(_failed(name, exc))
    except HostStateError as exc:  # the claim: another controller's, or not writable
        module.fail_json(msg=str(exc), claimed_by=getattr(exc, "holder", None),
                         **_summary(done, journal))
    for warning in (w for layer in done for w in layer.get("warnings", [])):
        module.warn(warning)  # the pending-reboot record could not be written
    summary = {**_summary(done, journal), "profile": profile.get("name")}
    failed = [layer for layer in done if layer.get("status") == "failed"]
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more layer(s) failed: see layers)" if failed[1:] else ""
        module.fail_json(msg=first["error"] + more, knob=first["knob"], path=first["path"],
                         **summary)
    for action in summary["manual_actions"]:
        module.warn(f"{action['check']}: {action['summary']} (what to do on the "
                    f"{action['where']}: manual_actions in the result)")
    module.exit_json(**summary)


def _renamed(layers: list[str], variables: dict[str, Any]) -> list[tuple[str, str]]:
    """``(earlier name, name)`` of each knob variable given by a name it used to have."""
    return sorted({pair for name in layers for knob in get_layer(name).knobs
                   for pair in knob.renamed_in(variables)})


def _by_arch(root: Sysroot, candidates: dict[str, Any]) -> dict[str, Any]:
    """The candidate profile for this host's architecture (empty when none is given)."""
    if not candidates:
        return {}
    arch = read_arch(root)
    return candidates.get(arch) or candidates.get("*") or {}


def _failed(name: str, exc: HostStateError) -> dict[str, Any]:
    """A layer that could not be planned or applied (put back), as :func:`run_layer` reports
    one."""
    return {"layer": name, "status": "failed", "error": str(exc),
            "knob": exc.knob if isinstance(exc, LayerFailed) else None, "path": exc.path,
            "changed": False, "reboot_required": False, "knobs": [], "manual_actions": []}


def _summary(done: list[dict[str, Any]], journal: Journal | None) -> dict[str, Any]:
    knobs = [k for layer in done for k in layer["knobs"]]
    return {"changed": any(k["changed"] for k in knobs),
            "diff": [d for k in knobs for d in k["diff"]],
            "knobs": knobs,
            "layers": [{"layer": layer["layer"], "status": layer.get("status", "ok"),
                        "error": layer.get("error"), "changed": layer["changed"],
                        "reboot_required": layer["reboot_required"]} for layer in done],
            "reboot_required": any(layer["reboot_required"] for layer in done),
            "manual_actions": [a for layer in done for a in layer["manual_actions"]],
            "journal": journal.display if journal else None}


if __name__ == "__main__":
    main()
