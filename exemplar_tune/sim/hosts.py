"""Simulated hosts: sysroot trees in the kernel's layout, built from a shipped base tree.

``trees/<base>.tar.gz`` are the test suite's fixture sysroots packed into the package
(``healthy-h100``: an x86 H100 node tuned as the reference; ``gb200-grace-vm``: a Grace KVM
guest). :func:`build_host` unpacks one, turns the Grace guest into a bare-metal GB300 node whose
kernel and firmware can run CMDQV (:func:`make_gb300`), writes the command outputs a real node
answers, consistent with its hardware and healthy (NVLink, IMEX, GPU-NIC topology, PCIe paths,
the driver: :mod:`exemplar_tune.sim.captures`), then writes the scenario's *faults*, each a
reported cause of the gap as the kernel would show it. :mod:`exemplar_tune.sim.boot` derives
the boot-time state (command line, CMDQV probe) at the end, as a boot would.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

from exemplar_tune.sim.captures import NVLINKS, write_captures

TREES = Path(__file__).with_name("trees")
BASES = {"h100": "healthy-h100", "grace": "gb200-grace-vm"}
CPU_DIR = "sys/devices/system/cpu"
SLICES = ("system.slice", "user.slice", "init.scope")
CMDQV_PARAM = "arm_smmu_v3.disable_cmdqv"
# Grace idle states through ACPI _LPI (driver acpi_idle, names LPI-<n>). NVIDIA's Grace tuning
# guide lists only WFI; LPI-1 is a scenario assumption so the x86 C-state case (a
# deep state the firmware or OS keeps disabled) can be exercised on the same node.
GRACE_LPI = (("LPI-0", "WFI", 1, 1), ("LPI-1", "CPU_PG", 120, 400))
# SMBIOS strings of the simulated GB300 compute tray (composed; bare metal, not a guest).
GB300_DMI = {"sys_vendor": "NVIDIA", "product_name": "GB300 NVL72 Compute Tray",
             "product_version": "A1", "bios_vendor": "NVIDIA", "bios_version": "02.04.11",
             "bios_date": "09/15/2026", "bios_release": "2.4", "chassis_type": "23",
             "chassis_vendor": "NVIDIA", "chassis_version": "A1"}


def build_host(base: str, faults: list[str], dest: Path,
               imex_domain: list[str] | None = None) -> Path:
    """Unpack ``base`` into ``dest`` and write ``faults`` into it; returns ``dest``.
    ``imex_domain``: the addresses of the host's IMEX domain (its rack) where its GPUs are in
    a multi-node NVLink domain (default: the host alone)."""
    if base not in BASES:
        raise ValueError(f"unknown base tree {base!r} (known: {', '.join(BASES)})")
    unknown = [name for name in faults if name not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault {unknown[0]!r} (known: {', '.join(FAULTS)})")
    dest.mkdir(parents=True)
    with tarfile.open(TREES / f"{BASES[base]}.tar.gz") as tar:
        tar.extractall(dest, filter="tar")  # links inside the tree may be absolute
    # Nodes wait between jobs: the base trees' running Slurm job is not part of the cluster.
    shutil.rmtree(dest / "sys/fs/cgroup/system.slice/slurmstepd.scope", ignore_errors=True)
    if base == "grace":
        make_gb300(dest)
    _write_hcas(dest, *HCAS[base])
    # a GB200 tray's nvidia-smi topo -m lists no NIC (NVIDIA/k8s-test-infra#371): the GPUs reach
    # the NICs over C2C and Grace, never behind a PCIe switch (see exemplar_tune.sim.captures)
    write_captures(dest, imex_domain=imex_domain, nics=base != "grace")
    for name in faults:
        FAULTS[name](dest)
    return dest


HCAS = {"grace": ("MT4131", "40.44.1036", "MT_0000001093"),  # ConnectX-8
        "h100": ("MT4129", "28.39.1002", "MT_0000000838")}  # ConnectX-7


def _write_hcas(root: Path, hca_type: str, fw_ver: str, board_id: str) -> None:
    """The model, firmware and board of every RDMA device (what identifies a fabric)."""
    for dev in sorted((root / "sys/class/infiniband").iterdir()):
        for name, value in (("hca_type", hca_type), ("fw_ver", fw_ver), ("board_id", board_id)):
            _write(dev / name, f"{value}\n")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _cpus(root: Path) -> list[int]:
    return sorted(int(p.name[3:]) for p in (root / CPU_DIR).glob("cpu[0-9]*"))


# -- the GB300 node -----------------------------------------------------------------------------

def make_gb300(root: Path) -> None:
    """A bare-metal GB300 Grace node from the Grace guest tree: SMBIOS of a compute tray, a
    kernel and firmware that can run CMDQV, idle states through ``_LPI``, NCCL jobs in enroot."""
    for name, value in GB300_DMI.items():
        _write(root / "sys/devices/virtual/dmi/id" / name, f"{value}\n")
    log = root / ".exemplar/commands/dmesg.txt"
    dmi_line = (f"DMI: {GB300_DMI['sys_vendor']} {GB300_DMI['product_name']}, BIOS "
                f"{GB300_DMI['bios_version']} {GB300_DMI['bios_date']}")
    log.write_text("".join(re.sub(r"DMI: .*", dmi_line, line)
                           for line in log.read_text().splitlines(True) if "kvm-guest" not in line))
    config = next((root / "boot").glob("config-*"))
    config.write_text(config.read_text() + "CONFIG_TEGRA241_CMDQV=y\n")
    device = root / "sys/devices/LNXSYSTM:00/LNXSYBUS:00/NVDA200C:00"
    for name, value in (("hid", "NVDA200C"), ("uid", "0"), ("status", "15"),
                        ("path", "\\_SB_.SMU0.CMQ0")):
        _write(device / name, f"{value}\n")
    (root / "sys/bus/acpi/devices/NVDA200C:00").symlink_to(
        "../../../devices/LNXSYSTM:00/LNXSYBUS:00/NVDA200C:00")
    _write(root / "sys/module/arm_smmu_v3/parameters/disable_cmdqv", "N\n")
    _write(root / "sys/module/arm_smmu_v3/parameters/bypass_vcmdq", "N\n")
    _write_lpi_states(root)
    _copy_runtime(root)
    _write_topology(root)


def _write_lpi_states(root: Path) -> None:
    idle = root / CPU_DIR / "cpuidle"
    _write(idle / "current_driver", "acpi_idle\n")
    _write(idle / "current_governor", "menu\n")
    _write(idle / "current_governor_ro", "menu\n")
    _write(idle / "available_governors", "ladder menu teo \n")
    for cpu in _cpus(root):
        for index, (name, desc, latency, residency) in enumerate(GRACE_LPI):
            state = root / CPU_DIR / f"cpu{cpu}/cpuidle/state{index}"
            values = {"name": name, "desc": desc, "latency": latency, "residency": residency,
                      "disable": 0, "default_status": "enabled", "usage": 1000 * (index + 1),
                      "time": 900000 * (index + 1), "above": 0, "below": 0, "rejected": 0,
                      "power": 0}
            for key, value in values.items():
                _write(state / key, f"{value}\n")


def _copy_runtime(root: Path) -> None:
    """NCCL configuration, topology file and enroot as the reference x86 node has them."""
    with tarfile.open(TREES / f"{BASES['h100']}.tar.gz") as tar:
        members = [m for m in tar.getmembers()
                   if m.name.startswith(("etc/nccl", "etc/enroot", "etc/slurm"))]
        tar.extractall(root, members=members, filter="tar")


def _write_topology(root: Path) -> None:
    """An NCCL topology (``NCCL_TOPO_DUMP_FILE`` layout) naming this node's GPUs and NICs."""
    smi = (root / ".exemplar/commands/nvidia-smi-q-x.xml").read_text()
    gpus = [bdf[4:].lower() for bdf in re.findall(r"<pci_bus_id>([^<]+)<", smi)]
    nics = {dev.name: Path(os.readlink(dev / "device")).name
            for dev in sorted((root / "sys/class/infiniband").iterdir())}
    lines = ['<system version="1">',
             '  <cpu numaid="0" arch="arm64" vendor="ARM" familyid="0x48" modelid="0xd4f">']
    for index, bdf in enumerate(gpus):
        lines += [f'    <pci busid="{bdf}" class="0x030200" vendor="0x10de" device="0x31c2" '
                  'link_speed="32.0 GT/s PCIe" link_width="16">',
                  f'      <gpu dev="{index}" sm="100" rank="{index}" gdr="1"/>', "    </pci>"]
    for index, (name, bdf) in enumerate(nics.items()):
        lines += [f'    <pci busid="{bdf}" class="0x020700" vendor="0x15b3" device="0x1023" '
                  'link_speed="32.0 GT/s PCIe" link_width="16">',
                  f'      <nic><net name="{name}" dev="{index}" speed="800000" port="1" '
                  'gdr="1" maxconn="131072" latency="0" coll="1"/></nic>', "    </pci>"]
    _write(root / "etc/nccl/topo.xml", "\n".join([*lines, "  </cpu>", "</system>", ""]))


