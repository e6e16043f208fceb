"""fabric-layer checks: RDMA ports up at the expected rate and free of errors, each GPU near a
NIC, and the NCCL settings jobs inherit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.gpu_topology import DISTANCE

from exemplar_tune.checks.base import (
    FAIL,
    PASS,
    WARN,
    Facts,
    Outcome,
    Profile,
    check,
    not_applicable,
    not_read,
    source,
    unknown,
    why_unknown,
)
from exemplar_tune.checks.gpu import gpus_on_bus

ACTIVE, LINK_UP = "ACTIVE", "LinkUp"
PORT_KEYS = ("ports_min", "rate_gbps_min", "link_layer")


def _unread(facts: Facts, key: str, layer: str = "fabric") -> str:
    return why_unknown(facts, layer, key)


def _no_gpu(facts: Facts) -> bool:
    """True where the host has no GPU: none listed by nvidia-smi (``gpu.present`` false)
    and none on the PCI bus as far as it was read."""
    return (facts.get("gpu") or {}).get("present") is False and not gpus_on_bus(facts)


def _port_label(device: dict[str, Any], port: dict[str, Any]) -> str:
    state = (port.get("state") or {}).get("name")
    phys = (port.get("phys_state") or {}).get("name")
    return (f"{device.get('name')}/{port.get('port')} {state}/{phys} "
            f"{port.get('rate_gbps')} Gb/s {port.get('link_layer')}")


def _port_problems(device: dict[str, Any], port: dict[str, Any],
                   expected: dict[str, Any]) -> list[str]:
    name = f"{device.get('name')}/{port.get('port')}"
    state = (port.get("state") or {}).get("name")
    phys = (port.get("phys_state") or {}).get("name")
    problems = []
    if state != ACTIVE or phys != LINK_UP:
        problems.append(f"{name} is {state}/{phys}, not {ACTIVE}/{LINK_UP}")
    rate_min = expected.get("rate_gbps_min")
    rate = port.get("rate_gbps")
    if rate_min is not None and (rate is None or rate < rate_min):
        problems.append(f"{name} runs at {rate} Gb/s, below {rate_min:g}")
    layer = expected.get("link_layer")
    if layer and port.get("link_layer") != layer:
        problems.append(f"{name} link layer {port.get('link_layer')}, expected {layer}")
    return problems


@check("fabric.ports",
       hand="count, rate and link layer of the ports together, against three keys",
       health=True, severity="high",
       title="Enough RDMA ports ACTIVE/LinkUp at the expected rate and link layer",
       risk="a down or slow rail caps every collective that crosses it; NCCL keeps running "
            "on the remaining rails",
       fix="reseat or replace the cable/transceiver, check the switch port and the subnet "
           "manager; a rate below spec is negotiated down (ibstat, mlxlink)")
def check_ports(facts: Facts, profile: Profile) -> Outcome:
    """Every port ACTIVE/LinkUp, at least ``ports_min`` of them, rate and link layer as set."""
    expected = {k: v for k, v in (profile.get("fabric") or {}).items() if k in PORT_KEYS}
    if not expected:
        return not_applicable("profile sets no fabric.ports_min, rate_gbps_min or link_layer")
    devices = (facts.get("fabric") or {}).get("ib_devices")
    if devices is None:
        return unknown(f"RDMA devices unknown (/sys/class/infiniband not read: "
                       f"{_unread(facts, 'ib_devices')})")
    evidence = source(facts, "fabric", "ib_devices")
    ports = [(d, p) for d in devices for p in d.get("ports") or []]
    problems = [text for d, p in ports for text in _port_problems(d, p, expected)]
    active = sum(1 for _, p in ports if (p.get("state") or {}).get("name") == ACTIVE
                 and (p.get("phys_state") or {}).get("name") == LINK_UP)
    if active < expected.get("ports_min", 0):
        problems.insert(0, f"{active} active ports, profile wants at least "
                           f"{expected['ports_min']}")
    observed = {"active_ports": active, "ports": [_port_label(d, p) for d, p in ports]}
    if problems:
        return Outcome(FAIL, observed, expected, "; ".join(problems), evidence)
    return Outcome(PASS, observed, expected,
                   f"{active} ports {ACTIVE}/{LINK_UP} as the profile expects", evidence)


# ibqueryerrors' thresholds (rdma-core infiniband-diags/etc/error_thresholds), by sysfs name
IB_ERROR_THRESHOLDS = {
    "symbol_error": 10, "link_error_recovery": 10, "link_downed": 10, "port_rcv_errors": 10,
    "port_rcv_remote_physical_errors": 100, "port_rcv_switch_relay_errors": 100,
    "port_xmit_discards": 100, "port_xmit_constraint_errors": 100,
    "port_rcv_constraint_errors": 100, "local_link_integrity_errors": 10,
    "excessive_buffer_overrun_errors": 10, "VL15_dropped": 100,
}
FLAPS = ("link_downed", "link_error_recovery")  # the link went down or retrained


def _counter_lines(ports: list[tuple[dict, dict]], key: str,
                   over: Mapping[str, int]) -> tuple[list[str], list[str]]:
    """(lines over their threshold, lines above zero) of the ports' ``key`` counters."""
    above, nonzero = [], []
    for device, port in ports:
        for name, value in sorted((port.get(key) or {}).items()):
            if value:
                line = f"{device.get('name')}/{port.get('port')} {name} {value}"
                (above if value > over.get(name, 0) else nonzero).append(line)
    return above, nonzero


