"""cpu-layer checks: idle states, PM QoS, frequency, housekeeping placement, NUMA.

Every check reads ``facts["cpu"]`` (and ``facts["vm"]`` / ``facts["gpu"]`` where noted) and
``profile["cpu"]``; a check whose profile key is absent is skipped as not applicable, one whose
facts could not be read (``None``) as unknown, naming the file and why. Semantics: the
kernel's cpuidle, pm_qos_interface, cpufreq, cgroup-v2 and kernel-parameters documentation,
and systemd.resource-control(5).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.knobs.planners.cpu import online_cpus
from ansible_collections.exemplar.tune.plugins.module_utils.readers.cgroup import HOUSEKEEPING_UNITS
from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpulist import (
    format_cpulist,
    parse_cpulist,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError

from exemplar_tune.checks.base import (
    FAIL,
    PASS,
    WARN,
    Facts,
    Outcome,
    Profile,
    check,
    not_applicable,
    read_errors,
    source,
    unknown,
    why_unknown,
)

GUEST = "guest C-states do not control the host"
# Command-line values that are no limit: the drivers' own defaults / "off" switches.
INTEL_IDLE_MAX_DEFAULT = 9  # CPUIDLE_STATE_MAX - 1
PROCESSOR_MAX_DEFAULT = 8  # ACPI_PROCESSOR_MAX_POWER


# ---- helpers (pure) -------------------------------------------------------------------------

def _cpu(facts: Facts) -> dict[str, Any]:
    return facts.get("cpu") or {}


def _want(profile: Profile, key: str) -> Any:
    return (profile.get("cpu") or {}).get(key)


def _unread(facts: Facts, key: str, layer: str = "cpu") -> str:
    return why_unknown(facts, layer, key)


def _evidence(facts: Facts, *keys: str, layer: str = "cpu") -> tuple[str, ...]:
    found: list[str] = []
    for key in keys:
        found += [s for s in source(facts, layer, key) if s not in found]
    return tuple(found)


def _cpus(text: str | None) -> set[int] | None:
    """A kernel cpulist as a set; ``None`` when unknown or malformed."""
    if text is None:
        return None
    try:
        return set(parse_cpulist(text))
    except ParseError:
        return None


def _fmt(cpus: set[int] | list[int]) -> str:
    return format_cpulist(sorted(cpus)) or "none"


def _guest(facts: Facts) -> bool | None:
    """True on a VM guest, False on bare metal, None when the vm layer did not say."""
    return (facts.get("vm") or {}).get("virtualized")


def _virt_unknown(facts: Facts) -> str:
    """Why ``vm.virtualized`` is unknown, in a few words."""
    if "vm" not in facts:
        return "no vm facts"
    return "virtualisation unknown in the vm facts"


def _online(cpu: dict[str, Any]) -> set[int] | None:
    """Online CPUs as the housekeeping knob sees them (None: unknown)."""
    try:
        return set(online_cpus(cpu)) or None
    except ParseError:
        return None


def _job_cpus(cpu: dict[str, Any]) -> dict[int | str, set[int]] | None:
    """``{job_id: effective CPUs}`` of the Slurm job cgroups; None when unknown."""
    jobs = cpu.get("slurm_jobs")
    if jobs is None:
        return None
    found = {}
    for job in jobs:
        cpus = _cpus(job.get("effective") or job.get("cpus"))
        if cpus:
            found[job.get("job_id")] = cpus
    return found


# ---- idle states ----------------------------------------------------------------------------

@check("cpu.deep-cstates-disabled",
       hand="every CPU's idle states, the profile's state names and the guest case together",
       severity="high",
       title="The deepest C-state is exposed and enabled on every CPU",
       risk="idle cores held in shallow C-states starve busy cores of turbo: 3.0 vs 3.8 GHz, "
            "~4 % step time",
       fix="enable the deepest state on every CPU (cpuidle stateN/disable=0) and in BIOS "
           "(C-states Auto/Enabled)",
       knob="cpu.deep_cstates")
def check_deep_cstates_disabled(facts: Facts, profile: Profile) -> Outcome:
    if not _want(profile, "deep_cstates"):
        return not_applicable("profile sets no deep_cstates")
    idle = _cpu(facts).get("cpuidle")
    if idle is None:
        return unknown(f"cpuidle facts unknown ({_unread(facts, 'cpuidle')})")
    if _guest(facts):
        return not_applicable(GUEST)
    evidence = source(facts, "cpu", "cpuidle")
    driver = idle.get("driver")
    if driver in (None, "none") or not idle.get("states"):
        if _guest(facts) is None:
            return unknown(f"cpuidle driver {driver or 'absent'} and {_virt_unknown(facts)}: "
                           "cannot tell a guest from bare metal")
        return Outcome(FAIL, observed={"driver": driver, "states_exposed": 0},
                       expected="a cpuidle driver with deep states",
                       detail=f"cpuidle driver {driver or 'absent'} on bare metal: CPUs idle "
                              "without C-states", evidence=evidence)
    return _judge_states(idle, _want(profile, "min_idle_states"), evidence)


def _judge_states(idle: dict[str, Any], min_states: int | None,
                  evidence: tuple[str, ...]) -> Outcome:
    states = idle["states"]
    deep = next((s for s in states if s.get("name") == idle.get("deepest_state")), states[-1])
    name, latency = deep.get("name"), deep.get("latency_us")
    disabled, missing = set(deep.get("disabled_cpus") or []), set(deep.get("missing_cpus") or [])
    exposed = idle.get("states_exposed", len(states))
    observed = {"deepest_state": name, "latency_us": latency, "disabled_cpus": _fmt(disabled),
                "missing_cpus": _fmt(missing), "states_exposed": exposed}
    expected = {"deepest_state_disabled_cpus": "none", "states_exposed_min": min_states}
    problems = []
    if disabled:
        problems.append(f"{name} ({latency} us) disabled on CPUs {_fmt(disabled)} "
                        f"(default_status={deep.get('default_status')})")
    if missing:
        problems.append(f"{name} absent on CPUs {_fmt(missing)}")
    if min_states is not None and exposed < min_states:
        names = ", ".join(s.get("name") or "?" for s in states)
        problems.append(f"only {exposed} states exposed ({names}), profile wants "
                        f">= {min_states}: deep C-states hidden by BIOS or driver")
    if problems:
        return Outcome(FAIL, observed, expected, "; ".join(problems), evidence)
    return Outcome(PASS, observed, expected,
                   f"{name} ({latency} us) enabled on every CPU, {exposed} states exposed",
                   evidence)


def _cmdline_limit(name: str, value: str | None) -> bool:
    """Whether ``name=value`` on the command line caps the idle states."""
    if name == "idle":
        return True
    number = _int(value)
    if name == "intel_idle.max_cstate":
        return number is None or number < INTEL_IDLE_MAX_DEFAULT
    if name == "processor.max_cstate":
        return number is None or number < PROCESSOR_MAX_DEFAULT
    if name == "intel_idle.states_off":
        return number != 0
    if name == "cpuidle.off":
        return value not in ("0", "n", "N")
    return False


def _int(value: str | None) -> int | None:
    try:
        return int(value, 0) if value is not None else None
    except ValueError:
        return None


def _param_limits(limits: dict[str, Any]) -> list[str]:
    """Limits seen in ``/sys/module/{intel_idle,processor}/parameters`` (e.g. modprobe.d)."""
    intel = limits.get("intel_idle") or {}
    found = []
    if intel.get("max_cstate") is not None and intel["max_cstate"] < INTEL_IDLE_MAX_DEFAULT:
        found.append(f"intel_idle max_cstate={intel['max_cstate']}")
    if intel.get("states_off"):
        found.append(f"intel_idle states_off={intel['states_off']:#x}")
    return found


@check("cpu.cstate-cmdline-limits",
       hand="several kernel arguments, each against its driver's own default",
       severity="high",
       title="No C-state limit on the kernel command line",
       risk="a boot-time C-state cap keeps deep states off on every boot: 3.0 vs 3.8 GHz turbo, "
            "~4 % step time, and only a reboot removes it",
       fix="remove intel_idle.max_cstate= / processor.max_cstate= / idle= / "
           "intel_idle.states_off= / cpuidle.off= from the bootloader config and reboot",
       knob="cpu.cstate_cmdline")
def check_cstate_cmdline_limits(facts: Facts, profile: Profile) -> Outcome:
    if not _want(profile, "deep_cstates"):
        return not_applicable("profile sets no deep_cstates")
    limits = _cpu(facts).get("cstate_limits")
    if limits is None:
        return unknown(f"kernel command line unknown ({_unread(facts, 'cstate_limits')})")
    if limits.get("cmdline") is None:
        return unknown("kernel command line unknown (/proc/cmdline absent or unreadable)")
    if _guest(facts):
        return not_applicable(GUEST)
    found = [f"{name}={value}" if value is not None else name
             for name, value in limits["cmdline"].items() if _cmdline_limit(name, value)]
    found += _param_limits(limits)
    evidence = source(facts, "cpu", "cstate_limits")
    if found:
        return Outcome(FAIL, observed=found, expected=[],
                       detail=f"C-state limits set: {', '.join(found)} (reboot needed)",
                       evidence=evidence)
    return Outcome(PASS, observed=[], expected=[], detail="no C-state limit on the command line",
                   evidence=evidence)


# ---- PM QoS ---------------------------------------------------------------------------------

def _qos_thresholds(cpu: dict[str, Any], profile: Profile) -> dict[str, int]:
    """``{why: µs}``: a latency request below any of these is a finding."""
    found = {}
    if _want(profile, "pm_qos_max_latency_us") is not None:
        found["profile pm_qos_max_latency_us"] = _want(profile, "pm_qos_max_latency_us")
    states = (cpu.get("cpuidle") or {}).get("states") or []
    deep = max(states, key=lambda s: s.get("latency_us") or -1, default=None)
    if _want(profile, "deep_cstates") and deep and deep.get("latency_us"):
        found[f"{deep['name']} exit latency"] = deep["latency_us"]
    return found


def _below(value: int | str, thresholds: dict[str, int]) -> list[str]:
    return [f"{why} {limit} us" for why, limit in thresholds.items()
            if value == "n/a" or int(value) < limit]


def _holders(cpu: dict[str, Any]) -> str:
    qos, tuned = cpu.get("pm_qos") or {}, cpu.get("tuned") or {}
    names = [f"{h.get('comm') or '?'} (pid {h.get('pid')})" for h in qos.get("holders") or []]
    text = "held by " + ", ".join(names) if names else "no holder visible (needs root)"
    if tuned.get("active_profiles") and tuned.get("force_latency_profile"):
        text += (f"; tuned profile {tuned['force_latency_profile']} sets "
                 f"force_latency={tuned.get('force_latency')}")
    return text


def _resume_findings(qos: dict[str, Any], thresholds: dict[str, int]) -> list[str]:
    found = []
    for value, cpus in (qos.get("resume_latency_us") or {}).items():
        if value == "0":
            continue
        limit = value if value == "n/a" else _int(value)
        if limit is not None and _below(limit, thresholds):
            found.append(f"pm_qos_resume_latency_us={value} on CPUs {_fmt(cpus)}")
    return found


@check("cpu.pm-qos-holder",
       hand="the PM QoS request against the deep states' latencies, and who holds it",
       severity="high",
       title="No PM QoS request blocks the deep C-states",
       risk="a held /dev/cpu_dma_latency request keeps every CPU out of slower states (99 us "
            "blocks C6 at 290 us): 3.0 vs 3.8 GHz turbo, ~4 % step time",
       fix="switch tuned to a child profile without force_latency (never kill tuned); stop "
           "other holders of /dev/cpu_dma_latency; write 0 to cpuN/power/pm_qos_resume_latency_us",
       knob="cpu.tuned_profile")
def check_pm_qos_holder(facts: Facts, profile: Profile) -> Outcome:
    cpu = _cpu(facts)
    thresholds = _qos_thresholds(cpu, profile)
    if not thresholds:
        return not_applicable("profile sets no pm_qos_max_latency_us or deep_cstates")
    qos = cpu.get("pm_qos")
    if qos is None:
        return unknown(f"PM QoS facts unknown ({_unread(facts, 'pm_qos')})")
    value = qos.get("cpu_dma_latency_us")
    findings = _resume_findings(qos, thresholds)
    below = [] if value is None else _below(value, thresholds)
    if below:
        findings.insert(0, f"/dev/cpu_dma_latency = {value} us < {' and < '.join(below)}: "
                           f"{_holders(cpu)}")
    observed = {"cpu_dma_latency_us": value,
                "holders": [f"{h.get('pid')}/{h.get('comm')}" for h in qos.get("holders") or []],
                "tuned_force_latency_profile": (cpu.get("tuned") or {}).get(
                    "force_latency_profile")}
    expected = {"cpu_dma_latency_us_min": max(thresholds.values())}
    evidence = _evidence(facts, "pm_qos", "tuned")
    if findings:
        return Outcome(FAIL, observed, expected, "; ".join(findings), evidence)
    if value is None:  # absent from a capture, or a live host read without root
        why = next((e.get("error") for e in cpu.get("errors") or []
                    if e.get("fact") == "pm_qos"), None)
        return unknown(f"cannot read /dev/cpu_dma_latency ({why or 'needs root'})")
    return Outcome(PASS, observed, expected,
                   f"/dev/cpu_dma_latency = {value} us, no per-CPU resume-latency limit",
                   evidence)


# ---- BIOS, read through the BMC --------------------------------------------------------------

SHALLOW_STATES = ("POLL", "C1")  # C1, C1E, C1_ACPI ...: every other state is a deep one
BIOS_FIELDS = ("core_cstates", "package_cstate", "c1e", "turbo", "profile")


def _deep_states(idle: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in idle.get("states") or []
            if not str(s.get("name") or "").upper().startswith(SHALLOW_STATES)]


def _os_blockers(cpu: dict[str, Any]) -> list[str]:
    """What on the OS side keeps the CPUs out of their deep states, naming check and knob."""
    limits, found = cpu.get("cstate_limits") or {}, []
    capped = [f"{name}={value}" if value is not None else name
              for name, value in (limits.get("cmdline") or {}).items()
              if _cmdline_limit(name, value)] + _param_limits(limits)
    if capped:
        found.append(f"{', '.join(capped)} (cpu.cstate-cmdline-limits, knob cpu.cstate_cmdline)")
    idle = cpu.get("cpuidle") or {}
    deep = _deep_states(idle)
    if not deep:
        found.append(f"cpuidle driver {idle.get('driver') or 'absent'} exposes no state deeper "
                     "than C1E (check MONITOR/MWAIT in the BIOS and the idle driver)")
    off = [s.get("name") for s in deep if s.get("disabled_cpus")]
    if off:
        found.append(f"{', '.join(off)} disabled in cpuidle (cpu.deep-cstates-disabled, "
                     "knob cpu.deep_cstates)")
    qos = (cpu.get("pm_qos") or {}).get("cpu_dma_latency_us")
    deepest = max((s.get("latency_us") or 0 for s in deep), default=0)
    if qos is not None and deepest and qos < deepest:
        found.append(f"/dev/cpu_dma_latency = {qos} us < {deepest} us, {_holders(cpu)} "
                     "(cpu.pm-qos-holder, knob cpu.tuned_profile)")
    return found


def _bios_expected(profile: Profile) -> dict[str, Any]:
    """The profile's BIOS targets; deep_cstates implies core C-states enabled."""
    want = {k: v for k, v in (_want(profile, "bios") or {}).items() if v is not None}
    if _want(profile, "deep_cstates"):
        want.setdefault("core_cstates", "enabled")
    return want


