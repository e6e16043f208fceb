"""CPU idle states (``/sys/devices/system/cpu/cpuidle/``, ``cpuN/cpuidle/stateK/``) and the
C-state limits set on the kernel command line and in ``/sys/module/{intel_idle,processor}``.

Documentation: ``Documentation/admin-guide/pm/cpuidle.rst`` and ``drivers/cpuidle/sysfs.c``
(the per-state files; ``latency``/``residency``/``time`` in microseconds),
``Documentation/admin-guide/pm/intel_idle.rst`` and
``Documentation/admin-guide/kernel-parameters.txt`` (``intel_idle.max_cstate``, ``idle=`` ...).
States are matched by *name* across CPUs, never by index: the index differs per driver.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from ansible_collections.exemplar.tune.plugins.module_utils.readers.cmdline import (
    parse_cmdline,
    pick,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotSupported,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.values import (
    parse_flag,
    parse_int,
    parse_text,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

CPU_DIR = "sys/devices/system/cpu"
CPUIDLE_DIR = f"{CPU_DIR}/cpuidle"
INTEL_IDLE_PARAMS = "sys/module/intel_idle/parameters"
PROCESSOR_PARAMS = "sys/module/processor/parameters"
CMDLINE_LIMITS = (
    "intel_idle.max_cstate", "processor.max_cstate", "idle", "intel_idle.states_off",
    "cpuidle.off", "intel_idle.use_acpi", "intel_idle.no_acpi", "cpuidle.governor",
)
# fields of a state that should be equal on every CPU (compared by name).
COMPARED = ("index", "desc", "latency_us", "residency_us", "default_status")

Problems = list[HostStateError] | None


class CpuidleState(NamedTuple):
    """One idle state of one CPU, as ``cpuN/cpuidle/stateK/`` shows it."""

    index: int
    name: str
    desc: str | None
    latency_us: int | None
    residency_us: int | None
    disabled: bool | None
    default_status: str | None
    usage: int | None
    time_us: int | None


def read_value(root: Sysroot, rel: str, parse: Callable[[str, str], Any],
               problems: Problems = None) -> Any:
    """``parse`` of an optional file: ``None`` when absent; a malformed file raises, or, when
    ``problems`` is a list, is recorded there and reads as ``None``."""
    text = root.read_optional(rel)
    if text is None:
        return None
    try:
        return parse(text, root.display(rel))
    except ParseError as exc:
        if problems is None:
            raise
        problems.append(exc)
        return None


def numbered(names: list[str], prefix: str) -> list[int]:
    """``["cpu1", "cpu0", "cpufreq"]``, ``"cpu"`` -> ``[0, 1]`` (numeric order)."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)")
    return sorted(int(m.group(1)) for m in map(pattern.fullmatch, names) if m)


def cpu_numbers(root: Sysroot) -> list[int]:
    """CPUs that have a ``/sys/devices/system/cpu/cpuN`` directory."""
    return numbered(root.listdir(CPU_DIR), "cpu")


def read_state(root: Sysroot, cpu: int, index: int, problems: Problems = None) -> CpuidleState:
    """``cpuN/cpuidle/stateK``; ``NotSupported`` when it has no ``name``."""
    base = f"{CPU_DIR}/cpu{cpu}/cpuidle/state{index}"
    name = root.read_optional(f"{base}/name")
    if name is None:
        raise NotSupported(root.display(f"{base}/name"))

    def get(file: str, parse: Callable[[str, str], Any]) -> Any:
        return read_value(root, f"{base}/{file}", parse, problems)

    return CpuidleState(
        index=index, name=name, desc=get("desc", parse_text),
        latency_us=get("latency", parse_int), residency_us=get("residency", parse_int),
        disabled=get("disable", parse_flag), default_status=get("default_status", parse_text),
        usage=get("usage", parse_int), time_us=get("time", parse_int),
    )


def read_cpu_states(root: Sysroot, cpu: int, problems: Problems = None) -> list[CpuidleState]:
    """All idle states of one CPU, by index; ``[]`` when it has no ``cpuidle`` directory."""
    states = []
    for index in numbered(root.listdir(f"{CPU_DIR}/cpu{cpu}/cpuidle"), "state"):
        try:
            states.append(read_state(root, cpu, index, problems))
        except NotSupported as exc:
            if problems is None:
                raise
            problems.append(exc)
    return states


