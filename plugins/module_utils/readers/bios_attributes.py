"""The per-vendor BIOS attribute map: C-states, C1E, turbo and power profile in one vocabulary.

Redfish standardises where BIOS attributes live (``Systems/<id>/Bios`` → ``Attributes``, the
pending ones in the ``@Redfish.Settings`` object) but not their names or values: each vendor
has its own attribute registry. This module maps the attributes that govern core and package
C-states, C1E, turbo and the power/performance profile to normalised fields:

* ``core_cstates``: ``enabled`` | ``disabled`` | ``C1E`` (deepest core state limited to C1E)
* ``package_cstate``: ``enabled`` | ``disabled`` | ``C6-retention`` | ``C6-non-retention`` |
  ``C2`` | ``auto``
* ``c1e``, ``turbo``: ``enabled`` | ``disabled``
* ``profile``: ``performance`` | ``balanced`` | ``efficiency`` | ``os-controlled`` | ``hpc`` |
  ``low-latency`` | ``dense`` | ``custom``

A vendor value the map does not know reads as ``unmapped:<value>`` (and is kept in ``raw``).
Every attribute below names the public document it was taken from; where a name or a value
could not be confirmed in a document or a captured BMC response, the comment says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError

FIELDS = ("core_cstates", "package_cstate", "c1e", "turbo", "profile")
UNKNOWN = "unknown"
# Supermicro names carry a 4-hex-digit suffix that differs between boards (``TurboMode_3D06``).
SUFFIX = re.compile(r"^(?P<base>.+)_[0-9A-F]{4}$")

ON_OFF = {"Enabled": "enabled", "Disabled": "disabled"}
ON_OFF_SHORT = {"Enable": "enabled", "Disable": "disabled"}


class BiosMapError(HostStateError):
    """A target the vendor map cannot express (unknown vendor, field, value or a conflict)."""


@dataclass(frozen=True)
class Attribute:
    """One vendor attribute behind a normalised field: how its values read and are written."""

    name: str
    read: dict[str, str]
    write: dict[str, tuple[str, ...]] = field(default_factory=dict)
    suffixed: bool = False


@dataclass(frozen=True)
class VendorMap:
    """A vendor's attributes; ``locked`` fields are writable only with ``profile`` = custom."""

    vendor: str
    attributes: dict[str, Attribute]
    locked: frozenset[str] = frozenset()
    manufacturers: tuple[str, ...] = ()