def _named(bios: dict[str, Any], field: str) -> str:
    """``ProcCStates=Disabled``: the vendor attribute behind a field and its raw value."""
    attr = (bios.get("attributes") or {}).get(field)
    return f"{attr}={(bios.get('raw') or {}).get(attr)}" if attr else field


@check("cpu.bios-cstates",
       hand="several BIOS attributes, their pending values and the OS's idle states",
       severity="high",
       title="The BIOS C-state policy (read over Redfish) matches the profile and the OS",
       risk="C-states disabled in the BIOS hide the deep idle states from the OS on every boot: "
            "busy cores stay below turbo (3.0 vs 3.8 GHz, ~4 % step time) and only a BIOS "
            "change plus a reboot removes it",
       fix="set the BIOS through the BMC (knob cpu.bios) and reboot; when the BIOS allows C6 "
           "but the OS blocks it, fix the OS side (knobs cpu.cstate_cmdline, "
           "cpu.tuned_profile, cpu.deep_cstates)",
       knob="cpu.bios")
def check_bios_cstates(facts: Facts, profile: Profile) -> Outcome:
    expected = _bios_expected(profile)
    if not expected:
        return not_applicable("profile sets no cpu.bios targets and no deep_cstates")
    bios = _cpu(facts).get("bios")
    if bios is None:
        return unknown(f"BIOS facts unknown: the BMC or its capture could not be read "
                       f"({_unread(facts, 'bios')})")
    if not bios.get("present"):  # no BMC given: the BIOS reading was not asked for
        return not_applicable(bios.get("reason") or "no BMC configured")
    if not bios.get("vendor_known"):
        return unknown(f"BMC vendor unknown (manufacturer {bios.get('manufacturer')!r}): raw BIOS "
                       "attributes only")
    observed = {f: bios.get(f) for f in BIOS_FIELDS if bios.get(f) is not None}
    observed["pending"] = bios.get("pending") or {}
    evidence = _evidence(facts, "bios", "cpuidle", "cstate_limits", "pm_qos")
    return _judge_bios(_cpu(facts), bios, expected, observed, evidence)


