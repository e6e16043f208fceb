"""``fabric.pcie-acs`` and ``fabric.nic-ats`` on real ``lspci -vvv`` reports by others (sources in
``tests/fixtures/realworld/lspci/SOURCES.md``): an HPE Cray XD665 whose H100 and ConnectX-5 sit
under one Broadcom PEX890xx switch with ACS redirection on, real switch-port stanzas with it off,
the ACSCtl lines of a whole system (NVIDIA/nccl#523) and the ATS lines of a guest's ConnectX-7
(NVIDIA/nccl-tests#256)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.lspci import parse_lspci
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, PASS, SKIP, WARN
from tests.corpus import REALWORLD
from tests.helpers import captured_host

LSPCI = REALWORLD / "lspci"
XD665 = LSPCI / "linuxhw-hpe-cray-xd665-h100-cx5-pex890xx-lspci-vvnn.txt"
PEX88096 = LSPCI / "linuxhw-supermicro-as4124gs-tnr-broadcom-pex88096-ports-lspci-vvnn.txt"
PEX8747 = LSPCI / "plx-pex8747-downstream-port-titanx-lspci-vvv.txt"
ACSCTL_LINES = LSPCI / "nccl-issue523-lspci-grep-acsctl.txt"
ATS_LINES = LSPCI / "nccl-tests-issue256-vm-h200-cx7-lspci-grep-ats.txt"
ACS = next(c for c in CHECKS if c.id == "fabric.pcie-acs")
ATS = next(c for c in CHECKS if c.id == "fabric.nic-ats")
XD665_OFF = ("\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- "
             "DirectTrans-")
XD665_ON = ("\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- "
            "DirectTrans-")


def facts_of(tmp_path: Path, report: str | None, virtualized: bool | None = False) -> dict:
    root = captured_host(tmp_path / "host", {"lspci-vvv.txt": report})
    return {"fabric": gather_facts(Sysroot(str(root)), ["fabric"])["fabric"],
            "vm": {"virtualized": virtualized}}


def with_guest_ats(enabled: str = "Enable+") -> str:
    """The XD665 report with the guest's real ATS capability in each ConnectX-5 stanza."""
    group = "".join(ATS_LINES.read_text().splitlines(True)[1:4]).replace("Enable+", enabled)
    return XD665.read_text().replace("\tKernel driver in use: mlx5_core\n",
                                     group + "\tKernel driver in use: mlx5_core\n")


def test_the_xd665_places_each_gpu_and_nic_below_its_switch_and_root_port():
    functions = {f["bdf"]: f for f in parse_lspci(XD665.read_text())}
    assert {b: f["port"] for b, f in functions.items() if f["port"]} == {
        "0000:00:01.1": "Root Port", "0000:01:00.0": "Upstream Port",
        "0000:02:00.0": "Downstream Port", "0000:02:01.0": "Downstream Port",
        "0000:03:00.0": "Endpoint", "0000:03:00.1": "Endpoint", "0000:04:00.0": "Endpoint",
        "0000:60:01.1": "Root Port", "0000:61:00.0": "Upstream Port",
        "0000:62:01.0": "Downstream Port", "0000:64:00.0": "Endpoint"}
    assert functions["0000:02:01.0"]["buses"] == [4, 4]
    assert functions["0000:04:00.0"]["class_id"] == "0302"


def test_real_switch_ports_with_acs_off_and_a_prompt_line_read():
    (usp, dsp) = parse_lspci(PEX88096.read_text())
    assert (usp["port"], usp["acs"], dsp["port"]) == ("Upstream Port", None, "Downstream Port")
    assert not any(dsp["acs"].values()) and len(dsp["acs"]) == 7
    (plx,) = parse_lspci(PEX8747.read_text())
    assert (plx["bdf"], plx["port"], plx["buses"]) == ("0000:03:08.0", "Downstream Port", [4, 4])


def test_every_real_acsctl_line_of_a_system_reads_bit_by_bit():
    stanza = PEX8747.read_text()
    lines = [line for line in ACSCTL_LINES.read_text().splitlines() if "ACSCtl:" in line]
    redirect = []
    for line in lines:
        (plx,) = parse_lspci(stanza.replace(
            "ACSCtl: SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- "
            "DirectTrans-", line.strip()))
        redirect.append(plx["acs"]["ReqRedir"] and plx["acs"]["CmpltRedir"])
    assert redirect == [True] + [False] * 7 + [True] * 4


def test_redirection_on_the_switch_above_a_gpu_and_its_nic_fails(tmp_path):
    outcome = ACS.func(facts_of(tmp_path, XD665.read_text()), {})
    assert outcome.status == FAIL
    assert outcome.detail == (
        "ACS redirects peer traffic at 3 of 3 switch ports: 02:00.0 (above NIC 03:00.0, NIC "
        "03:00.1); 02:01.0 (above GPU 04:00.0); 62:01.0 (above GPU 64:00.0)")
    assert outcome.evidence == ("lspci -vvv",)


