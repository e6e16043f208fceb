"""CPU frequency policy: ``/sys/devices/system/cpu/cpufreq/policyN/``, the turbo controls
(``intel_pstate/no_turbo``, ``cpufreq/boost``) and ``cpuN/power/energy_perf_bias``.

Documentation: ``Documentation/admin-guide/pm/cpufreq.rst``, ``intel_pstate.rst`` and
``amd-pstate.rst``. Frequencies are in kHz. ``affected_cpus``/``related_cpus`` are
space-separated CPU numbers. ``/sys/devices/system/cpu/cpufreq/boost`` does not exist under
``intel_pstate``, whose turbo switch is ``intel_pstate/no_turbo`` (0 = turbo allowed).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpuidle import (
    CPU_DIR,
    Problems,
    cpu_numbers,
    numbered,
    read_value,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.values import (
    parse_flag,
    parse_int,
    parse_text,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

CPUFREQ_DIR = f"{CPU_DIR}/cpufreq"
INTEL_PSTATE_DIR = f"{CPU_DIR}/intel_pstate"
AMD_PSTATE_STATUS = f"{CPU_DIR}/amd_pstate/status"
INTEL_PSTATE_INTS = ("no_turbo", "max_perf_pct", "min_perf_pct", "turbo_pct", "num_pstates",
                     "hwp_dynamic_boost")


class Policy(NamedTuple):
    """One cpufreq policy (``policyN``); ``None`` for a file this driver does not provide."""

    policy: int
    cpus: list[int] | None
    related_cpus: list[int] | None
    driver: str | None
    governor: str | None
    energy_performance_preference: str | None
    cpuinfo_min_khz: int | None
    cpuinfo_max_khz: int | None
    scaling_min_khz: int | None
    scaling_max_khz: int | None
    base_khz: int | None
    boost: bool | None


def parse_cpu_words(text: str, source: str = "affected_cpus") -> list[int]:
    """``"0 1 64"`` -> ``[0, 1, 64]`` (cpufreq's space-separated CPU lists)."""
    try:
        return sorted(int(word) for word in text.split())
    except ValueError:
        raise ParseError(source, text, "not a space-separated CPU list") from None


def read_policy(root: Sysroot, number: int, problems: Problems = None) -> Policy:
    """``/sys/devices/system/cpu/cpufreq/policyN``."""
    base = f"{CPUFREQ_DIR}/policy{number}"

    def get(file: str, parse: Any = parse_int) -> Any:
        return read_value(root, f"{base}/{file}", parse, problems)

    return Policy(
        policy=number, cpus=get("affected_cpus", parse_cpu_words),
        related_cpus=get("related_cpus", parse_cpu_words),
        driver=get("scaling_driver", parse_text), governor=get("scaling_governor", parse_text),
        energy_performance_preference=get("energy_performance_preference", parse_text),
        cpuinfo_min_khz=get("cpuinfo_min_freq"), cpuinfo_max_khz=get("cpuinfo_max_freq"),
        scaling_min_khz=get("scaling_min_freq"), scaling_max_khz=get("scaling_max_freq"),
        base_khz=get("base_frequency"), boost=get("boost", parse_flag),
    )


def read_policies(root: Sysroot, problems: Problems = None) -> list[Policy]:
    """All policies, by number; ``[]`` when there is no cpufreq driver."""
    return [read_policy(root, n, problems)
            for n in numbered(root.listdir(CPUFREQ_DIR), "policy")]


def read_intel_pstate(root: Sysroot, problems: Problems = None) -> dict[str, Any] | None:
    """``/sys/devices/system/cpu/intel_pstate/*``; ``None`` when intel_pstate is not loaded."""
    if not root.is_dir(INTEL_PSTATE_DIR):
        return None
    values: dict[str, Any] = {
        "status": read_value(root, f"{INTEL_PSTATE_DIR}/status", parse_text, problems)}
    for name in INTEL_PSTATE_INTS:
        values[name] = read_value(root, f"{INTEL_PSTATE_DIR}/{name}", parse_int, problems)
    return values


def turbo(root: Sysroot, intel: dict[str, Any] | None, boost: bool | None) -> dict[str, Any]:
    """Whether turbo/boost is allowed, and the file that says so."""
    if intel and intel["status"] != "off" and intel["no_turbo"] is not None:
        return {"enabled": intel["no_turbo"] == 0,
                "control": root.display(f"{INTEL_PSTATE_DIR}/no_turbo")}
    if boost is not None:
        return {"enabled": boost, "control": root.display(f"{CPUFREQ_DIR}/boost")}
    return {"enabled": None, "control": None}


def group_by(pairs: list[tuple[Any, list[int] | None]]) -> dict[str, list[int]]:
    """``[("performance", [0, 1]), ("powersave", [2])]`` -> ``{"performance": [0, 1], ...}``;
    pairs with a ``None`` value are left out."""
    groups: dict[str, list[int]] = {}
    for value, cpus in pairs:
        if value is not None:
            groups.setdefault(str(value), []).extend(cpus or [])
    return {key: sorted(cpus) for key, cpus in groups.items()}


def read_energy_perf_bias(root: Sysroot, problems: Problems = None) -> dict[str, list[int]]:
    """``{"6": [0, 1, ...]}``: CPUs by ``cpuN/power/energy_perf_bias`` (x86 only)."""
    pairs = [(read_value(root, f"{CPU_DIR}/cpu{cpu}/power/energy_perf_bias", parse_int,
                         problems), [cpu]) for cpu in cpu_numbers(root)]
    return group_by(pairs)


def read_cpufreq(root: Sysroot, problems: Problems = None) -> dict[str, Any]:
    """Policies, drivers, governors and EPP by CPU, turbo state, EPB. No cpufreq (a VM, a
    Grace guest) is a normal answer: no policies, turbo unknown."""
    policies = read_policies(root, problems)
    intel = read_intel_pstate(root, problems)
    boost = read_value(root, f"{CPUFREQ_DIR}/boost", parse_flag, problems)
    return {
        "policies": [p._asdict() for p in policies],
        "drivers": sorted({p.driver for p in policies if p.driver}),
        "governors": group_by([(p.governor, p.cpus) for p in policies]),
        "energy_performance_preferences": group_by(
            [(p.energy_performance_preference, p.cpus) for p in policies]),
        "boost": boost,
        "intel_pstate": intel,
        "amd_pstate_status": read_value(root, AMD_PSTATE_STATUS, parse_text, problems),
        "turbo": turbo(root, intel, boost),
        "energy_perf_bias": read_energy_perf_bias(root, problems),
    }