def _judge_bios(cpu: dict[str, Any], bios: dict[str, Any], expected: dict[str, Any],
                observed: dict[str, Any], evidence: tuple[str, ...]) -> Outcome:
    pending = bios.get("pending") or {}
    unresolved = {f: v for f, v in expected.items() if bios.get(f) != v and pending.get(f) != v}
    if unresolved:
        return Outcome(FAIL, observed, expected, _bios_mismatch(cpu, bios, unresolved),
                       evidence)
    blockers = _os_blockers(cpu) if expected.get("core_cstates") == "enabled" and \
        bios.get("core_cstates") == "enabled" else []
    if blockers:
        return Outcome(FAIL, observed, expected,
                       f"BIOS allows C-states ({_named(bios, 'core_cstates')}) but the OS blocks "
                       f"them: {'; '.join(blockers)}", evidence)
    if pending:
        changes = ", ".join(f"{f} {bios.get(f)} -> {v}" for f, v in sorted(pending.items()))
        return Outcome(WARN, observed, expected, f"BIOS change pending, not applied yet: "
                       f"{changes}; reboot needed (exemplar_reboot_via=redfish resets through "
                       "the BMC)", evidence)
    deep = [s.get("name") for s in _deep_states(cpu.get("cpuidle") or {})]
    return Outcome(PASS, observed, expected,
                   f"BIOS {', '.join(_named(bios, f) for f in expected)} as the profile wants"
                   + (f"; the OS uses {', '.join(deep)}" if deep else ""), evidence)


