"""Action of ``exemplar.tune.layer``: ``layers``, ``profile``, ``profile_candidates``,
``profile_by_arch``, ``variables``, ``run_id``, ``sysroot``, ``bmc`` and ``claim`` from the
host when the task leaves them out (see ``plugin_utils.host_options``)."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.plugin_utils.host_options import HostOptionsAction


class ActionModule(HostOptionsAction):
    """Runs ``exemplar.tune.layer``."""

    # layers first: the knob variables are those of the layers the call works on
    OPTIONS = ("layers", "profile", "profile_candidates", "profile_by_arch", "variables",
               "run_id", "sysroot", "bmc", "claim")
