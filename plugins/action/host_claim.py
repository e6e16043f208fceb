"""Action of ``exemplar.tune.host_claim``: ``sysroot`` and ``claim`` from the host when the
task leaves them out (see ``plugin_utils.host_options``)."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.plugin_utils.host_options import HostOptionsAction


class ActionModule(HostOptionsAction):
    """Runs ``exemplar.tune.host_claim``."""

    OPTIONS = ("sysroot", "claim")
