"""What each Xid is called and what NVIDIA says to do about it.

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog" (Ampere and newer GPUs),
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, table "Xids": per Xid only
the Description column (``name``) and the "Resolution Bucket (Immediate Action)" column
(``bucket``). Rows marked "Unused" on A100/H100/B100/GB200 are left out; Xids 162-172 have no
bucket in the table. An Xid that is not here has name ``None`` and action ``INVESTIGATE``.

The driver may state the action itself: Xid 154 "GPU recovery action changed from 0x0 (None) to
0x1 (GPU Reset Required)" (format string in NVIDIA/open-gpu-kernel-modules
``src/nvidia/src/kernel/gpu/gpu.c``, names from ``_gpuRecoveryActionName``, codes from
``NV2080_CTRL_GPU_RECOVERY_ACTION_*`` in ``ctrl2080gpu.h``). The catalog row for Xid 154 says it
"summarizes the recovery action required for other Xids"; that stated action wins over the
bucket.

Buckets map to the few actions an operator takes (:data:`ACTIONS`): RESTART_APP, IGNORE,
RESET_GPU (also WORKFLOW_XID_48 "solo: reset", and the NVLink workflows "reset the GPU or reboot
the node"), REBOOT (RESTART_BM: bare-metal power cycle; RESTART_VM), HARDWARE (CHECK_MECHANICALS,
CONTACT_SUPPORT), INVESTIGATE (UPDATE_SWFW, CHECK_UVM, no bucket, unknown Xid). WORKFLOW_XID_45
("solo: restart Fabric Manager, else follow the other Xid": a teardown after another error) maps to
RESTART_APP.
"""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.readers.lazy_pattern import LazyPattern

NONE, IGNORE, RESTART_APP, INVESTIGATE = "NONE", "IGNORE", "RESTART_APP", "INVESTIGATE"
RESET_GPU, DRAIN_P2P, DRAIN_AND_RESET = "RESET_GPU", "DRAIN_P2P", "DRAIN_AND_RESET"
RECOVER_IMEX_DOMAIN, REBOOT, HARDWARE = "RECOVER_IMEX_DOMAIN", "REBOOT", "HARDWARE"
ACTIONS = (NONE, IGNORE, RESTART_APP, INVESTIGATE, RESET_GPU, DRAIN_P2P, DRAIN_AND_RESET,
           RECOVER_IMEX_DOMAIN, REBOOT, HARDWARE)

# What the operator does, per action (one line, used in check fixes).
ACTION_TEXT = {
    NONE: "none: the driver reports no recovery action needed",
    IGNORE: "none required by NVIDIA's catalog (informational)",
    RESTART_APP: "restart the application; debug it if it recurs (cuda-gdb, compute-sanitizer)",
    INVESTIGATE: "look the Xid up in NVIDIA's Xid catalog and investigate",
    RESET_GPU: "drain the node, stop GPU processes, reset the GPU (nvidia-smi -r); reboot if "
               "that fails, replace the GPU if it recurs",
    DRAIN_P2P: "drain peer-to-peer (NVLink) work from the GPU, then reset it",
    DRAIN_AND_RESET: "drain the node, then reset the GPU (nvidia-smi -r)",
    RECOVER_IMEX_DOMAIN: "recover the IMEX domain (restart the IMEX daemons of the NVLink domain)",
    REBOOT: "drain and power-cycle the node (a reboot at least)",
    HARDWARE: "drain the node and have the hardware checked (seating, power cables, RMA)",
}

BUCKET_ACTION = {
    "RESTART_APP": RESTART_APP, "IGNORE": IGNORE, "WORKFLOW_XID_45": RESTART_APP,
    "RESET_GPU": RESET_GPU, "WORKFLOW_XID_48": RESET_GPU, "WORKFLOW_NVLINK_ERR": RESET_GPU,
    "WORKFLOW_NVLINK5_ERR": RESET_GPU, "RESTART_BM": REBOOT, "RESTART_VM": REBOOT,
    "CHECK_MECHANICALS": HARDWARE, "CONTACT_SUPPORT": HARDWARE,
    "UPDATE_SWFW": INVESTIGATE, "CHECK_UVM": INVESTIGATE, "XID_154": INVESTIGATE,
}

