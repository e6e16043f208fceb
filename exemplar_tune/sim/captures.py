"""The command outputs a real node answers, for a simulated host: built from its own facts and
from real captures by others (:mod:`exemplar_tune.sim.capture_templates`).

:func:`write_captures` reads what the host tree already says (the GPUs, their UUIDs, bus IDs
and PCI IDs in ``nvidia-smi -q -x``; the RDMA devices under ``/sys/class/infiniband``; each
device's NUMA node, local CPUs, link and IOMMU group in sysfs; the PCIe switches of the NCCL
topology file ``/etc/nccl/topo.xml``; the driver's banner in the kernel log) and writes, all
healthy:

* ``nvidia-smi-nvlink-s.txt``: every GPU with 18 links at one speed. Derived from the H200
  capture of utkuozdemir/nvidia_gpu_exporter (header and ``\\t Link N: 26.562 GB/s`` layout;
  Hopper's speed) and, for GB200, the speed of NVIDIA/k8s-test-infra#371 (53.125 GB/s); the
  headers name this host's GPUs and UUIDs.
* ``nvidia-smi-nvlink-e.txt``: per link ``Replay Errors``, ``Recovery Errors``, ``CRC Errors``
  all 0, in the layout of the brev A100 report (a blank line after each link's group); a
  GB300 snippet noted in ``nvlink/SOURCES.md`` prints the same names on Blackwell.
* ``nvidia-smi-topo-m.txt``: in the tab layout of the utkuozdemir H200 matrix (its legend
  whole), ``NV18`` between GPUs, and per GPU-NIC pair ``PIX`` where the topology file puts
  both behind one PCIe switch, ``NODE`` on the same NUMA node, ``SYS`` across; the NIC legend
  in the form of the kubernetes-sigs/dranet B200 capture. ``nics=False`` leaves the NICs out,
  as the GB200 tray of NVIDIA/k8s-test-infra#371 prints them (no NIC column): the Grace trees'
  GPUs and NICs sit in separate PCI domains, never behind one switch (where a GB200 lists its
  NICs, as in sgl-project/sglang#11208, every GPU-NIC pair is ``SYS``).
* ``lspci-vvv.txt``: the GPUs, the RDMA NICs and the PCIe switch ports above them. Stanzas
  derived from the HPE Cray XD665 capture (linuxhw/LsPCI: a Broadcom PEX890xx switch with an
  H100 and a ConnectX-5 behind it): upstream port, one downstream port per device, the NIC and
  the GPU. Changed to fit the host: addresses, ``Bus:`` numbers, ``NUMA node``, ``IOMMU
  group`` (the tree's own groups for endpoints, the next free numbers for switch ports), the
  identity lines (device and subsystem from the facts; the ``-nn`` numbers dropped, as
  ``lspci -vvv`` prints), the NIC's link speeds (sysfs), the GPU bound to ``nvidia``
  (``BusMaster+``, ``Kernel driver in use``) and the switch ports' ``ACSCtl`` set to the
  all-off line of the Supermicro PEX88096 capture (a node tuned for GPUDirect: no ACS
  redirection). The ConnectX-5's product data (VPD) and SR-IOV blocks are left out (they
  describe that card); root ports and functions other than these are left out too (no real
  capture of this host's root ports exists). Without a switch in the topology file (the Grace
  trees) the GPUs and NICs hang off root ports: no switch port is listed.
* ``nvidia-imex-ctl-N.txt`` (only where a GPU is in a multi-node NVLink domain: GB200/GB300
  NVL): the domain's nodes READY, every connection ``C``, ``Domain State: UP``, in the layout
  of jgehrcke/jpsnips-nv's two-node GH200 capture (IMEX before R570.172: no version column;
  column widths as the AWS 18-node capture widens them); ``/etc/nvidia-imex/nodes_config.cfg``
  lists the same addresses. The addresses are composed (``10.0.<rack>.<n>``).
* ``/proc/driver/nvidia/version``: the driver's ``NVRM: loading`` banner from the kernel log
  and the compiler of the kernel's banner, in ``nv-procfs.c``'s two lines; and
  ``/sys/module/nvidia_peermem`` (loaded: GPUDirect RDMA through the peer-memory module).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.gpu import in_cluster
from ansible_collections.exemplar.tune.plugins.module_utils.readers.nvidia_smi import (
    parse_nvidia_smi,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.safe_xml import parse_xml
from ansible_collections.exemplar.tune.plugins.module_utils.readers.topo_xml import normalize_bdf

from exemplar_tune.sim import capture_templates as real

COMMANDS = ".exemplar/commands"
NVLINKS = 18  # links per GPU on HGX H100/H200 and GB200/GB300 NVL (both real captures list 18)
NVL_TRAYS = 18  # compute trays in one NVL72 rack: one IMEX domain
IMEX_CONFIG = "etc/nvidia-imex/nodes_config.cfg"
# Per-link NVLink speed by GPU family: the figure of the real capture of that family.
LINK_SPEEDS = {"H100": real.H200_NVLINK_STATUS, "H200": real.H200_NVLINK_STATUS,
               "GB200": real.GB200_NVLINK_STATUS, "GB300": real.GB200_NVLINK_STATUS}
# lspci's names (pci.ids) for the functions of the simulated trees.
GPU_NAMES = {"2330": "GH100 [H100 SXM5 80GB]"}  # the XD665 capture's own header
NIC_NAMES = {"101e": "ConnectX Family mlx5Gen Virtual Function",
             "1021": "MT2910 Family [ConnectX-7]", "1023": "CX8 Family [ConnectX-8]"}
CLASS_NAMES = {"0x0200": "Ethernet controller", "0x0207": "Infiniband controller",
               "0x0302": "3D controller", "0x0300": "VGA compatible controller"}
_NN = re.compile(r" \[[0-9a-f]{4}:[0-9a-f]{4}\]")  # what -nn adds to names


def imex_address(rack: int, tray: int) -> str:
    """The (composed) address of compute tray ``tray`` of rack ``rack`` in its IMEX domain."""
    return f"10.0.{rack}.{tray + 1}"


def imex_domains(names: list[str]) -> dict[str, list[str]]:
    """Each host's IMEX domain: the addresses of its rack, ``NVL_TRAYS`` hosts in order."""
    return {name: [imex_address(i // NVL_TRAYS, j) for j in
                   range(min(NVL_TRAYS, len(names) - i // NVL_TRAYS * NVL_TRAYS))]
            for i, name in enumerate(names)}


def write_captures(root: Path, *, imex_domain: list[str] | None = None,
                   nics: bool = True) -> None:
    """Write the captures above into the host tree at ``root``. ``imex_domain``: the addresses
    of the host's IMEX domain (default: the host alone); ``nics``: whether ``nvidia-smi topo
    -m`` lists the NICs. ``ValueError`` where the tree lacks what a capture is built from."""
    host = read_host(root)
    commands = root / COMMANDS
    _write(commands / "nvidia-smi-nvlink-s.txt", nvlink_status(host))
    _write(commands / "nvidia-smi-nvlink-e.txt", nvlink_errors(host))
    _write(commands / "nvidia-smi-topo-m.txt", topology(host, nics=nics))
    _write(commands / "lspci-vvv.txt", lspci(host))
    if any(in_cluster(g) for g in host["gpus"]):
        domain = imex_domain or [imex_address(0, 0)]
        _write(commands / "nvidia-imex-ctl-N.txt", imex_nodes(domain))
        _write(root / IMEX_CONFIG, "".join(f"{address}\n" for address in domain))
    _write(root / "proc/driver/nvidia/version", driver_version(root))
    _write(root / "sys/module/nvidia_peermem/initstate", "live\n")
    _write(root / "sys/module/nvidia_peermem/refcnt", "0\n")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# -- the host's facts ---------------------------------------------------------------------------

def read_host(root: Path) -> dict[str, Any]:
    """``{"gpus": [...], "nics": [...], "pci": {bdf: {...}}, "parent": {bdf: switch bdf}}``."""
    text = (root / COMMANDS / "nvidia-smi-q-x.xml").read_text()
    subsystems = [(gpu.findtext("pci/pci_sub_system_id") or "").lower()[:4] or None
                  for gpu in parse_xml(text, "nvidia-smi -q -x").findall("gpu")]
    gpus = [{"name": gpu["product_name"], "uuid": gpu["uuid"], "bdf": gpu["sysfs_bdf"],
             "device": gpu["pci_device_id"][2:], "subsystem": subsystem,
             "fabric": gpu["fabric"]}
            for gpu, subsystem in zip(parse_nvidia_smi(text)["gpus"], subsystems, strict=True)]
    ib = root / "sys/class/infiniband"
    nics = [{"name": dev.name, "bdf": Path(os.readlink(dev / "device")).name}
            for dev in sorted(ib.iterdir(), key=lambda p: _natural(p.name))] \
        if ib.is_dir() else []
    groups = {link.name: int(group.name) for group in (root / "sys/kernel/iommu_groups").glob("*")
              for link in (group / "devices").glob("*")}
    pci = {}
    for bdf in [g["bdf"] for g in gpus] + [n["bdf"] for n in nics]:
        dev = root / "sys/bus/pci/devices" / bdf
        pci[bdf] = {key: (dev / key).read_text().strip() for key in (
            "class", "device", "numa_node", "local_cpulist", "max_link_speed", "max_link_width",
            "current_link_speed", "current_link_width")}
        pci[bdf]["iommu_group"] = groups.get(bdf)
    switches, subsystems = _topology_file(root)
    return {"gpus": gpus, "nics": nics, "pci": pci, "switches": switches,
            "parent": {child: bridge for bridge, children in switches.items()
                       for child in children},
            "nic_subsystems": subsystems, "next_group": max(groups.values(), default=-1) + 1}


def _natural(name: str) -> tuple[str, int]:
    head, _, number = name.rpartition("_")
    return (head, int(number)) if number.isdigit() else (name, -1)


def _topology_file(root: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """From the NCCL topology file: its PCIe switches, ``{bridge bdf: [device bdfs]}``, and
    the NICs' PCI subsystem ids, ``{bdf: "0127"}``."""
    path = root / "etc/nccl/topo.xml"
    if not path.is_file():
        return {}, {}
    system = parse_xml(path.read_text(), str(path))
    switches = {normalize_bdf(pci.get("busid", "")): sorted(
        normalize_bdf(child.get("busid", "")) for child in pci.findall("pci"))
        for pci in system.iter("pci") if pci.get("class", "").startswith("0x0604")}
    subsystems = {normalize_bdf(pci.get("busid", "")): pci.get("subsystem_device", "")[2:]
                  for pci in system.iter("pci")
                  if pci.get("vendor") == "0x15b3" and pci.get("subsystem_device")}
    return switches, subsystems


# -- nvidia-smi nvlink -s / -e ------------------------------------------------------------------

def _link_template(name: str) -> tuple[str, ...]:
    for family, lines in LINK_SPEEDS.items():
        if family in name.split():
            return lines
    raise ValueError(f"no NVLink capture for {name!r} (known: {', '.join(LINK_SPEEDS)})")


def _header(template: str, index: int, gpu: dict[str, Any]) -> str:
    return re.sub(r"GPU \d+: .* \(UUID: .*\)", lambda _: f"GPU {index}: {gpu['name']} (UUID: "
                  f"{gpu['uuid']})", template)


def nvlink_status(host: dict[str, Any]) -> str:
    """``nvidia-smi nvlink -s``: every link of every GPU active at its family's speed."""
    header, link = real.H200_NVLINK_STATUS
    indent = link[:link.index("Link")]
    lines = []
    for index, gpu in enumerate(host["gpus"]):
        speed = re.search(r"[\d.]+ GB/s", _link_template(gpu["name"])[1]).group(0)
        lines.append(_header(header, index, gpu))
        lines += [f"{indent}Link {n}: {speed}" for n in range(NVLINKS)]
    return "\n".join(lines) + "\n"


def nvlink_errors(host: dict[str, Any]) -> str:
    """``nvidia-smi nvlink -e``: every counter of every link 0."""
    header, *counters = real.A100_NVLINK_ERRORS
    lines = []
    for index, gpu in enumerate(host["gpus"]):
        lines.append(_header(header, index, gpu))
        for n in range(NVLINKS):
            lines += [line.replace("Link 0:", f"Link {n}:") for line in counters]
    return "\n".join(lines) + "\n"


# -- nvidia-smi topo -m -------------------------------------------------------------------------

def _distance(host: dict[str, Any], a: str, b: str) -> str:
    parent = host["parent"]
    if parent.get(a) and parent.get(a) == parent.get(b):
        return "PIX"
    return "NODE" if host["pci"][a]["numa_node"] == host["pci"][b]["numa_node"] else "SYS"


def topology(host: dict[str, Any], nics: bool = True) -> str:
    """``nvidia-smi topo -m`` of the host (see the module docstring)."""
    gpus = [g["bdf"] for g in host["gpus"]]
    cards = [n["bdf"] for n in host["nics"]] if nics else []
    names = [f"GPU{i}" for i in range(len(gpus))] + [f"NIC{i}" for i in range(len(cards))]
    devices = gpus + cards
    head, _row, *legend = real.H200_TOPO  # the one row's layout is that of the rows below
    lines = [head.replace("GPU0", "\t".join(names))]
    for index, (name, bdf) in enumerate(zip(names, devices, strict=True)):
        cells = []
        for other_index, other in enumerate(devices):
            if other_index == index:
                cells.append(" X ")
            elif index < len(gpus) and other_index < len(gpus):
                cells.append(f"NV{NVLINKS}")
            else:
                cells.append(_distance(host, bdf, other))
        if index < len(gpus):
            info = host["pci"][bdf]
            cells += [info["local_cpulist"], info["numa_node"], "", "N/A"]
        lines.append("\t".join([name, *cells]))
    lines += legend
    if cards:
        title, blank, entry = real.B200_NIC_LEGEND
        lines += ["", title, blank] + [entry.replace("NIC0", f"NIC{i}").replace(
            "mlx5_0", nic["name"]) for i, nic in enumerate(host["nics"])]
    return "\n".join(lines) + "\n"


# -- lspci -vvv ---------------------------------------------------------------------------------

def _bus(bdf: str) -> int:
    return int(bdf[5:7], 16)


def _gts(sysfs: str) -> str:
    """``32.0 GT/s PCIe`` (sysfs) -> ``32GT/s`` (lspci)."""
    return f"{float(sysfs.split()[0]):g}GT/s"


def _link(lines: list[str], cap: tuple[str, str] | None = None,
          sta: tuple[str, str] | None = None) -> list[str]:
    """Set the speed and width lspci shows: ``cap`` the device's maximum (``LnkCap``,
    ``LnkCap2``, ``LnkCtl2``), ``sta`` the link's current (``LnkSta``)."""
    out = []
    for line in lines:
        if cap and line.startswith("\t\tLnkCap:\t"):
            line = re.sub(r"Speed [\d.]+GT/s, Width x\d+", f"Speed {cap[0]}, Width x{cap[1]}",
                          line)
        elif cap and line.startswith("\t\tLnkCap2: Supported Link Speeds: "):
            line = re.sub(r"2\.5-[\d.]+GT/s", f"2.5-{cap[0]}", line)
        elif cap and line.startswith("\t\tLnkCtl2: Target Link Speed: "):
            line = re.sub(r"Target Link Speed: [\d.]+GT/s", f"Target Link Speed: {cap[0]}", line)
        elif sta and line.startswith("\t\tLnkSta:\t"):
            line = re.sub(r"Speed [\d.]+GT/s, Width x\d+", f"Speed {sta[0]}, Width x{sta[1]}",
                          line)
        out.append(line)
    return out


def _without(lines: list[str], capability: str) -> list[str]:
    """``lines`` less one capability block (its ``Capabilities:`` line and the deeper ones)."""
    out, skipping = [], False
    for line in lines:
        if line.startswith("\tCapabilities: ") and capability in line:
            skipping = True
            continue
        if skipping and line.startswith("\t\t"):
            continue
        skipping = False
        out.append(line)
    return out


def _adapt(template: tuple[str, ...], header: str, numa: str, group: int,
           buses: tuple[int, int, int] | None = None) -> list[str]:
    """A template stanza with this function's header, NUMA node, IOMMU group and buses."""
    lines = [_NN.sub("", header)]
    for line in template[1:]:
        line = _NN.sub("", line)
        if line.startswith("\tNUMA node: "):
            line = f"\tNUMA node: {numa}"
        elif line.startswith("\tIOMMU group: "):
            line = f"\tIOMMU group: {group}"
        elif buses and line.startswith("\tBus: primary="):
            line = re.sub(r"primary=\w\w, secondary=\w\w, subordinate=\w\w",
                          "primary={:02x}, secondary={:02x}, subordinate={:02x}".format(*buses),
                          line)
        lines.append(line)
    return lines


def _address(bdf: str, domains: bool) -> str:
    return bdf if domains else bdf[5:]


def _gpu_stanza(host: dict[str, Any], gpu: dict[str, Any], domains: bool) -> list[str]:
    info = host["pci"][gpu["bdf"]]
    kind = CLASS_NAMES[info["class"][:6]]
    name = GPU_NAMES.get(gpu["device"], f"Device {gpu['device']}")
    lines = _adapt(real.XD665_H100, f"{_address(gpu['bdf'], domains)} {kind}: NVIDIA "
                   f"Corporation {name} (rev a1)", info["numa_node"], info["iommu_group"])
    if gpu["subsystem"] != "16c0" or gpu["device"] != "2330":  # the XD665 card's own
        lines[1] = f"\tSubsystem: NVIDIA Corporation Device {gpu['subsystem']}"
    lines = [line.replace("BusMaster-", "BusMaster+") if line.startswith("\tControl:") else
             line.replace("Device ID: 2330", f"Device ID: {gpu['device']}") for line in lines]
    lines.insert(len(lines) - 1, "\tKernel driver in use: nvidia")
    cap = (_gts(info["max_link_speed"]), info["max_link_width"])
    return _link(lines, cap, (_gts(info["current_link_speed"]), info["current_link_width"]))


def _nic_stanza(host: dict[str, Any], nic: dict[str, Any], domains: bool,
                subsystem: str | None) -> list[str]:
    info = host["pci"][nic["bdf"]]
    device = info["device"][2:]
    name = NIC_NAMES.get(device, f"Device {device}")
    lines = _adapt(real.XD665_CONNECTX, f"{_address(nic['bdf'], domains)} "
                   f"{CLASS_NAMES[info['class'][:6]]}: Mellanox Technologies {name}",
                   info["numa_node"], info["iommu_group"])
    lines = _without(_without(lines, "Vital Product Data"), "SR-IOV")
    if subsystem:
        lines[1] = f"\tSubsystem: Mellanox Technologies Device {subsystem}"
    else:
        del lines[1]
    cap = (_gts(info["max_link_speed"]), info["max_link_width"])
    return _link(lines, cap, (_gts(info["current_link_speed"]), info["current_link_width"]))


def _switch_stanzas(host: dict[str, Any], bridge: str, domains: bool,
                    group: int) -> list[list[str]]:
    """The switch at ``bridge``: its upstream port, then one downstream port per device below
    (in bus order), ACS redirection off."""
    children = host["switches"][bridge]
    domain, bus = bridge[:4], _bus(bridge)
    numa = host["pci"][children[0]]["numa_node"]
    up = real.XD665_SWITCH_UPSTREAM
    stanzas = [_adapt(up, f"{_address(bridge, domains)}{up[0][7:]}".replace(" [0604]", ""),
                      numa, group, (bus, bus + 1, max(_bus(c) for c in children)))]
    for port, child in enumerate(children):
        gpu = child in {g["bdf"] for g in host["gpus"]}
        template = real.XD665_SWITCH_DOWNSTREAM_GPU if gpu else real.XD665_SWITCH_DOWNSTREAM_NIC
        address = f"{domain}:{bus + 1:02x}:{port:02x}.0"
        lines = _adapt(template, f"{_address(address, domains)}{template[0][7:]}".replace(
            " [0604]", ""), numa, group + 1 + port, (bus + 1, _bus(child), _bus(child)))
        lines = [real.PEX88096_ACSCTL_OFF[0] if line.startswith("\t\tACSCtl:") else line
                 for line in lines]
        info = host["pci"][child]
        stanzas.append(_link(lines, sta=(_gts(info["current_link_speed"]),
                                         info["current_link_width"])))
    return stanzas


def lspci(host: dict[str, Any]) -> str:
    """``lspci -vvv`` of the GPUs, the RDMA NICs and the switch ports above them."""
    every = [g["bdf"] for g in host["gpus"]] + [n["bdf"] for n in host["nics"]]
    domains = any(not bdf.startswith("0000:") for bdf in every)
    stanzas: dict[str, list[str]] = {}
    group = host["next_group"]
    for bridge in sorted(host["switches"]):
        found = _switch_stanzas(host, bridge, domains, group)
        group += len(found)
        for lines in found:
            address = lines[0].split()[0]
            stanzas[address if domains else f"0000:{address}"] = lines
    for gpu in host["gpus"]:
        stanzas[gpu["bdf"]] = _gpu_stanza(host, gpu, domains)
    subsystems = host["nic_subsystems"]
    for nic in host["nics"]:
        stanzas[nic["bdf"]] = _nic_stanza(host, nic, domains, subsystems.get(nic["bdf"]))
    return "".join("\n".join(stanzas[bdf]) + "\n\n" for bdf in sorted(stanzas))


# -- nvidia-imex-ctl -N, the driver -------------------------------------------------------------

def imex_nodes(addresses: list[str]) -> str:
    """``nvidia-imex-ctl -N`` of a domain whose nodes are all READY and connected."""
    template = real.GH200_IMEX_2NODE
    legend = template[:template.index("Nodes:") + 1]
    count = len(addresses)
    width = len(str(count - 1)) + 2
    lines = [*legend, *(f"Node #{i:<4}- {address:<16}- READY"
                        for i, address in enumerate(addresses)), ""]
    lines.append((" Nodes From\\To  " + "".join(f"{i:<{width}}" for i in range(count))).rstrip())
    lines += [f"{i:>8}        " + (" " * (width - 1)).join(["C"] * count) for i in range(count)]
    lines.append(template[-1])
    return "\n".join(lines) + "\n"


def driver_version(root: Path) -> str:
    """``/proc/driver/nvidia/version``: ``nv-procfs.c`` prints the banner the driver logs when
    it loads (``NVRM: loading ...``) and the compiler it was built with (the kernel's, DKMS)."""
    log = (root / COMMANDS / "dmesg.txt").read_text()
    banner = re.search(r"NVRM: loading (NVIDIA UNIX .*?)\s*$", log, re.M)
    compiler = re.search(r"Linux version \S+ \(\S+\) \(\S*gcc\S* \(([^)]*)\) ([\d.]+),", log)
    if not banner or not compiler:
        raise ValueError(f"{root}: no NVRM banner or kernel compiler in the kernel log")
    return (f"NVRM version: {banner.group(1)}\n"
            f"GCC version:  gcc version {compiler.group(2)} ({compiler.group(1)})\n")