@check("fabric.ib-errors",
       hand="per-counter thresholds per port, merged from defaults and the profile",
       health=True, severity="medium",
       title="No RDMA port error counters rising (symbol errors, link downs, discards ...)",
       risk="a port that takes symbol or receive errors retransmits and slows every collective "
            "on its rail; a link that goes down and up (flaps) stalls NCCL and can abort jobs",
       fix="manual: check the cable or transceiver and the switch port (mlxlink -d <dev> -m, "
           "the switch's counters), replace what keeps erroring; clear the counters "
           "(perfquery -x -R) after a repair so that old errors stop counting")
def check_ib_errors(facts: Facts, profile: Profile) -> Outcome:
    """With a sampling window (``--counter-window``): a link down or error recovery in the
    window, or a counter that gained more than its threshold, fails; any other gain warns.
    Without one: counters above their threshold since they were last cleared warn (old
    events cannot be told from new ones). Thresholds: ibqueryerrors' defaults, or the
    profile's ``fabric.ib_error_thresholds``."""
    devices = (facts.get("fabric") or {}).get("ib_devices")
    if devices is None:
        return unknown(f"RDMA devices unknown (/sys/class/infiniband not read: "
                       f"{_unread(facts, 'ib_devices')})")
    ports = [(d, p) for d in devices for p in d.get("ports") or [] if p.get("counters")]
    if not ports:
        unread = next((f"{e.get('path')}: {e.get('error')}"
                       for e in (facts.get("fabric") or {}).get("errors") or []
                       if e.get("fact") == "ib_devices" and "/counters/" in str(e.get("path"))),
                      "")
        if unread:
            return unknown(f"RDMA port error counters not read ({unread})")
        return not_applicable("no RDMA port with error counters")
    over = {**IB_ERROR_THRESHOLDS, **((profile.get("fabric") or {}).get("ib_error_thresholds")
                                      or {})}
    evidence = source(facts, "fabric", "ib_devices")
    window = (facts.get("fabric") or {}).get("counter_window_s")
    if window:
        above, gained = _counter_lines(ports, "counters_delta", over)
        flaps = [line for line in gained if line.split()[1] in FLAPS]
        observed = {"window_s": window, "over": above, "gained": gained}
        if above or flaps:
            return Outcome(FAIL, observed, over, f"in {window:g} s: " + "; ".join(
                above + flaps), evidence)
        if gained:
            return Outcome(WARN, observed, over, f"in {window:g} s, below their thresholds: "
                           + "; ".join(gained), evidence)
        return Outcome(PASS, observed, over, f"no error counter of {len(ports)} ports rose in "
                       f"{window:g} s", evidence)
    above, nonzero = _counter_lines(ports, "counters", over)
    observed = {"over": above, "nonzero": nonzero}
    if above:
        return Outcome(WARN, observed, over, "since the counters were last cleared: "
                       + "; ".join(above) + " (--counter-window SECONDS tells whether they "
                       "are rising now)", evidence)
    return Outcome(PASS, observed, over, f"every error counter of {len(ports)} ports within "
                   "its threshold since last cleared", evidence)


