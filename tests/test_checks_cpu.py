"""cpu-layer checks (exemplar_tune/checks/cpu.py).

The checks run on the facts of the three fixture sysroots (tests/fixtures/sysroots/HOSTS.md)
with the shipped profiles, then on copies of those facts with one value changed, one case per
branch, including unknown facts (-> skip).
"""

from __future__ import annotations

import copy
import shutil
from typing import Any

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts, get_layer
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS, cpu as cpu_checks
from exemplar_tune.checks.base import FAIL, PASS, SKIP, WARN, Outcome
from exemplar_tune.checks.run import run_checks
from exemplar_tune.profile import load_profile
from tests.conftest import SYSROOTS
from tests.helpers import listed_statuses

PROFILE_OF = {"h100-x86": "h100-x86", "healthy-h100": "h100-x86",
              "gb200-grace-vm": "gb200-grace"}
# the hand-written checks, in order; the checks family knobs declare come after them
CPU_IDS = ("cpu.deep-cstates-disabled", "cpu.cstate-cmdline-limits", "cpu.pm-qos-holder",
           "cpu.bios-cstates", "cpu.governor", "cpu.turbo", "cpu.housekeeping-overlap",
           "cpu.irqbalance-banned", "cpu.job-cpus-gpu-local")
DELETE = object()
_FACTS: dict[str, dict] = {}


def facts_of(host: str) -> dict[str, Any]:
    """A deep copy of the host's facts (gathered once per session)."""
    if host not in _FACTS:
        _FACTS[host] = gather_facts(Sysroot(str(SYSROOTS / host)))
    return copy.deepcopy(_FACTS[host])


