"""IOMMU units, IOMMU groups and the IOMMU kernel parameters.

Files read:

* ``/sys/class/iommu/<unit>`` (``Documentation/ABI/testing/sysfs-class-iommu``); the unit name
  tells the driver: ``smmu3.0x<addr>`` (``arm-smmu-v3.c``), ``smmu.0x<addr>`` (``arm-smmu.c``),
  ``dmar<N>`` (Intel VT-d, ``intel/dmar.c``), ``ivhd<N>`` (AMD-Vi, ``amd/init.c``);
* ``/sys/kernel/iommu_groups/<N>/type`` (``Documentation/ABI/testing/sysfs-kernel-iommu_groups``:
  ``DMA``, ``DMA-FQ``, ``identity``, ``blocked``, ``unmanaged``), summarised as counts;
* ``/proc/cmdline`` parameters ``iommu=``, ``iommu.passthrough=``, ``iommu.strict=``,
  ``intel_iommu=``, ``amd_iommu=``, ``arm_smmu_v3.*`` (``kernel-parameters.txt``).
"""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

IOMMU_CLASS = "sys/class/iommu"
IOMMU_GROUPS = "sys/kernel/iommu_groups"
# unit-name prefix -> kind
UNIT_KINDS: tuple[tuple[str, str], ...] = (
    ("smmu3.", "smmu_v3"),
    ("smmu.", "smmu"),
    ("dmar", "intel_dmar"),
    ("ivhd", "amd_iommu"),
    ("amd-iommu", "amd_iommu"),
)
GROUP_TYPES = ("DMA", "DMA-FQ", "identity", "blocked", "unmanaged")
CMDLINE_NAMES = (
    "iommu", "iommu.passthrough", "iommu.strict", "intel_iommu", "amd_iommu", "iommu.forcedac",
)
CMDLINE_PREFIXES = ("arm_smmu_v3.",)


def unit_kind(name: str) -> str:
    """``"smmu3.0x0000000009050000"`` -> ``"smmu_v3"``; unknown drivers give ``"other"``."""
    for prefix, kind in UNIT_KINDS:
        if name.startswith(prefix):
            return kind
    return "other"


def read_iommu_units(root: Sysroot) -> list[dict[str, str]]:
    """``[{"name": "dmar0", "kind": "intel_dmar"}, ...]``; ``[]`` when there is no IOMMU."""
    return [{"name": name, "kind": unit_kind(name)} for name in root.listdir(IOMMU_CLASS)]


def parse_group_type(text: str, source: str = "iommu group type") -> str:
    """A group's default-domain ``type``; unknown words are kept, empty text is an error."""
    word = text.strip()
    if not word or len(word.split()) != 1:
        raise ParseError(source, text, "not an IOMMU group type")
    return word


def read_iommu_groups(root: Sysroot) -> dict[str, int]:
    """Number of IOMMU groups per default-domain type, e.g. ``{"identity": 17}``.

    A group without a ``type`` file (kernels before 5.11) counts as ``"unknown"``.
    """
    counts: dict[str, int] = {}
    for group in root.listdir(IOMMU_GROUPS):
        rel = f"{IOMMU_GROUPS}/{group}/type"
        text = root.read_optional(rel)
        kind = "unknown" if text is None else parse_group_type(text, root.display(rel))
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


def iommu_cmdline(params: dict[str, str | None]) -> dict[str, str | None]:
    """The IOMMU-related kernel parameters of a parsed command line, in a stable order."""
    picked = {name: params[name] for name in CMDLINE_NAMES if name in params}
    for name in sorted(params):
        if name.startswith(CMDLINE_PREFIXES):
            picked[name] = params[name]
    return picked
