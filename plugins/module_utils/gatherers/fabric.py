"""fabric-layer facts: InfiniBand/RoCE devices and ports, and the NCCL settings jobs inherit.

``infiniband`` reads ``/sys/class/infiniband``, each port's error counters included (since they
were last cleared, usually boot). With ``counter_window`` seconds the counters are read again
after that long and each port gets ``counters_delta``, what its counters gained meanwhile
(``counter_window_s`` records the window); ``gpu_nic_topology`` is ``nvidia-smi topo -m``'s view
of how each GPU reaches each NIC; ``gpudirect`` what GPUDirect RDMA can use (nvidia_peermem or
dma-buf); ``pcie_paths`` the GPUs and RDMA NICs with the bridges above them and their ACS and
ATS bits (``lspci -vvv``, run only where the PCI bus shows a GPU or NIC);
``link_events`` the NICs' link downs and ups in the kernel log; ``nccl_conf`` resolves
the NCCL_* settings (environment > ``$NCCL_CONF_FILE`` or ``$HOME/.nccl.conf`` >
``/etc/nccl.conf``).
"""

from __future__ import annotations

import time
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers import (
    gpu_topology,
    ibstat,
    link_events,
    lsmod,
    lspci,
    pci,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    CommandFailed,
    HostStateError,
    NotSupported,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.infiniband import (
    IB_CLASS,
    read_counters,
    read_ib_devices,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.nccl_conf import (
    ENVIRONMENT,
    conf_paths,
    read_nccl_config,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")


def _ib_devices(root: Sysroot, errors: list[HostStateError]
                ) -> tuple[list[dict[str, Any]] | None, str]:
    """The RDMA devices and where they were read: ``/sys/class/infiniband``, or in a capture
    without it, its ibstat output (a sos report keeps ibstat's, never the class directory).
    No class directory and no ibstat output is no device, except in a sos report: unknown."""
    if root.live or root.exists(IB_CLASS):
        return read_ib_devices(root, errors), root.display(IB_CLASS)
    try:
        out = root.command(ibstat.SOURCE)
    except NotSupported as exc:
        if root.sos_report() is None:
            return [], root.display(IB_CLASS)
        errors.append(NotSupported(root.display(IB_CLASS), "not in a sos report; "
                                   f"{exc.path}: {exc.reason}"))
        return None, root.display(IB_CLASS)
    devices = ibstat.devices_from_ibstat(out.stdout)
    if out.rc and not devices:
        errors.append(CommandFailed(out.source, out.rc, out.stderr or out.stdout))
        return None, out.source
    return devices, out.source


def _ib_facts(root: Sysroot, sheet: FactSheet, window: float) -> None:
    errors: list[HostStateError] = []
    try:
        devices, source = _ib_devices(root, errors)
    except HostStateError as exc:
        errors.append(exc)
        devices, source = None, root.display(IB_CLASS)
    if devices and window > 0 and source == root.display(IB_CLASS):
        _deltas(root, devices, window, errors)
    for exc in errors:
        sheet.error("ib_devices", exc)
    sheet.put("ib_devices", devices, source)
    sheet.put("present", bool(devices), source)
    sheet.put("counter_window_s", window if devices and window > 0 else None, source)


def _deltas(root: Sysroot, devices: list[dict[str, Any]], window: float,
            errors: list[HostStateError]) -> None:
    """Each port's ``counters_delta``: its error counters read again ``window`` s later, less
    the first reading (a counter that went down was cleared meanwhile: its new value)."""
    time.sleep(window)
    for device in devices:
        for port in device["ports"]:
            rel = f"{IB_CLASS}/{device['name']}/ports/{port['port']}"
            now = read_counters(root, rel, errors)
            port["counters_delta"] = {name: value - port["counters"][name]
                                      if value >= port["counters"].get(name, 0) else value
                                      for name, value in now.items()}


def _gpudirect_facts(root: Sysroot, sheet: FactSheet) -> None:
    """``gpudirect``: what GPUDirect RDMA can go through. ``peermem`` (a peer-memory module is
    loaded: :func:`_peermem`), ``open_module`` (the driver is NVIDIA's
    open kernel module: ``/proc/driver/nvidia/version``; ``None`` unread), ``kernel``
    (``/proc/sys/kernel/osrelease``) and ``dmabuf_move_notify`` (``CONFIG_DMABUF_MOVE_NOTIFY``
    in ``/boot/config-<kernel>``; ``None`` unread): dma-buf needs the last three."""
    version = root.read_optional("proc/driver/nvidia/version")
    kernel = root.read_optional("proc/sys/kernel/osrelease")
    config = root.read_optional(f"boot/config-{kernel}") if kernel else None
    peermem, where = _peermem(root)
    sheet.put("gpudirect", {
        "peermem": peermem,
        "open_module": None if version is None else "Open Kernel Module" in version,
        "kernel": kernel,
        "dmabuf_move_notify": None if config is None else
        "CONFIG_DMABUF_MOVE_NOTIFY=y" in config.splitlines(),
    }, where)


def _peermem(root: Sysroot) -> tuple[bool | None, str]:
    """Whether a peer-memory module (``nvidia_peermem``, or MOFED's older ``nv_peer_mem``)
    is loaded, and where that was read: ``/sys/module``, or in a capture without it, its
    lsmod output; ``None`` (unknown) in a sos report that holds neither."""
    if root.live or root.exists("sys/module"):
        return (any(root.exists(f"sys/module/{name}") for name in PEERMEM_MODULES),
                root.display("sys/module/nvidia_peermem"))
    try:
        out = root.command(lsmod.SOURCE)
    except NotSupported:
        return (None if root.sos_report() is not None else False), root.display("sys/module")
    return bool(lsmod.loaded_modules(out.stdout) & set(PEERMEM_MODULES)), out.source


def _lspci_wanted(root: Sysroot) -> bool:
    """Whether to read ``lspci -vvv``: where the PCI bus shows a GPU or an RDMA NIC, and in a
    capture without the bus (command outputs only), whatever it holds."""
    if pci.list_pci_devices(root, vendors=(pci.NVIDIA, pci.MELLANOX),
                            classes=pci.GPU_CLASSES + pci.NIC_CLASSES):  # one walk of the bus
        return True
    return not root.live and not root.exists(pci.PCI_DEVICES)


def _nccl_facts(root: Sysroot, sheet: FactSheet) -> None:
    paths = conf_paths(root.environ())
    errors: list[HostStateError] = []
    conf = read_nccl_config(root, errors)
    for exc in errors:
        sheet.error("nccl_settings", exc)
    sheet.put("nccl_settings", conf["effective"], [ENVIRONMENT, *paths])
    sheet.put("nccl_files", conf["files"], paths)
    sheet.put("nccl_suspicious_keys", conf["suspicious_keys"], paths)


def gather(root: Sysroot, counter_window: float = 0.0) -> dict[str, Any]:
    """Facts of the fabric layer (see module docstring)."""
    sheet = FactSheet()
    _ib_facts(root, sheet, counter_window)
    sheet.attempt_command("gpu_nic_topology", gpu_topology.SOURCE, gpu_topology.read_topology,
                          root)
    _gpudirect_facts(root, sheet)
    sheet.attempt_command("pcie_paths", lspci.SOURCE, lspci.read_pcie_paths, root,
                          wanted=_lspci_wanted(root))
    sheet.attempt_command("link_events", link_events.SOURCE, link_events.read_link_events, root)
    _nccl_facts(root, sheet)
    return sheet.result()