NEAR = ("PIX", "PXB")  # behind the same PCIe switch: GPUDirect RDMA stays off the CPU


@check("fabric.gpu-nic-locality",
       hand="the PCIe paths between each GPU and its nearest NIC",
       severity="medium",
       title="Every GPU has a NIC behind its own PCIe switch (PIX or PXB)",
       risk="a GPU whose nearest NIC is only reached through the CPU's host bridge (PHB, NODE) "
            "or the other socket (SYS) sends its network traffic across the CPU: GPUDirect "
            "RDMA is slower there or not used, and the rail carries less",
       fix="manual: check the GPU and NIC placement in the chassis and the BIOS PCIe "
           "bifurcation; in a VM, pass the GPU and its NIC through together and expose the "
           "PCIe topology (a topology file for NCCL, runtime.topo_file)")
def check_gpu_nic_locality(facts: Facts, profile: Profile) -> Outcome:
    """Per GPU, the nearest NIC in ``nvidia-smi topo -m``: ``PIX`` or ``PXB`` passes; a GPU
    whose nearest NIC is ``PHB``, ``NODE`` or ``SYS`` away warns. GPUs listing no NIC (an NVL
    tray whose NICs nvidia-smi does not show, a host without RDMA NICs) are not judged."""
    del profile
    fabric = facts.get("fabric") or {}
    topo = fabric.get("gpu_nic_topology")
    if topo is None:
        why = _unread(facts, "gpu_nic_topology")
        absent = "GPU" if _no_gpu(facts) else "RDMA NIC" if fabric.get("ib_devices") == [] \
            else None
        if absent:
            return not_applicable(f"GPU-NIC topology unknown ({why}): no {absent} on this host")
        return unknown(f"GPU-NIC topology unknown ({why})")
    nearest = {}
    for gpu, row in topo["gpus"].items():
        reach = [(DISTANCE.index(v), nic) for nic, v in row["nics"].items() if v in DISTANCE]
        if reach:
            rank, nic = min(reach)
            nearest[gpu] = (DISTANCE[rank], topo["nics"].get(nic, nic))
    if not nearest:
        return not_applicable("no NIC in nvidia-smi topo -m: GPU-NIC locality not judged")
    evidence = source(facts, "fabric", "gpu_nic_topology")
    observed = {gpu: f"{nic} {level}" for gpu, (level, nic) in nearest.items()}
    far = [f"{gpu}: nearest NIC {nic} is {level}" for gpu, (level, nic) in nearest.items()
           if level not in NEAR]
    if far:
        return Outcome(WARN, observed, "a NIC at PIX or PXB for every GPU",
                       f"{len(far)} of {len(nearest)} GPUs reach their nearest NIC through the "
                       f"CPU: {'; '.join(far[:4])}" + ("; ..." if len(far) > 4 else ""),
                       evidence)
    return Outcome(PASS, observed, "a NIC at PIX or PXB for every GPU",
                   f"every one of {len(nearest)} GPUs has a NIC behind its PCIe switch ("
                   + ", ".join(sorted({level for level, _ in nearest.values()})) + ")", evidence)


