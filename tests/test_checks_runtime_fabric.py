"""runtime, fabric and workload checks on the fixture hosts and on modified facts.

The fixture statuses follow tests/fixtures/sysroots/HOSTS.md: h100-x86 has a valid topology
file that enroot does not carry, healthy-h100 carries it through enroot, gb200-grace-vm has
none. Every other branch is reached by editing a deep copy of a fixture's facts.
"""

from __future__ import annotations

import copy
import shutil
from functools import cache
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import (
    runtime as layer_runtime,
)
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.topo_xml import parse_topo_xml
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, PASS, SKIP, WARN
from exemplar_tune.checks.fabric import (
    check_link_flaps,
    check_nccl_measured_here,
    check_nccl_settings,
    check_nccl_suspicious_keys,
    check_ports,
    fabric_identity,
)
from exemplar_tune.checks.run import run_checks
from exemplar_tune.checks.runtime import (
    check_stale_nccl_conf,
    check_topo_file,
    check_topo_in_container,
)
from exemplar_tune.checks.workload import check_reference, performance_ratio
from exemplar_tune.profile import load_profile, validate_profile
from tests.conftest import SYSROOTS
from tests.helpers import listed_statuses

TOPO = "/etc/nccl/topo.xml"
LAYERS = ["runtime", "fabric", "workload"]
HOST_PROFILE = {"h100-x86": "h100-x86", "healthy-h100": "h100-x86",
                "gb200-grace-vm": "gb200-grace"}
OUR_CHECKS = {
    "runtime.topo-file": ("high", "runtime.topo_file"),
    "runtime.topo-in-container": ("high", "runtime.enroot_topo"),
    "runtime.stale-nccl-conf": ("medium", "runtime.nccl_conf"),
    "fabric.ports": ("high", None),
    "fabric.ib-errors": ("medium", None),
    "fabric.gpu-nic-locality": ("medium", None),
    "fabric.gpudirect-rdma": ("high", None),
    "fabric.link-flaps": ("high", None),
    "fabric.pcie-acs": ("high", None),
    "fabric.nic-ats": ("medium", None),
    "fabric.nccl-settings": ("medium", "fabric.nccl_conf"),
    "fabric.nccl-suspicious-keys": ("medium", "fabric.nccl_conf"),
    "fabric.nccl-measured-here": ("medium", "fabric.nccl_conf"),
    "workload.reference": ("high", None),
}
WANT = {
    "h100-x86": {"runtime.topo-file": PASS, "runtime.topo-in-container": FAIL,
                 "runtime.stale-nccl-conf": PASS, "fabric.ports": PASS,
                 "fabric.ib-errors": SKIP, "fabric.gpu-nic-locality": SKIP,
                 "fabric.gpudirect-rdma": SKIP, "fabric.link-flaps": PASS,
                 "fabric.pcie-acs": SKIP, "fabric.nic-ats": SKIP,
                 "fabric.nccl-settings": SKIP, "fabric.nccl-suspicious-keys": PASS,
                 "fabric.nccl-measured-here": SKIP, "workload.reference": SKIP},
    # healthy-h100 has the topo -m, lspci -vvv and driver captures a real node answers
    "healthy-h100": {"runtime.topo-file": PASS, "runtime.topo-in-container": PASS,
                     "runtime.stale-nccl-conf": PASS, "fabric.ports": PASS,
                     "fabric.ib-errors": SKIP, "fabric.gpu-nic-locality": PASS,
                     "fabric.gpudirect-rdma": PASS, "fabric.link-flaps": PASS,
                     "fabric.pcie-acs": PASS, "fabric.nic-ats": SKIP,
                     "fabric.nccl-settings": SKIP, "fabric.nccl-suspicious-keys": PASS,
                     "fabric.nccl-measured-here": SKIP, "workload.reference": SKIP},
    "gb200-grace-vm": {"runtime.topo-file": FAIL, "runtime.topo-in-container": SKIP,
                       "runtime.stale-nccl-conf": PASS, "fabric.ports": PASS,
                       "fabric.ib-errors": SKIP, "fabric.gpu-nic-locality": SKIP,
                       "fabric.gpudirect-rdma": SKIP, "fabric.link-flaps": PASS,
                       "fabric.pcie-acs": SKIP, "fabric.nic-ats": SKIP,
                       "fabric.nccl-settings": SKIP, "fabric.nccl-suspicious-keys": PASS,
                       "fabric.nccl-measured-here": SKIP, "workload.reference": SKIP},
}


