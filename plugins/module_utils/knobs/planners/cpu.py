"""How the cpu layer's planner knobs plan: idle states, kernel C-state limits, tuned, turbo,
housekeeping and the BIOS policy behind the BMC (declared in ``knobs/cpu.py``).

A knob the profile asks for whose host has nothing it could write raises ``NotApplicable``
with the reason (no idle state, no turbo switch, no systemd or no cgroup v2 cpuset, no BMC
for the BIOS policy), so the audit never reports it as "no drift"; a knob the profile does
not ask for plans nothing."""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import (
    KnobInputError,
    Target,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
    AttrChange,
    Change,
    FileChange,
    service_step,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.cpu import NO_CPUFREQ, POLICIES
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.envfile import plan_env_file
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.families import systemd_absent
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.grub import plan_cmdline
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import (
    FILE_NAME,
    IDLE_STATE,
    SYSTEMD_UNIT,
    WORD,
    clean_path,
    matching,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.tuned_switch import plan_switch
from ansible_collections.exemplar.tune.plugins.module_utils.readers.cgroup import (
    cpuset_base,
    detect_version,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpulist import (
    format_cpulist,
    parse_cpulist,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotApplicable,
    NotSupported,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.hypervisor import (
    classify,
    read_cpu_flags,
    read_dmi,
    read_xen_type,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import COMMANDS_DIR, Sysroot

SYSTEMCTL_SHOW = f"{COMMANDS_DIR}/systemctl-show-slices.txt"
CPU_DIR = "sys/devices/system/cpu"
IDLE_DIRS = f"{CPU_DIR}/cpu[0-9]*/cpuidle/state[0-9]*"
CPUIDLE_DRIVER = f"{CPU_DIR}/cpuidle/current_driver"
NO_TURBO = f"{CPU_DIR}/intel_pstate/no_turbo"
BOOST = f"{CPU_DIR}/cpufreq/boost"


def _deep(target: Target) -> bool:
    return bool(target.want.get("deep_cstates"))


def state_names(target: Target) -> list[str]:
    """Idle states to allow: the profile's names (refused unless plain words), else the
    deepest state the CPUs expose (as the host names it: data, never refused)."""
    names = target.want.get("deep_cstate_names") or []
    if names:
        return [matching(name, IDLE_STATE, "cpu.deep_cstate_names") for name in names]
    deepest = (target.facts.get("cpuidle") or {}).get("deepest_state")
    return [deepest] if deepest else []


GUEST = ("a virtual machine's idle states do not set the physical CPUs' C-states (set them "
         "on the hypervisor host)")


def guest_idle_states(root: Sysroot, target: Target) -> None:
    """``NotApplicable`` on a virtual machine: a guest's idle states (the ``haltpoll`` driver,
    or any driver under a hypervisor) decide how the guest waits, not the C-states of the
    physical CPUs, which the hypervisor host sets. The guest is told by the ``haltpoll``
    driver, else as the vm layer tells it (CPU flag, DMI, ``/sys/hypervisor``), without the
    kernel log."""
    if (target.facts.get("cpuidle") or {}).get("driver") == "haltpoll":
        raise NotApplicable(f"/{CPUIDLE_DRIVER}", f"cpuidle driver haltpoll: {GUEST}")
    try:
        flags: list[str] | None = read_cpu_flags(root)
    except NotSupported:
        flags = None
    verdict = classify(None, flags, read_dmi(root), read_xen_type(root))
    if verdict.virtualized:
        path, _, seen = verdict.evidence[0].partition(": ")
        raise NotApplicable(path, f"{seen}: {GUEST}")


def udev_match(value: str) -> str:
    """``value`` as a udev match string: every character udev or its quoting would read
    (quote, backslash, glob, alternation, control, non-ASCII) becomes ``?``, which matches
    that one character, so a name read from the host cannot change the rule's syntax."""
    return "".join(c if c.isascii() and c.isprintable() and c not in '"\\*?[]|' else "?"
                   for c in value)


def udev_rule(names: list[str], indices: list[int]) -> bytes:
    """A udev rule that enables the named idle states on every CPU as it appears or comes online.

    One line per state index and name, matched by the state's name (never by index alone, so
    a CPU whose states are numbered differently still gets the right one); no shell, no
    program: udev writes the attribute itself. Names are written through :func:`udev_match`.
    """
    lines = ["# Managed by exemplar-tune (layer cpu, knob deep_cstates); put back by "
             "exemplar-tune restore.",
             f"# Enables the idle states {', '.join(map(udev_match, names))} by name on every "
             "CPU, at boot and whenever a CPU is added or brought online."]
    for index in indices:
        for name in names:
            lines.append(f'ACTION=="add|online", SUBSYSTEM=="cpu", KERNEL=="cpu[0-9]*", '
                         f'ATTR{{cpuidle/state{index}/name}}=="{udev_match(name)}", '
                         f'ATTR{{cpuidle/state{index}/disable}}="0"')
    return ("\n".join(lines) + "\n").encode()


def plan_deep_cstates(root: Sysroot, target: Target) -> list[Change]:
    """``disable=0`` on every matching idle state now, and a udev rule where the driver
    turns the state off at boot (``default_status`` disabled)."""
    if not _deep(target):
        return []
    guest_idle_states(root, target)
    directories = root.glob(IDLE_DIRS)
    if not directories:
        driver = (target.facts.get("cpuidle") or {}).get("driver") or \
            (root.read_optional(CPUIDLE_DRIVER) or "").strip()
        raise NotApplicable(root.display(CPU_DIR), "no idle state under cpu*/cpuidle "
                            f"({f'cpuidle driver {driver}' if driver else 'no cpuidle driver'})"
                            ": the kernel exposes no C-state to enable")
    names = state_names(target)
    if not names:
        return []
    changes: list[Change] = []
    indices: set[int] = set()
    seen: set[str] = set()
    for directory in directories:
        indices.add(int(directory.rsplit("state", 1)[1]))
        name = root.read_optional(f"{directory}/name")
        seen.add(name or "?")
        if name in names and root.exists(f"{directory}/disable"):
            changes.append(AttrChange(f"{directory}/disable", "0"))
    if not changes:
        raise NotApplicable(root.display(CPU_DIR), f"no idle state named {', '.join(names)} "
                            f"under cpu*/cpuidle (the CPUs have {', '.join(sorted(seen))})")
    states = (target.facts.get("cpuidle") or {}).get("states") or []
    if any(s.get("name") in names and s.get("default_status") == "disabled" for s in states):
        path = clean_path(target.settings["cpu_cstates_udev_rule_path"],
                          "cpu_cstates_udev_rule_path")
        changes.append(FileChange(path, udev_rule(names, sorted(indices)), own=True))
    return changes


def plan_cstate_cmdline(root: Sysroot, target: Target) -> list[Change]:
    """Remove the C-state limits from the kernel command line (next boot)."""
    if not _deep(target):
        return []
    remove = [matching(n, WORD, "cpu_cstate_cmdline_remove")
              for n in target.settings["cpu_cstate_cmdline_remove"]]
    return plan_cmdline(root, clean_path(target.settings["cpu_grub_defaults_path"],
                                         "cpu_grub_defaults_path"),
                        remove, {}, target.settings["exemplar_bootloader_command"])


def plan_tuned_profile(root: Sysroot, target: Target) -> list[Change]:
    """A child of tuned's active profile without ``force_latency``, made the active one."""
    tuned = target.facts.get("tuned") or {}
    latency = tuned.get("force_latency")
    if not _deep(target) or latency is None or str(latency).lower() == "none":
        return []
    active = [matching(n, FILE_NAME, "tuned active profile")
              for n in tuned.get("active_profiles") or []]
    if not active:
        return []
    suffix = matching(target.settings["cpu_tuned_child_suffix"], WORD, "cpu_tuned_child_suffix")
    child = "-".join(active) + suffix
    conf = ("# Managed by exemplar-tune (layer cpu, knob tuned_profile); put back by "
            "exemplar-tune restore.\n[main]\n"
            f"summary={', '.join(active)} without force_latency (deep C-states allowed)\n"
            f"include={','.join(active)}\n\n[cpu]\nforce_latency=none\n")
    return [FileChange(f"/etc/tuned/{child}/tuned.conf", conf.encode(), own=True),
            *plan_switch(root, [child])]


def plan_turbo(root: Sysroot, target: Target) -> list[Change]:
    """Turbo on or off: intel_pstate ``no_turbo``, else cpufreq ``boost`` (runtime)."""
    turbo = target.want.get("turbo")
    if turbo is None:
        return []
    control = ((target.facts.get("cpufreq") or {}).get("turbo") or {}).get("control") or ""
    if control.endswith("/no_turbo"):
        paths, value = [NO_TURBO], "0" if turbo else "1"
    else:
        paths = [BOOST] + [f"{policy}/boost" for policy in root.glob(POLICIES)]
        value = "1" if turbo else "0"
    found = [path for path in paths if root.exists(path)]
    if not found:
        raise no_turbo_switch(root)
    return [AttrChange(path, value) for path in found]


def no_turbo_switch(root: Sysroot) -> NotApplicable:
    """Why turbo cannot be set here: no cpufreq driver at all, or one without a boost file."""
    looked = "no turbo switch (intel_pstate/no_turbo, cpufreq/boost or cpufreq/policy*/boost)"
    policies = root.glob(POLICIES)
    if not policies:
        return NotApplicable(root.display(CPU_DIR), f"{looked}: {NO_CPUFREQ}")
    drivers = sorted({d.strip() for d in (root.read_optional(f"{p}/scaling_driver")
                                          for p in policies) if d and d.strip()})
    return NotApplicable(root.display(CPU_DIR), f"{looked}: the cpufreq driver "
                         f"{', '.join(drivers) or 'in use'} offers none")


def online_cpus(facts: dict[str, Any]) -> list[int]:
    """Online CPUs: the root cpuset, else the NUMA nodes' CPUs."""
    effective = ((facts.get("cgroup") or {}).get("root") or {}).get("effective")
    if not effective:
        nodes = (facts.get("numa") or {}).get("nodes") or []
        effective = ",".join(n["cpulist"] for n in nodes if n.get("cpulist"))
    return parse_cpulist(effective or "", "online CPUs")


def units_with_jobs(units: list[str], facts: dict[str, Any]) -> list[str]:
    """Housekeeping units below which Slurm job cgroups live."""
    tops = {str(job.get("path", "")).removeprefix("/sys/fs/cgroup/").split("/", 1)[0]
            for job in facts.get("slurm_jobs") or []}
    return [unit for unit in units if unit in tops]


def sysroot_effects(root: Sysroot, units: list[str], cpus: str) -> list[Change]:
    """In a sysroot, what the kernel and systemd then report: each unit's effective cpuset
    and the captured ``systemctl show`` (on a live host they follow by themselves)."""
    changes: list[Change] = [AttrChange(f"sys/fs/cgroup/{u}/cpuset.cpus.effective", cpus)
                             for u in units
                             if root.exists(f"sys/fs/cgroup/{u}/cpuset.cpus.effective")]
    text = root.read_optional(SYSTEMCTL_SHOW)
    if text is None:
        return changes
    blocks = []
    for block in (text + "\n").split("\n\n"):
        if not block.strip():
            continue
        if f"Id={block.split('Id=', 1)[-1].splitlines()[0]}" in (f"Id={u}" for u in units):
            block = re.sub(r"(?m)^(AllowedCPUs|EffectiveCPUs)=.*$",
                           lambda m: f"{m.group(1)}={cpus.replace(',', ' ')}", block)
        blocks.append(block.strip("\n"))
    return changes + [FileChange(SYSTEMCTL_SHOW, ("\n\n".join(blocks) + "\n").encode(),
                                 root.file_mode(SYSTEMCTL_SHOW) or 0o644)]


def allowed_cpus_dropin(unit: str, cpus: str) -> bytes:
    """The drop-in ``systemctl set-property UNIT AllowedCPUs=...`` writes."""
    section = "Scope" if unit.endswith(".scope") else "Slice"
    return ("# This is a drop-in unit file extension, created via \"systemctl set-property\"\n"
            "# or an equivalent operation. Do not edit.\n"
            f"[{section}]\nAllowedCPUs=\nAllowedCPUs={cpus.replace(',', ' ')}\n").encode()


def confinable(root: Sysroot) -> None:
    """``NotApplicable`` where the units cannot be confined: systemd is not the init system
    (no units, nothing reads ``AllowedCPUs=``), no cgroup hierarchy, or the cpuset controller
    on a cgroup v1 hierarchy (``AllowedCPUs=`` works on the unified hierarchy only,
    systemd.resource-control(5))."""
    why = systemd_absent(root)
    if why is not None:
        raise NotApplicable(root.display("run/systemd/system"), f"{why}: no systemd unit to "
                            "confine")
    try:
        version = detect_version(root)
    except NotSupported as exc:
        raise NotApplicable(exc.path, f"{exc.reason}: no cpuset to confine the units "
                            "with") from None
    base, interface = cpuset_base(root, version)
    if interface != "v2":
        raise NotApplicable(root.display(base), f"cpuset controller on a cgroup v1 hierarchy "
                            f"(cgroup {version}): systemd's AllowedCPUs= needs cgroup v2")


def plan_housekeeping(root: Sysroot, target: Target) -> list[Change]:
    """Confine the housekeeping units to their CPUs (now and at boot); ban the rest in
    irqbalance. Refuses units that hold Slurm job cgroups unless allowed. ``NotApplicable``
    where the units cannot be confined (:func:`confinable`), even before the profile names
    the CPUs; without ``housekeeping_cpus`` nothing is planned."""
    cpus = target.want.get("housekeeping_cpus")
    if not target.want.get("housekeeping_confined"):
        return []
    try:
        house = None if cpus in (None, "") else parse_cpulist(str(cpus), "cpu.housekeeping_cpus")
    except HostStateError as exc:
        raise KnobInputError("cpu.housekeeping_cpus", exc.reason) from None
    units = [matching(u, SYSTEMD_UNIT, "cpu_housekeeping_units")
             for u in target.settings["cpu_housekeeping_units"]]
    confinable(root)
    if house is None:
        return []
    listed = format_cpulist(house)
    busy = units_with_jobs(units, target.facts)
    if busy and not target.settings["cpu_housekeeping_allow_job_units"]:
        raise KnobInputError(", ".join(busy), "hold Slurm job cgroups: confining them would "
                             "squeeze the running jobs onto the housekeeping CPUs. Move the job "
                             "cgroups out of the unit, or set cpu_housekeeping_allow_job_units="
                             "true to confine anyway")
    changes: list[Change] = [AttrChange(f"sys/fs/cgroup/{u}/cpuset.cpus", listed) for u in units
                             if root.exists(f"sys/fs/cgroup/{u}/cpuset.cpus")]
    changes += [FileChange(f"/etc/systemd/system.control/{u}.d/50-AllowedCPUs.conf",
                           allowed_cpus_dropin(u, listed)) for u in units]
    if not root.live:
        changes += sysroot_effects(root, units, listed)
    # systemd reads the drop-ins now, so a later reload cannot put its old cpusets back
    changes.append(service_step("", "daemon-reload", root))
    rest = sorted(set(online_cpus(target.facts)) - set(house))
    if rest:
        path = clean_path(target.settings["cpu_irqbalance_path"], "cpu_irqbalance_path")
        changes += plan_env_file(root, path, {"IRQBALANCE_BANNED_CPULIST": format_cpulist(rest)},
                                 "shell")
        changes.append(service_step("irqbalance", "try-restart", root))  # reads it at start
    return changes


def plan_bios(_root: Sysroot, target: Target) -> list[Change]:
    """The BIOS C-state/turbo/profile policy, staged through the BMC for the next boot."""
    wanted = target.want.get("bios")
    if not wanted:
        return []
    if target.bmc is None:
        raise NotApplicable("exemplar_bmc_address", "not set: the BIOS policy is read and "
                            "staged through the host's BMC (Redfish), and none is given")
    from ansible_collections.exemplar.tune.plugins.module_utils.knobs.bios_change import (
        plan_change,  # imported here: only hosts with a BMC need the Redfish client
    )
    return [plan_change(target.bmc, wanted, target.settings["cpu_bios_apply_time"])]