def _bios_mismatch(cpu: dict[str, Any], bios: dict[str, Any], wrong: dict[str, Any]) -> str:
    text = "; ".join(f"BIOS {f}={bios.get(f)} ({_named(bios, f)}), profile wants {v}"
                     for f, v in wrong.items())
    idle = cpu.get("cpuidle") or {}
    if wrong.get("core_cstates") == "enabled" and bios.get("core_cstates") != "enabled" and \
            not _deep_states(idle):
        names = ", ".join(s.get("name") or "?" for s in idle.get("states") or []) or "none"
        text = (f"cause found: BIOS {_named(bios, 'core_cstates')} hides the deep C-states from "
                f"the OS (states exposed: {names}); {text}")
    return text + ": fix in the BIOS (knob cpu.bios), then reboot"


# ---- frequency ------------------------------------------------------------------------------

@check("cpu.governor",
       hand="policies folded by governor into CPU lists, not listed one by one",
       severity="medium",
       title="Every cpufreq policy uses the profile's governor",
       risk="an on-demand governor ramps frequency only after load appears: slower data loading "
            "and kernel launches after every idle gap",
       fix="set scaling_governor on every policy (or the tuned [cpu] governor)",
       knob="cpu.governor")
def check_governor(facts: Facts, profile: Profile) -> Outcome:
    want = _want(profile, "governor")
    if want is None:
        return not_applicable("profile sets no governor")
    freq = _cpu(facts).get("cpufreq")
    if freq is None:
        return unknown(f"cpufreq facts unknown ({_unread(facts, 'cpufreq')})")
    policies = freq.get("policies") or []
    if not policies:
        return not_applicable("no cpufreq policy (VM guest or no cpufreq driver)")
    wrong: dict[str, set[int]] = {}
    for policy in policies:
        if policy.get("governor") != want:
            wrong.setdefault(str(policy.get("governor")), set()).update(policy.get("cpus") or [])
    observed = {gov: _fmt(cpus) for gov, cpus in (freq.get("governors") or {}).items()}
    evidence = source(facts, "cpu", "cpufreq")
    if wrong:
        text = ", ".join(f"{gov} on CPUs {_fmt(cpus)}" for gov, cpus in sorted(wrong.items()))
        return Outcome(FAIL, observed, want, f"governor {text}, want {want}", evidence)
    return Outcome(PASS, observed, want, f"{want} on all {len(policies)} policies", evidence)


