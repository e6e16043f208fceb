"""How the cpu layer's planner knobs plan: idle states, kernel C-state limits, tuned, turbo,
housekeeping and the BIOS policy behind the BMC (declared in ``knobs/cpu.py``)."""

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
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.cpu import POLICIES
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.envfile import plan_env_file
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
IDLE_DIRS = "sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*"
CPUIDLE_DRIVER = "sys/devices/system/cpu/cpuidle/current_driver"
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
    names = state_names(target)
    if not names:
        return []
    changes: list[Change] = []
    indices: set[int] = set()
    for directory in root.glob(IDLE_DIRS):
        indices.add(int(directory.rsplit("state", 1)[1]))
        if root.read_optional(f"{directory}/name") in names and \
                root.exists(f"{directory}/disable"):
            changes.append(AttrChange(f"{directory}/disable", "0"))
    states = (target.facts.get("cpuidle") or {}).get("states") or []
    if any(s.get("name") in names and s.get("default_status") == "disabled" for s in states):
        path = clean_path(target.settings["cpu_cstates_udev_rule_path"],
                          "cpu_cstates_udev_rule_path")
        changes.append(FileChange(path, udev_rule(names, sorted(indices))))
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
    return [FileChange(f"/etc/tuned/{child}/tuned.conf", conf.encode()),
            *plan_switch(root, [child])]


def plan_turbo(root: Sysroot, target: Target) -> list[Change]:
    """Turbo on or off: intel_pstate ``no_turbo``, else cpufreq ``boost`` (runtime)."""
    turbo = target.want.get("turbo")
    if turbo is None:
        return []
    control = ((target.facts.get("cpufreq") or {}).get("turbo") or {}).get("control") or ""
    if control.endswith("/no_turbo"):
        paths, value = ["sys/devices/system/cpu/intel_pstate/no_turbo"], "0" if turbo else "1"
    else:
        paths = ["sys/devices/system/cpu/cpufreq/boost"] + [
            f"{policy}/boost" for policy in root.glob(POLICIES)]
        value = "1" if turbo else "0"
    return [AttrChange(path, value) for path in paths if root.exists(path)]


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


def plan_housekeeping(root: Sysroot, target: Target) -> list[Change]:
    """Confine the housekeeping units to their CPUs (now and at boot); ban the rest in
    irqbalance. Refuses units that hold Slurm job cgroups unless allowed."""
    cpus = target.want.get("housekeeping_cpus")
    if not target.want.get("housekeeping_confined") or cpus in (None, ""):
        return []
    try:
        house = parse_cpulist(str(cpus), "cpu.housekeeping_cpus")
    except HostStateError as exc:
        raise KnobInputError("cpu.housekeeping_cpus", exc.reason) from None
    listed = format_cpulist(house)
    units = [matching(u, SYSTEMD_UNIT, "cpu_housekeeping_units")
             for u in target.settings["cpu_housekeeping_units"]]
    busy = units_with_jobs(units, target.facts)
    if busy and not target.settings["cpu_housekeeping_allow_job_units"]:
        raise KnobInputError(", ".join(busy), "hold Slurm job cgroups: confining them would "
                             "squeeze the running jobs onto the housekeeping CPUs. Move the job "
                             "cgroups out of the unit, or set cpu_housekeeping_allow_job_units="
                             "true to confine anyway. Nothing was changed")
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
    if not wanted or target.bmc is None:
        return []
    from ansible_collections.exemplar.tune.plugins.module_utils.knobs.bios_change import (
        plan_change,  # imported here: only hosts with a BMC need the Redfish client
    )
    return [plan_change(target.bmc, wanted, target.settings["cpu_bios_apply_time"])]