_CE = "Copy Engine Exception"
_APP = "RESTART_APP"
# Xid -> (Description, Resolution Bucket (Immediate Action)); None: no bucket in the table.
CATALOG: dict[int, tuple[str, str | None]] = {
    8: ("GPU stopped processing", _APP),
    11: ("Invalid or corrupted push buffer stream", _APP),
    13: ("Graphics Engine Exception", _APP),
    25: ("Invalid or illegal push buffer stream", _APP),
    31: ("GPU memory page fault", _APP),
    32: ("Invalid or corrupted push buffer stream", _APP),
    37: ("Driver firmware error", "IGNORE"),
    38: ("Driver firmware error", "IGNORE"),
    39: (_CE, _APP), 40: (_CE, _APP), 41: (_CE, _APP),
    43: ("GPU stopped processing", "IGNORE"),
    44: ("Graphics Engine fault during context switch", "IGNORE"),
    45: ("Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45"),
    46: ("GPU stopped processing", "RESET_GPU"),
    48: ("Double Bit ECC Error", "WORKFLOW_XID_48"),
    54: ("Auxiliary power is not connected to the GPU board", "CHECK_MECHANICALS"),
    60: ("Video processor exception", _APP),
    62: ("Internal micro-controller halt", "RESET_GPU"),
    63: ("GPU memory remapping event", "IGNORE"),
    64: ("GPU memory remapping failure", "RESET_GPU"),
    66: ("Illegal access by driver", "IGNORE"),
    67: ("Illegal access by driver", "IGNORE"),
    68: ("NVDEC0 Exception", _APP),
    69: ("Graphics Engine class error", _APP),
    74: ("NVLINK Error", "WORKFLOW_NVLINK_ERR"),
    78: ("vGPU Start Error", "UPDATE_SWFW"),
    79: ("GPU has fallen off the bus", "RESTART_BM"),
    80: ("Corrupted data sent to GPU", _APP),
    82: ("NVJPG0 Error", _APP),
    86: ("OFA Exception", _APP),
    92: ("High single-bit ECC error rate", "IGNORE"),
    93: ("Non-fatal violation of provisioned InfoROM wear limit", "IGNORE"),
    94: ("Contained memory error", _APP),
    95: ("Uncontained memory error", "RESET_GPU"),
    106: ("SMBPBI Test Message", "IGNORE"),
    107: ("SMBPBI Test Message Silent", "IGNORE"),
    109: ("Context Switch Timeout Error", "RESET_GPU"),
    110: ("Security Fault Error", "RESET_GPU"),
    119: ("GSP RPC Timeout", "RESET_GPU"),
    120: ("GSP Error", "RESET_GPU"),
    121: ("C2C Error", "IGNORE"),
    136: ("Link Training Failed", "RESET_GPU"),
    137: ("NVLink Privilege Error", "IGNORE"),
    139: ("OFA1 Error", _APP),
    140: ("ECC Unrecovered Error", "RESET_GPU"),
    141: ("CUDA Fast Path Error", "IGNORE"),
    142: ("NVENC3 Error", "CONTACT_SUPPORT"),
    143: ("GPU Initialization Error", "RESET_GPU"),
    144: ("NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR"),
    145: ("NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR"),
    146: ("NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR"),
    147: ("NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR"),
    148: ("NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR"),
    149: ("NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR"),
    150: ("NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR"),
    151: ("Key rotation Error", "RESTART_VM"),
    154: ("GPU Recovery Action Changed", "XID_154"),
    155: ("NVLINK: SW Defined Error", "RESET_GPU"),
    156: ("Resource Retirement Event", "RESET_GPU"),
    157: ("Resource Retirement Failure", "IGNORE"),
    158: ("GPU Fatal Timeout", "RESET_GPU"),
    159: ("CHI Non-Data Error", "CHECK_UVM"),
    160: ("Channel Retirement Event", "IGNORE"),
    161: ("Channel Retirement Failure", "IGNORE"),
    162: ("Power Smoothing HW Circuitry capability reengaged", None),
    163: ("Power Smoothing HW Circuitry capability disengaged", None),
    164: ("Power Smoothing HW Circuitry low lifetime reached", None),
    165: ("Power Smoothing HW Circuitry lifetime exhausted", None),
    167: ("PCIE_FATAL_TIMEOUT", None),
    168: ("Errors found in WPR (write protected region)", None),
    169: ("Internal micro-controller halt", None),
    171: ("Uncorrectable DRAM error (details of Xid 48)", None),
    172: ("Uncorrectable SRAM error (details of Xid 48)", None),
}
CATALOG.update({n: (f"NVDEC{i} Error", _APP) for i, n in enumerate((83, 84, 88, 89), 1)})
CATALOG.update({n: (f"NVDEC{i} Error", _APP) for i, n in enumerate((96, 97, 98), 5)})
CATALOG.update({n: (f"NVJPG{n - 98} Error", _APP) for n in range(99, 106)})
CATALOG.update({n: (f"CE{i}: Unknown Error", _APP) for i, n in
                zip((3, 4, 5, 6, 7, 8, 9), (70, 71, 72, 75, 76, 77, 85), strict=True)})