def aggregate_states(per_cpu: dict[int, list[CpuidleState]]) -> list[dict[str, Any]]:
    """One entry per state *name* over all CPUs: values of the first CPU that has it, the
    CPUs that have it disabled or lack it, the fields whose values differ between CPUs, and
    the summed ``usage``/``time_us``. Ordered by the index on the first CPU."""
    by_name: dict[str, list[tuple[int, CpuidleState]]] = {}
    for cpu, states in sorted(per_cpu.items()):
        for state in states:
            by_name.setdefault(state.name, []).append((cpu, state))
    result = [_aggregate(name, entries, sorted(per_cpu)) for name, entries in by_name.items()]
    return sorted(result, key=lambda s: (s["index"], s["name"]))


def _aggregate(name: str, entries: list[tuple[int, CpuidleState]],
               cpus: list[int]) -> dict[str, Any]:
    first = entries[0][1]
    have = [cpu for cpu, _ in entries]
    states = [state for _, state in entries]
    return {
        "name": name, "index": first.index, "desc": first.desc,
        "latency_us": first.latency_us, "residency_us": first.residency_us,
        "default_status": first.default_status,
        "disabled_cpus": [cpu for cpu, state in entries if state.disabled],
        "missing_cpus": [cpu for cpu in cpus if cpu not in have],
        "values_differ": [f for f in COMPARED if len({getattr(s, f) for s in states}) > 1],
        "usage": _total(s.usage for s in states),
        "time_us": _total(s.time_us for s in states),
    }


def _total(values: Any) -> int | None:
    values = list(values)
    return None if None in values else sum(values)


def deepest(states: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The aggregated state with the highest exit latency (ties: the higher index)."""
    if not states:
        return None
    return max(states, key=lambda s: (-1 if s["latency_us"] is None else s["latency_us"],
                                      s["index"]))


def read_cpuidle(root: Sysroot, problems: Problems = None) -> dict[str, Any]:
    """Driver, governor, per-CPU states and the by-name summary.

    No cpuidle directory or driver ``none`` is a normal answer (no states), not an error.
    """
    governors = root.read_optional(f"{CPUIDLE_DIR}/available_governors")
    per_cpu = {cpu: read_cpu_states(root, cpu, problems) for cpu in cpu_numbers(root)}
    per_cpu = {cpu: states for cpu, states in per_cpu.items() if states}
    states = aggregate_states(per_cpu)
    deep = deepest(states)
    return {
        "driver": root.read_optional(f"{CPUIDLE_DIR}/current_driver"),
        "governor": root.read_optional(f"{CPUIDLE_DIR}/current_governor_ro")
        or root.read_optional(f"{CPUIDLE_DIR}/current_governor"),
        "available_governors": None if governors is None else governors.split(),
        "cpus": sorted(per_cpu),
        "states_exposed": len(states),
        "states": states,
        "deepest_state": deep["name"] if deep else None,
        "deepest_state_disabled_cpus": deep["disabled_cpus"] if deep else [],
        "deepest_state_disabled_anywhere": bool(deep and deep["disabled_cpus"]),
        "per_cpu": {str(cpu): [s._asdict() for s in states] for cpu, states in per_cpu.items()},
    }


def _module_params(root: Sysroot, base: str, parsers: dict[str, Callable[[str, str], Any]],
                   problems: Problems) -> dict[str, Any] | None:
    if not root.is_dir(base):
        return None
    return {name: read_value(root, f"{base}/{name}", parse, problems)
            for name, parse in parsers.items()}


def read_cstate_limits(root: Sysroot, problems: Problems = None) -> dict[str, Any]:
    """C-state limits: the command-line knobs that are set (``/proc/cmdline``), and the
    ``intel_idle`` / ``processor`` module parameters (``None`` when the module is absent)."""
    text = root.read_optional("proc/cmdline")
    intel = {"max_cstate": parse_int, "states_off": parse_int,
             "use_acpi": parse_flag, "no_acpi": parse_flag}
    return {
        "cmdline": None if text is None else pick(parse_cmdline(text), CMDLINE_LIMITS),
        "intel_idle": _module_params(root, INTEL_IDLE_PARAMS, intel, problems),
        "processor": _module_params(root, PROCESSOR_PARAMS, {"max_cstate": parse_int},
                                    problems),
    }