@cache
def _facts(host: str) -> dict:
    return gather_facts(Sysroot(str(SYSROOTS / host)), LAYERS)


def facts_of(host: str) -> dict:
    """A deep copy of the fixture's runtime/fabric/workload facts, free to edit."""
    return copy.deepcopy(_facts(host))


def profile_with(base: str, **sections: dict) -> dict:
    """Shipped profile ``base`` with whole sections replaced; validated against the schema."""
    profile = copy.deepcopy(load_profile(base))
    for name, section in sections.items():
        profile[name] = section
    validate_profile(profile, "test")
    return profile


def test_registered_with_severity_and_knob() -> None:
    have = {c.id: (c.severity, c.knob) for c in CHECKS if c.id in OUR_CHECKS}
    assert have == OUR_CHECKS
    assert all(c.risk and c.fix and c.title for c in CHECKS if c.id in OUR_CHECKS)


@pytest.mark.parametrize("host", sorted(WANT))
def test_fixture_statuses(host: str) -> None:
    profile = load_profile(HOST_PROFILE[host])
    results = run_checks(_facts(host), profile, LAYERS)
    assert listed_statuses(results, WANT[host], profile) == WANT[host]
    for result in results:
        if result.status in (PASS, FAIL, WARN):
            assert result.evidence, result.id


def test_h100_topo_in_container_names_the_gap() -> None:
    outcome = check_topo_in_container(_facts("h100-x86"), load_profile("h100-x86"))
    assert outcome.detail.startswith("host has it, containers will not")
    assert "no enroot environ.d line sets NCCL_TOPO_FILE" in outcome.detail
    assert f"no enroot mounts.d line binds {TOPO}" in outcome.detail


def test_gb200_topo_file_unset() -> None:
    outcome = check_topo_file(_facts("gb200-grace-vm"), load_profile("gb200-grace"))
    assert outcome.status == FAIL
    assert "NCCL_TOPO_FILE is unset" in outcome.detail
    assert f"{TOPO} is absent" in outcome.detail
    assert outcome.expected == TOPO


# -- runtime.topo-file ------------------------------------------------------------------------

def _topo(facts: dict) -> dict:
    return facts["runtime"]["nccl_topo_file"]


@pytest.mark.parametrize("name, edit, want", [
    ("missing", lambda t: t.update(exists=False, readable=False, parse=None),
     "does not exist; NCCL only logs"),
    ("unreadable", lambda t: t.update(readable=False, parse=None), "is not a readable file"),
    ("invalid", lambda t: t["parse"].update(valid=False, error="XML Topology has wrong version 2"),
     "is not a valid NCCL topology: XML Topology has wrong version 2"),
    ("foreign-gpus", lambda t: t.update(gpus_missing_on_host=["0000:01:00.0"]),
     "names GPUs this host lacks: 0000:01:00.0"),
    ("foreign-nics", lambda t: t.update(nics_missing_on_host=["0000:02:00.0", "0000:03:00.0"]),
     "names NICs this host lacks: 0000:02:00.0, 0000:03:00.0"),
    ("other-path", lambda t: t.update(value="/opt/topo.xml"), "profile wants /etc/nccl/topo.xml"),
    ("virtual-nets", lambda t: t["parse"].update(virtual_nets=["veth3f2a1b0"]),
     "names virtual interfaces as network devices (veth3f2a1b0: bridges, veth pairs"),
])
def test_topo_file_fails(name: str, edit, want: str) -> None:
    facts = facts_of("h100-x86")
    edit(_topo(facts))
    outcome = check_topo_file(facts, load_profile("h100-x86"))
    assert outcome.status == FAIL, name
    assert want in outcome.detail