def test_redirection_off_on_the_switch_ports_passes_and_root_ports_are_not_judged(tmp_path):
    report = XD665.read_text().replace(XD665_ON, XD665_OFF)
    facts = facts_of(tmp_path, report)
    assert facts["fabric"]["pcie_paths"]["bridges"]["0000:02:00.0"]["redirect"] is False
    outcome = ACS.func(facts, {})
    assert (outcome.status, outcome.detail) == (
        PASS, "ACS redirection off on the 3 switch ports above the GPUs and NICs")


def test_one_switch_port_redirecting_is_named_alone(tmp_path):
    head, tail = XD665.read_text().split("62:01.0 PCI bridge", 1)
    report = head.replace(XD665_ON, XD665_OFF) + "62:01.0 PCI bridge" + tail
    outcome = ACS.func(facts_of(tmp_path, report), {})
    assert outcome.status == FAIL
    assert outcome.observed["redirecting"] == ["0000:62:01.0"]


@pytest.mark.parametrize(("virtualized", "check", "reason"), [
    (True, ACS, "in a VM: the guest's ACS bits are emulated"),
    (False, ATS, "bare metal: ATS matters for NICs passed through to VMs"),
    (None, ATS, "virtualisation unknown"),
])
def test_each_check_is_not_configured_on_the_other_platform(tmp_path, virtualized, check,
                                                            reason):
    outcome = check.func(facts_of(tmp_path, XD665.read_text(), virtualized), {})
    assert outcome.status == SKIP and outcome.detail.startswith(reason)


def test_a_guest_nic_with_ats_on_passes_and_with_it_off_warns(tmp_path):
    outcome = ATS.func(facts_of(tmp_path / "on", with_guest_ats(), True), {})
    assert (outcome.status, outcome.detail) == (PASS, "ATS on for all 2 RDMA NIC functions")
    outcome = ATS.func(facts_of(tmp_path / "off", with_guest_ats("Enable-"), True), {})
    assert outcome.status == WARN
    assert outcome.detail == ("2 of 2 RDMA NIC functions without ATS: 03:00.0 ATS off, "
                              "03:00.1 ATS off")


def test_a_guest_nic_without_the_ats_capability_warns(tmp_path):
    outcome = ATS.func(facts_of(tmp_path, XD665.read_text(), True), {})
    assert outcome.status == WARN and "03:00.0 no ATS capability" in outcome.detail


def test_gpus_without_a_nic_are_not_judged(tmp_path):
    report = XD665.read_text().split("03:00.0 Ethernet")[0] + "04:00.0 3D" + \
        XD665.read_text().split("04:00.0 3D", 1)[1]
    outcome = ACS.func(facts_of(tmp_path, report), {})
    assert outcome.status == SKIP and "GPUDirect RDMA does not apply" in outcome.detail


def test_lspci_without_root_leaves_acs_unknown_not_off(tmp_path):
    report = "\n\n".join(
        "\n".join(s.splitlines()[:5] + ["\tCapabilities: <access denied>"]
                  + [line for line in s.splitlines() if line.startswith("\tBus:")])
        for s in XD665.read_text().split("\n\n"))
    facts = facts_of(tmp_path, report)
    assert facts["fabric"]["pcie_paths"]["bridges"]["0000:02:00.0"]["denied"] is True
    outcome = ACS.func(facts, {})
    assert outcome.status == SKIP


def test_a_report_not_captured_says_so_and_a_malformed_one_is_a_fact_error(tmp_path):
    outcome = ACS.func(facts_of(tmp_path / "none", None), {})
    assert outcome.status == SKIP and "lspci-vvv.txt" in outcome.detail
    facts = facts_of(tmp_path / "bad", "\tACSCtl: SrcValid-\n")
    assert facts["fabric"]["pcie_paths"] is None
    assert ACS.func(facts, {}).status == SKIP


def test_text_before_the_first_stanza_is_refused_unless_a_prompt():
    with pytest.raises(ParseError, match="not an lspci stanza header"):
        parse_lspci("lspci: Unable to load libkmod resources\n" + PEX8747.read_text())
    with pytest.raises(ParseError, match="no PCI function listed"):
        parse_lspci("# lspci -vvv\n")


def test_a_pci_bus_without_gpus_or_nics_is_never_given_to_lspci(tmp_path):
    root = captured_host(tmp_path / "host", {"lspci-vvv.txt": XD665.read_text()})
    nvme = root / "sys/bus/pci/devices/0000:05:00.0"
    nvme.mkdir(parents=True)
    for name, value in (("vendor", "0x1344"), ("device", "0x51c3"), ("class", "0x010802")):
        (nvme / name).write_text(value + "\n")
    fabric = gather_facts(Sysroot(str(root)), ["fabric"])["fabric"]
    assert (fabric["pcie_paths"], fabric["pcie_paths_missing"]) == (None, None)