def edit(data: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """Set dotted paths (``"cpu.pm_qos.holders.0.pid"``; ``DELETE`` removes the key).

    Keys that contain a dot themselves (``user.slice``) are matched against existing keys.
    """
    for path, value in changes.items():
        *parents, last = _split(data, path)
        node: Any = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if value is DELETE:
            node.pop(last, None)
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return data


def _split(data: Any, path: str) -> list[str]:
    parts, node, words = [], data, path.split(".")
    while words:
        word = words.pop(0)
        while isinstance(node, dict) and word not in node and words and \
                any(k.startswith(word + ".") for k in node):
            word += "." + words.pop(0)
        parts.append(word)
        if isinstance(node, dict):
            node = node.get(word)
        elif isinstance(node, list) and word.isdigit():
            node = node[int(word)]
    return parts


def run_one(facts: dict[str, Any], profile: dict[str, Any], check_id: str) -> Outcome:
    """The check's own function (not run_checks, which turns an exception into a skip)."""
    (found,) = [c for c in CHECKS if c.id == check_id]
    return found.func(facts, profile)


# ---- registry -------------------------------------------------------------------------------

def test_cpu_checks_registered_once_with_metadata():
    cpu = {c.id: c for c in CHECKS if c.layer == "cpu"}
    declared = tuple(k.check_id for k in get_layer("cpu").knobs if k.check)
    assert "cpu.numa-balancing" in declared
    assert tuple(cpu) == CPU_IDS + declared
    for c in cpu.values():
        assert c.severity in ("high", "medium", "low")
        assert c.title and c.risk and c.fix and "\n" not in c.risk + c.fix
        assert c.knob is None or c.knob.startswith("cpu.")
    assert cpu["cpu.deep-cstates-disabled"].knob == "cpu.deep_cstates"
    assert cpu["cpu.pm-qos-holder"].knob == "cpu.tuned_profile"
    assert "3.0 vs 3.8 GHz" in cpu["cpu.deep-cstates-disabled"].risk


# ---- fixture hosts --------------------------------------------------------------------------

# the fixture trees hold no /sys/kernel/mm; the shipped profiles set no THP mode
MEMORY_SKIPPED = dict.fromkeys(("cpu.transparent-hugepage", "cpu.hugepages-2m",
                                "cpu.hugepages-1g"), SKIP)
FIXTURE_STATUSES = {
    "h100-x86": {
        "cpu.deep-cstates-disabled": FAIL, "cpu.cstate-cmdline-limits": PASS,
        "cpu.pm-qos-holder": FAIL, "cpu.bios-cstates": SKIP, "cpu.governor": PASS,
        "cpu.turbo": PASS, "cpu.housekeeping-overlap": FAIL, "cpu.irqbalance-banned": WARN,
        "cpu.job-cpus-gpu-local": PASS, "cpu.numa-balancing": WARN,
        "cpu.sched-autogroup": SKIP,  # the shipped profiles leave autogroup alone
        **MEMORY_SKIPPED,
    },
    # no BMC in the fixture trees: the BIOS check is skipped (tests/test_bios_redfish.py)
    "healthy-h100": {**dict.fromkeys(CPU_IDS, PASS), "cpu.numa-balancing": PASS,
                     "cpu.bios-cstates": SKIP, "cpu.sched-autogroup": SKIP,
                     **MEMORY_SKIPPED},
    "gb200-grace-vm": {
        "cpu.deep-cstates-disabled": SKIP, "cpu.cstate-cmdline-limits": SKIP,
        "cpu.pm-qos-holder": SKIP, "cpu.bios-cstates": SKIP, "cpu.governor": SKIP,
        "cpu.turbo": SKIP, "cpu.housekeeping-overlap": FAIL, "cpu.irqbalance-banned": WARN,
        "cpu.job-cpus-gpu-local": PASS, "cpu.numa-balancing": WARN,
        "cpu.sched-autogroup": SKIP,  # the shipped profiles leave autogroup alone
        **MEMORY_SKIPPED,
    },
}


@pytest.mark.parametrize("host", sorted(FIXTURE_STATUSES))
def test_fixture_host_statuses(host):
    profile = load_profile(PROFILE_OF[host])
    results = run_checks(facts_of(host), profile, layers=["cpu"])
    assert listed_statuses(results, FIXTURE_STATUSES[host], profile) == FIXTURE_STATUSES[host]
    for r in results:
        assert r.detail and "\n" not in r.detail
        assert not r.detail.startswith("check could not run"), r.detail
        if r.status != SKIP:
            assert r.evidence, r.id


def test_h100_x86_details_name_the_culprits():
    facts, profile = facts_of("h100-x86"), load_profile("h100-x86")
    deep = run_one(facts, profile, "cpu.deep-cstates-disabled")
    assert "C6" in deep.detail and "CPUs 0-7" in deep.detail
    assert deep.observed["disabled_cpus"] == "0-7"
    assert deep.evidence[0].startswith("/sys/devices/system/cpu/")
    qos = run_one(facts, profile, "cpu.pm-qos-holder")
    for part in ("99 us", "C6 exit latency 290 us", "tuned (pid 1432)",
                 "accelerator-performance", "force_latency=99"):
        assert part in qos.detail
    assert qos.observed["holders"] == ["1432/tuned"]
    assert "/dev/cpu_dma_latency" in qos.evidence[0]
    hk = run_one(facts, profile, "cpu.housekeeping-overlap")
    assert hk.detail == ("system.slice, user.slice, init.scope share CPUs 0-7 with "
                         "Slurm job 4242")
    numa = run_one(facts, profile, "cpu.numa-balancing")
    assert (numa.observed, numa.expected) == (1, 0)
    assert numa.evidence == ("/proc/sys/kernel/numa_balancing",)


def test_gb200_vm_governor_skip_reason():
    result = run_one(facts_of("gb200-grace-vm"), load_profile("gb200-grace"), "cpu.governor")
    assert "no cpufreq" in result.detail


def test_guest_skips_cstate_checks_even_with_a_cstate_profile():
    profile = load_profile("h100-x86")
    for check_id in ("cpu.deep-cstates-disabled", "cpu.cstate-cmdline-limits"):
        result = run_one(facts_of("gb200-grace-vm"), profile, check_id)
        assert (result.status, result.detail) == (SKIP, "guest C-states do not control the host")
        assert result.unknown is False  # not applicable: the guest does not own its C-states


# ---- not applicable vs unknown on real fixture trees ----------------------------------------

def test_fixture_hosts_not_applicable_checks_say_why():
    """The fixture captures hold no BMC, run no hugepage profile and (the VM) no cpufreq: those
    checks do not apply, each saying why, none of them unknown."""
    bios = run_one(facts_of("h100-x86"), load_profile("h100-x86"), "cpu.bios-cstates")
    assert (bios.status, bios.unknown, bios.detail) == (SKIP, False, "no BMC configured")
    governor = run_one(facts_of("gb200-grace-vm"), load_profile("gb200-grace"), "cpu.governor")
    assert (governor.status, governor.unknown) == (SKIP, False)
    assert governor.detail.startswith("no cpufreq policy")
    silent = run_one(facts_of("healthy-h100"), load_profile("h100-x86"), "cpu.hugepages-1g")
    assert (silent.status, silent.unknown) == (SKIP, False)
    assert silent.detail == "profile sets no hugepages_1g"


def test_a_host_whose_files_cannot_be_read_gets_unknown_naming_the_file(tmp_path):
    """healthy-h100 passes every cpu check; with /dev/cpu_dma_latency cut short, the sysctl
    garbled and the Redfish capture truncated, the checks that need them are unknown and
    say which file and why, while the others still pass."""
    host = tmp_path / "host"
    shutil.copytree(SYSROOTS / "healthy-h100", host, symlinks=True)
    (host / "dev/cpu_dma_latency").write_bytes(b"\x00\x94")
    (host / "proc/sys/kernel/numa_balancing").write_text("on\n")
    (host / ".exemplar/commands/redfish-bios.json").write_text('{"Bios": ')
    facts = gather_facts(Sysroot(str(host)), ["cpu", "vm"])
    results = {r.id: r for r in run_checks(facts, load_profile("h100-x86"), layers=["cpu"])}
    profile = load_profile("h100-x86")
    qos = run_one(facts, profile, "cpu.pm-qos-holder")
    assert (qos.status, qos.unknown) == (SKIP, True)
    assert qos.detail == "cannot read /dev/cpu_dma_latency (expected 4 bytes, got 2: '0094')"
    numa = run_one(facts, profile, "cpu.numa-balancing")
    assert (numa.status, numa.unknown) == (SKIP, True)
    assert numa.detail == "kernel.numa_balancing unknown: not an integer: 'on'"
    bios = run_one(facts, profile, "cpu.bios-cstates")
    assert (bios.status, bios.unknown) == (SKIP, True)
    assert "/.exemplar/commands/redfish-bios.json: not JSON" in bios.detail
    assert {i: r.status for i, r in results.items() if r.status != SKIP} == dict.fromkeys(
        ("cpu.deep-cstates-disabled", "cpu.cstate-cmdline-limits", "cpu.governor", "cpu.turbo",
         "cpu.housekeeping-overlap", "cpu.irqbalance-banned", "cpu.job-cpus-gpu-local"), PASS)


def test_a_check_that_raises_is_unknown(monkeypatch):
    """A check that raises does not hide the others, and is reported as not judged (unknown),
    never as not applicable."""
    def broken(profile, key):
        raise KeyError(key)

    monkeypatch.setattr(cpu_checks, "_want", broken)
    results = {r.id: r.to_dict() for r in run_checks(facts_of("h100-x86"),
                                                     load_profile("h100-x86"), layers=["cpu"])}
    governor = results["cpu.governor"]
    assert (governor["status"], governor["detail"]) == (
        SKIP, "check could not run: KeyError: 'governor'")
    assert governor["class"] == "unknown"
    assert results["cpu.numa-balancing"]["status"] == WARN  # a declared check: no _want


# ---- one changed value per branch -----------------------------------------------------------

ALL = [0, 1, 2, 3, 4, 5, 6, 7]
CASES = [
    # id, host, check (without "cpu."), fact changes, profile changes, status, detail part
    # deep-cstates-disabled
    ("deep-no-profile", "h100-x86", "deep-cstates-disabled", {},
     {"deep_cstates": DELETE}, SKIP, "profile sets no deep_cstates"),
    ("deep-profile-false", "h100-x86", "deep-cstates-disabled", {},
     {"deep_cstates": False}, SKIP, "profile sets no deep_cstates"),
    ("deep-unknown", "h100-x86", "deep-cstates-disabled", {"cpu.cpuidle": None}, {},
     SKIP, "unknown"),
    ("deep-guest", "h100-x86", "deep-cstates-disabled", {"vm.virtualized": True}, {},
     SKIP, "guest C-states"),
    ("deep-driver-none-metal", "healthy-h100", "deep-cstates-disabled",
     {"cpu.cpuidle.driver": "none", "cpu.cpuidle.states": [], "cpu.cpuidle.states_exposed": 0},
     {}, FAIL, "cpuidle driver none on bare metal"),
    ("deep-driver-absent-metal", "healthy-h100", "deep-cstates-disabled",
     {"cpu.cpuidle.driver": None, "cpu.cpuidle.states": []}, {}, FAIL, "driver absent"),
    ("deep-driver-none-virt-unknown", "healthy-h100", "deep-cstates-disabled",
     {"cpu.cpuidle.driver": "none", "cpu.cpuidle.states": [], "vm": DELETE}, {},
     SKIP, "cannot tell a guest"),
    ("deep-one-cpu-disabled", "healthy-h100", "deep-cstates-disabled",
     {"cpu.cpuidle.states.3.disabled_cpus": [3]}, {}, FAIL, "C6 (290 us) disabled on CPUs 3"),
    ("deep-missing-on-cpus", "healthy-h100", "deep-cstates-disabled",
     {"cpu.cpuidle.states.3.missing_cpus": [6, 7]}, {}, FAIL, "C6 absent on CPUs 6-7"),
    ("deep-too-few-states", "healthy-h100", "deep-cstates-disabled", {},
     {"min_idle_states": 5}, FAIL, "only 4 states exposed (POLL, C1, C1E, C6)"),
    ("deep-no-min", "healthy-h100", "deep-cstates-disabled", {},
     {"min_idle_states": DELETE}, PASS, "C6 (290 us) enabled on every CPU"),
    # cstate-cmdline-limits
    ("cmd-no-profile", "healthy-h100", "cstate-cmdline-limits", {},
     {"deep_cstates": DELETE}, SKIP, "profile sets no deep_cstates"),
    ("cmd-unknown", "healthy-h100", "cstate-cmdline-limits", {"cpu.cstate_limits": None}, {},
     SKIP, "unknown"),
    ("cmd-cmdline-unknown", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.cmdline": None}, {}, SKIP, "command line unknown"),
    ("cmd-guest", "healthy-h100", "cstate-cmdline-limits", {"vm.virtualized": True}, {},
     SKIP, "guest"),
    ("cmd-intel-max", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.cmdline": {"intel_idle.max_cstate": "1"}}, {}, FAIL,
     "intel_idle.max_cstate=1 (reboot needed)"),
    ("cmd-intel-max-default", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.cmdline": {"intel_idle.max_cstate": "9"}}, {}, PASS, "no C-state"),
    ("cmd-processor-max", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.cmdline": {"processor.max_cstate": "1"}}, {}, FAIL,
     "processor.max_cstate=1"),
    ("cmd-idle-poll", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.cmdline": {"idle": "poll"}}, {}, FAIL, "idle=poll"),
    ("cmd-states-off", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.cmdline": {"intel_idle.states_off": "0x8"}}, {}, FAIL,
     "intel_idle.states_off=0x8"),
    ("cmd-states-off-zero", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.cmdline": {"intel_idle.states_off": "0"}}, {}, PASS, "no C-state"),
    ("cmd-cpuidle-off", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.cmdline": {"cpuidle.off": "1"}}, {}, FAIL, "cpuidle.off=1"),
    ("cmd-no-acpi-is-no-limit", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.cmdline": {"intel_idle.no_acpi": "1", "cpuidle.governor": "teo"}},
     {}, PASS, "no C-state"),
    ("cmd-module-param", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.intel_idle.max_cstate": 2}, {}, FAIL, "intel_idle max_cstate=2"),
    ("cmd-module-param-zero", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.intel_idle.max_cstate": 0}, {}, FAIL, "intel_idle max_cstate=0"),
    ("cmd-unparseable-max", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.cmdline": {"intel_idle.max_cstate": "abc"}}, {}, FAIL,
     "intel_idle.max_cstate=abc"),
    ("cmd-module-states-off", "healthy-h100", "cstate-cmdline-limits",
     {"cpu.cstate_limits.intel_idle.states_off": 8}, {}, FAIL, "intel_idle states_off=0x8"),
    # pm-qos-holder
    ("qos-no-profile", "h100-x86", "pm-qos-holder", {},
     {"deep_cstates": DELETE, "pm_qos_max_latency_us": DELETE}, SKIP, "profile sets no"),
    ("qos-unknown", "h100-x86", "pm-qos-holder", {"cpu.pm_qos": None}, {}, SKIP, "unknown"),
    ("qos-value-unknown", "healthy-h100", "pm-qos-holder",
     {"cpu.pm_qos.cpu_dma_latency_us": None}, {}, SKIP, "cannot read /dev/cpu_dma_latency"),
    ("qos-only-profile-max-ok", "h100-x86", "pm-qos-holder", {},
     {"deep_cstates": DELETE, "pm_qos_max_latency_us": 50}, PASS, "99 us"),
    ("qos-only-deepest", "h100-x86", "pm-qos-holder", {},
     {"pm_qos_max_latency_us": DELETE}, FAIL, "99 us < C6 exit latency 290 us: held by tuned"),
    ("qos-below-profile-no-holder", "healthy-h100", "pm-qos-holder",
     {"cpu.pm_qos.cpu_dma_latency_us": 500}, {}, FAIL,
     "500 us < profile pm_qos_max_latency_us 1000 us: no holder visible"),
    ("qos-at-profile-max", "healthy-h100", "pm-qos-holder",
     {"cpu.pm_qos.cpu_dma_latency_us": 1000}, {}, PASS, "1000 us"),
    ("qos-other-holder-no-tuned", "h100-x86", "pm-qos-holder",
     {"cpu.pm_qos.holders": [{"pid": 77, "comm": "dpdk-app", "fds": [3]}],
      "cpu.tuned.active_profiles": []}, {}, FAIL, "held by dpdk-app (pid 77)"),
    ("qos-resume-latency", "healthy-h100", "pm-qos-holder",
     {"cpu.pm_qos.resume_latency_us": {"0": ALL[:7], "20": [7]}}, {}, FAIL,
     "pm_qos_resume_latency_us=20 on CPUs 7"),
    ("qos-resume-na", "healthy-h100", "pm-qos-holder",
     {"cpu.pm_qos.resume_latency_us": {"0": ALL[2:], "n/a": [0, 1]}}, {}, FAIL,
     "pm_qos_resume_latency_us=n/a on CPUs 0-1"),
    ("qos-resume-na-value-unknown", "healthy-h100", "pm-qos-holder",
     {"cpu.pm_qos.cpu_dma_latency_us": None, "cpu.pm_qos.resume_latency_us": {"n/a": ALL}},
     {}, FAIL, "n/a on CPUs 0-7"),
    ("qos-resume-loose", "healthy-h100", "pm-qos-holder",
     {"cpu.pm_qos.resume_latency_us": {"0": ALL[:7], "5000": [7]}}, {}, PASS, "2000000000"),
    # governor
    ("gov-no-profile", "h100-x86", "governor", {}, {"governor": DELETE}, SKIP,
     "profile sets no governor"),
    ("gov-unknown", "h100-x86", "governor", {"cpu.cpufreq": None}, {}, SKIP, "unknown"),
    ("gov-no-policies", "h100-x86", "governor", {"cpu.cpufreq.policies": []}, {}, SKIP,
     "no cpufreq policy"),
    ("gov-powersave", "h100-x86", "governor",
     {"cpu.cpufreq.policies.3.governor": "powersave",
      "cpu.cpufreq.policies.4.governor": "powersave"}, {}, FAIL,
     "governor powersave on CPUs 3-4, want performance"),
    ("gov-profile-other", "h100-x86", "governor", {}, {"governor": "schedutil"}, FAIL,
     "performance on CPUs 0-7"),
    # turbo
    ("turbo-no-profile", "h100-x86", "turbo", {}, {"turbo": DELETE}, SKIP, "profile sets no"),
    ("turbo-unknown", "h100-x86", "turbo", {"cpu.cpufreq": None}, {}, SKIP, "unknown"),
    ("turbo-no-control", "h100-x86", "turbo",
     {"cpu.cpufreq.turbo": {"enabled": None, "control": None}}, {}, SKIP, "no turbo control"),
    ("turbo-off", "h100-x86", "turbo", {"cpu.cpufreq.turbo.enabled": False}, {}, FAIL,
     "turbo disabled (/sys/devices/system/cpu/intel_pstate/no_turbo), profile wants on"),
    ("turbo-policy-boost-off", "h100-x86", "turbo", {"cpu.cpufreq.policies.2.boost": 0}, {},
     FAIL, "policy boost=0 on CPUs 2"),
    ("turbo-unwanted", "h100-x86", "turbo", {}, {"turbo": False}, FAIL, "profile wants off"),
    # housekeeping-overlap
    ("hk-no-profile", "h100-x86", "housekeeping-overlap", {},
     {"housekeeping_confined": DELETE}, SKIP, "profile sets no housekeeping_confined"),
    ("hk-unknown", "h100-x86", "housekeeping-overlap", {"cpu.housekeeping": None}, {},
     SKIP, "unknown"),
    ("hk-units-unknown", "h100-x86", "housekeeping-overlap",
     {"cpu.housekeeping": {"system.slice": None, "user.slice": None, "init.scope": None}}, {},
     SKIP, "unknown"),
    ("hk-no-job-unconfined", "h100-x86", "housekeeping-overlap", {"cpu.slurm_jobs": []}, {},
     WARN, "span all online CPUs 0-7"),
    ("hk-jobs-unknown-unconfined", "h100-x86", "housekeeping-overlap",
     {"cpu.slurm_jobs": None}, {}, WARN, "housekeeping not confined"),
    ("hk-no-job-online-from-numa", "h100-x86", "housekeeping-overlap",
     {"cpu.slurm_jobs": [], "cpu.cgroup": None}, {}, WARN, "0-7"),
    ("hk-no-job-confined", "healthy-h100", "housekeeping-overlap", {"cpu.slurm_jobs": []}, {},
     PASS, "no Slurm job running"),
    ("hk-partial-overlap", "healthy-h100", "housekeeping-overlap",
     {"cpu.slurm_jobs.0.effective": "0-3"}, {}, FAIL,
     "system.slice, user.slice, init.scope share CPUs 0 with Slurm job 4242"),
    ("hk-one-unit-overlap", "healthy-h100", "housekeeping-overlap",
     {"cpu.housekeeping.user.slice.effective": "0-7"}, {}, FAIL,
     "user.slice share CPUs 1-3,5-7 with Slurm job 4242"),
    ("hk-malformed-job-cpuset", "h100-x86", "housekeeping-overlap",
     {"cpu.slurm_jobs.0.effective": "garbage", "cpu.slurm_jobs.0.cpus": "x"}, {}, WARN,
     "no Slurm job to compare"),
    # irqbalance-banned
    ("irqb-no-profile", "h100-x86", "irqbalance-banned", {},
     {"housekeeping_confined": DELETE}, SKIP, "profile sets no"),
    ("irqb-unknown", "h100-x86", "irqbalance-banned", {"cpu.irqbalance": None}, {},
     SKIP, "unknown"),
    ("irqb-not-running", "h100-x86", "irqbalance-banned",
     {"cpu.irqbalance.running": False}, {}, PASS, "not running"),
    ("irqb-banned-unknown", "healthy-h100", "irqbalance-banned",
     {"cpu.irqbalance.banned": None}, {}, SKIP, "banned CPUs unknown"),
    ("irqb-no-job-unconfined", "h100-x86", "irqbalance-banned", {"cpu.slurm_jobs": []}, {},
     SKIP, "no CPUs to keep free"),
    ("irqb-no-job-confined", "healthy-h100", "irqbalance-banned", {"cpu.slurm_jobs": []}, {},
     PASS, "bans the job CPUs 1-3,5-7"),
    ("irqb-partly-banned", "healthy-h100", "irqbalance-banned",
     {"cpu.irqbalance.banned": "1-3"}, {}, WARN, "job CPUs 5-7 (banned: 1-3)"),
    # job-cpus-gpu-local
    ("loc-no-profile", "h100-x86", "job-cpus-gpu-local", {},
     {"job_cpus_gpu_local": DELETE}, SKIP, "profile sets no"),
    ("loc-jobs-unknown", "h100-x86", "job-cpus-gpu-local", {"cpu.slurm_jobs": None}, {},
     SKIP, "unknown"),
    ("loc-no-job", "h100-x86", "job-cpus-gpu-local", {"cpu.slurm_jobs": []}, {},
     SKIP, "no Slurm job running"),
    ("loc-no-gpu-numa", "h100-x86", "job-cpus-gpu-local",
     {f"cpu.gpus_pci.{i}.numa_node": -1 for i in range(8)}, {}, SKIP, "no GPU NUMA node"),
    ("loc-no-gpus", "h100-x86", "job-cpus-gpu-local", {"cpu.gpus_pci": None}, {},
     SKIP, "no GPU NUMA node"),
    ("loc-job-one-socket", "h100-x86", "job-cpus-gpu-local",
     {"cpu.slurm_jobs.0.effective": "0-3"}, {}, WARN,
     "job 4242 (0-3) has no CPU on node1 (4-7: 4 GPUs, 4 NICs)"),
    ("loc-job-on-gpu-less-node", "h100-x86", "job-cpus-gpu-local",
     {"cpu.slurm_jobs.0.effective": "4-7", **{f"cpu.gpus_pci.{i}.numa_node": 0
                                              for i in range(8)},
      "cpu.nics_pci": []}, {}, WARN, "has no CPU on node0 (0-3: 8 GPUs, 0 NICs)"),
    ("loc-gpu-layer-restricts", "gb200-grace-vm", "job-cpus-gpu-local",
     {"cpu.slurm_jobs.0.effective": "0-3", "cpu.nics_pci": [],
      "gpu.gpus": [{"sysfs_bdf": "0008:01:00.0"}, {"sysfs_bdf": "0009:01:00.0"}]}, {},
     PASS, "nodes [0]"),
    # numa-balancing
    ("numa-no-profile", "h100-x86", "numa-balancing", {}, {"numa_balancing": DELETE}, SKIP,
     "profile sets no numa_balancing"),
    ("numa-absent", "h100-x86", "numa-balancing", {"cpu.numa_balancing": None}, {}, SKIP,
     "not on this kernel (/proc/sys/kernel/numa_balancing absent)"),
    ("numa-unreadable", "h100-x86", "numa-balancing",
     {"cpu.numa_balancing": None, "cpu.errors": [
         {"fact": "numa_balancing", "path": "/proc/sys/kernel/numa_balancing",
          "error": "Permission denied"}]}, {}, SKIP,
     "kernel.numa_balancing unknown: Permission denied"),
    ("numa-match", "h100-x86", "numa-balancing", {"cpu.numa_balancing": 0}, {}, PASS,
     "kernel.numa_balancing=0"),
    ("numa-tiering", "healthy-h100", "numa-balancing", {"cpu.numa_balancing": 2}, {}, WARN,
     "kernel.numa_balancing=2, profile wants 0"),
]


# The skipped cases that could not be judged (a fact unreadable, malformed or contradictory);
# every other skipped case does not apply (profile silent, guest, no cpufreq, no job ...).
UNKNOWN_CASES = {
    "deep-unknown", "deep-driver-none-virt-unknown", "cmd-unknown", "cmd-cmdline-unknown",
    "qos-unknown", "qos-value-unknown", "gov-unknown", "turbo-unknown", "hk-unknown",
    "hk-units-unknown", "irqb-unknown", "irqb-banned-unknown", "loc-jobs-unknown",
    "loc-no-gpus", "numa-unreadable",
}


def test_unknown_cases_are_skip_cases():
    skips = {c[0] for c in CASES if c[5] == SKIP}
    assert not UNKNOWN_CASES - skips, UNKNOWN_CASES - skips


@pytest.mark.parametrize(("case", "host", "name", "changes", "profile_changes", "want", "part"),
                         CASES, ids=[c[0] for c in CASES])
def test_changed_facts(case, host, name, changes, profile_changes, want, part):
    facts = edit(facts_of(host), changes)
    profile = copy.deepcopy(load_profile(PROFILE_OF[host]))
    edit(profile, {f"cpu.{k}": v for k, v in profile_changes.items()})
    result = run_one(facts, profile, f"cpu.{name}")
    assert (result.status, part in result.detail) == (want, True), result.detail
    assert result.unknown is (case in UNKNOWN_CASES), result.detail
    assert "\n" not in result.detail


def test_checks_are_pure():
    facts, profile = facts_of("h100-x86"), load_profile("h100-x86")
    before = copy.deepcopy((facts, profile))
    run_checks(facts, profile, layers=["cpu"])
    assert (facts, profile) == before


def test_missing_cpu_layer_skips_everything():
    results = run_checks({}, load_profile("h100-x86"), layers=["cpu"])
    assert {r.id: r.status for r in results} == dict.fromkeys(
        (c.id for c in CHECKS if c.layer == "cpu"), SKIP)
    assert not any(r.detail.startswith("check could not run") for r in results)
