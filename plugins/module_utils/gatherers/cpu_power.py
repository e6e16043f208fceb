"""cpu-layer power facts: C-states, C-state limits, PM QoS, TuneD and frequency policy.

Keys added to the cpu layer's sheet: ``cpuidle``, ``cstate_limits``, ``pm_qos``, ``tuned``,
``cpufreq``. A file that cannot be read or understood becomes ``None`` inside its fact plus an
entry in the sheet's ``errors``; the other values of the same fact are kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers import (
    cpufreq,
    cpuidle,
    pmqos,
    tuned,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

SOURCES = {
    "cpuidle": [f"{cpuidle.CPUIDLE_DIR}", f"{cpuidle.CPU_DIR}/cpu*/cpuidle/state*"],
    "cstate_limits": ["proc/cmdline", cpuidle.INTEL_IDLE_PARAMS, cpuidle.PROCESSOR_PARAMS],
    "pm_qos": [pmqos.DMA_LATENCY, "proc/*/fd", f"{cpuidle.CPU_DIR}/cpu*/{pmqos.RESUME_LATENCY}"],
    "tuned": [tuned.ACTIVE_PROFILE, tuned.PROFILE_MODE],
    "cpufreq": [f"{cpufreq.CPUFREQ_DIR}/policy*", cpufreq.CPUFREQ_DIR + "/boost",
                cpufreq.INTEL_PSTATE_DIR, cpufreq.AMD_PSTATE_STATUS,
                f"{cpuidle.CPU_DIR}/cpu*/power/energy_perf_bias"],
}


def _gather(sheet: FactSheet, root: Sysroot, key: str,
            reader: Callable[..., dict[str, Any]], *args: Any) -> Any:
    """``sheet.attempt`` for a reader that logs per-file problems instead of raising."""
    problems: list[HostStateError] = []
    source = [root.display(rel) for rel in SOURCES[key]]
    value = sheet.attempt(key, ", ".join(source), reader, root, problems, *args)
    for exc in problems:
        sheet.error(key, exc)
    return value


def gather_into(sheet: FactSheet, root: Sysroot) -> None:
    """Add the power facts to ``sheet``."""
    idle = _gather(sheet, root, "cpuidle", cpuidle.read_cpuidle)
    _gather(sheet, root, "cstate_limits", cpuidle.read_cstate_limits)
    _gather(sheet, root, "pm_qos", pmqos.read_pm_qos)
    # Per-CPU detail stays on the host: the by-name summary is what checks need, and the fact
    # size must not grow with the CPU count (hundreds of hosts x hundreds of CPUs).
    per_cpu = idle.pop("per_cpu", {}) if idle else {}
    first_cpu = next(iter(per_cpu.values()), [])
    profile = _gather(sheet, root, "tuned", tuned.read_tuned, first_cpu)
    if profile:
        sheet.sources["tuned"] = ", ".join(
            [root.display(tuned.ACTIVE_PROFILE), root.display(tuned.PROFILE_MODE),
             *profile["files"]])
    _gather(sheet, root, "cpufreq", cpufreq.read_cpufreq)
