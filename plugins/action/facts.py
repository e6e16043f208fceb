"""Action of ``exemplar.tune.facts``: ``sysroot``, ``bmc`` and ``layers`` from the host when the
task leaves them out (see ``plugin_utils.host_options``)."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.plugin_utils.host_options import HostOptionsAction


class ActionModule(HostOptionsAction):
    """Runs ``exemplar.tune.facts``."""

    OPTIONS = ("sysroot", "bmc", "layers")