@check("cpu.turbo",
       hand="the global turbo control and each policy's boost together",
       severity="high",
       title="Turbo/boost matches the profile",
       risk="without turbo busy cores stay at base clock: 2.2 instead of 3.8 GHz on a Xeon "
            "8460H for data loading and kernel launches",
       fix="allow turbo: intel_pstate/no_turbo=0 or cpufreq/boost=1 (and turbo enabled in BIOS)",
       knob="cpu.turbo")
def check_turbo(facts: Facts, profile: Profile) -> Outcome:
    want = _want(profile, "turbo")
    if want is None:
        return not_applicable("profile sets no turbo")
    freq = _cpu(facts).get("cpufreq")
    if freq is None:
        return unknown(f"cpufreq facts unknown ({_unread(facts, 'cpufreq')})")
    turbo = freq.get("turbo") or {}
    enabled = turbo.get("enabled")
    if enabled is None:
        unread = _turbo_unread(facts)
        if unread:
            return unknown(f"turbo control not read ({unread})")
        return not_applicable("no turbo control exposed (no cpufreq driver or VM guest)")
    off = sorted(c for p in freq.get("policies") or [] if p.get("boost") in (0, False)
                 for c in p.get("cpus") or [])
    where = turbo.get("control") or "cpufreq"
    evidence = (where,) if turbo.get("control") else source(facts, "cpu", "cpufreq")
    if enabled != want or (want and off):
        detail = f"turbo {'enabled' if enabled else 'disabled'} ({where})"
        if want and off:
            detail += f"; policy boost=0 on CPUs {_fmt(off)}"
        return Outcome(FAIL, enabled and not off, want, f"{detail}, profile wants "
                       f"{'on' if want else 'off'}", evidence)
    return Outcome(PASS, enabled, want, f"turbo {'enabled' if enabled else 'disabled'} "
                   f"({where})", evidence)


