"""The cpu layer's knobs: idle states, kernel C-state limits, tuned, frequency, housekeeping,
NUMA balancing, scheduler autogroup, host memory pages and the BIOS policy behind the BMC.

Family knobs are complete here; the planners of the others are in ``planners/cpu.py``.
"""

from __future__ import annotations

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import (
    BOOTLOADER,
    CheckSpec,
    Knob,
    Setting,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.families import (
    kernel_arg,
    sysctl,
    sysfs_attr,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import IDLE_STATE, WORD
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.kernel_params import (
    layer_params,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.cgroup import HOUSEKEEPING_UNITS

POLICIES = "sys/devices/system/cpu/cpufreq/policy[0-9]*"
# why a host has no cpufreq policy: the not-applicable reason of governor and turbo there
NO_CPUFREQ = ("no cpufreq driver is loaded (none in a VM guest; on bare metal: disabled, "
              "missing or without firmware support)")
GRUB_PATH = Setting("cpu_grub_defaults_path", "/etc/default/grub",
                    "The bootloader defaults file edited by C(cstate_cmdline).")
_ENABLED = ["enabled", "disabled"]
BIOS_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "description": "BIOS policy set through the BMC (Redfish) in normalised terms; the vendor "
                   "attribute map translates it (knob cpu.bios, takes effect after a reboot)",
    "properties": {
        "core_cstates": {"enum": [*_ENABLED, "C1E"]},
        "package_cstate": {"enum": [*_ENABLED, "C6-retention", "C6-non-retention", "C2",
                                    "auto"]},
        "c1e": {"enum": _ENABLED},
        "turbo": {"enum": _ENABLED},
        "profile": {"enum": ["performance", "balanced", "efficiency", "os-controlled", "hpc",
                             "low-latency", "dense", "custom"]}}}
DEEP_CSTATES = {"deep_cstates": {
    "type": "boolean",
    "description": "the deepest idle state must be exposed and enabled on every CPU"}}


ROLE_SUMMARY = "Fix the CPU-layer gaps of a GPU training host"
ROLE_NOTES = (
    "Each knob goes through the journaled engine (previous state recorded, written, read back, "
    "put back on failure) and can be switched off with its C(cpu_<knob>) boolean; a knob whose "
    "target is unset in the profile's C(cpu) section is skipped.",
)

KNOBS: tuple[Knob, ...] = (
    Knob("cpu", "deep_cstates", "enable the deepest idle state (or the named ones) on every "
         "CPU now, and by a udev rule at boot", "plan_deep_cstates",
         {**DEEP_CSTATES, "deep_cstate_names": {
             "type": "array", "items": {"type": "string", "pattern": IDLE_STATE.pattern},
             "description": "idle states to allow, by name (default: the deepest state each "
                            "CPU exposes)"}},
         (Setting("cpu_cstates_udev_rule_path", "/etc/udev/rules.d/90-exemplar-cstates.rules",
                  "The udev rule that re-enables the idle states at boot and CPU online."),),
         facts=("cpu.cpuidle",), former={"cpu_deep_cstate_names": "deep_cstate_names"},
         doc="C(deep_cstates) enables the deepest idle state (or C(cpu.deep_cstate_names)) on "
             "every CPU now and writes a udev rule that does it again at boot and for CPUs "
             "brought online."),
    Knob("cpu", "cstate_cmdline", "remove the C-state limits from the kernel command line",
         "plan_cstate_cmdline", DEEP_CSTATES,
         (Setting("cpu_cstate_cmdline_remove", ["intel_idle.max_cstate", "processor.max_cstate",
                                                "idle", "intel_idle.states_off", "cpuidle.off"],
                  "Kernel parameters removed from the bootloader defaults."), GRUB_PATH,
          BOOTLOADER),
         reboot=True,
         doc="C(cstate_cmdline) removes C-state limits from C(/etc/default/grub); it takes "
             "effect after a reboot, which the role never does - it sets "
             "C(cpu_reboot_required) instead."),
    Knob("cpu", "tuned_profile", "switch tuned to a child profile without force_latency",
         "plan_tuned_profile", DEEP_CSTATES,
         (Setting("cpu_tuned_child_suffix", "-no-force-latency",
                  "Suffix of the child profile's name (C(<active><suffix>) under "
                  "C(/etc/tuned))."),),
         facts=("cpu.tuned",),
         doc="C(tuned_profile) switches tuned to a child profile of the active one with "
             "C(force_latency=none) (tuned is never stopped)."),
    sysfs_attr("cpu", "governor", f"{POLICIES}/scaling_governor",
               "cpufreq governor of every policy",
               {"type": "string", "pattern": WORD.pattern,
                "description": "cpufreq governor for every policy (performance)"},
               doc="C(governor) writes the governor of every cpufreq policy (runtime).",
               absent=NO_CPUFREQ),
    Knob("cpu", "turbo", "turbo allowed or not", "plan_turbo",
         {"turbo": {"type": "boolean",
                    "description": "turbo allowed (true) or forbidden (false)"}},
         facts=("cpu.cpufreq",),
         doc="C(turbo) sets intel_pstate C(no_turbo), else cpufreq C(boost) (runtime)."),
    Knob("cpu", "housekeeping", "confine housekeeping units to their CPUs, ban the others in "
         "irqbalance", "plan_housekeeping",
         {"housekeeping_confined": {
             "type": "boolean",
             "description": "system.slice/user.slice/init.scope must not share CPUs with "
                            "training jobs"},
          "housekeeping_cpus": {
             "type": "string", "pattern": "^[0-9,\\-]+$",
             "description": "CPU list (kernel cpulist format) that system.slice, user.slice "
                            "and init.scope are confined to; the rest is left to training "
                            "jobs"}},
         (Setting("cpu_housekeeping_units", list(HOUSEKEEPING_UNITS),
                  "systemd units confined to the housekeeping CPUs."),
          Setting("cpu_housekeeping_allow_job_units", False,
                  "Confine a unit even when Slurm job cgroups live below it. Off by default - "
                  "the running jobs would be squeezed onto the housekeeping CPUs."),
          Setting("cpu_irqbalance_path", "/etc/default/irqbalance",
                  "irqbalance's environment file (C(/etc/sysconfig/irqbalance) on RHEL).")),
         facts=("cpu.cgroup", "cpu.numa", "cpu.slurm_jobs"),
         former={"cpu_housekeeping_confined": "housekeeping_confined",
                 "cpu_housekeeping_cpus": "housekeeping_cpus"},
         doc="C(housekeeping) writes the units' cpusets now, the C(AllowedCPUs=) drop-ins for "
             "the next boot, and bans the other CPUs in irqbalance."),
    sysctl("cpu", "numa_balancing", "kernel.numa_balancing", "kernel.numa_balancing now and "
           "in sysctl.d",
           {"type": "integer", "minimum": 0, "maximum": 3,
            "description": "value of kernel.numa_balancing (0 off, 1 normal, 2 memory "
                           "tiering, 3 both)"},
           check=CheckSpec("low", "kernel.numa_balancing matches the profile",
                           "automatic NUMA balancing unmaps pages to sample access: hinting "
                           "page faults and page migrations stall loader threads during "
                           "training"),
           boot_arg=("numa_balancing", {0: "disable", 1: "enable"})),
    sysctl("cpu", "sched_autogroup", "kernel.sched_autogroup_enabled",
           "kernel.sched_autogroup_enabled now and in sysctl.d",
           {"type": "integer", "minimum": 0, "maximum": 1,
            "description": "value of kernel.sched_autogroup_enabled (1: CFS shares CPU time "
                           "per session, 0: per task)"},
           check=CheckSpec("low", "kernel.sched_autogroup_enabled matches the profile",
                           "with autogroup on, CFS divides CPU time between sessions, not "
                           "tasks: a training job's many threads weigh as much as one shell's "
                           "build on a contended core")),
    sysctl("cpu", "vm_max_map_count", "vm.max_map_count",
           "vm.max_map_count raised to the profile's floor, now and in sysctl.d",
           {"type": "integer", "minimum": 65530, "maximum": 2147483647,
            "description": "least vm.max_map_count (memory maps per process; kernel default "
                           "65530, NVIDIA's nvidia-gb200-performance TuneD profile sets "
                           "262144)"},
           check=CheckSpec("low", "vm.max_map_count is at least the profile's floor",
                           "a process that maps more regions than vm.max_map_count (many "
                           "mmapped checkpoint shards, CUDA/UVM and pinned host allocations "
                           "on large GB200 jobs) fails its next mmap with ENOMEM"),
           minimum=True),
    sysfs_attr("cpu", "transparent_hugepage", "sys/kernel/mm/transparent_hugepage/enabled",
               "transparent huge pages mode",
               {"type": "string", "enum": ["always", "madvise", "never"],
                "pattern": WORD.pattern,
                "description": "transparent huge pages: always, madvise (only where the "
                               "program asks) or never"},
               check=CheckSpec("low", "transparent huge pages mode matches the profile",
                               "THP decides whether loader and pinned host buffers get huge "
                               "pages (fewer TLB misses) or pay compaction stalls; on a 64 KiB "
                               "page Grace kernel a THP is 512 MiB (NVIDIA Grace tuning "
                               "guide)"),
               doc="C(transparent_hugepage) writes the THP mode (runtime; the kernel "
                   "argument C(transparent_hugepage=) keeps it across boots).",
               absent="the kernel has no transparent huge pages (built without "
                      "CONFIG_TRANSPARENT_HUGEPAGE)"),
    *(sysfs_attr("cpu", f"hugepages_{size}",
                 f"sys/kernel/mm/hugepages/hugepages-{kib}kB/nr_hugepages",
                 f"{size.upper()} hugetlb pool size",
                 {"type": "integer", "minimum": 0, "maximum": 1 << 24,
                  "description": f"{size.upper()} huge pages reserved in the hugetlb pool "
                                 f"(NVIDIA's GB200 performance profile: {count})"},
                 check=CheckSpec("low", f"{size.upper()} hugetlb pool matches the profile",
                                 "programs that map hugetlbfs fall back to small pages or "
                                 "fail to map when the pool is smaller than provisioned"),
                 doc=f"C(hugepages_{size}) sets the {size.upper()} hugetlb pool now (the kernel "
                     "may find less contiguous memory on a long-running host: then the knob "
                     "fails and is put back; the kernel arguments C(hugepagesz=) "
                     "C(hugepages=) reserve it at boot).",
                 absent=f"the kernel offers no {size.upper()} huge page size (a CPU or base page "
                        "size without it, or a kernel without hugetlbfs)")
      for size, kib, count in (("2m", 2048, 5128), ("1g", 1048576, 2))),
    Knob("cpu", "bios", "BIOS C-state, C1E, turbo and profile policy through the BMC",
         "plan_bios", {"bios": BIOS_SCHEMA},
         (Setting("cpu_bios_apply_time", "OnReset",
                  "C(@Redfish.SettingsApplyTime) requested for BIOS changes where the BMC "
                  "lists it.", choices=("OnReset", "Immediate", "AtMaintenanceWindowStart",
                                        "InMaintenanceWindowOnReset")),),
         reboot=True,
         doc="C(bios) stages the BIOS C-state, C1E, turbo and profile settings through the "
             "host's BMC (Redfish C(PATCH Bios/Settings), applied at the next reset, so "
             "C(cpu_reboot_required) becomes true); it runs only where "
             "C(exemplar_bmc_address) is set, from where the role runs, and the journal keeps "
             "the previous values for C(restore)."),
    kernel_arg("cpu", "init_on_alloc", "init_on_alloc",
               "init_on_alloc on the kernel command line (next boot)",
               {"type": "integer", "minimum": 0, "maximum": 1,
                "description": "init_on_alloc= kernel argument: 0 leaves allocated pages as "
                               "they are, 1 zeroes them (nvidia-base: 0)"},
               grub=GRUB_PATH,
               check=CheckSpec("low", "init_on_alloc matches the profile",
                               "with init_on_alloc=1 (the default of several distributions' "
                               "kernels) every allocated page is zeroed: slower large "
                               "allocations and page faults for pinned and loader memory")),
    *layer_params("cpu"),
)
