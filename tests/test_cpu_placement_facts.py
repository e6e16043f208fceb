"""cpu layer, placement part: NUMA, PCI locality, cpusets, systemd, isolation, IRQs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import (
    cpu_placement as layer_cpu_placement,
)
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers import (
    cgroup,
    isolation,
    numa,
    pci,
    systemd,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    NotSupported,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.conftest import SYSROOTS

HOSTS = ("h100-x86", "healthy-h100", "gb200-grace-vm")


def gather(root: Sysroot) -> dict:
    sheet = FactSheet()
    layer_cpu_placement.gather_into(sheet, root)
    return sheet.result()


@pytest.fixture(scope="module")
def facts() -> dict[str, dict]:
    return {host: gather(Sysroot(str(SYSROOTS / host))) for host in HOSTS}


def copy_host(tmp_path: Path, host: str) -> Path:
    dest = tmp_path / host
    shutil.copytree(SYSROOTS / host, dest, symlinks=True)
    return dest


# -- (a) parsers -------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text", "want"), [
    ("valid", "10 21", [10, 21]),
    ("one node", "10\n", [10]),
    ("empty", "", ParseError),
    ("garbage", "10 x", ParseError),
])
def test_parse_distance(name, text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            numa.parse_distance(text)
    else:
        assert numa.parse_distance(text) == want


@pytest.mark.parametrize(("name", "text", "want"), [
    ("valid", "Node 0 MemTotal:  131859324 kB\nNode 0 HugePages_Total:     0\n", 131859324),
    ("empty", "", ParseError),
    ("truncated", "Node 0 MemTotal:", ParseError),
    ("no MemTotal", "Node 0 MemFree:  1 kB", ParseError),
    ("garbage", "MemTotal 12", ParseError),
])
def test_parse_node_meminfo(name, text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            numa.parse_node_meminfo(text)
    else:
        assert numa.parse_node_meminfo(text)["MemTotal"] == want


@pytest.mark.parametrize(("text", "want"), [
    ("32.0 GT/s PCIe", 32.0), ("8 GT/s", 8.0), ("2.5 GT/s PCIe\n", 2.5),
    ("Unknown", None), ("Unknown speed", None), ("", ParseError), ("fast", ParseError),
])
def test_parse_link_speed(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            pci.parse_link_speed(text)
    else:
        assert pci.parse_link_speed(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ("-1", None), ("0", 0), ("3\n", 3), ("", ParseError), ("x", ParseError),
])
def test_parse_numa_node(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            pci.parse_numa_node(text)
    else:
        assert pci.parse_numa_node(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ("0x10DE\n", "0x10de"), ("0x030200", "0x030200"), ("", ParseError), ("10de", ParseError),
])
def test_parse_hex_id(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            pci.parse_hex_id(text)
    else:
        assert pci.parse_hex_id(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ("0 4", "0,4"), ("0-3 8-11", "0-3,8-11"), ("0-3,8", "0-3,8"), ("", ""),
    ("0-", ParseError), ("all", ParseError),
])
def test_parse_cpu_set(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            systemd.parse_cpu_set(text)
    else:
        assert systemd.parse_cpu_set(text) == want


def test_parse_unit_file_reset_and_comments():
    text = "# AllowedCPUs=9\n[Slice]\nAllowedCPUs=\nAllowedCPUs=0 4\n;AllowedCPUs=7\n"
    assert systemd.parse_unit_file(text, "AllowedCPUs") == ["", "0 4"]
    assert systemd.parse_unit_file("", "AllowedCPUs") == []


@pytest.mark.parametrize(("text", "want"), [
    ("AllowedCPUs=0 4\nEffectiveCPUs=0 4\n", {"AllowedCPUs": "0 4", "EffectiveCPUs": "0 4"}),
    ("AllowedCPUs=\n", {"AllowedCPUs": ""}),
    ("", {}),
    ("garbage line\n=x\n", {}),
])
def test_parse_systemctl_show(text, want):
    assert systemd.parse_systemctl_show(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ("managed_irq,domain,2-7", {"flags": ["managed_irq", "domain"], "cpus": "2-7"}),
    ("1,3-5", {"flags": [], "cpus": "1,3-5"}),
    ("nohz,", {"flags": ["nohz"], "cpus": ""}),
    ("domain,x", ParseError),
])
def test_parse_isolcpus(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            isolation.parse_isolcpus(text)
    else:
        assert isolation.parse_isolcpus(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ("\n", ""), ("(null)\n", ""), ("2-3,1", "1-3"), ("x", ParseError),
])
def test_parse_sysfs_cpus(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            isolation.parse_sysfs_cpus(text)
    else:
        assert isolation.parse_sysfs_cpus(text) == want


INTERRUPTS = """           CPU0       CPU1
  0:         44          0   IO-APIC   2-edge      timer
  9:          0          0   IO-APIC   9-fasteoi   acpi, foo
 28:          0          0 PCI-MSIX-0000:00:01.0   0-edge      virtio0-config
 31:          5