def test_topo_file_unset_without_container_carry_fails() -> None:
    facts = facts_of("healthy-h100")
    facts["runtime"]["enroot"]["environ_d"] = []
    assert check_topo_file(facts, load_profile("h100-x86")).status == FAIL


def test_topo_file_enroot_names_a_missing_file() -> None:
    facts = facts_of("healthy-h100")
    facts["runtime"]["default_topo_files"][TOPO] = False
    outcome = check_topo_file(facts, load_profile("h100-x86"))
    assert outcome.status == FAIL
    assert "the host has no such file" in outcome.detail


REALWORLD_TOPO = Path(__file__).parent / "fixtures" / "realworld" / "topology"


def _enroot_only_host(root: Path, topo_file: str, devices: bool) -> dict:
    """Facts of a host whose NCCL_TOPO_FILE comes only from enroot's environ.d, the file bound
    from /opt/topo/site.xml (a real capture), its PCI devices present when ``devices``."""
    text = (REALWORLD_TOPO / topo_file).read_text()
    files = {"etc/enroot/enroot.conf": "",
             "etc/enroot/environ.d/50-nccl.env": f"NCCL_TOPO_FILE={TOPO}\n",
             "etc/enroot/mounts.d/50-nccl.fstab": f"/opt/topo/site.xml {TOPO} none bind\n",
             "opt/topo/site.xml": text}
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    parsed = parse_topo_xml(text, topo_file)
    present = parsed["gpus"] + parsed["nics"] if devices else []
    for bdf in present:
        (root / "sys/bus/pci/devices" / bdf).mkdir(parents=True)
    return {"runtime": layer_runtime.gather(Sysroot(str(root)))}


@pytest.mark.parametrize("topo_file, devices, want, text", [
    ("azure-azhpc-images-topology-ndv5-topo.xml", True, PASS,
     "/opt/topo/site.xml is a valid topology naming only this host's GPUs and NICs"),
    ("azure-azhpc-images-topology-ncv4-graph.xml", True, FAIL,
     "/opt/topo/site.xml is not a valid NCCL topology: root element is <graphs>"),
    ("azure-azhpc-images-topology-ndv5-topo.xml", False, FAIL,
     "/opt/topo/site.xml names GPUs this host lacks: 0001:00:00.0"),
])
def test_topo_file_from_enroot_only_is_judged_by_its_content(tmp_path, topo_file: str,
                                                             devices: bool, want: str,
                                                             text: str) -> None:
    facts = _enroot_only_host(tmp_path, topo_file, devices)
    outcome = check_topo_file(facts, load_profile("h100-x86"))
    assert outcome.status == want
    assert outcome.detail.startswith("unset for host processes; enroot gives container jobs "
                                     f"{TOPO} (/etc/enroot/environ.d/50-nccl.env)")
    assert text in outcome.detail
    assert "content not parsed" not in outcome.detail


def test_topo_in_container_enroot_carries_a_graph_dump(tmp_path) -> None:
    """enroot carries the variable and binds the file, but the file is a <graphs> dump."""
    facts = _enroot_only_host(tmp_path, "azure-azhpc-images-topology-ncv4-graph.xml", True)
    enroot = facts["runtime"]["enroot"]
    assert (enroot["carries_topo_env"], enroot["carries_topo_mount"]) == (True, True)
    outcome = check_topo_in_container(facts, load_profile("h100-x86"))
    assert outcome.status == FAIL
    assert "/opt/topo/site.xml is not a valid NCCL topology: root element is <graphs>" in \
        outcome.detail