DMABUF_KERNEL = (5, 12)  # dma-buf for peer devices: Linux 5.12 and the open kernel modules


def _release(text: str | None) -> tuple[int, int] | None:
    parts = (text or "").split(".")
    return (int(parts[0]), int(parts[1])) if len(parts) > 1 and parts[0].isdigit() and \
        parts[1].isdigit() else None


@check("fabric.gpudirect-rdma",
       hand="the peer-memory module, the GPUs and the RDMA NICs together",
       severity="high",
       title="GPUDirect RDMA is possible: nvidia_peermem loaded, or dma-buf available",
       risk="without either, NCCL stages every network transfer through host memory: more "
            "latency, less bandwidth, CPU memory traffic on every collective across nodes",
       fix="manual: load nvidia_peermem (modprobe nvidia-peermem, and list it in "
           "/etc/modules-load.d), or run NVIDIA's open kernel modules on Linux 5.12 or later "
           "with CONFIG_DMABUF_MOVE_NOTIFY so NCCL can use dma-buf")
def check_gpudirect_rdma(facts: Facts, profile: Profile) -> Outcome:
    """Where the host has RDMA NICs and GPUs: ``nvidia_peermem`` loaded passes; so does
    dma-buf (open kernel module, Linux 5.12+, ``CONFIG_DMABUF_MOVE_NOTIFY=y``); the open module
    on 5.12+ with the kernel configuration unread warns; neither fails."""
    del profile
    fabric = facts.get("fabric") or {}
    direct = fabric.get("gpudirect")
    if fabric.get("ib_devices") is None:
        return unknown(f"RDMA devices unknown ({_unread(facts, 'ib_devices')}): GPUDirect RDMA "
                       "not judged")
    if not fabric["ib_devices"] or _no_gpu(facts):
        return not_applicable(f"no {'RDMA NIC' if not fabric['ib_devices'] else 'GPU'}: "
                              "GPUDirect RDMA does not apply")
    if (facts.get("gpu") or {}).get("present") is False:  # GPUs on the bus, none listed
        return unknown(f"{len(gpus_on_bus(facts) or [])} NVIDIA GPUs on the PCI bus but none "
                       f"listed ({(facts.get('gpu') or {}).get('reason')}): GPUDirect RDMA not "
                       "judged")
    if direct is None or direct["open_module"] is None:
        return unknown("NVIDIA driver version not read (/proc/driver/nvidia/version absent or "
                       "unreadable): GPUDirect RDMA not judged")
    evidence = source(facts, "fabric", "gpudirect")
    if direct["peermem"]:
        return Outcome(PASS, direct, "nvidia_peermem or dma-buf", "nvidia_peermem loaded",
                       evidence)
    release = _release(direct["kernel"])
    new_kernel = release is not None and release >= DMABUF_KERNEL
    if direct["open_module"] and new_kernel and direct["dmabuf_move_notify"]:
        return Outcome(PASS, direct, "nvidia_peermem or dma-buf", "dma-buf: open kernel "
                       f"module on Linux {direct['kernel']} with CONFIG_DMABUF_MOVE_NOTIFY",
                       evidence)
    if direct["peermem"] is None:  # a capture that holds neither /sys/module nor lsmod
        return unknown("whether nvidia_peermem is loaded was not read (no /sys/module, no "
                       "lsmod in this capture) and dma-buf is not certain: GPUDirect RDMA not "
                       "judged")
    if direct["open_module"] and new_kernel and direct["dmabuf_move_notify"] is None:
        return Outcome(WARN, direct, "nvidia_peermem or dma-buf", "no nvidia_peermem; dma-buf "
                       f"likely (open kernel module, Linux {direct['kernel']}) but the kernel "
                       "configuration was not read", evidence)
    why = ["the driver is not the open kernel module" if not direct["open_module"] else "",
           f"Linux {direct['kernel']} is older than 5.12" if release and not new_kernel else "",
           "CONFIG_DMABUF_MOVE_NOTIFY is off" if direct["dmabuf_move_notify"] is False else ""]
    return Outcome(FAIL, direct, "nvidia_peermem or dma-buf", "nvidia_peermem not loaded and "
                   "no dma-buf (" + "; ".join(w for w in why if w) + ")", evidence)