# -- faults -------------------------------------------------------------------------------------

def cmdqv_disabled_by_param(root: Path) -> None:
    """The boot command line turns CMDQV off (``arm_smmu_v3.disable_cmdqv=1``)."""
    grub = root / "etc/default/grub"
    text = grub.read_text()
    grub.write_text(re.sub(r'^GRUB_CMDLINE_LINUX="([^"]*)"',
                           lambda m: f'GRUB_CMDLINE_LINUX="{m.group(1)} {CMDQV_PARAM}=1"',
                           text, count=1, flags=re.M))


def deep_cstate_disabled(root: Path) -> None:
    """The deepest idle state is disabled on every CPU, from boot (as a BIOS ``_CST`` would)."""
    for cpu in _cpus(root):
        states = sorted((root / CPU_DIR / f"cpu{cpu}/cpuidle").glob("state[0-9]*"),
                        key=lambda p: int(p.name[5:]))
        if states:
            (states[-1] / "disable").write_text("1\n")
            (states[-1] / "default_status").write_text("disabled\n")


def housekeeping_unconfined(root: Path) -> None:
    """systemd's slices may run on every CPU (no ``AllowedCPUs=``), irqbalance bans nothing."""
    online = (root / "sys/fs/cgroup/cpuset.cpus.effective").read_text().strip()
    lines = []
    for unit in SLICES:
        (root / "sys/fs/cgroup" / unit / "cpuset.cpus").write_text("\n")
        (root / "sys/fs/cgroup" / unit / "cpuset.cpus.effective").write_text(f"{online}\n")
        lines.append(f"Id={unit}\nAllowedCPUs=\nEffectiveCPUs={online}\n")
        dropin = root / "etc/systemd/system.control" / f"{unit}.d" / "50-AllowedCPUs.conf"
        dropin.unlink(missing_ok=True)
    (root / ".exemplar/commands/systemctl-show-slices.txt").write_text("\n".join(lines))
    irqbalance = root / "etc/default/irqbalance"
    irqbalance.write_text("".join(line for line in irqbalance.read_text().splitlines(True)
                                  if not line.startswith("IRQBALANCE_BANNED_CPULIST=")))