def test_topo_file_profile_silent_or_facts_missing() -> None:
    profile = profile_with("h100-x86", runtime={"require_in_container": True})
    assert check_topo_file(_facts("h100-x86"), profile).detail == \
        "profile sets no runtime.nccl_topo_file"
    assert check_topo_file({}, load_profile("h100-x86")).status == SKIP


@pytest.mark.parametrize("name, edit, want", [
    ("unset", lambda t: t.update(value=None, source=None), PASS),
    ("valid", lambda t: None, PASS),
    ("dangling", lambda t: t.update(exists=False, readable=False, parse=None), WARN),
    ("foreign", lambda t: t.update(gpus_missing_on_host=["0000:01:00.0"]), FAIL),
])
def test_topo_file_when_platform_needs_none(name: str, edit, want: str) -> None:
    facts = facts_of("h100-x86")
    edit(_topo(facts))
    profile = profile_with("h100-x86", runtime={"nccl_topo_file": None})
    assert check_topo_file(facts, profile).status == want, name


# -- runtime.topo-in-container ----------------------------------------------------------------

def test_topo_in_container_profile_silent() -> None:
    profile = profile_with("h100-x86", runtime={"nccl_topo_file": TOPO})
    assert check_topo_in_container(_facts("h100-x86"), profile).detail == \
        "profile sets no runtime.require_in_container"


def test_topo_in_container_nothing_to_carry() -> None:
    facts = facts_of("gb200-grace-vm")
    profile = profile_with("gb200-grace", runtime={"nccl_topo_file": None,
                                                   "require_in_container": True})
    outcome = check_topo_in_container(facts, profile)
    assert outcome.status == SKIP
    assert "names a topology file" in outcome.detail


def test_topo_in_container_no_runtime_asks_for_launcher() -> None:
    outcome = check_topo_in_container(_facts("gb200-grace-vm"), load_profile("gb200-grace"))
    assert outcome.detail == ("no enroot or pyxis on this host: give --launcher to check "
                              "inside the job container")
    assert outcome.unknown is False  # no container runtime here: nothing to judge


def test_topo_in_container_unknown_when_enroot_cannot_be_read(tmp_path: Path) -> None:
    """The same host with a dangling environ.d link: enroot's configuration cannot be read,
    so whether containers get the file is unknown (not "no enroot"), naming the file."""
    root = tmp_path / "host"
    shutil.copytree(SYSROOTS / "gb200-grace-vm", root, symlinks=True)
    (root / "etc/enroot/environ.d").mkdir(parents=True)
    (root / "etc/enroot/environ.d/50-nccl.env").symlink_to("/nonexistent/50-nccl.env")
    facts = gather_facts(Sysroot(str(root)), LAYERS)
    outcome = check_topo_in_container(facts, load_profile("gb200-grace"))
    assert (outcome.status, outcome.unknown) == (SKIP, True)
    assert "/etc/enroot/environ.d/50-nccl.env" in outcome.detail


@pytest.mark.parametrize("name, carry_env, carry_mount, want", [
    ("env-only", True, False, f"no enroot mounts.d line binds {TOPO}"),
    ("mount-only", False, True, "no enroot environ.d line sets NCCL_TOPO_FILE"),
])
def test_topo_in_container_half_carried(name: str, carry_env: bool, carry_mount: bool,
                                        want: str) -> None:
    facts = facts_of("healthy-h100")
    enroot = facts["runtime"]["enroot"]
    if not carry_env:
        enroot["environ_d"] = [e for e in enroot["environ_d"] if e["key"] != "NCCL_TOPO_FILE"]
    enroot["carries_topo_env"] = carry_env
    enroot["carries_topo_mount"] = carry_mount
    outcome = check_topo_in_container(facts, load_profile("h100-x86"))
    assert outcome.status == FAIL, name
    assert outcome.detail.startswith("neither the host nor containers get it")
    assert want in outcome.detail


