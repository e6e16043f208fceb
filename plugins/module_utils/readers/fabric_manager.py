"""NVIDIA Fabric Manager: the NVSwitches on the host's PCI bus that need it, and its service.

HGX and DGX baseboards with NVSwitches (A100, H100/H200, B200) show them on the host's PCI bus
as bridges of class ``0x068000``, vendor ``0x10de`` (device ``0x22a3`` on HGX H100/H200: the HGX
H200 inventory in openfabric-systems/simllm, and the nvidia-nvswitch driver's probe line in
NVIDIA/nvtrust#124). There the ``nvidia-fabricmanager`` service must run before the GPUs can use
NVLink (NVIDIA's Fabric Manager user guide); the GPUs' fabric state stays ``Completed`` after
the daemon dies, so the service itself is read. GB200/GB300 NVL compute trays keep their
switches in switch trays their PCI bus never shows: no Fabric Manager runs on them, and the
GPUs' fabric registration is the signal (``gpu.fabric-state``).

The service: ``systemctl show`` of the unit (systemctl(1): ``Key=Value`` lines, in systemd's own
order); a unit that is not installed shows ``LoadState=not-found``.
"""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.pci import (
    NVIDIA,
    list_pci_devices,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.systemd import (
    parse_systemctl_show,
    systemd_booted,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import COMMANDS, Sysroot

NVSWITCH_CLASSES = ("0x0680",)  # "Bridge" (other), as NVSwitches show themselves
COMMAND = "systemctl-show-fabricmanager.txt"
SOURCE = " ".join(COMMANDS[COMMAND])
STATES = {"LoadState": "load", "ActiveState": "active", "SubState": "sub", "Result": "result"}


def list_nvswitches(root: Sysroot) -> list[str]:
    """PCI addresses of the NVSwitches on the host's bus (none on an NVL compute tray)."""
    return [d.bdf for d in list_pci_devices(root, vendors=(NVIDIA,), classes=NVSWITCH_CLASSES)]


def parse_unit_state(text: str, source: str = SOURCE) -> dict[str, str | None]:
    """``{"load", "active", "sub", "result"}`` of one unit's ``systemctl show``; a property the
    output lacks is ``None``; ``ParseError`` without ``LoadState``."""
    shown = parse_systemctl_show(text)
    if "LoadState" not in shown:
        raise ParseError(source, text, "no LoadState= line")
    return {key: shown.get(prop) for prop, key in STATES.items()}


def read_fabric_manager(root: Sysroot) -> dict[str, str | None] | None:
    """The Fabric Manager unit's state; ``None`` on a live host whose init is not systemd
    (nothing to ask), ``NotSupported`` without systemctl or a capture of it."""
    if root.live and not systemd_booted(root):
        return None
    out = root.command(COMMAND).checked()
    return parse_unit_state(out.stdout, out.source)
