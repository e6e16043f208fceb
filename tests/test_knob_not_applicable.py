"""A knob the profile asks for on a host that has nothing it could write does not apply there:
its planner raises ``NotApplicable`` with a one-line reason, and the audit lists it under
``not_applicable`` (Prometheus: ``exemplar_tune_knob_not_applicable``), never as drift 0.

Trees: the fixture hosts (``h100-x86`` bare metal with cpufreq, ``gb200-grace-vm`` a KVM
guest without cpufreq) and hosts captured from real machines (``tests/realhosts.py``: a
CloudStack KVM guest, a Kunpeng 920 without cpufreq or cpuidle, a bubblewrap sandbox). Genuine
drift stays drift: a host with the attributes at other values still plans its changes, a host
with some of them plans for those.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import AttrChange
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.engine import (
    LayerFailed,
    plan_layer,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.families import dropin
from ansible_collections.exemplar.tune.plugins.module_utils.layers import get_layer
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import NotApplicable
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.helpers import copy_sysroot, tree_hash
from tests.realhosts import unpack
from tests.test_cli import cli

CPUFREQ = "sys/devices/system/cpu/cpufreq"
NO_CPUFREQ = ("no cpufreq driver is loaded (none in a VM guest; on bare metal: disabled, "
              "missing or without firmware support)")
GOVERNOR_NA = f"/{CPUFREQ}: no policy[0-9]*/scaling_governor: {NO_CPUFREQ}"
TURBO_NA = ("/sys/devices/system/cpu: no turbo switch (intel_pstate/no_turbo, cpufreq/boost or "
            f"cpufreq/policy*/boost): {NO_CPUFREQ}")
FREQ = {"governor": "performance", "turbo": True}
ALLOW_JOBS = {"cpu_housekeeping_allow_job_units": True}


def plan(root: Path, layer: str, section: dict, variables: dict | None = None,
         only: list[str] | None = None) -> dict[str, tuple[list, str | None]]:
    """Each planned knob: (its changes, why it does not apply); planning never writes."""
    before = tree_hash(root)
    planned = plan_layer(Sysroot(str(root)), get_layer(layer), {layer: section},
                         variables or {}, only)
    assert tree_hash(root) == before
    return {p.knob.name: (p.changes, p.not_applicable) for p in planned}


def reasons(root: Path, layer: str, section: dict, **kwargs) -> dict[str, str]:
    return {name: why for name, (_c, why) in plan(root, layer, section, **kwargs).items() if why}


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> dict[str, Path]:
    """The captured real hosts these tests need, unpacked once (read only)."""
    work = tmp_path_factory.mktemp("real")
    return {name: unpack(name, work) for name in ("hwloc-kvm-guest-2pa", "hwloc-128arm-kunpeng920",
                                                  "snapshot-bwrap-sandbox")}


@pytest.fixture
def h100(tmp_path: Path) -> Path:
    return copy_sysroot("h100-x86", tmp_path)


@pytest.fixture
def vm(tmp_path: Path) -> Path:
    return copy_sysroot("gb200-grace-vm", tmp_path)


# -- cpufreq: governor (SysfsAttr family) and turbo ------------------------------------------

def test_a_guest_without_cpufreq_has_no_governor_or_turbo_to_set(vm, real):
    for root in (vm, real["hwloc-kvm-guest-2pa"]):
        assert not (root / CPUFREQ).exists() or not list((root / CPUFREQ).glob("policy*"))
        got = plan(root, "cpu", FREQ, only=["governor", "turbo"])
        assert got == {"governor": ([], GOVERNOR_NA), "turbo": ([], TURBO_NA)}, root.name


def test_bare_metal_at_another_governor_still_drifts(h100):
    (h100 / CPUFREQ / "policy3/scaling_governor").write_text("powersave\n")
    (h100 / "sys/devices/system/cpu/intel_pstate/no_turbo").write_text("1\n")
    got = plan(h100, "cpu", FREQ, only=["governor", "turbo"])
    assert got["governor"][1] is None and got["turbo"][1] is None
    assert len(got["governor"][0]) == 8
    assert got["turbo"][0] == [AttrChange("sys/devices/system/cpu/intel_pstate/no_turbo", "0")]


def test_a_host_with_some_policies_plans_for_those(h100):
    for number in range(4, 8):
        shutil.rmtree(h100 / CPUFREQ / f"policy{number}")
    changes, why = plan(h100, "cpu", FREQ, only=["governor"])["governor"]
    assert why is None
    assert [c.path for c in changes] == [f"{CPUFREQ}/policy{n}/scaling_governor"
                                         for n in range(4)]


def test_a_cpufreq_driver_without_a_boost_file_names_the_driver(h100):
    shutil.rmtree(h100 / "sys/devices/system/cpu/intel_pstate")
    for policy in (h100 / CPUFREQ).glob("policy*"):
        (policy / "scaling_driver").write_text("cppc_cpufreq\n")
        (policy / "boost").unlink(missing_ok=True)
    (h100 / CPUFREQ / "boost").unlink(missing_ok=True)
    got = plan(h100, "cpu", FREQ, only=["governor", "turbo"])
    assert got["governor"][1] is None  # the policies are there: the governor still applies
    assert got["turbo"] == ([], "/sys/devices/system/cpu: no turbo switch (intel_pstate/"
                            "no_turbo, cpufreq/boost or cpufreq/policy*/boost): the cpufreq "
                            "driver cppc_cpufreq offers none")


# -- other families: sysctl, sysfs attributes, drop-ins ---------------------------------------

def test_a_sysctl_the_kernel_lacks_does_not_apply(h100, real):
    assert reasons(h100, "cpu", {"sched_autogroup": 0}, only=["sched_autogroup"]) == {
        "sched_autogroup": "/proc/sys/kernel/sched_autogroup_enabled: not present: the running "
                           "kernel has no kernel.sched_autogroup_enabled (built without it, or "
                           "its module is not loaded)"}
    kunpeng = real["hwloc-128arm-kunpeng920"]  # a capture without /proc/sys at all
    assert reasons(kunpeng, "cpu", {"numa_balancing": 0}, only=["numa_balancing"]) == {
        "numa_balancing": "/proc/sys: not present (not in this tree): kernel.numa_balancing "
                          "cannot be read or set"}
    # the entry there, at another value: drift, now and in sysctl.d
    changes, why = plan(h100, "cpu", {"numa_balancing": 0}, only=["numa_balancing"])[
        "numa_balancing"]
    assert why is None and changes[0] == AttrChange("proc/sys/kernel/numa_balancing", "0")


def test_an_attribute_the_kernel_does_not_show_does_not_apply(vm):
    assert reasons(vm, "cpu", {"transparent_hugepage": "never", "hugepages_1g": 2}) == {
        "transparent_hugepage": "/sys/kernel/mm/transparent_hugepage/enabled: not present: "
                                "the kernel has no transparent huge pages (built without "
                                "CONFIG_TRANSPARENT_HUGEPAGE)",
        "hugepages_1g": "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages: not "
                        "present: the kernel offers no 1G huge page size (a CPU or base page "
                        "size without it, or a kernel without hugetlbfs)"}
    pool = vm / "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
    pool.parent.mkdir(parents=True)
    pool.write_text("0\n")
    changes, why = plan(vm, "cpu", {"hugepages_1g": 2}, only=["hugepages_1g"])["hugepages_1g"]
    assert why is None and changes == [AttrChange(str(pool.relative_to(vm)), "2")]


def test_a_dropin_where_systemd_is_not_the_init_system_does_not_apply(real, h100):
    knob = dropin("cpu", "test_dropin", "irqbalance.service", "Service", "Nice", "test",
                  {"type": "integer", "description": "test"})
    sandbox = Sysroot(str(real["snapshot-bwrap-sandbox"]))
    target = knob.target({"test_dropin": 5}, {}, {})
    with pytest.raises(NotApplicable) as raised:
        knob.plan(sandbox, target)
    assert str(raised.value) == ("/run/systemd/system: not present, nor a systemctl show that "
                                 "answered: systemd is not the init system (PID 1 is bwrap)")
    assert knob.plan(Sysroot(str(h100)), target)  # a captured systemd host: planned


# -- planner knobs: idle states, housekeeping, BIOS, GPU, enroot -------------------------------

def test_bare_metal_without_idle_states_has_no_c_state_to_enable(real, h100):
    assert reasons(real["hwloc-128arm-kunpeng920"], "cpu", {"deep_cstates": True},
                   only=["deep_cstates"]) == {
        "deep_cstates": "/sys/devices/system/cpu: no idle state under cpu*/cpuidle (no cpuidle "
                        "driver): the kernel exposes no C-state to enable"}
    assert reasons(h100, "cpu", {"deep_cstates": True, "deep_cstate_names": ["C10"]},
                   only=["deep_cstates"]) == {
        "deep_cstates": "/sys/devices/system/cpu: no idle state named C10 under cpu*/cpuidle "
                        "(the CPUs have C1, C1E, C6, POLL)"}
    changes, why = plan(h100, "cpu", {"deep_cstates": True}, only=["deep_cstates"])[
        "deep_cstates"]
    assert why is None  # C6 disabled on every CPU: drift
    assert len([c for c in changes if isinstance(c, AttrChange)]) == 8


HOUSE = {"housekeeping_confined": True, "housekeeping_cpus": "0"}


def test_housekeeping_without_systemd_or_cgroup_v2_cpusets_does_not_apply(real, h100):
    assert reasons(real["snapshot-bwrap-sandbox"], "cpu", HOUSE, only=["housekeeping"]) == {
        "housekeeping": "/run/systemd/system: not present, nor a systemctl show that answered: "
                        "systemd is not the init system (PID 1 is bwrap): no systemd unit to "
                        "confine"}
    (h100 / "run/systemd/system").mkdir(parents=True)  # systemd, on a cgroup v1 cpuset
    shutil.rmtree(h100 / "sys/fs/cgroup")
    for name in ("cpuset", "cpu"):
        (h100 / "sys/fs/cgroup" / name).mkdir(parents=True)
        (h100 / "sys/fs/cgroup" / name / "cgroup.procs").write_text("1\n")
    assert reasons(h100, "cpu", HOUSE, variables=ALLOW_JOBS, only=["housekeeping"]) == {
        "housekeeping": "/sys/fs/cgroup/cpuset: cpuset controller on a cgroup v1 hierarchy "
                        "(cgroup v1): systemd's AllowedCPUs= needs cgroup v2"}
    shutil.rmtree(h100 / "sys/fs/cgroup")
    (h100 / "sys/fs/cgroup").mkdir()
    assert reasons(h100, "cpu", HOUSE, variables=ALLOW_JOBS, only=["housekeeping"]) == {
        "housekeeping": "/sys/fs/cgroup: no cgroup hierarchy mounted: no cpuset to confine the "
                        "units with"}


def test_housekeeping_on_a_systemd_cgroup_v2_host_still_plans(h100):
    changes, why = plan(h100, "cpu", HOUSE, variables=ALLOW_JOBS, only=["housekeeping"])[
        "housekeeping"]
    assert why is None
    assert AttrChange("sys/fs/cgroup/system.slice/cpuset.cpus", "0") in changes


def test_confinement_without_a_cpu_list_is_judged_on_the_host_first(real, h100):
    """The shipped profiles ask for housekeeping_confined without housekeeping_cpus: where
    nothing could be confined the knob says so; elsewhere it plans nothing (no CPU list)."""
    confined = {"housekeeping_confined": True}
    assert reasons(real["snapshot-bwrap-sandbox"], "cpu", confined, only=["housekeeping"])[
        "housekeeping"].endswith("systemd is not the init system (PID 1 is bwrap): no systemd "
                                 "unit to confine")
    assert plan(h100, "cpu", confined, only=["housekeeping"]) == {"housekeeping": ([], None)}


def test_a_bios_policy_without_a_bmc_does_not_apply(h100):
    assert reasons(h100, "cpu", {"bios": {"turbo": "enabled"}}, only=["bios"]) == {
        "bios": "exemplar_bmc_address: not set: the BIOS policy is read and staged through the "
                "host's BMC (Redfish), and none is given"}


def test_persistence_mode_on_a_host_without_gpu_does_not_apply(real, h100):
    assert reasons(real["hwloc-kvm-guest-2pa"], "gpu", {"persistence_mode": True}) == {
        "persistence_mode": "/sys/bus/pci/devices: no NVIDIA GPU on the PCI bus "
                            "(/.exemplar/commands/nvidia-smi-q-x.xml: not captured)"}
    got = plan(h100, "gpu", {"persistence_mode": True})["persistence_mode"]
    assert got[1] is None and got[0]  # GPU 3 has it off: drift


def test_gpus_on_the_pci_bus_that_nvidia_smi_does_not_list_fail_the_knob(h100):
    """Not "not applicable" and not "no drift": the GPUs are there, their state unknown."""
    (h100 / ".exemplar/commands/nvidia-smi-q-x.xml").unlink()
    with pytest.raises(LayerFailed, match=r"^gpu\.persistence_mode: /\.exemplar/commands/"
                                          r"nvidia-smi-q-x\.xml: .*nothing was changed$"):
        plan(h100, "gpu", {"persistence_mode": True})


def test_carrying_the_topology_into_containers_without_enroot_does_not_apply(vm, h100):
    want = {"nccl_topo_file": "/etc/nccl/topo.xml", "require_in_container": True}
    assert reasons(vm, "runtime", want, only=["enroot_topo"]) == {
        "enroot_topo": "/etc/enroot/enroot.conf: not present, nor /usr/bin/enroot: enroot is "
                       "not installed, no enroot container to carry NCCL_TOPO_FILE into"}
    changes, why = plan(h100, "runtime", want, only=["enroot_topo"])["enroot_topo"]
    assert why is None and len(changes) == 2  # enroot without the entries: drift


# -- a profile that asks for nothing ---------------------------------------------------------

@pytest.mark.parametrize("layer", ["gpu", "vm", "cpu", "fabric"])
def test_a_knob_the_profile_does_not_set_plans_nothing_and_is_not_marked(vm, real, layer):
    for root in (vm, real["hwloc-kvm-guest-2pa"], real["snapshot-bwrap-sandbox"]):
        got = plan(root, layer, {})
        assert all(changes == [] and why is None for changes, why in got.values()), \
            (root.name, got)


# -- the audit: JSON and Prometheus -----------------------------------------------------------

def _audit(root: Path, fmt: str) -> str:
    out = cli("audit", "--sysroot", str(root), "--profile", "h100-x86", "--layer", "cpu",
              "--format", fmt)
    assert out.returncode in (0, 1), out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr
    return out.stdout


def _series(text: str, name: str, knob: str) -> list[str]:
    return re.findall(rf'^{name}{{[^}}]*knob="{re.escape(knob)}"[^}}]*}} (\S+)$', text, re.M)


@pytest.mark.parametrize("host", ["gb200-grace-vm", "hwloc-kvm-guest-2pa"])
def test_audit_of_a_guest_lists_governor_and_turbo_as_not_applicable(host, real, tmp_path):
    root = copy_sysroot(host, tmp_path) if host == "gb200-grace-vm" else real[host]
    before = tree_hash(root)
    doc = json.loads(_audit(root, "json"))
    listed = {(g["layer"], g["knob"]): g["reason"] for g in doc["not_applicable"]}
    assert listed[("cpu", "governor")] == GOVERNOR_NA
    assert listed[("cpu", "turbo")] == TURBO_NA
    assert not {("cpu", "governor"), ("cpu", "turbo")} & {(g["layer"], g["knob"])
                                                          for g in doc["drift"]}
    text = _audit(root, "prometheus")
    for knob in ("cpu.governor", "cpu.turbo"):
        assert _series(text, "exemplar_tune_knob_not_applicable", knob) == ["1"], text
        assert _series(text, "exemplar_tune_knob_drift", knob) == [], text
    assert tree_hash(root) == before  # an audit writes nothing


def test_audit_of_bare_metal_at_another_governor_still_drifts(h100):
    (h100 / CPUFREQ / "policy3/scaling_governor").write_text("powersave\n")
    doc = json.loads(_audit(h100, "json"))
    assert ("cpu", "governor") in {(g["layer"], g["knob"]) for g in doc["drift"]}
    assert ("cpu", "governor") not in {(g["layer"], g["knob"]) for g in doc["not_applicable"]}
    text = _audit(h100, "prometheus")
    assert _series(text, "exemplar_tune_knob_drift", "cpu.governor") == ["1"], text
    assert _series(text, "exemplar_tune_knob_not_applicable", "cpu.governor") == []