def test_topo_in_container_enroot_names_another_path() -> None:
    facts = facts_of("healthy-h100")
    entry = next(e for e in facts["runtime"]["enroot"]["environ_d"]
                 if e["key"] == "NCCL_TOPO_FILE")
    entry["value"] = "/opt/other.xml"
    outcome = check_topo_in_container(facts, load_profile("h100-x86"))
    assert outcome.status == FAIL
    assert f"NCCL_TOPO_FILE=/opt/other.xml ({entry['file']}), expected {TOPO}" in outcome.detail


def test_topo_in_container_pyxis_without_enroot_conf() -> None:
    facts = facts_of("h100-x86")
    facts["runtime"]["enroot"].update(installed=False, conf_present=False, environ_d=[],
                                      mounts_d=[])
    assert check_topo_in_container(facts, load_profile("h100-x86")).status == FAIL


def _probe(path: str | None, *, exists: bool = True, readable: bool = True,
           valid: bool = True) -> dict:
    return {"launcher": "srun --container-image=x", "ok": True, "error": None,
            "env": {"NCCL_TOPO_FILE": path} if path else {},
            "topo_file": {"path": path, "source": "environment" if path else None,
                          "exists": exists, "readable": readable, "looks_valid": valid,
                          "head": ""},
            "nccl_conf": {}, "python": None}


@pytest.mark.parametrize("name, probe, want, text", [
    ("carried", _probe(TOPO), PASS, "is a readable topology"),
    ("no-variable", _probe(None), FAIL, "NCCL_TOPO_FILE is not set inside the container "
                                        "(the host has /etc/nccl/topo.xml)"),
    ("not-mounted", _probe(TOPO, exists=False, readable=False, valid=False), FAIL,
     "does not exist inside the container"),
    ("unreadable", _probe(TOPO, readable=False, valid=False), FAIL, "not a readable file"),
    ("not-topology", _probe(TOPO, valid=False), FAIL, "does not start like an NCCL topology"),
    ("probe-failed", {"launcher": "srun", "ok": False, "error": "launcher not found: srun"},
     SKIP, "container probe failed: launcher not found: srun"),
])
def test_topo_in_container_probe_wins_over_enroot(name: str, probe: dict, want: str,
                                                  text: str) -> None:
    facts = facts_of("h100-x86")  # enroot carries nothing: only the probe can make it pass
    facts["runtime"]["container"] = probe
    outcome = check_topo_in_container(facts, load_profile("h100-x86"))
    assert outcome.status == want, name
    assert text in outcome.detail
    assert outcome.evidence == (f"probe: {probe['launcher']}",)
    assert outcome.unknown is (want == SKIP)  # a failed probe judged nothing


def test_topo_in_container_probe_without_enroot() -> None:
    facts = facts_of("gb200-grace-vm")
    facts["runtime"]["container"] = _probe(None)
    outcome = check_topo_in_container(facts, load_profile("gb200-grace"))
    assert outcome.status == FAIL
    assert "(the profile wants it)" in outcome.detail


# -- runtime.stale-nccl-conf ------------------------------------------------------------------

def _conf_line(key: str, value: str, **extra) -> dict:
    return {"key": key, "value": value, "file": "/etc/nccl.conf", "line": 3, **extra}


