"""fabric-layer facts: InfiniBand/RoCE devices and ports, and the NCCL settings jobs inherit.

``infiniband`` reads ``/sys/class/infiniband``; ``nccl_conf`` resolves the NCCL_* settings
(environment > ``$NCCL_CONF_FILE`` or ``$HOME/.nccl.conf`` > ``/etc/nccl.conf``).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.infiniband import (
    IB_CLASS,
    read_ib_devices,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.nccl_conf import (
    ENVIRONMENT,
    conf_paths,
    read_nccl_config,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def _ib_facts(root: Sysroot, sheet: FactSheet) -> None:
    source = root.display(IB_CLASS)
    errors: list[HostStateError] = []
    try:
        devices = read_ib_devices(root, errors)
    except HostStateError as exc:
        errors.append(exc)
        devices = None
    for exc in errors:
        sheet.error("ib_devices", exc)
    sheet.put("ib_devices", devices, source)
    sheet.put("present", bool(devices), source)


def _nccl_facts(root: Sysroot, sheet: FactSheet) -> None:
    paths = conf_paths(root.environ())
    errors: list[HostStateError] = []
    conf = read_nccl_config(root, errors)
    for exc in errors:
        sheet.error("nccl_settings", exc)
    sheet.put("nccl_settings", conf["effective"], [ENVIRONMENT, *paths])
    sheet.put("nccl_files", conf["files"], paths)
    sheet.put("nccl_suspicious_keys", conf["suspicious_keys"], paths)


def gather(root: Sysroot) -> dict[str, Any]:
    """Facts of the fabric layer (see module docstring)."""
    sheet = FactSheet()
    _ib_facts(root, sheet)
    _nccl_facts(root, sheet)
    return sheet.result()