def _turbo_unread(facts: Facts) -> str:
    """The read error of a turbo control file (intel_pstate no_turbo/status, cpufreq boost),
    ``path: reason``; ``""`` when none was recorded."""
    return next((f"{e.get('path')}: {e.get('error')}" for e in _cpu(facts).get("errors") or []
                 if e.get("fact") == "cpufreq"
                 and str(e.get("path")).endswith(("/no_turbo", "/boost", "intel_pstate/status"))),
                "")


# ---- placement ------------------------------------------------------------------------------

def _housekeeping(cpu: dict[str, Any]) -> dict[str, set[int]] | None:
    """``{unit: effective CPUs}`` of the housekeeping units that exist; None when unknown."""
    units = cpu.get("housekeeping")
    if not units:
        return None
    found = {}
    for unit in HOUSEKEEPING_UNITS:
        cpus = _cpus((units.get(unit) or {}).get("effective"))
        if cpus:
            found[unit] = cpus
    return found or None


@check("cpu.housekeeping-overlap",
       hand="the housekeeping units' CPU sets against the job CPUs",
       severity="medium",
       title="Housekeeping (system.slice, user.slice, init.scope) runs off the job CPUs",
       risk="housekeeping threads preempt data loaders: 50-100 ms stalls, bimodal step times",
       fix="confine system.slice, user.slice and init.scope with AllowedCPUs= to housekeeping "
           "cores outside the Slurm job cpusets",
       knob="cpu.housekeeping")
def check_housekeeping_overlap(facts: Facts, profile: Profile) -> Outcome:
    if not _want(profile, "housekeeping_confined"):
        return not_applicable("profile sets no housekeeping_confined")
    cpu = _cpu(facts)
    units = _housekeeping(cpu)
    if units is None:
        return unknown(f"housekeeping cpusets unknown ({_housekeeping_unread(facts)})")
    jobs = _job_cpus(cpu) or {}
    evidence = _evidence(facts, "housekeeping", "slurm_jobs")
    observed = {"housekeeping": {u: _fmt(c) for u, c in units.items()},
                "jobs": {str(j): _fmt(c) for j, c in jobs.items()}}
    if jobs:
        return _judge_overlap(units, jobs, observed, evidence)
    online = _online(cpu)
    wide = [u for u, c in units.items() if online and c >= online]
    if wide:
        return Outcome(WARN, observed, "housekeeping on a subset of the CPUs",
                       f"{', '.join(wide)} span all online CPUs {_fmt(online or set())}: "
                       "housekeeping not confined (no Slurm job to compare)", evidence)
    return Outcome(PASS, observed, "housekeeping on a subset of the CPUs",
                   f"housekeeping confined ({_summary(units)}), no Slurm job running", evidence)


def _housekeeping_unread(facts: Facts) -> str:
    """Why no housekeeping unit's cpuset is known: a read error, the cgroup hierarchy
    unknown, or no effective cpuset shown for the units."""
    cpu = _cpu(facts)
    if not cpu.get("housekeeping"):
        return _unread(facts, "housekeeping")
    found = read_errors(facts, "cpu", "housekeeping")
    if found:
        return found
    if cpu.get("cgroup") is None:
        return f"cgroup hierarchy unknown: {_unread(facts, 'cgroup')}"
    return (f"no effective cpuset for {', '.join(HOUSEKEEPING_UNITS)} under "
            f"{cpu['cgroup'].get('cpuset_hierarchy')}")


def _summary(units: dict[str, set[int]]) -> str:
    return ", ".join(f"{u} {_fmt(c)}" for u, c in units.items())