NMI:          0          0   Non-maskable interrupts
ERR:          0
"""


@pytest.mark.parametrize(("text", "want"), [
    (INTERRUPTS, {0: "timer", 9: "acpi, foo", 28: "virtio0-config"}),
    ("           CPU0\n", {}),
    ("", ParseError),
    ("  0: 1 2 timer\n", ParseError),
])
def test_parse_interrupts(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            isolation.parse_interrupts(text)
    else:
        assert isolation.parse_interrupts(text) == want


@pytest.mark.parametrize(("env", "auto", "want"), [
    ({}, [2, 3], ("2-3", "isolated+nohz_full")),
    ({"IRQBALANCE_BANNED_CPULIST": ""}, [2, 3], ("", "IRQBALANCE_BANNED_CPULIST")),
    ({"IRQBALANCE_BANNED_CPULIST": "1-3,5-7"}, [], ("1-3,5-7", "IRQBALANCE_BANNED_CPULIST")),
    ({"IRQBALANCE_BANNED_CPUS": "ee", "IRQBALANCE_BANNED_CPULIST": "1"}, [],
     ("1-3,5-7", "IRQBALANCE_BANNED_CPUS")),
    ({"IRQBALANCE_BANNED_CPUS": ""}, [4], ("4", "isolated+nohz_full")),
])
def test_irqbalance_banned(env, auto, want):
    assert isolation.irqbalance_banned(env, auto) == want


def test_irqbalance_banned_garbage():
    with pytest.raises(ParseError):
        isolation.irqbalance_banned({"IRQBALANCE_BANNED_CPULIST": "one"}, [])


def test_parse_env_file():
    text = '# c\nexport A="1-3 5"\nIRQBALANCE_BANNED_CPULIST=\nB=x # tail\nnoequals\n'
    assert isolation.parse_env_file(text) == {"A": "1-3 5", "IRQBALANCE_BANNED_CPULIST": "",
                                              "B": "x"}


def test_summarize_irqs_outside_and_unjudged():
    irqs = [{"irq": 1, "name": "a", "affinity": "0-7", "effective": "5"},
            {"irq": 2, "name": "b", "affinity": "0", "effective": None}]
    have = isolation.summarize_irqs(irqs, [0, 4], "0-7")
    assert have["outside_housekeeping"] == [{"irq": 1, "name": "a", "effective": "5"}]
    assert have["by_affinity"] == {"0": 1, "0-7": 1}
    assert isolation.summarize_irqs(irqs, None, None)["outside_housekeeping"] is None


# -- (b) fixture sysroots ----------------------------------------------------------------

NODE_CPUS = {"h100-x86": ["0-3", "4-7"], "healthy-h100": ["0-3", "4-7"],
             "gb200-grace-vm": ["0-3", "4-7"]}


@pytest.mark.parametrize("host", HOSTS)
def test_numa_on_fixtures(facts, host):
    have = facts[host]["numa"]
    assert have["online"] == [0, 1]
    assert have["has_cpu"] == [0, 1]
    assert have["has_memory"] == [0, 1]
    assert [n["cpulist"] for n in have["nodes"]] == NODE_CPUS[host]
    assert all(n["distance"][n["node"]] == 10 for n in have["nodes"])
    assert all(n["mem_total_kb"] > 0 for n in have["nodes"])
    assert facts[host]["errors"] == []


def test_numa_values_h100(facts):
    nodes = facts["h100-x86"]["numa"]["nodes"]
    assert nodes[0] == {"node": 0, "cpulist": "0-3", "mem_total_kb": 1056398400,
                        "distance": [10, 21]}




H100_GPU = {"0000:a4:00.0": 0, "0000:ae:00.0": 0, "0000:b8:00.0": 0, "0000:c2:00.0": 0,
            "0000:cc:00.0": 1, "0000:d6:00.0": 1, "0000:e0:00.0": 1, "0000:ea:00.0": 1}
H100_NIC = {"0000:a3:00.0": 0, "0000:ad:00.0": 0, "0000:b7:00.0": 0, "0000:c1:00.0": 0,
            "0000:cb:00.0": 1, "0000:d5:00.0": 1, "0000:df:00.0": 1, "0000:e9:00.0": 1}
PCI_SPEC = {
    "h100-x86": (H100_GPU, "0x2330", H100_NIC, "0x020000"),
    "healthy-h100": (H100_GPU, "0x2330", H100_NIC, "0x020000"),
    "gb200-grace-vm": ({"0008:01:00.0": 0, "0009:01:00.0": 0, "0018:01:00.0": 1,
                        "0019:01:00.0": 1}, "0x2941",
                       {"0000:03:00.0": 0, "0002:03:00.0": 0, "0010:03:00.0": 1,
                        "0012:03:00.0": 1}, "0x020700"),
}


@pytest.mark.parametrize("host", HOSTS)
def test_pci_devices_on_fixtures(facts, host):
    gpus, gpu_id, nics, nic_class = PCI_SPEC[host]
    have_gpus = facts[host]["gpus_pci"]
    assert {g["bdf"]: g["numa_node"] for g in have_gpus} == gpus
    assert {g["device"] for g in have_gpus} == {gpu_id}
    assert {g["driver"] for g in have_gpus} == {"nvidia"}
    have_nics = facts[host]["nics_pci"]
    assert {n["bdf"]: n["numa_node"] for n in have_nics} == nics
    assert {n["pci_class"] for n in have_nics} == {nic_class}
    assert {n["driver"] for n in have_nics} == {"mlx5_core"}
    for dev in have_gpus + have_nics:
        assert dev["local_cpulist"] == ("0-3" if dev["numa_node"] == 0 else "4-7")
        domain = dev["bdf"][:4]
        assert dev["sysfs_path"] == f"/sys/devices/pci{domain}:00/{domain}:00:01.0/{dev['bdf']}"


def test_pci_device_h100_exact(facts):
    assert facts["h100-x86"]["gpus_pci"][3] == {
        "bdf": "0000:c2:00.0", "vendor": "0x10de", "device": "0x2330", "pci_class": "0x030200",
        "numa_node": 0, "local_cpulist": "0-3", "current_link_gts": 32.0, "max_link_gts": 32.0,
        "current_link_width": 16, "max_link_width": 16, "driver": "nvidia",
        "sysfs_path": "/sys/devices/pci0000:00/0000:00:01.0/0000:c2:00.0"}


def test_list_pci_devices_filters(tmp_path):
    root = Sysroot(str(SYSROOTS / "gb200-grace-vm"))
    assert len(pci.list_pci_devices(root)) == 8
    assert len(pci.list_pci_devices(root, vendors=("0x15B3",), classes=("0x0207",))) == 4
    assert pci.list_pci_devices(root, vendors=("0x8086",)) == []
    assert pci.list_pci_devices(Sysroot(str(tmp_path))) == []


def test_pci_numa_node_minus_one_and_unbound(tmp_path):
    dest = copy_host(tmp_path, "gb200-grace-vm")
    dev = dest / "sys/devices/pci0008:00/0008:00:01.0/0008:01:00.0"
    (dev / "numa_node").write_text("-1\n")
    (dev / "driver").unlink()
    (dev / "max_link_speed").unlink()
    have = pci.read_pci_device(Sysroot(str(dest)), "0008:01:00.0")
    assert (have.numa_node, have.driver, have.max_link_gts) == (None, None, None)


HOUSEKEEPING = {"h100-x86": ("", "0-7"), "healthy-h100": ("0,4", "0,4"),
                "gb200-grace-vm": ("", "0-7")}
JOB = {"h100-x86": "0-7", "healthy-h100": "1-3,5-7", "gb200-grace-vm": "0-7"}


@pytest.mark.parametrize("host", HOSTS)
def test_cgroups_on_fixtures(facts, host):
    have = facts[host]
    assert have["cgroup"] == {"version": "v2", "cpuset_hierarchy": "/sys/fs/cgroup",
                              "cpuset_interface": "v2",
                              "root": {"path": "/sys/fs/cgroup", "cpus": None,
                                       "effective": "0-7"}}
    cpus, effective = HOUSEKEEPING[host]
    for unit in ("system.slice", "user.slice", "init.scope"):
        assert have["housekeeping"][unit] == {"path": f"/sys/fs/cgroup/{unit}", "cpus": cpus,
                                              "effective": effective}
    job_path = "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_4242"
    assert have["slurm_jobs"] == [{
        "job_id": 4242, "path": job_path, "cpus": JOB[host], "effective": JOB[host],
        "steps": {"step_0": {"path": f"{job_path}/step_0", "cpus": "",
                             "effective": JOB[host]}}}]


@pytest.mark.parametrize("host", HOSTS)
def test_systemd_on_fixtures(facts, host):
    have = facts[host]
    confined = host == "healthy-h100"
    assert have["systemd_cpu_affinity"] is None
    for unit in ("system.slice", "user.slice", "init.scope"):
        dropin = have["systemd_allowed_cpus"][unit]
        if confined:
            path = f"/etc/systemd/system.control/{unit}.d/50-AllowedCPUs.conf"
            assert dropin == {"cpus": "0,4", "file": path, "files": [path]}
        else:
            assert dropin is None
        assert have["systemd_show"][unit] == {
            "allowed_cpus": "0,4" if confined else "",
            "effective_cpus": "0,4" if confined else "0-7"}
    assert have["sources"]["systemd_show"] == (
        "systemctl show --property=Id,AllowedCPUs,EffectiveCPUs system.slice user.slice init.scope")


def test_cpu_affinity_dropins_last_wins(tmp_path):
    dest = copy_host(tmp_path, "h100-x86")
    conf_d = dest / "etc/systemd/system.conf.d"
    conf_d.mkdir(parents=True)
    (dest / "etc/systemd/system.conf").write_text("[Manager]\nCPUAffinity=0-7\n")
    (conf_d / "00-tuned.conf").write_text("[Manager]\nCPUAffinity=0 4\n")
    (conf_d / "10-reset.conf").write_text("[Manager]\nCPUAffinity=1\n")
    have = systemd.read_cpu_affinity(Sysroot(str(dest)))
    assert have == {"cpus": "1", "file": "/etc/systemd/system.conf.d/10-reset.conf"}
    (conf_d / "10-reset.conf").write_text("[Manager]\nCPUAffinity=\n")
    assert systemd.read_cpu_affinity(Sysroot(str(dest))) is None


def test_allowed_cpus_runtime_dropin(tmp_path):
    dest = copy_host(tmp_path, "h100-x86")
    run_d = dest / "run/systemd/system.control/user.slice.d"
    run_d.mkdir(parents=True)
    (run_d / "50-AllowedCPUs.conf").write_text("[Slice]\nAllowedCPUs=\nAllowedCPUs=0-1 4\n")
    have = systemd.read_allowed_cpus_dropins(Sysroot(str(dest)), "user.slice")
    path = "/run/systemd/system.control/user.slice.d/50-AllowedCPUs.conf"
    assert have == {"cpus": "0-1,4", "file": path, "files": [path]}


def test_missing_systemctl_output_is_none_not_error(tmp_path):
    dest = copy_host(tmp_path, "healthy-h100")
    show = dest / ".exemplar/commands/systemctl-show-slices.txt"
    blocks = show.read_text().split("\n\n")
    show.write_text("\n\n".join(b for b in blocks if "Id=user.slice" not in b))
    have = gather(Sysroot(str(dest)))
    assert have["systemd_show"]["user.slice"] is None
    assert have["systemd_show"]["system.slice"] == {"allowed_cpus": "0,4",
                                                    "effective_cpus": "0,4"}
    assert have["errors"] == []


def test_malformed_cpuset_file_is_none_plus_error(tmp_path):
    dest = copy_host(tmp_path, "healthy-h100")
    (dest / "sys/fs/cgroup/user.slice/cpuset.cpus.effective").write_text("0,4-\n")
    have = gather(Sysroot(str(dest)))
    assert have["housekeeping"]["user.slice"] is None
    assert have["housekeeping"]["system.slice"]["effective"] == "0,4"
    assert have["errors"] == [{
        "fact": "housekeeping.user.slice",
        "path": "/sys/fs/cgroup/user.slice/cpuset.cpus.effective",
        "error": "not a CPU list: '0,4-'"}]


def test_cgroup_v1_and_hybrid_detection(tmp_path):
    root = tmp_path / "v1"
    job = root / "sys/fs/cgroup/cpuset/slurm/uid_1000/job_77"
    job.mkdir(parents=True)
    for rel, text in (("", "0-7"), ("slurm/uid_1000/job_77/", "2-3")):
        base = root / "sys/fs/cgroup/cpuset" / rel
        (base / "cgroup.procs").write_text("")
        (base / "cpuset.cpus").write_text(text + "\n")
        (base / "cpuset.effective_cpus").write_text(text + "\n")
    sysroot = Sysroot(str(root))
    assert cgroup.detect_version(sysroot) == "v1"
    assert cgroup.read_slurm_jobs(sysroot) == [{
        "job_id": 77, "path": "/sys/fs/cgroup/cpuset/slurm/uid_1000/job_77", "cpus": "2-3",
        "effective": "2-3", "steps": {}}]
    (root / "sys/fs/cgroup/unified").mkdir()
    (root / "sys/fs/cgroup/unified/cgroup.controllers").write_text("\n")
    assert cgroup.detect_version(sysroot) == "hybrid"
    assert cgroup.read_cgroup(sysroot)["cpuset_interface"] == "v1"
    with pytest.raises(NotSupported):
        cgroup.detect_version(Sysroot(str(tmp_path / "empty")))


@pytest.mark.parametrize("host", HOSTS)
def test_isolation_on_fixtures(facts, host):
    assert facts[host]["isolation"] == {
        "cmdline": {"isolcpus": None, "nohz_full": None, "rcu_nocbs": None,
                    "irqaffinity": None},
        "isolcpus": None, "isolated": "", "nohz_full": ""}


def test_isolation_from_cmdline(tmp_path):
    dest = copy_host(tmp_path, "h100-x86")
    (dest / "proc/cmdline").write_text("ro isolcpus=managed_irq,domain,1-3 nohz_full=1-3\n")
    (dest / "sys/devices/system/cpu/isolated").write_text("1-3\n")
    have = isolation.read_isolation(Sysroot(str(dest)))
    assert have["isolcpus"] == {"flags": ["managed_irq", "domain"], "cpus": "1-3"}
    assert have["cmdline"]["nohz_full"] == "1-3"
    assert have["isolated"] == "1-3"


@pytest.mark.parametrize(("host", "outside"), [
    ("h100-x86", []),
    ("healthy-h100", [121, 122, 123, 124]),
    ("gb200-grace-vm", []),
])
def test_irq_summary_on_fixtures(facts, host, outside):
    have = facts[host]["irq"]
    assert have["default_affinity"] == "0-7"
    assert have["housekeeping"] == ("0,4" if host == "healthy-h100" else "0-7")
    assert [i["irq"] for i in have["outside_housekeeping"]] == outside
    assert sum(have["by_effective"].values()) == have["count"]


def test_irq_names_h100(facts):
    have = facts["healthy-h100"]["irq"]["outside_housekeeping"][0]
    assert have == {"irq": 121, "name": "mlx5_comp0@pci:0000:a3:00.0", "effective": "1"}
    assert facts["h100-x86"]["irq"]["count"] == 10


@pytest.mark.parametrize(("host", "banned", "origin"), [
    ("h100-x86", "", "isolated+nohz_full"),
    ("healthy-h100", "1-3,5-7", "IRQBALANCE_BANNED_CPULIST"),
    ("gb200-grace-vm", "", "isolated+nohz_full"),
])
def test_irqbalance_on_fixtures(facts, host, banned, origin):
    have = facts[host]["irqbalance"]
    assert have["running"] is True
    assert have["pids"] == [1201]
    assert have["files"] == ["/etc/default/irqbalance"]
    assert (have["banned"], have["banned_from"]) == (banned, origin)


@pytest.mark.parametrize("host", HOSTS)
def test_no_cmdqv_interrupt_line(host):
    assert "tegra241-cmdqv" not in (SYSROOTS / host / "proc/interrupts").read_text()


def test_facts_are_json(facts):
    assert json.loads(json.dumps(facts)) == facts


# -- (c) this machine ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def live() -> dict:
    return gather(Sysroot("/"))


def test_live_numa_node0(live):
    node0 = next(n for n in live["numa"]["nodes"] if n["node"] == 0)
    with open("/sys/devices/system/node/node0/cpulist") as handle:
        assert node0["cpulist"] == handle.read().strip()
    assert live["numa"]["online"] == [int(n[4:]) for n in os.listdir("/sys/devices/system/node")
                                      if n.startswith("node") and n[4:].isdigit()]


def test_live_cgroup_version(live):
    entries = set(os.listdir("/sys/fs/cgroup"))
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        want = "v2"
    elif "unified" in entries and "cpuset" in entries:
        want = "hybrid"
    else:
        want = "v1"
    assert live["cgroup"]["version"] == want
    if want == "hybrid":
        with open("/sys/fs/cgroup/cpuset/cpuset.effective_cpus") as handle:
            assert live["cgroup"]["root"]["effective"] == handle.read().strip()
    for unit in ("system.slice", "user.slice", "init.scope"):
        exists = os.path.isdir(os.path.join(live["cgroup"]["cpuset_hierarchy"], unit))
        assert (live["housekeeping"][unit] is not None) == exists


def test_live_pci_and_systemctl(live):
    nvidia = []
    for bdf in os.listdir("/sys/bus/pci/devices"):
        with open(f"/sys/bus/pci/devices/{bdf}/vendor") as v, \
                open(f"/sys/bus/pci/devices/{bdf}/class") as c:
            if v.read().strip() == "0x10de" and c.read().startswith(("0x0302", "0x0300")):
                nvidia.append(bdf)
    assert sorted(g["bdf"] for g in live["gpus_pci"]) == sorted(nvidia)
    try:
        proc = subprocess.run(["systemctl", "show", "system.slice"], capture_output=True,
                              check=False)
        works = proc.returncode == 0
    except FileNotFoundError:
        works = False
    assert (live["systemd_show"]["system.slice"] is not None) == works


def test_live_irqs(live):
    irqs = [n for n in os.listdir("/proc/irq") if n.isdigit()]
    assert live["irq"]["count"] == len(irqs)
    comms = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as handle:
                comms.append(handle.read().strip())
        except OSError:
            continue
    assert live["irqbalance"]["running"] == ("irqbalance" in comms)
    assert live["errors"] == []