@pytest.mark.parametrize("name, lines, runtime_section, want, text", [
    ("dangling-topo", [_conf_line("NCCL_TOPO_FILE", "/var/run/nvidia-topologyd/"
                                                    "virtualTopology.xml")],
     {"nccl_topo_file": "/var/run/nvidia-topologyd/virtualTopology.xml"}, WARN, "no such file"),
    ("other-than-profile", [_conf_line("NCCL_TOPO_FILE", TOPO)],
     {"nccl_topo_file": "/opt/topo.xml"}, WARN, "profile wants /opt/topo.xml"),
    ("platform-needs-none", [_conf_line("NCCL_TOPO_FILE", TOPO)],
     {"nccl_topo_file": None}, WARN, "profile wants no topology file"),
    ("graph-file-missing", [_conf_line("NCCL_GRAPH_FILE", "/opt/g.xml", exists=False)],
     {}, WARN, "NCCL_GRAPH_FILE=/opt/g.xml: no such file"),
    ("graph-file-unknown", [_conf_line("NCCL_GRAPH_FILE", "/opt/g.xml")],
     {}, PASS, "file presence not gathered"),
    ("spaced-key-left-to-fabric", [_conf_line("NCCL_TOPO_FILE ", "/nope")],
     {"nccl_topo_file": TOPO}, PASS, "every topology line"),
])
def test_stale_nccl_conf(name: str, lines: list, runtime_section: dict, want: str,
                         text: str) -> None:
    facts = facts_of("h100-x86")
    facts["runtime"]["nccl_conf_topo_keys"] = lines
    profile = profile_with("h100-x86", runtime=runtime_section)
    outcome = check_stale_nccl_conf(facts, profile)
    assert outcome.status == want, name
    assert text in outcome.detail


def test_stale_nccl_conf_without_facts() -> None:
    assert check_stale_nccl_conf({"runtime": {}}, load_profile("h100-x86")).status == SKIP


# -- fabric.ports -----------------------------------------------------------------------------

def _first_port(facts: dict) -> dict:
    return facts["fabric"]["ib_devices"][0]["ports"][0]


@pytest.mark.parametrize("name, edit, want", [
    ("down", lambda f: _first_port(f).update(state={"code": 1, "name": "DOWN"},
                                             phys_state={"code": 3, "name": "Disabled"}),
     ["7 active ports, profile wants at least 8", "mlx5_0/1 is DOWN/Disabled"]),
    ("polling", lambda f: _first_port(f).update(phys_state={"code": 2, "name": "Polling"}),
     ["mlx5_0/1 is ACTIVE/Polling, not ACTIVE/LinkUp"]),
    ("slow", lambda f: _first_port(f).update(rate_gbps=100.0), ["runs at 100.0 Gb/s, below 200"]),
    ("too-few", lambda f: f["fabric"]["ib_devices"].pop(), ["7 active ports"]),
    ("none", lambda f: f["fabric"].update(ib_devices=[]), ["0 active ports"]),
])
def test_ports_fail(name: str, edit, want: list) -> None:
    facts = facts_of("h100-x86")
    edit(facts)
    outcome = check_ports(facts, load_profile("h100-x86"))
    assert outcome.status == FAIL, name
    for text in want:
        assert text in outcome.detail


def test_ports_link_layer_differs() -> None:
    profile = profile_with("h100-x86", fabric={"ports_min": 8, "link_layer": "InfiniBand"})
    outcome = check_ports(_facts("h100-x86"), profile)
    assert outcome.status == FAIL
    assert "mlx5_0/1 link layer Ethernet, expected InfiniBand" in outcome.detail
    assert outcome.observed["active_ports"] == 8


def test_ports_skip() -> None:
    profile = profile_with("h100-x86", fabric={"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4"}})
    assert check_ports(_facts("h100-x86"), profile).status == SKIP
    facts = facts_of("h100-x86")
    facts["fabric"]["ib_devices"] = None
    assert check_ports(facts, load_profile("h100-x86")).status == SKIP


# -- not applicable vs unknown on real fixture trees -------------------------------------------

def test_fabric_checks_not_applicable_on_bare_metal_unknown_without_nvidia_smi_topo() -> None:
    """h100-x86 with every layer: ATS is not configured on bare metal and the profile names
    no NCCL setting (not applicable); its GPUs and RDMA NICs are there but the capture lacks
    ``nvidia-smi topo -m`` and ``lspci -vvv``, so locality and ACS cannot be judged."""
    facts = gather_facts(Sysroot(str(SYSROOTS / "h100-x86")))
    profile = load_profile("h100-x86")
    by_id = {c.id: c.func(facts, profile) for c in CHECKS if c.layer == "fabric"}
    for check_id, reason in (("fabric.nic-ats", "bare metal: ATS matters"),
                             ("fabric.nccl-settings", "profile sets no fabric.nccl")):
        have = by_id[check_id]
        assert (have.status, have.unknown) == (SKIP, False), check_id
        assert have.detail.startswith(reason), have.detail
    for check_id, command in (("fabric.gpu-nic-locality", "nvidia-smi-topo-m.txt"),
                              ("fabric.pcie-acs", "lspci-vvv.txt")):
        have = by_id[check_id]
        assert (have.status, have.unknown) == (SKIP, True), check_id
        assert f"/.exemplar/commands/{command}: not captured" in have.detail, have.detail


