"""A host's hardware identity - CPU architecture, and which NVIDIA GPUs and how many - and the
profile it calls for.

The GPUs are named by their PCI device ID (``/sys/bus/pci/devices/*/device``), not by
nvidia-smi, so the identity holds when the driver or a GPU does not answer. IDs from the PCI ID
repository (pci-ids.ucw.cz, vendor 10de; the H100/H200 IDs also in NVIDIA's gpu-admin-tools
``gpu/devid_names.py``). A profile declares the identity it is for in its ``match`` block
(``{gpu: H200, arch: x86_64}``); :func:`choose_profile` takes the candidate that matches the
most keys, so a generic profile (``match: {}``) serves the GPUs no profile names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.hypervisor import read_arch
from ansible_collections.exemplar.tune.plugins.module_utils.readers.pci import list_gpus
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

GPU_PRODUCTS = {  # PCI device ID (vendor 0x10de) -> product
    **dict.fromkeys((0x2313, 0x2321, 0x2330, 0x2331, 0x2336, 0x2337, 0x2338, 0x2339, 0x233D),
                    "H100"),
    **dict.fromkeys((0x2335, 0x233B), "H200"),
    0x2901: "B200",
    0x2941: "GB200",
    **dict.fromkeys((0x31C2, 0x31C3), "GB300"),
}
UNKNOWN = "unknown"  # NVIDIA GPUs whose ID no entry names


def identity(arch: str | None, devices: Iterable[str]) -> dict[str, Any]:
    """``{arch, gpu, gpu_count, gpu_devices}`` from the architecture and the NVIDIA GPUs'
    device IDs (``"0x2335"``); ``gpu`` is the most common product, :data:`UNKNOWN` when no
    entry names it, ``None`` without NVIDIA GPUs."""
    ids = [int(d, 16) for d in devices]
    products = Counter(GPU_PRODUCTS.get(i, UNKNOWN) for i in ids)
    return {"arch": arch, "gpu": products.most_common(1)[0][0] if products else None,
            "gpu_count": len(ids), "gpu_devices": sorted({f"10de:{i:04x}" for i in ids})}


def read_identity(root: Sysroot) -> dict[str, Any]:
    """:func:`identity` of the host at ``root`` (``/proc/cpuinfo`` or ``kernel/arch``, PCI)."""
    try:
        arch = read_arch(root)
    except HostStateError:  # unreadable: matches no arch key
        arch = None
    return identity(arch, [gpu.device for gpu in list_gpus(root)])


def identity_from_facts(facts: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`identity` from a host's facts (the vm layer's arch, the cpu layer's GPUs)."""
    gpus = (facts.get("cpu") or {}).get("gpus_pci") or []
    return identity((facts.get("vm") or {}).get("arch"), [g["device"] for g in gpus])


def choose_profile(candidates: list[dict[str, Any]],
                   ident: Mapping[str, Any]) -> dict[str, Any] | None:
    """The candidate whose ``match`` keys all equal the identity's, the most keys first (the
    first listed among equals); ``None`` when none matches."""
    fitting = [c for c in candidates
               if all(ident.get(key) == value for key, value in (c.get("match") or {}).items())]
    return max(fitting, key=lambda c: len(c.get("match") or {}), default=None)


def describe(ident: Mapping[str, Any]) -> str:
    """``8x H200 (10de:2335), x86_64`` / ``no NVIDIA GPU, aarch64``."""
    if not ident["gpu_count"]:
        gpus = "no NVIDIA GPU"
    else:
        name = "unknown NVIDIA GPU" if ident["gpu"] == UNKNOWN else ident["gpu"]
        gpus = f"{ident['gpu_count']}x {name} ({', '.join(ident['gpu_devices'])})"
    return f"{gpus}, {ident['arch'] or 'unknown architecture'}"