def _pcie_paths(facts: Facts) -> tuple[dict[str, Any] | None, Outcome | None]:
    """The GPUs' and NICs' PCIe paths, or why they are not judged."""
    fabric = facts.get("fabric") or {}
    paths = fabric.get("pcie_paths")
    if paths is None:
        why = not_read(facts, "fabric", "pcie_paths")
        if _no_gpu(facts):
            return None, not_applicable(f"PCIe paths not read ({why or 'not needed'}): no GPU "
                                        "on this host, GPUDirect RDMA does not apply")
        if why or "fabric" not in facts:
            return None, unknown(f"PCIe paths not read ({why or _unread(facts, 'pcie_paths')})")
        return None, not_applicable("PCIe paths not read (no GPU or RDMA NIC on the PCI bus)")
    kinds = {d["kind"] for d in paths["devices"]}
    if kinds != {"gpu", "nic"}:
        return None, not_applicable("no GPU and RDMA NIC both on this host's PCI bus: "
                                    "GPUDirect RDMA does not apply")
    return paths, None


def _below(paths: dict[str, Any], bridge: str) -> str:
    found = [f"{d['kind'].upper()} {d['bdf'][5:]}" for d in paths["devices"]
             if bridge in d["above"]]
    return ", ".join(found)


@check("fabric.pcie-acs",
       hand="ACS of the switch ports above GPUs and NICs, on bare metal only",
       severity="high",
       title="No PCIe switch port above a GPU or NIC redirects peer traffic (ACS, bare metal)",
       risk="With ACS request or completion redirection on a switch port, GPU-to-NIC and "
            "GPU-to-GPU traffic through that switch goes up to the CPU's root complex: "
            "GPUDirect RDMA and P2P slow down badly or hang (NCCL troubleshooting, PCI ACS)",
       fix="manual: turn off IO virtualisation / ACS in the BIOS, or clear ACS on the switch "
           "ports at each boot (setpci -s <port> ECAP_ACS+0x6.w=0000, or the kernel argument "
           "pci=disable_acs_redir=<ports>) - only on bare metal, never where VMs rely on the "
           "IOMMU groups")
def check_pcie_acs(facts: Facts, profile: Profile) -> Outcome:
    """On bare metal, per PCIe switch port (``Downstream Port``) above a GPU or RDMA NIC in
    ``lspci -vvv``: ``ReqRedir+`` or ``CmpltRedir+`` in ``ACSCtl`` fails. Root ports are not
    judged (traffic between root ports crosses the root complex anyway); in a VM the guest's
    ACS bits are emulated and ATS is what matters (``fabric.nic-ats``)."""
    del profile
    if (facts.get("vm") or {}).get("virtualized"):
        return not_applicable("in a VM: the guest's ACS bits are emulated (fabric.nic-ats "
                              "judges the passthrough NICs)")
    paths, not_judged = _pcie_paths(facts)
    if not_judged:
        return not_judged
    ports = {bdf: b for bdf, b in paths["bridges"].items() if b["port"] == "Downstream Port"}
    evidence = source(facts, "fabric", "pcie_paths")
    if not ports:
        return not_applicable("no PCIe switch above the GPUs and NICs: ACS redirection not "
                              "configured")
    unread = sorted(bdf for bdf, b in ports.items() if b["acs"] is None and b["denied"])
    on = sorted(bdf for bdf, b in ports.items() if b["redirect"])
    observed = {"switch_ports": len(ports), "redirecting": on, "unread": unread}
    if on:
        lines = [f"{bdf[5:]} (above {_below(paths, bdf)})" for bdf in on]
        return Outcome(FAIL, observed, "ReqRedir- CmpltRedir-", f"ACS redirects peer traffic "
                       f"at {len(on)} of {len(ports)} switch ports: " + "; ".join(lines[:4])
                       + ("; ..." if len(lines) > 4 else ""), evidence)
    if unread:
        return unknown(f"ACS of {len(unread)} switch ports not readable (lspci without root)")
    return Outcome(PASS, observed, "ReqRedir- CmpltRedir-", f"ACS redirection off on the "
                   f"{len(ports)} switch ports above the GPUs and NICs", evidence)