def test_link_flaps_unknown_when_the_kernel_log_cannot_be_read(tmp_path: Path) -> None:
    """dmesg refused (dmesg_restrict without root): the captured run failed, so link flaps
    cannot be judged on a host that has RDMA NICs; the reason names the command and why."""
    root = tmp_path / "host"
    shutil.copytree(SYSROOTS / "h100-x86", root, symlinks=True)
    commands = root / ".exemplar/commands"
    (commands / "dmesg.txt").unlink()
    (commands / "dmesg.txt.rc").write_text("1\n")
    (commands / "dmesg.txt.stderr").write_text(
        "dmesg: read kernel buffer failed: Operation not permitted\n")
    facts = gather_facts(Sysroot(str(root)), LAYERS)
    outcome = check_link_flaps(facts, load_profile("h100-x86"))
    assert (outcome.status, outcome.unknown) == (SKIP, True)
    assert "dmesg" in outcome.detail and "Operation not permitted" in outcome.detail
    assert outcome.detail.endswith("link flaps not judged")


# -- fabric.nccl-settings, fabric.nccl-suspicious-keys ----------------------------------------

QPS = {"ports_min": 8, "nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4"}}


@pytest.mark.parametrize("host, want", [("h100-x86", WARN), ("healthy-h100", PASS)])
def test_nccl_settings_against_profile(host: str, want: str) -> None:
    outcome = check_nccl_settings(_facts(host), profile_with("h100-x86", fabric=QPS))
    assert outcome.status == want
    assert outcome.expected == {"NCCL_IB_QPS_PER_CONNECTION": "4"}
    if want == WARN:
        assert outcome.detail == ("tune by sweep: NCCL_IB_QPS_PER_CONNECTION=1 from "
                                  "/etc/nccl.conf (profile 4)")


def test_nccl_settings_unset_key() -> None:
    profile = profile_with("h100-x86", fabric={"nccl": {"NCCL_IB_SPLIT_DATA_ON_QPS": "0"}})
    outcome = check_nccl_settings(_facts("gb200-grace-vm"), profile)
    assert outcome.status == WARN
    assert "NCCL_IB_SPLIT_DATA_ON_QPS=unset (NCCL default) (profile 0)" in outcome.detail


def test_nccl_settings_fix_is_a_sweep() -> None:
    fix = next(c.fix for c in CHECKS if c.id == "fabric.nccl-settings")
    assert fix.startswith("tune by sweep") and "never copy values blindly" in fix


def test_suspicious_keys() -> None:
    facts = facts_of("h100-x86")
    facts["fabric"]["nccl_suspicious_keys"] = [
        {"path": "/etc/nccl.conf", "line": 4, "key": "NCCL_IB_HCA ", "meant": "NCCL_IB_HCA"}]
    outcome = check_nccl_suspicious_keys(facts, load_profile("h100-x86"))
    assert outcome.status == WARN
    assert "/etc/nccl.conf:4 'NCCL_IB_HCA ' (meant NCCL_IB_HCA)" in outcome.detail
    facts["fabric"].pop("nccl_suspicious_keys")
    assert check_nccl_suspicious_keys(facts, load_profile("h100-x86")).status == SKIP