def _judge_overlap(units: dict[str, set[int]], jobs: dict[Any, set[int]],
                   observed: dict[str, Any], evidence: tuple[str, ...]) -> Outcome:
    shared: dict[tuple[Any, str], list[str]] = {}
    for job, job_cpus in jobs.items():
        for unit, cpus in units.items():
            if cpus & job_cpus:
                shared.setdefault((job, _fmt(cpus & job_cpus)), []).append(unit)
    clashes = [f"{', '.join(names)} share CPUs {both} with Slurm job {job}"
               for (job, both), names in shared.items()]
    expected = "no CPU shared between housekeeping and Slurm jobs"
    if clashes:
        return Outcome(FAIL, observed, expected, "; ".join(clashes), evidence)
    return Outcome(PASS, observed, expected,
                   f"housekeeping ({_summary(units)}) disjoint from "
                   f"{len(jobs)} Slurm job cpuset(s)", evidence)


@check("cpu.irqbalance-banned",
       hand="irqbalance's banned CPUs against the job CPUs, and whether it runs",
       severity="low",
       title="irqbalance keeps device interrupts off the job CPUs",
       risk="irqbalance moves interrupts onto job CPUs: handlers preempt data-loader and "
            "launch threads, latency spikes in step time",
       fix="set IRQBALANCE_BANNED_CPULIST to the job CPUs in /etc/default/irqbalance (or "
           "/etc/sysconfig/irqbalance) and restart irqbalance",
       knob="cpu.housekeeping")
def check_irqbalance_banned(facts: Facts, profile: Profile) -> Outcome:
    if not _want(profile, "housekeeping_confined"):
        return not_applicable("profile sets no housekeeping_confined")
    cpu = _cpu(facts)
    irqb = cpu.get("irqbalance")
    if irqb is None:
        return unknown(f"irqbalance facts unknown ({_unread(facts, 'irqbalance')})")
    evidence = _evidence(facts, "irqbalance", "slurm_jobs")
    if not irqb.get("running"):
        return Outcome(PASS, "not running", "job CPUs banned",
                       "irqbalance not running: it moves no interrupt", evidence)
    target = _irq_target(cpu)
    if target is None:
        unread = _target_unread(facts)
        if unread:
            return unknown(f"CPUs to keep free unknown ({unread})")
        return not_applicable("no Slurm job and no housekeeping confinement: no CPUs to keep "
                              "free")
    banned = _cpus(irqb.get("banned"))
    if banned is None:
        return unknown(f"irqbalance banned CPUs unknown (not a cpulist: {irqb.get('banned')!r} "
                       f"from {irqb.get('banned_from')})")
    observed = {"banned": _fmt(banned), "from": irqb.get("banned_from")}
    loose = target - banned
    if loose:
        return Outcome(WARN, observed, _fmt(target),
                       f"irqbalance may place interrupts on job CPUs {_fmt(loose)} "
                       f"(banned: {_fmt(banned)})", evidence)
    return Outcome(PASS, observed, _fmt(target),
                   f"irqbalance bans the job CPUs {_fmt(target)}", evidence)


def _irq_target(cpu: dict[str, Any]) -> set[int] | None:
    """The CPUs irqbalance must avoid: the job CPUs, else the CPUs outside housekeeping."""
    jobs = _job_cpus(cpu)
    if jobs:
        return set().union(*jobs.values())
    units, online = _housekeeping(cpu), _online(cpu)
    if not units or not online:
        return None
    rest = online - set().union(*units.values())
    return rest or None


def _target_unread(facts: Facts) -> str:
    """The read error that hides the Slurm job or housekeeping CPUs; ``""`` when none did."""
    if "cpu" not in facts:
        return _unread(facts, "slurm_jobs")
    return next((found for key in ("slurm_jobs", "housekeeping", "cgroup")
                 if (found := read_errors(facts, "cpu", key))), "")


def _device_nodes(facts: Facts, minors: set[int] | None = None) -> dict[int, list[str]]:
    """``{numa node: ["GPU 0000:a4:00.0", ...]}`` of the GPUs (gpu layer BDFs when known)
    and NICs whose node is known. With ``minors`` (a job's GPU minor numbers) that match, only
    those GPUs and the NICs on their nodes."""
    cpu = _cpu(facts)
    listed = {g.get("sysfs_bdf") for g in (facts.get("gpu") or {}).get("gpus") or []
              if minors is None or g.get("minor_number") in minors}
    gpus = cpu.get("gpus_pci") or []
    mine = listed & {g.get("bdf") for g in gpus}
    if mine:
        gpus = [g for g in gpus if g.get("bdf") in listed]
    nodes: dict[int, list[str]] = {}
    for kind, devices in (("GPU", gpus), ("NIC", cpu.get("nics_pci") or [])):
        for dev in devices:
            node = dev.get("numa_node")
            if node is not None and node >= 0:
                nodes.setdefault(node, []).append(f"{kind} {dev.get('bdf')}")
    with_gpu = {n: d for n, d in nodes.items() if any(x.startswith("GPU") for x in d)}
    if not with_gpu:
        return {}
    return with_gpu if minors is not None and mine else nodes