@check("fabric.nic-ats",
       hand="ATS of the passthrough NICs, in a VM only",
       severity="medium",
       title="ATS is on for the RDMA NICs passed through to a VM",
       risk="Without PCIe ATS on the NIC every GPUDirect RDMA transfer in a VM is translated "
            "by the IOMMU on the way: NVIDIA's VM guide needs ATS on the NIC (and ACS set to "
            "allow it) for full GPUDirect RDMA bandwidth",
       fix="manual, on the host: mlxconfig -d <nic> set ATS_ENABLED=true, reboot the host; set "
           "ACS on the switch ports and root ports of the passed-through GPUs and NICs as "
           "NVIDIA's VM guide describes")
def check_nic_ats(facts: Facts, profile: Profile) -> Outcome:
    """In a VM, each RDMA NIC function in ``lspci -vvv``: ``ATSCtl: Enable+`` passes,
    ``Enable-`` or no ATS capability warns. On bare metal ATS is not configured (not judged)."""
    del profile
    virtualized = (facts.get("vm") or {}).get("virtualized")
    if virtualized is False:
        return not_applicable("bare metal: ATS matters for NICs passed through to VMs")
    if not virtualized:
        why = "the vm layer was not gathered" if "vm" not in facts else "the vm facts cannot tell"
        return unknown(f"virtualisation unknown ({why}): ATS not judged")
    paths, not_judged = _pcie_paths(facts)
    if not_judged:
        return not_judged
    nics = [d for d in paths["devices"] if d["kind"] == "nic"]
    if all(d["ats"] is None and d["denied"] for d in nics):
        return unknown("ATS of the NICs not readable (lspci without root)")
    off = [d["bdf"][5:] + (" ATS off" if d["ats"] is False else " no ATS capability")
           for d in nics if not d["ats"]]
    observed = {"nics": len(nics), "without_ats": off}
    evidence = source(facts, "fabric", "pcie_paths")
    if off:
        return Outcome(WARN, observed, "ATSCtl: Enable+", f"{len(off)} of {len(nics)} RDMA "
                       "NIC functions without ATS: " + ", ".join(off[:6])
                       + (", ..." if len(off) > 6 else ""), evidence)
    return Outcome(PASS, observed, "ATSCtl: Enable+", f"ATS on for all {len(nics)} RDMA NIC "
                   "functions", evidence)


FLAP_WINDOW_S = 300.0  # ByteRobust: a network alert must repeat within 5 minutes
FLAP_REPEATS = 2


def _flaps(events: list[dict]) -> dict[str, list[dict]]:
    """Per interface, its state changes in the last boot beyond the first ``up`` (a boot
    brings each link up once)."""
    changes: dict[str, list[dict]] = {}
    for event in events:
        if event["boot"] == 0 and event["state"] in ("down", "up", "unplugged"):
            changes.setdefault(f"{event['device']} {event['iface']}", []).append(event)
    for key, found in changes.items():
        if found and found[0]["state"] == "up":
            changes[key] = found[1:]
    return {key: found for key, found in changes.items() if found}


def _repeated(found: list[dict], window: float, repeats: int) -> bool:
    stamps = [e["t"] for e in found if e["t"] is not None]
    return any(stamps[i + repeats - 1] - stamps[i] <= window
               for i in range(len(stamps) - repeats + 1))


