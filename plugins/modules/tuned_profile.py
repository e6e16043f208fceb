#!/usr/bin/python
"""exemplar.tune.tuned_profile: switch TuneD's active profile, journaled."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tuned_profile
short_description: Switch the active TuneD profile, with journal and restore
description:
  - On a live host (C(sysroot=/)) reads the active profile with C(tuned-adm active) and, when
    it differs, runs C(tuned-adm profile <profile>); the journal records
    C(tuned-adm profile <previous>) as the undo command. TuneD keeps running - it is never
    stopped or killed, so the settings of the new profile take over at once.
  - With a sysroot no command is run - the module writes C(/etc/tuned/active_profile)
    (C(<profile>)) and C(/etc/tuned/profile_mode) (C(manual)) as C(tuned-adm) would.
  - The profile must exist (in C(/etc/tuned) or C(/usr/lib/tuned)) before it is selected;
    write a child profile first with M(exemplar.tune.managed_file).
version_added: "0.1.0"
author: exemplar-tune maintainers (@exemplar-tune)
options:
  profile:
    description: Name of the profile to make active (several names separated by spaces).
    type: str
    required: true
extends_documentation_fragment:
  - exemplar.tune.attributes.changes
  - exemplar.tune.knob
"""

EXAMPLES = r"""
- name: Switch to the child profile that drops force_latency
  exemplar.tune.tuned_profile:
    profile: accelerator-performance-no-force-latency
    layer: cpu
    knob: tuned_profile
    run_id: "{{ exemplar_run_id }}"
"""

RETURN = r"""
previous:
  description: The active profile(s) before the switch (null when none was active).
  returned: always
  type: str
changes:
  description: The profile switch (live) or the files written (sysroot), before and after.
  returned: always
  type: list
  elements: dict
"""


from ansible_collections.exemplar.tune.plugins.module_utils.glue.bytecode_cache import (
    use_bytecode_cache,
)

use_bytecode_cache()  # the collection's imports below: compiled once, cached on the host

from ansible_collections.exemplar.tune.plugins.module_utils.glue.knob_module import (
    knob_module,
    run_knob,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
    Change,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.tuned_switch import (
    active_profile,
    plan_switch,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    NotSupported,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.tuned import (
    find_profile,
    parse_active_profile,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def main() -> None:
    """Module entry point."""
    module = knob_module({"profile": {"type": "str", "required": True}})
    params = module.params
    profile = " ".join(params["profile"].split())
    previous: list[str | None] = [None]

    def plan(root: Sysroot) -> list[Change]:
        names = parse_active_profile(profile, "option profile")
        if not names:
            raise ParseError("option profile", params["profile"], "no profile name")
        if not module.check_mode:
            missing = [name for name in names if find_profile(root, name) is None]
            if missing:
                raise NotSupported(root.display(f"etc/tuned/{missing[0]}/tuned.conf"),
                                   "profile not found; write it before switching to it")
        changes = plan_switch(root, names)
        previous[0] = (changes[-1].current or None) if root.live else active_profile(root)
        return changes

    run_knob(module, plan, previous=lambda: previous[0])


if __name__ == "__main__":
    main()