def test_nccl_settings_measured_on_another_fabric() -> None:
    """The h100-x86 capture's ports (RoCE: Ethernet link layer) against a profile whose NCCL
    settings were chosen on InfiniBand: sweep again; on its own fabric: pass."""
    facts = facts_of("h100-x86")
    for device in facts["fabric"]["ib_devices"]:
        device.update(hca_type="MT4129", fw_ver="28.39.1002")
    here = fabric_identity(facts["fabric"])
    assert here["hca_types"] == ["MT4129"] and here["link_layers"] == ["Ethernet"]
    same = profile_with("h100-x86", fabric={**QPS, "measured_on": here})
    assert check_nccl_measured_here(facts, same).status == PASS
    other = profile_with("h100-x86", fabric={**QPS, "measured_on": {
        **here, "link_layers": ["InfiniBand"]}})
    outcome = check_nccl_measured_here(facts, other)
    assert outcome.status == WARN
    assert "link_layers ['Ethernet'] (measured on ['InfiniBand'])" in outcome.detail
    assert "sweep again here" in outcome.detail
    assert check_nccl_measured_here(facts, load_profile("h100-x86")).status == SKIP


# -- workload.reference -----------------------------------------------------------------------

REFERENCE = {"gate": 0.95, "reference": {
    "llama8b-step": {"value": 2.0, "unit": "s/step"},
    "allreduce-8g": {"value": 480.0, "unit": "GB/s", "higher_is_better": True},
}}


def _with_results(results: dict | None) -> dict:
    facts = facts_of("h100-x86")
    facts["workload"]["results"] = results
    return facts


@pytest.mark.parametrize("name, results, want, text", [
    ("both-ok", {"llama8b-step": {"value": 2.1, "unit": "s/step"},
                 "allreduce-8g": {"value": 460.0, "unit": "GB/s"}}, PASS, "2 shape(s) within"),
    ("slow-step", {"llama8b-step": {"value": 2.2, "unit": "s/step"}}, FAIL,
     "llama8b-step at 90.9% of reference 2.0 s/step (measured 2.2)"),
    ("low-bandwidth", {"allreduce-8g": {"value": 400.0, "unit": "GB/s"}}, FAIL,
     "allreduce-8g at 83.3% of reference 480.0 GB/s"),
    ("faster-than-reference", {"llama8b-step": {"value": 1.5, "unit": "s/step"}}, PASS,
     "allreduce-8g: not measured"),
    ("unit-mismatch", {"llama8b-step": {"value": 2.0, "unit": "ms/step"}}, SKIP,
     "unit 'ms/step', reference in 's/step'"),
    ("other-shapes", {"resnet": {"value": 1.0, "unit": "s"}}, SKIP, "not measured"),
    ("none", None, SKIP, "no benchmark results"),
    ("empty", {}, SKIP, "no benchmark results"),
])
def test_workload_reference(name: str, results: dict | None, want: str, text: str) -> None:
    outcome = check_reference(_with_results(results), profile_with("h100-x86",
                                                                   workload=REFERENCE))
    assert outcome.status == want, name
    assert text in outcome.detail
    # a measured shape whose result is unusable cannot be judged; no result or no measured
    # shape of the reference leaves nothing to judge
    assert outcome.unknown is (name == "unit-mismatch")


def test_workload_gate_boundary_and_ratio() -> None:
    results = {"llama8b-step": {"value": 2.0 / 0.95, "unit": "s/step"}}
    outcome = check_reference(_with_results(results), profile_with("h100-x86",
                                                                   workload=REFERENCE))
    assert outcome.status == PASS
    assert outcome.observed["llama8b-step"]["ratio"] == 0.95
    assert performance_ratio(240.0, 480.0, True) == 0.5
    assert performance_ratio(4.0, 2.0, False) == 0.5


def test_workload_profile_silent() -> None:
    results = {"llama8b-step": {"value": 2.0, "unit": "s/step"}}
    outcome = check_reference(_with_results(results), load_profile("h100-x86"))
    assert outcome.detail == "profile sets no workload.reference"