@check("fabric.link-flaps",
       hand="link events counted in a time window against a repeat count",
       health=True, severity="high",
       title="No RDMA NIC link going down and up again and again (kernel log)",
       risk="a flapping link stalls or aborts the collectives that cross it each time it drops; "
            "NCCL may leave the rail or the job may hang until a timeout",
       fix="manual: check the cable or transceiver and the switch port (mlxlink -d <dev> -m), "
           "replace what keeps dropping; drain the node until then")
def check_link_flaps(facts: Facts, profile: Profile) -> Outcome:
    """In the last boot, per interface: link changes (down, unplugged, or an up beyond the
    first) that repeat ``flap_repeats`` times within ``flap_window_s`` seconds fail (a flap, as
    ByteRobust repeats an alert within 5 minutes before it acts); a single change warns."""
    events = (facts.get("fabric") or {}).get("link_events")
    if events is None:
        why = _unread(facts, "link_events")
        if (facts.get("fabric") or {}).get("ib_devices") == []:
            return not_applicable(f"no RDMA NIC (and kernel log not read: {why})")
        return unknown(f"kernel log not read ({why}): link flaps not judged")
    settings = profile.get("fabric") or {}
    window = settings.get("flap_window_s", FLAP_WINDOW_S)
    repeats = settings.get("flap_repeats", FLAP_REPEATS)
    evidence = source(facts, "fabric", "link_events")
    changes = _flaps(events)
    observed = {key: [f"{e['time']} {e['state']}" for e in found]
                for key, found in changes.items()}
    expected = f"fewer than {repeats} link changes within {window:g} s"
    flapping = [f"{key}: {len(found)} changes ({', '.join(e['state'] for e in found[:6])})"
                for key, found in changes.items() if _repeated(found, window, repeats)]
    if flapping:
        return Outcome(FAIL, observed, expected, f"link flapping ({repeats}+ changes within "
                       f"{window:g} s) on {'; '.join(flapping)}", evidence)
    if changes:
        return Outcome(WARN, observed, expected, "link changed this boot on " + "; ".join(
            f"{key}: {', '.join(e['state'] for e in found)}" for key, found in changes.items()),
                       evidence)
    return Outcome(PASS, observed, expected, "no NIC link went down this boot", evidence)


@check("fabric.nccl-settings",
       hand="the keys of several NCCL configuration files against the profile's",
       severity="medium",
       title="The NCCL_* settings jobs inherit match the profile's tuned values",
       risk="NCCL defaults or stale values can cost bus bandwidth on this fabric",
       fix="tune by sweep: measure the candidate values with nccl-tests on this fabric and "
           "set the winner (fabric.nccl_conf); never copy values blindly",
       knob="fabric.nccl_conf")
def check_nccl_settings(facts: Facts, profile: Profile) -> Outcome:
    """Each profile ``fabric.nccl`` key against the effective setting (env > files)."""
    wanted = (profile.get("fabric") or {}).get("nccl")
    if not wanted:
        return not_applicable("profile sets no fabric.nccl")
    settings = (facts.get("fabric") or {}).get("nccl_settings")
    if settings is None:
        return unknown(f"fabric facts lack nccl_settings ({_unread(facts, 'nccl_settings')})")
    evidence = source(facts, "fabric", "nccl_settings")
    observed = {key: (settings.get(key) or {}).get("value") for key in wanted}
    differing = [f"{key}={_shown(observed[key], settings.get(key))} (profile {value})"
                 for key, value in wanted.items() if observed[key] != value]
    if differing:
        return Outcome(WARN, observed, dict(wanted),
                       f"tune by sweep: {'; '.join(differing)}", evidence)
    return Outcome(PASS, observed, dict(wanted), "every profile NCCL setting is in effect",
                   evidence)


def _shown(value: str | None, setting: dict[str, str] | None) -> str:
    return f"{value} from {setting['source']}" if setting else "unset (NCCL default)"