CATALOG.update({n: (f"CE{n - 116}: Unknown Error", _APP) for n in range(126, 136)})

# Xid 154: "GPU recovery action changed from 0x%x (%s) to 0x%x (%s)" (compiled at first use).
_RECOVERY = LazyPattern(r"recovery action changed from 0x[0-9a-fA-F]+ \([^)]*\) "
                        r"to 0x(?P<code>[0-9a-fA-F]+) \((?P<name>[^)]*)\)")
_RECOVERY_CODES = {0: NONE, 1: RESET_GPU, 2: REBOOT, 3: DRAIN_P2P, 4: DRAIN_AND_RESET,
                   5: RECOVER_IMEX_DOMAIN}
_RECOVERY_NAMES = {"None": NONE, "GPU Reset Required": RESET_GPU, "Node Reboot Required": REBOOT,
                   "Drain P2P": DRAIN_P2P, "Drain and Reset": DRAIN_AND_RESET,
                   "Recover IMEX Domain": RECOVER_IMEX_DOMAIN}


def xid_name(xid: int | None) -> str | None:
    """The catalog's description of ``xid`` (``None`` when it is not in the catalog)."""
    return CATALOG[xid][0] if xid in CATALOG else None


def catalog_bucket(xid: int | None) -> str | None:
    """The catalog's immediate-action bucket of ``xid`` (``None``: none or unknown Xid)."""
    return CATALOG[xid][1] if xid in CATALOG else None


def bucket_action(bucket: str | None) -> str:
    """The operator action (:data:`ACTIONS`) of a catalog bucket."""
    return BUCKET_ACTION.get(bucket or "", INVESTIGATE)


def recovery_stated(text: str) -> str | None:
    """What an Xid 154 message says the action is, as the driver words it (``0x2 (Node Reboot
    Required)``); ``None`` when ``text`` states none."""
    match = _RECOVERY.search(text)
    return f"0x{match.group('code')} ({match.group('name')})" if match else None


def driver_action(text: str) -> str | None:
    """The action an Xid 154 message states (``None`` when ``text`` states none).

    The numeric code decides (names have changed between drivers, e.g. "OS Reboot"); a code
    this table does not know falls back to the name, else ``INVESTIGATE``.
    """
    match = _RECOVERY.search(text)
    if not match:
        return None
    code = int(match.group("code"), 16)
    return _RECOVERY_CODES.get(code) or _RECOVERY_NAMES.get(match.group("name"), INVESTIGATE)