def _both(read: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """Write table that inverts a one-to-one read table."""
    return {norm: (raw,) for raw, norm in read.items()}


# ---- Dell iDRAC ------------------------------------------------------------------------------
# Names and a current-value sample: a real iDRAC9 response of a PowerEdge (Xeon Gold 6354),
# captured with DMTF Redfish-Mockup-Creator, github.com/cholcombe973/libredfish
# tests/mockups/dell/redfish/v1/Systems/System.Embedded.1/Bios/index.json (commit cb05ba08):
# ProcCStates, ProcC1E, ProcTurboMode = Enabled|Disabled, SysProfile = PerfOptimized.
# Value sets: Dell OpenManage `omconfig chassis biossetup -?` listing (SysProfile =
# PerfPerWattOptimizedDapc|PerfPerWattOptimizedOs|PerfOptimized|DenseCfgOptimized|Custom;
# ProcTurboMode/ProcC1E/ProcCStates = Enabled|Disabled), as quoted in public automation code.
# Dependency: OpenManage Server Administrator help, "System Profile Settings" (shipped in
# linux.dell.com srvadmin-tomcat): "When the option is set to a mode other than Custom, BIOS
# sets each option accordingly"; a public Dell PowerShell listing shows the registry rule
# `<ROIf Op="NOT" Name="SysProfile">Custom</ROIf>` for ProcPwrPerf - that the same rule covers
# ProcCStates/ProcC1E/ProcTurboMode is inferred from the help text, not read in a registry.
# "Autonomous" for C States appears only in Dell's 16G tuning guide (infohub.delltechnologies
# .com, "BIOS Settings for Optimized Performance on Next-Generation Dell PowerEdge Servers").
# PackageCStates (Enabled|Disabled): seen in an iDRAC9 dump of a PowerEdge R650; absent on
# other platforms (not in the Gold 6354 capture above) - not confirmed in a Dell document.
DELL = VendorMap("dell", {
    "core_cstates": Attribute("ProcCStates", {**ON_OFF, "Autonomous": "enabled"},
                              {"enabled": ("Enabled",), "disabled": ("Disabled",)}),
    "package_cstate": Attribute("PackageCStates", ON_OFF, _both(ON_OFF)),
    "c1e": Attribute("ProcC1E", ON_OFF, _both(ON_OFF)),
    "turbo": Attribute("ProcTurboMode", ON_OFF, _both(ON_OFF)),
    "profile": Attribute("SysProfile", {
        "PerfOptimized": "performance", "PerfPerWattOptimizedDapc": "efficiency",
        "PerfPerWattOptimizedOs": "os-controlled", "DenseCfgOptimized": "dense",
        "Custom": "custom"}, {
        "performance": ("PerfOptimized",), "efficiency": ("PerfPerWattOptimizedDapc",),
        "os-controlled": ("PerfPerWattOptimizedOs",), "dense": ("DenseCfgOptimized",),
        "custom": ("Custom",)}),
}, frozenset({"core_cstates", "package_cstate", "c1e", "turbo"}), ("dell",))

# ---- HPE iLO 5 -------------------------------------------------------------------------------
# HPE iLO 5 Redfish reference, Bios.v1_0_0 attributes: github.com/HewlettPackard/ilo-rest-api-docs
# iLO5_Redfish_Reference.md (hewlettpackard.github.io/ilo-rest-api-docs/ilo5/):
# MinProcIdlePower = C6|C1E|NoCStates ("only if Workload Profile is set to Custom"),
# MinProcIdlePkgState = C6Retention|C6NonRetention|NoState (same restriction),
# ProcTurbo = Enabled|Disabled, WorkloadProfile = GeneralPowerEfficientCompute|
# GeneralPeakFrequencyCompute|GeneralThroughputCompute|Virtualization-PowerEfficient|
# Virtualization-MaxPerformance|LowLatency|MissionCritical|TransactionalApplicationProcessing|
# HighPerformanceCompute(HPC)|DecisionSupport|GraphicProcessing|I/OThroughput|Custom.
# iLO 5 has no separate C1E attribute (MinProcIdlePower=C1E limits cores to C1E): c1e unmapped.
# Whether ProcTurbo is locked by the Workload Profile is not stated there; treated as locked.
HPE = VendorMap("hpe", {
    "core_cstates": Attribute("MinProcIdlePower", {
        "C6": "enabled", "C1E": "C1E", "NoCStates": "disabled"}, {
        "enabled": ("C6",), "C1E": ("C1E",), "disabled": ("NoCStates",)}),
    "package_cstate": Attribute("MinProcIdlePkgState", {
        "C6Retention": "C6-retention", "C6NonRetention": "C6-non-retention",
        "NoState": "disabled"}, {
        "enabled": ("C6Retention",), "C6-retention": ("C6Retention",),
        "C6-non-retention": ("C6NonRetention",), "disabled": ("NoState",)}),
    "turbo": Attribute("ProcTurbo", ON_OFF, _both(ON_OFF)),
    "profile": Attribute("WorkloadProfile", {
        "GeneralPeakFrequencyCompute": "performance",
        "GeneralThroughputCompute": "balanced",
        "GeneralPowerEfficientCompute": "efficiency",
        "HighPerformanceCompute(HPC)": "hpc", "LowLatency": "low-latency", "Custom": "custom"}, {
        "performance": ("GeneralPeakFrequencyCompute",), "balanced": ("GeneralThroughputCompute",),
        "efficiency": ("GeneralPowerEfficientCompute",), "hpc": ("HighPerformanceCompute(HPC)",),
        "low-latency": ("LowLatency",), "custom": ("Custom",)}),
}, frozenset({"core_cstates", "package_cstate", "turbo"}), ("hpe", "hewlett", "hp"))

# ---- Lenovo XCC ------------------------------------------------------------------------------
# A real XCC response (DMTF Redfish-Mockup-Creator), github.com/cholcombe973/libredfish
# tests/mockups/lenovo/redfish/v1/Systems/1/Bios/index.json (commit cb05ba08):
# Processors_CStates = Autonomous, Processors_C1EnhancedMode = Enabled,
# Processors_TurboMode = Enabled, OperatingModes_ChooseOperatingMode =
# Efficiency_FavorPerformance; pending settings at Bios/Pending, SupportedApplyTimes [OnReset].
# XCC1 (Skylake) firmware spells the values Enable/Disable (a public XCC test fixture asserts
# Processors_CStates "Disable", Processors_C1EnhancedMode "Disable", ChooseOperatingMode
# "MaximumPerformance"); both spellings are read, and writes follow the spelling in use.
# "CustomMode" and "Efficiency_FavorPower": public XCC automation notes (preset operating modes
# lock the C-state settings, "combining Maximum Performance with custom C-states requires
# CustomMode"). "Legacy" (OS-controlled C-states) is named in Lenovo tuning material but was
# not seen in a captured response: unconfirmed. No package C-state attribute was confirmed.
LENOVO = VendorMap("lenovo", {
    "core_cstates": Attribute("Processors_CStates", {
        **ON_OFF, **ON_OFF_SHORT, "Autonomous": "enabled", "Legacy": "enabled"}, {
        "enabled": ("Legacy", "Enable"), "disabled": ("Disabled", "Disable")}),
    "c1e": Attribute("Processors_C1EnhancedMode", {**ON_OFF, **ON_OFF_SHORT}, {
        "enabled": ("Enabled", "Enable"), "disabled": ("Disabled", "Disable")}),
    "turbo": Attribute("Processors_TurboMode", {**ON_OFF, **ON_OFF_SHORT}, {
        "enabled": ("Enabled", "Enable"), "disabled": ("Disabled", "Disable")}),
    "profile": Attribute("OperatingModes_ChooseOperatingMode", {
        "MaximumPerformance": "performance", "Efficiency_FavorPerformance": "balanced",
        "Efficiency_FavorPower": "efficiency", "CustomMode": "custom"}, {
        "performance": ("MaximumPerformance",), "balanced": ("Efficiency_FavorPerformance",),
        "efficiency": ("Efficiency_FavorPower",), "custom": ("CustomMode",)}),
}, frozenset({"core_cstates", "c1e", "turbo"}), ("lenovo",))

# ---- Supermicro ------------------------------------------------------------------------------
# A real Supermicro BMC response (DMTF Redfish-Mockup-Creator), github.com/cholcombe973/
# libredfish tests/mockups/supermicro/redfish/v1/Systems/1/Bios/index.json (commit cb05ba08):
# CPUC6Report_3D22 = Auto, EnhancedHaltState_C1E__3D23 = Enable, PackageCState_3D25 = Auto,
# TurboMode_3D06 = Enable, PowerTechnology_FF77 = Custom; settings object Bios/SD. The
# suffix after the last "_" differs per board, so names are matched without it.
# Package C State menu values "C0/C1 state" (FD.io CSIT lab BIOS dump, github.com/FDio/csit
# docs/lab/testbeds_sm_skx_hw_bios_cfg.md); "C2 state", "C6(non Retention) state",
# "C6(Retention) state", "No Limit" and the Power Technology values "Energy Efficient",
# "Disable" come from Supermicro board manuals and were not seen in a Redfish response.
SUPERMICRO = VendorMap("supermicro", {
    "core_cstates": Attribute("CPUC6Report", {**ON_OFF_SHORT, "Auto": "enabled"}, {
        "enabled": ("Enable",), "disabled": ("Disable",)}, suffixed=True),
    "package_cstate": Attribute("PackageCState", {
        "C0/C1 state": "disabled", "C2 state": "C2", "C6(non Retention) state":
        "C6-non-retention", "C6(Retention) state": "C6-retention", "No Limit": "enabled",
        "Auto": "auto"}, {
        "disabled": ("C0/C1 state",), "C2": ("C2 state",),
        "C6-non-retention": ("C6(non Retention) state",),
        "C6-retention": ("C6(Retention) state",), "enabled": ("No Limit",),
        "auto": ("Auto",)}, suffixed=True),
    "c1e": Attribute("EnhancedHaltState_C1E_", ON_OFF_SHORT, _both(ON_OFF_SHORT),
                     suffixed=True),
    "turbo": Attribute("TurboMode", ON_OFF_SHORT, _both(ON_OFF_SHORT), suffixed=True),
    "profile": Attribute("PowerTechnology", {
        "Custom": "custom", "Energy Efficient": "efficiency", "Disable": "os-controlled"}, {
        "custom": ("Custom",), "efficiency": ("Energy Efficient",),
        "os-controlled": ("Disable",)}, suffixed=True),
}, frozenset({"core_cstates", "package_cstate", "c1e"}), ("supermicro", "super micro"))

VENDORS: dict[str, VendorMap] = {m.vendor: m for m in (DELL, HPE, LENOVO, SUPERMICRO)}
OEM_KEYS = {"Dell": "dell", "Hpe": "hpe", "Hp": "hpe", "Lenovo": "lenovo",
            "Supermicro": "supermicro"}


# ---- vendor detection ------------------------------------------------------------------------

def vendor_by_name(*names: str | None) -> str | None:
    """The vendor whose manufacturer pattern occurs in the first name that has one."""
    for name in names:
        text = (name or "").lower()
        for vmap in VENDORS.values():
            if any(word in text.split() or text.startswith(word)
                   for word in vmap.manufacturers):
                return vmap.vendor
    return None


def vendor_by_attributes(attributes: dict[str, Any]) -> str | None:
    """The vendor two or more of whose attribute names the BIOS offers (else ``None``)."""
    best, hits = None, 1
    for vmap in VENDORS.values():
        found = sum(resolve(vmap, f, attributes) is not None for f in vmap.attributes)
        if found > hits:
            best, hits = vmap.vendor, found
    return best


def detect_vendor(manufacturer: str | None, service_vendor: str | None,
                  oem_keys: list[str], attributes: dict[str, Any]) -> tuple[str, str]:
    """``(vendor, how)``: by manufacturer/service vendor, OEM section, attribute names, or
    ``("unknown", "none")``."""
    found = vendor_by_name(manufacturer, service_vendor)
    if found:
        return found, "manufacturer"
    for key in oem_keys:
        if key in OEM_KEYS:
            return OEM_KEYS[key], "oem"
    found = vendor_by_attributes(attributes)
    return (found, "attribute names") if found else (UNKNOWN, "none")


# ---- reading ---------------------------------------------------------------------------------

def resolve(vmap: VendorMap, name: str, attributes: dict[str, Any]) -> str | None:
    """The attribute name this BIOS uses for field ``name`` (suffix matched), or ``None``."""
    attr = vmap.attributes.get(name)
    if attr is None:
        return None
    if attr.name in attributes:
        return attr.name
    if attr.suffixed:
        for key in sorted(attributes):
            match = SUFFIX.match(key)
            if match and match.group("base") == attr.name:
                return key
    return None


def normalise_value(attr: Attribute, raw: Any) -> str | None:
    """A vendor value in the normalised vocabulary (``unmapped:<raw>`` when unknown)."""
    if raw is None:
        return None
    return attr.read.get(str(raw), f"unmapped:{raw}")


def normalise(vmap: VendorMap, attributes: dict[str, Any]) -> dict[str, Any]:
    """``{field: normalised value or None}`` plus ``attributes`` ``{field: vendor name}``."""
    names = {f: resolve(vmap, f, attributes) for f in FIELDS}
    values = {f: normalise_value(vmap.attributes[f], attributes[n]) if n else None
              for f, n in names.items()}
    return {**values, "attributes": {f: n for f, n in names.items() if n}}


# ---- writing ---------------------------------------------------------------------------------

def choose(candidates: tuple[str, ...], current: Any) -> str:
    """The candidate spelled like the value in use (``Enabled`` vs ``Enable``), else the first."""
    style = str(current or "").endswith("d")
    for candidate in candidates:
        if candidate.endswith("d") == style:
            return candidate
    return candidates[0]


def translate(vmap: VendorMap, attributes: dict[str, Any], target: dict[str, Any],
              where: str) -> dict[str, Any]:
    """The vendor attributes (name → value) that make ``attributes`` match ``target``.

    ``target`` is in normalised terms; fields set to ``None`` are left alone. Locked fields add
    the vendor's custom profile unless the target names another profile (then
    :class:`BiosMapError`); so does a field or value the vendor map cannot express.
    """
    wanted = {k: v for k, v in target.items() if v is not None}
    wanted = _with_custom_profile(vmap, wanted, where)
    desired: dict[str, Any] = {}
    for name, value in wanted.items():
        attr_name = _attribute_name(vmap, name, attributes, where)
        attr = vmap.attributes[name]
        current = attributes.get(attr_name)
        if normalise_value(attr, current) == value:
            desired[attr_name] = current
            continue
        if value not in attr.write:
            raise BiosMapError(where, f"{vmap.vendor} {attr.name} cannot be set to {name}="
                               f"{value}; known: {', '.join(sorted(attr.write))}")
        desired[attr_name] = choose(attr.write[value], current)
    return desired


def unlocked(vmap: VendorMap, effective: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` without the locked attributes when the profile will hold a preset.

    A preset profile (anything but custom) sets the locked attributes itself and the BIOS
    refuses writes to them (Dell: read-only unless SysProfile is Custom), so putting back a
    preset writes the profile alone and lets it bring its own values.
    """
    merged = {**effective, **values}
    name = resolve(vmap, "profile", merged)
    if name is None or normalise_value(vmap.attributes["profile"], merged[name]) == "custom":
        return values
    locked = {resolve(vmap, f, merged) for f in vmap.locked}
    return {k: v for k, v in values.items() if k not in locked}


def _with_custom_profile(vmap: VendorMap, wanted: dict[str, Any], where: str) -> dict[str, Any]:
    locked = sorted(set(wanted) & vmap.locked)
    if not locked or "profile" not in vmap.attributes:
        return wanted
    if wanted.get("profile", "custom") != "custom":
        raise BiosMapError(where, f"{vmap.vendor}: {', '.join(locked)} can only be set with the "
                           f"custom profile ({vmap.attributes['profile'].name}); set "
                           "cpu.bios.profile to custom or leave it out")
    return {**wanted, "profile": "custom"}


def _attribute_name(vmap: VendorMap, name: str, attributes: dict[str, Any], where: str) -> str:
    if name not in FIELDS:
        raise BiosMapError(where, f"unknown BIOS field {name!r}; known: {', '.join(FIELDS)}")
    if name not in vmap.attributes:
        raise BiosMapError(where, f"{vmap.vendor}: no BIOS attribute for {name} in the "
                           "attribute map")
    found = resolve(vmap, name, attributes)
    if found is None:
        raise BiosMapError(where, f"{vmap.vendor}: this BIOS does not offer "
                           f"{vmap.attributes[name].name} ({name})")
    return found