def topo_not_in_container(root: Path) -> None:
    """enroot starts containers without ``NCCL_TOPO_FILE`` and without the topology file."""
    for rel in ("etc/enroot/environ.d/50-nccl.env", "etc/enroot/mounts.d/50-nccl-topo.fstab"):
        (root / rel).unlink(missing_ok=True)


def nccl_qps_1(root: Path) -> None:
    """The system NCCL configuration keeps NCCL's default of one QP per connection."""
    conf = root / "etc/nccl.conf"
    conf.write_text(re.sub(r"^NCCL_IB_QPS_PER_CONNECTION=.*$", "NCCL_IB_QPS_PER_CONNECTION=1",
                           conf.read_text(), flags=re.M))


DEGRADED_HCA = "mlx5_1"  # the RDMA device nic_degraded degrades
DEGRADED_GPU = 1  # the GPU whose NVLinks nvlink_degraded takes down
DEGRADED_LINKS = 6  # how many of its links


def nic_degraded(root: Path) -> None:
    """One compute rail runs at half its rate (port 1 of :data:`DEGRADED_HCA` trained at 2X,
    200 of 400 Gb/s), with the error counters and link flaps of a marginal cable or port: it
    slows every collective across hosts that includes this host, not the host alone."""
    port = root / "sys/class/infiniband" / DEGRADED_HCA / "ports/1"
    gbps, speed = re.match(r"([\d.]+) Gb/sec \(\d+X (\w+)\)", (port / "rate").read_text()).groups()
    _write(port / "rate", f"{float(gbps) / 2:g} Gb/sec (2X {speed})\n")
    for name, value in (("link_downed", 3), ("symbol_error", 2113),
                        ("link_error_recovery", 7), ("port_rcv_errors", 41)):
        _write(port / "counters" / name, f"{value}\n")
    device = root / "sys/class/infiniband" / DEGRADED_HCA
    bdf = Path(os.readlink(device / "device")).name
    iface = next(iter(sorted(p.name for p in (device / "device/net").iterdir())), "ib0")
    log = root / ".exemplar/commands/dmesg.txt"
    text = log.read_text()
    last = re.findall(r"^\[\s*(\d+)\.\d+\]", text, flags=re.M)
    at = int(last[-1]) if last else 100
    flaps = "".join(f"[{at + 60 * n + 30:>5}.{n:06d}] mlx5_core {bdf} {iface}: Link {state}\n"
                    for n in range(3) for state in ("down", "up"))
    log.write_text(text if text.endswith("\n") or not text else text + "\n")
    with log.open("a") as handle:
        handle.write(flaps)


def nvlink_degraded(root: Path) -> None:
    """GPU :data:`DEGRADED_GPU` has :data:`DEGRADED_LINKS` of its NVLinks down
    (``nvidia-smi nvlink -s`` lists them ``<inactive>``): every collective that includes its
    GPUs runs slower, inside the host and across hosts."""
    status = root / ".exemplar/commands/nvidia-smi-nvlink-s.txt"
    lines, gpu = [], -1
    for line in status.read_text().splitlines():
        if line.startswith("GPU "):
            gpu += 1
        elif gpu == DEGRADED_GPU and (m := re.match(r"^(\s*Link (\d+)): ", line)) \
                and int(m.group(2)) >= NVLINKS - DEGRADED_LINKS:
            line = f"{m.group(1)}: <inactive>"
        lines.append(line)
    status.write_text("\n".join(lines) + "\n")


FAULTS: dict[str, Callable[[Path], None]] = {
    "cmdqv_disabled_by_param": cmdqv_disabled_by_param,
    "deep_cstate_disabled": deep_cstate_disabled,
    "housekeeping_unconfined": housekeeping_unconfined,
    "topo_not_in_container": topo_not_in_container,
    "nccl_qps_1": nccl_qps_1,
    "nic_degraded": nic_degraded,
    "nvlink_degraded": nvlink_degraded,
}