@check("fabric.nccl-suspicious-keys",
       hand="keys with stray whitespace, in every NCCL configuration source",
       severity="medium",
       title="No NCCL config lines whose key has stray whitespace",
       risk="NCCL does not trim keys: 'NCCL_IB_HCA = mlx5' defines a different variable and the "
            "intended setting is silently ignored",
       fix="remove the spaces around '=' in the NCCL config file (fabric.nccl_conf)",
       knob="fabric.nccl_conf")
def check_nccl_suspicious_keys(facts: Facts, profile: Profile) -> Outcome:
    """Config lines NCCL reads under a different name than the author meant."""
    del profile  # not an expectation: a key with spaces is never what anyone meant
    found = (facts.get("fabric") or {}).get("nccl_suspicious_keys")
    if found is None:
        return unknown("fabric facts lack nccl_suspicious_keys "
                       f"({_unread(facts, 'nccl_suspicious_keys')})")
    evidence = source(facts, "fabric", "nccl_suspicious_keys")
    observed = [f"{k['path']}:{k['line']} {k['key']!r}" for k in found]
    if found:
        meant = ", ".join(f"{k['path']}:{k['line']} {k['key']!r} (meant {k['meant']})"
                          for k in found)
        return Outcome(WARN, observed, [], f"keys NCCL will not recognise: {meant}", evidence)
    return Outcome(PASS, observed, [], "no NCCL config key has stray whitespace", evidence)


IDENTITY_KEYS = ("hca_types", "firmware", "link_layers", "rates_gbps")


def fabric_identity(fabric_facts: Mapping[str, Any]) -> dict[str, list[Any]]:
    """What a sweep's result is keyed by: the RDMA devices' models, firmware, link layers and
    rates of a host (sorted, distinct)."""
    devices = fabric_facts.get("ib_devices") or []
    ports = [p for d in devices for p in d.get("ports") or []]

    def distinct(values: Any) -> list[Any]:
        return sorted({v for v in values if v is not None})

    return {"hca_types": distinct(d.get("hca_type") for d in devices),
            "firmware": distinct(d.get("fw_ver") for d in devices),
            "link_layers": distinct(p.get("link_layer") for p in ports),
            "rates_gbps": distinct(p.get("rate_gbps") for p in ports)}


@check("fabric.nccl-measured-here",
       hand="the profile's measured_on against this host's identity",
       severity="medium",
       title="The profile's NCCL settings were measured on this host's fabric",
       risk="a setting that helps one fabric (HCA model, firmware, link layer or rate) can "
            "cost bandwidth or CPU on another: QPs per connection are fabric-dependent",
       fix="run 'exemplar-tune sweep' on this fabric and use its --write-profile fragment",
       knob="fabric.nccl_conf")
def check_nccl_measured_here(facts: Facts, profile: Profile) -> Outcome:
    """``fabric.measured_on`` (written by ``sweep --write-profile``) against this host."""
    measured = (profile.get("fabric") or {}).get("measured_on")
    if not measured:
        return not_applicable("the profile's NCCL settings name no fabric they were measured on")
    fabric = facts.get("fabric") or {}
    if fabric.get("ib_devices") is None:
        return unknown(f"fabric facts lack ib_devices ({_unread(facts, 'ib_devices')})")
    here = fabric_identity(fabric)
    expected = {k: measured.get(k) for k in IDENTITY_KEYS if measured.get(k) is not None}
    differing = [f"{k} {here[k]} (measured on {v})" for k, v in expected.items() if here[k] != v]
    evidence = source(facts, "fabric", "ib_devices")
    if differing:
        return Outcome(WARN, here, expected, "this fabric differs from the one the NCCL "
                       f"settings were chosen on: {'; '.join(differing)}; sweep again here",
                       evidence)
    return Outcome(PASS, here, expected, "the NCCL settings were measured on this fabric",
                   evidence)