def _node_cpus(cpu: dict[str, Any]) -> dict[int, set[int]]:
    nodes = (cpu.get("numa") or {}).get("nodes") or []
    return {n["node"]: _cpus(n.get("cpulist")) or set() for n in nodes if "node" in n}


@check("cpu.job-cpus-gpu-local",
       hand="Slurm jobs' CPUs against the GPUs' and NICs' NUMA nodes",
       severity="medium",
       title="Slurm job CPUs include cores local to every GPU/NIC NUMA node",
       risk="loader and launch threads on a remote socket cross the inter-socket link for every "
            "host-device copy: lower H2D bandwidth, higher launch latency",
       fix="bind jobs to GPU-local cores: gres.conf Cores= per GPU, TaskPlugin=task/affinity,"
           "task/cgroup and --cpu-bind / --gpu-bind=closest",
       knob=None)
def check_job_cpus_gpu_local(facts: Facts, profile: Profile) -> Outcome:
    if not _want(profile, "job_cpus_gpu_local"):
        return not_applicable("profile sets no job_cpus_gpu_local")
    cpu = _cpu(facts)
    jobs, inside = _job_cpus(cpu), _probed_job(facts)
    if inside:
        jobs = {**(jobs or {}), inside[0]: inside[1]}
    if jobs is None:
        return unknown(f"Slurm job cgroups unknown ({_unread(facts, 'slurm_jobs')})")
    if not jobs:
        return not_applicable("no Slurm job running")
    node_cpus = _node_cpus(cpu)
    devices = {n: d for n, d in _device_nodes(facts).items() if node_cpus.get(n)}
    if not devices:
        unread = next((_unread(facts, key) for key in ("gpus_pci", "numa")
                       if cpu.get(key) is None), "")
        if unread:
            return unknown(f"no GPU NUMA node known (not read: {unread})")
        return not_applicable("no GPU NUMA node known (numa_node -1 or no GPU)")
    per_job = {job: devices for job in jobs}
    if inside:  # the probed job is judged against its own GPUs, when they are known
        own = {n: d for n, d in _device_nodes(facts, inside[2]).items() if node_cpus.get(n)}
        per_job[inside[0]] = own or devices
    evidence = _evidence(facts, "slurm_jobs", "gpus_pci", "nics_pci", "numa") + (
        (PROBE_EVIDENCE,) if inside else ())
    findings = []
    for job, cpus in jobs.items():
        for node, devs in sorted(per_job[job].items()):
            if not cpus & node_cpus[node]:
                findings.append(f"job {job} ({_fmt(cpus)}) has no CPU on node{node} "
                                f"({_fmt(node_cpus[node])}: {_devices_text(devs)})")
    observed = {str(j): _fmt(c) for j, c in jobs.items()}
    expected = {f"node{n}": _fmt(node_cpus[n]) for n in sorted(devices)}
    if findings:
        return Outcome(WARN, observed, expected, "; ".join(findings), evidence)
    return Outcome(PASS, observed, expected,
                   f"every job has CPUs on the GPU/NIC nodes {sorted(devices)}", evidence)


PROBE_EVIDENCE = "Cpus_allowed_list of /proc/self/status inside the job (--launcher probe)"


def _probed_job(facts: Facts) -> tuple[int | str, set[int], set[int] | None] | None:
    """``(job id, its CPUs, its GPU minor numbers or None)`` from the ``--launcher`` probe,
    which read its cpuset inside the job's allocation; None without a usable probe."""
    probe = (facts.get("runtime") or {}).get("container") or {}
    job = (probe.get("job") or {}) if probe.get("ok") else {}
    cpus = _cpus(job.get("cpus_allowed"))
    if not cpus:
        return None
    job_id = str(job.get("id") or "probe")
    gpus = job.get("gpus")
    return (int(job_id) if job_id.isdigit() else job_id, cpus,
            set(gpus) if gpus is not None else None)


def _devices_text(devs: list[str]) -> str:
    gpus = sum(d.startswith("GPU") for d in devs)
    return f"{gpus} GPUs, {len(devs) - gpus} NICs"
