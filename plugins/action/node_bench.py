"""Action of ``exemplar.tune.node_bench``: ``bench_command`` from the host's
``exemplar_node_bench_command``, and ``sysroot``, ``bmc`` and ``layers`` as for
``exemplar.tune.facts``, when the task leaves them out."""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.plugin_utils.host_options import HostOptionsAction


class ActionModule(HostOptionsAction):
    """Runs ``exemplar.tune.node_bench``."""

    OPTIONS = ("bench_command", "sysroot", "bmc", "layers")
