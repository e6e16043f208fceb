"""Action of ``exemplar.tune.node_bench``: ``bench_command`` from the host's
``exemplar_node_bench_command`` when the task leaves it out."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.plugin_utils.host_options import HostOptionsAction


class ActionModule(HostOptionsAction):
    """Runs ``exemplar.tune.node_bench``."""

    OPTIONS = ("bench_command",)
