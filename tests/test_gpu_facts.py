"""gpu layer: nvidia-smi -q -x parsing, kernel-log Xid events, NVML fallback, the gatherer."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils import layers, sysroot
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import gpu as layer_gpu
from ansible_collections.exemplar.tune.plugins.module_utils.readers import nvidia_smi, nvml, xid
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotSupported,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import (
    CommandOutput,
    Sysroot,
)

from .conftest import SAMPLES, SYSROOTS

A100 = SAMPLES / "nvidia_smi_qx_netdata_a100-sxm4-mig.xml"
RTX4090 = SAMPLES / "nvidia_smi_qx_netdata_rtx-4090-driver-535.xml"
L4 = SAMPLES / "nvidia_smi_qx_L4_driver555_excerpt.xml.txt"
XID_SAMPLES = SAMPLES / "dmesg_nvrm_xid_samples.txt"
H100_BDFS = ["00000000:A4:00.0", "00000000:AE:00.0", "00000000:B8:00.0", "00000000:C2:00.0",
             "00000000:CC:00.0", "00000000:D6:00.0", "00000000:E0:00.0", "00000000:EA:00.0"]
GB200_BDFS = ["00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0"]

BOMB = """<?xml version="1.0"?>
<!DOCTYPE nvidia_smi_log [
 <!ENTITY a "aaaaaaaaaaaaaaaaaaaa">
 <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
 <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
]>
<nvidia_smi_log><driver_version>&c;</driver_version></nvidia_smi_log>
"""
XXE = """<?xml version="1.0"?>
<!DOCTYPE nvidia_smi_log [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<nvidia_smi_log><driver_version>&x;</driver_version></nvidia_smi_log>
"""


def sample_xml(path: Path) -> str:
    """A sample's XML: the L4 excerpt carries '#' SOURCE/comment lines before the document."""
    text = path.read_text()
    return "".join(line for line in text.splitlines(True) if not line.startswith("#"))


def minimal(gpu_body: str, driver: str = "550.90.07") -> str:
    return (f"<nvidia_smi_log><driver_version>{driver}</driver_version>"
            f"<attached_gpus>1</attached_gpus><gpu id=\"00000000:C2:00.0\">{gpu_body}</gpu>"
            "</nvidia_smi_log>")


# -- (a) parsers, table-driven ---------------------------------------------------------------


@pytest.mark.parametrize(("text", "units", "want"), [
    ("45 C", ("C",), 45),
    ("-5 C", ("C",), -5),
    ("27.22 W", ("W",), 27.22),
    ("16x", ("x",), 16),
    ("96 bank(s)", ("bank(s)",), 96),
    ("23034 MiB", ("MiB",), 23034),
    ("0", ("",), 0),
    ("N/A", ("W",), None),
    ("[N/A]", ("W",), None),
    ("", ("W",), None),
    (None, ("W",), None),
])
def test_parse_quantity(text, units, want):
    have = nvidia_smi.parse_quantity(text, units, "test")
    assert have == want
    assert type(have) is type(want)


@pytest.mark.parametrize(("text", "units"), [
    ("hot C", ("C",)),  # garbage
    ("45 F", ("C",)),  # wrong unit
    ("27.", ("W",)),  # truncated
    ("16", ("x",)),  # unit missing
])
def test_parse_quantity_errors(text, units):
    with pytest.raises(ParseError) as err:
        nvidia_smi.parse_quantity(text, units, "test")
    assert err.value.path == "test"


@pytest.mark.parametrize(("text", "want"), [
    ("Enabled", True), ("Disabled", False), ("Yes", True), ("No", False),
    ("Active", True), ("Not Active", False), ("Not Active\n            ", False),
    ("N/A", None), ("[N/A]", None), (None, None),
])
def test_parse_flag(text, want):
    assert nvidia_smi.parse_flag(text, "test") is want


@pytest.mark.parametrize("text", ["Maybe", "1", "Enabledx"])
def test_parse_flag_garbage(text):
    with pytest.raises(ParseError):
        nvidia_smi.parse_flag(text, "test")


@pytest.mark.parametrize(("text", "want_smi", "want_sysfs"), [
    ("0000:cb:00", "00000000:CB:00.0", "0000:cb:00.0"),  # kernel-log form, no function
    ("0000:10:1c", "00000000:10:1C.0", "0000:10:1c.0"),
    ("00000000:C2:00.0", "00000000:C2:00.0", "0000:c2:00.0"),  # nvidia-smi form
    ("0008:01:00.0", "00000008:01:00.0", "0008:01:00.0"),  # sysfs form, domain 8
    ("c2:00.1", "00000000:C2:00.1", "0000:c2:00.1"),
])
def test_bdf_forms(text, want_smi, want_sysfs):
    assert nvidia_smi.normalize_bdf(text) == want_smi
    assert nvidia_smi.sysfs_bdf(text) == want_sysfs


@pytest.mark.parametrize("text", ["", "garbage", "0000:cb", "0000:cb:00.9", "0000:xx:00.0"])
def test_bdf_garbage(text):
    with pytest.raises(ValueError):
        nvidia_smi.normalize_bdf(text)


@pytest.mark.parametrize(("name", "text", "reason"), [
    ("empty", "", "empty output"),
    ("blank", "  \n", "empty output"),
    ("truncated", sample_xml(A100)[:3000], "malformed XML"),
    ("garbage", "No devices were found", "malformed XML"),
    ("bomb", BOMB, "unsafe XML refused"),
    ("xxe", XXE, "unsafe XML refused"),
    ("other document", "<system><gpu id='0000:01:00.0'/></system>", "not <nvidia_smi_log>"),
])
def test_parse_nvidia_smi_errors(name, text, reason):
    with pytest.raises(ParseError) as err:
        nvidia_smi.parse_nvidia_smi(text, "nvidia-smi -q -x")
    assert reason in err.value.reason, name
    assert err.value.path.startswith("nvidia-smi -q -x")


PRODUCT = "<product_name>NVIDIA H100 80GB HBM3</product_name>"


@pytest.mark.parametrize(("name", "text", "key", "path", "reason"), [
    ("gpu without id", f"<nvidia_smi_log><gpu>{PRODUCT}</gpu></nvidia_smi_log>", "bdf",
     "nvidia-smi -q -x", "<gpu> has no id"),
    ("bad gpu id", f'<nvidia_smi_log><gpu id="slot 1">{PRODUCT}</gpu></nvidia_smi_log>', "bdf",
     "nvidia-smi -q -x: <gpu id>", "not a PCI address"),
    ("bad number", minimal(f"{PRODUCT}<temperature><gpu_temp>warm</gpu_temp></temperature>"),
     "temperature_c", "nvidia-smi -q -x: <gpu_temp>", "not a number"),
    ("bad pci id", minimal(f"{PRODUCT}<pci><pci_device_id>2330</pci_device_id></pci>"),
     "pci_device_id", "nvidia-smi -q -x: <pci/pci_device_id>", "8-digit PCI id"),
    ("redacted pci id", minimal(f"{PRODUCT}<pci><pci_device_id>[REDACTED]</pci_device_id></pci>"),
     "pci_device_id", "nvidia-smi -q -x: <pci/pci_device_id>", "'[REDACTED]'"),
    ("bad flag", minimal(f"{PRODUCT}<persistence_mode>Maybe</persistence_mode>"),
     "persistence_mode", "nvidia-smi -q -x: <persistence_mode>", "not a yes/no value"),
])
def test_bad_field_is_none_with_an_error(name, text, key, path, reason):
    """One field that cannot be read is None and named in errors; the GPU is still read."""
    have = nvidia_smi.parse_nvidia_smi(text, "nvidia-smi -q -x")
    (gpu,) = have["gpus"]
    assert gpu[key] is None, name
    assert gpu["product_name"] == "NVIDIA H100 80GB HBM3"
    (error,) = have["errors"]
    assert (error["fact"], error["path"]) == ("gpus.0", path)
    assert reason in error["error"]


def test_attached_gpus_beyond_the_listed_is_an_error():
    have = nvidia_smi.parse_nvidia_smi(sample_xml(L4))
    assert (have["attached_gpus"], len(have["gpus"])) == (2, 1)
    assert have["errors"] == [{"fact": "attached_gpus", "path": "nvidia-smi -q -x",
                               "error": "attached_gpus is 2 but 1 GPU(s) listed: a cut or "
                                        "partial capture"}]


def test_sample_a100_driver_510_old_names():
    have = nvidia_smi.parse_nvidia_smi(sample_xml(A100))
    assert (have["driver_version"], have["cuda_version"], have["attached_gpus"]) == (
        "510.47.03", "11.6", 1)
    (gpu,) = have["gpus"]
    assert gpu["product_name"] == "NVIDIA A100-SXM4-40GB"
    assert (gpu["bdf"], gpu["sysfs_bdf"]) == ("00000000:00:04.0", "0000:00:04.0")
    assert (gpu["pci_vendor_id"], gpu["pci_device_id"]) == ("0x10de", "0x20b0")
    assert gpu["persistence_mode"] is False
    assert gpu["mig_mode"] == "Enabled"
    assert gpu["virtualization_mode"] == "Pass-Through"
    # <clocks_throttle_reasons> read through the alias table: known, none active
    assert gpu["clocks_event_reasons_active"] == []
    # <power_readings>: power_draw and enforced_power_limit
    assert (gpu["power_draw_w"], gpu["power_limit_w"]) == (66.92, 400.0)
    assert gpu["ecc"]["mode_current"] is True
    assert gpu["ecc"]["volatile"] == dict.fromkeys(gpu["ecc"]["volatile"])  # all N/A
    assert gpu["ecc"]["aggregate"] == {
        "correctable": 0, "uncorrectable": 0, "sram_correctable": 0, "sram_uncorrectable": 0,
        "dram_correctable": 0, "dram_uncorrectable": 0}
    # bare <remapped_rows>N/A</remapped_rows>
    assert gpu["remapped_rows"] == {"correctable": None, "uncorrectable": None,
                                    "pending": None, "failure": None, "histogram_banks": None}
    assert gpu["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
    assert gpu["pcie"] == {"gen_current": 4, "gen_max": 4, "gen_device_max": None,
                           "gen_host_max": None, "width_current": 16, "width_max": 16,
                           "replay_counter": 0}
    assert (gpu["temperature_c"], gpu["memory_temperature_c"]) == (36, 44)
    # old absolute thresholds are not mistaken for the newer T.Limit margins
    assert gpu["temperature_limits"] == {
        "absolute_c": {"shutdown": 92, "slowdown": 89, "gpu_max": 85, "memory_max": 95},
        "tlimit_margin_c": dict.fromkeys(("current", "shutdown", "slowdown", "gpu_max",
                                          "memory_max"))}


def test_old_throttle_names_map_to_event_keys():
    """The same report with old and new clock-reason tag names parses identically."""
    old = sample_xml(A100).replace(
        "<clocks_throttle_reason_sw_power_cap>Not Active</clocks_throttle_reason_sw_power_cap>",
        "<clocks_throttle_reason_sw_power_cap>Active</clocks_throttle_reason_sw_power_cap>")
    assert old != sample_xml(A100)
    new = old.replace("clocks_throttle_reason", "clocks_event_reason")
    have_old, have_new = nvidia_smi.parse_nvidia_smi(old), nvidia_smi.parse_nvidia_smi(new)
    assert have_old["gpus"][0]["clocks_event_reasons_active"] == ["sw_power_cap"]
    assert have_old == have_new


def test_sample_rtx4090_driver_535_new_names():
    have = nvidia_smi.parse_nvidia_smi(sample_xml(RTX4090))
    assert (have["driver_version"], have["cuda_version"]) == ("535.86.05", "12.2")
    (gpu,) = have["gpus"]
    assert gpu["product_name"] == "NVIDIA GeForce RTX 4090"
    assert gpu["bdf"] == "00000000:84:00.0"
    assert gpu["persistence_mode"] is True
    assert gpu["serial"] is None
    assert gpu["clocks_event_reasons_active"] == ["gpu_idle"]
    assert gpu["pcie"]["gen_current"] == 1
    assert (gpu["pcie"]["gen_max"], gpu["pcie"]["gen_device_max"],
            gpu["pcie"]["gen_host_max"]) == (3, 4, 3)
    assert (gpu["power_draw_w"], gpu["power_limit_w"], gpu["power_max_limit_w"]) == (
        26.84, 450.0, 600.0)
    assert gpu["ecc"]["mode_current"] is False
    assert gpu["ecc"]["aggregate"]["uncorrectable"] is None
    assert gpu["remapped_rows"] == {
        "correctable": 0, "uncorrectable": 0, "pending": False, "failure": False,
        "histogram_banks": {"max": 192, "high": 0, "partial": 0, "low": 0, "none": 0}}
    assert gpu["temperature_limits"]["tlimit_margin_c"] == {
        "current": 43, "shutdown": -7, "slowdown": -2, "gpu_max": 0, "memory_max": None}
    assert gpu["temperature_limits"]["absolute_c"]["shutdown"] is None


def test_sample_l4_driver_555_datacenter_layout():
    have = nvidia_smi.parse_nvidia_smi(sample_xml(L4))
    assert (have["driver_version"], have["cuda_version"]) == ("555.42.06", "12.5")
    assert have["attached_gpus"] == 2  # the excerpt keeps only the first <gpu>
    (gpu,) = have["gpus"]
    assert (gpu["product_name"], gpu["architecture"]) == ("NVIDIA L4", "Ada Lovelace")
    assert gpu["uuid"] == "GPU-c5533cd4-5a60-059e-348d-b6d7466932e4"
    assert gpu["ecc"]["sram_threshold_exceeded"] is False
    assert gpu["ecc"]["volatile"]["uncorrectable"] == 0
    assert gpu["remapped_rows"]["histogram_banks"]["max"] == 96
    assert (gpu["pcie"]["gen_current"], gpu["pcie"]["gen_host_max"]) == (4, 5)
    assert (gpu["power_draw_w"], gpu["power_limit_w"]) == (27.22, 72.0)
    assert (gpu["fabric"]["state"], gpu["fabric"]["status"], gpu["fabric"]["clique_id"]) == (
        None, None, None)


ECC_R550 = """<ecc_errors><volatile><sram_correctable>4</sram_correctable>
<sram_uncorrectable_parity>1</sram_uncorrectable_parity>
<sram_uncorrectable_secded>2</sram_uncorrectable_secded>
<dram_correctable>5</dram_correctable><dram_uncorrectable>7</dram_uncorrectable></volatile>
</ecc_errors>"""
ECC_R510 = """<ecc_errors><volatile><sram_correctable>4</sram_correctable>
<sram_uncorrectable>3</sram_uncorrectable><dram_correctable>5</dram_correctable>
<dram_uncorrectable>7</dram_uncorrectable></volatile></ecc_errors>"""
ECC_R470 = """<ecc_errors><volatile><single_bit><device_memory>9</device_memory>
<total>9</total></single_bit><double_bit><device_memory>10</device_memory><total>10</total>
</double_bit></volatile></ecc_errors>"""


@pytest.mark.parametrize(("layout", "body", "want"), [
    ("R550+", ECC_R550, {"correctable": 9, "uncorrectable": 10, "sram_correctable": 4,
                         "sram_uncorrectable": 3, "dram_correctable": 5,
                         "dram_uncorrectable": 7}),
    ("R510-R535", ECC_R510, {"correctable": 9, "uncorrectable": 10, "sram_correctable": 4,
                             "sram_uncorrectable": 3, "dram_correctable": 5,
                             "dram_uncorrectable": 7}),
    ("pre-R510", ECC_R470, {"correctable": 9, "uncorrectable": 10, "sram_correctable": None,
                            "sram_uncorrectable": None, "dram_correctable": None,
                            "dram_uncorrectable": None}),
])
def test_ecc_layouts(layout, body, want):
    gpu = nvidia_smi.parse_nvidia_smi(minimal(body))["gpus"][0]
    assert gpu["ecc"]["volatile"] == want, layout
    assert gpu["ecc"]["aggregate"]["correctable"] is None


def test_retired_pages_and_old_pending_name():
    body = """<retired_pages><multiple_single_bit_retirement><retired_count>2</retired_count>
    </multiple_single_bit_retirement><double_bit_retirement><retired_count>1</retired_count>
    </double_bit_retirement><pending_blacklist>Yes</pending_blacklist></retired_pages>"""
    gpu = nvidia_smi.parse_nvidia_smi(minimal(body))["gpus"][0]
    assert gpu["retired_pages"] == {"single_bit": 2, "double_bit": 1, "pending": True}


# -- (a) Xid lines ---------------------------------------------------------------------------

XID_LINES = [
    ("[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', "
     "name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction "
     "Parameter",
     ("00000000:CB:00.0", 13, None, None, "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): "
      "Illegal Instruction Parameter")),
    ("[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, "
     "name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
     ("00000000:CB:00.0", 109, 1797828, "pt_main_thread",
      "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005")),
    ("kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by "
     "previous Xid 149",
     ("00000000:DC:00.0", 45, 1818990, "python3", "Ch 00000001 caused by previous Xid 149")),
    ("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, "
     "reset gpu to activate.",
     ("00000000:10:1C.0", 63, 1896, None,
      "Row Remapper: New row marked for remapping, reset gpu to activate.")),
    ("Nov 22 18:29:55 hostname kernel: [ 966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, "
     "engmask 00000120, intr 10000000",
     ("00000000:01:00.0", 31, None, None, "Ch 0000000b, engmask 00000120, intr 10000000")),
    # MIG form, from https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/ (Table 3)
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
     "RST: No, D-RST: No",
     ("00000000:01:00.0", 94, 7194, None, "Contained: CE User Channel (0x9). RST: No, D-RST: No")),
]


@pytest.mark.parametrize(("line", "want"), XID_LINES)
def test_parse_xid_line(line, want):
    (event,) = xid.parse_xid_events(line)
    assert (event["bdf"], event["xid"], event["pid"], event["process"], event["text"]) == want
    assert (event["kind"], event["line"]) == ("xid", line)


@pytest.mark.parametrize(("name", "text", "want"), [
    ("empty", "", []),
    ("garbage", "\x00\xff not a log \n\n", []),
    ("truncated", "NVRM: Xid (PCI:0000:cb:00", []),
    ("no xid number", "NVRM: Xid (PCI:0000:cb:00): , pid=1", []),
    ("other NVRM line", "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07", []),
    ("fallen off the bus", "[ 9.1] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
     [("fallen_off_bus", "00000000:3B:00.0", None)]),
])
def test_parse_xid_events_cases(name, text, want):
    have = [(e["kind"], e["bdf"], e["xid"]) for e in xid.parse_xid_events(text)]
    assert have == want, name


def test_xid_sample_file():
    events = xid.parse_xid_events(XID_SAMPLES.read_text())
    assert [e["xid"] for e in events] == [13, 13, 13, 109, 45, 45, 45, 45, 63, 31]
    assert [e["bdf"] for e in events][4:8] == [
        "00000000:DC:00.0", "00000000:ED:00.0", "00000000:BA:00.0", "00000000:97:00.0"]
    assert all(e["line"].count("NVRM: Xid") == 1 for e in events)


# -- (b) fixture sysroots --------------------------------------------------------------------


def gather(host: str) -> dict:
    facts = layer_gpu.gather(Sysroot(str(SYSROOTS / host)))
    json.dumps(facts)  # JSON-serialisable
    return facts


def test_h100_x86():
    facts = gather("h100-x86")
    assert facts["errors"] == []
    assert (facts["present"], facts["reason"], facts["source"]) == (True, None, "nvidia-smi")
    assert (facts["driver_version"], facts["cuda_version"], facts["count"]) == (
        "550.90.07", "12.4", 8)
    gpus = facts["gpus"]
    assert [g["bdf"] for g in gpus] == H100_BDFS
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["product_name"] for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {(g["pci_vendor_id"], g["pci_device_id"]) for g in gpus} == {("0x10de", "0x2330")}
    assert [g["bdf"] for g in gpus if g["persistence_mode"] is False] == ["00000000:C2:00.0"]
    assert all(g["persistence_mode"] is True for g in gpus if g["bdf"] != "00000000:C2:00.0")
    assert {(g["pcie"]["gen_current"], g["pcie"]["width_current"]) for g in gpus} == {(5, 16)}
    assert {g["virtualization_mode"] for g in gpus} == {"None"}
    c2 = gpus[3]
    assert c2["remapped_rows"]["pending"] is True
    assert c2["remapped_rows"]["correctable"] == 1
    assert [g["remapped_rows"]["pending"] for g in gpus].count(True) == 1
    assert {g["ecc"]["aggregate"]["uncorrectable"] for g in gpus} == {0}
    assert [(e["kind"], e["bdf"], e["xid"]) for e in facts["xids"]] == [
        ("xid", "00000000:E0:00.0", 31), ("xid", "00000000:C2:00.0", 63)]
    assert [(i["gpu"], i["xid"], i["lines"], i["first_seen"], i["action"])
            for i in facts["xid_incidents"]] == [
        ("00000000:E0:00.0", 31, 1, "5421.774512", "RESTART_APP"),
        ("00000000:C2:00.0", 63, 1, "86412.003816", "IGNORE")]
    assert facts["xid_log"] == {"boots": 1, "clock": "boot", "sxid_lines": 0}
    assert facts["sources"]["xid_incidents"] == "dmesg"
    assert facts["nvml"] == {"available": False, "reason": "not a live host (captured sysroot)"}
    assert facts["sources"]["gpus"] == "nvidia-smi -q -x"
    assert facts["sources"]["xids"] == "dmesg"


def test_healthy_h100():
    facts = gather("healthy-h100")
    assert facts["errors"] == []
    assert (facts["present"], facts["count"], facts["driver_version"]) == (True, 8, "550.90.07")
    assert [g["bdf"] for g in facts["gpus"]] == H100_BDFS
    assert all(g["persistence_mode"] is True for g in facts["gpus"])
    assert all(g["remapped_rows"]["pending"] is False for g in facts["gpus"])
    assert facts["xids"] == []
    log = (SYSROOTS / "healthy-h100/.exemplar/commands/dmesg.txt").read_text()
    assert "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07" in log


def test_gb200_grace_vm():
    facts = gather("gb200-grace-vm")
    assert facts["errors"] == []
    assert (facts["present"], facts["count"], facts["driver_version"]) == (
        True, 4, "570.133.20")
    assert [g["bdf"] for g in facts["gpus"]] == GB200_BDFS
    assert [g["sysfs_bdf"] for g in facts["gpus"]] == [
        "0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"]
    assert {g["product_name"] for g in facts["gpus"]} == {"NVIDIA GB200"}
    assert {g["pci_device_id"] for g in facts["gpus"]} == {"0x2941"}
    assert {g["virtualization_mode"] for g in facts["gpus"]} == {"Pass-Through"}
    assert facts["xids"] == []  # the vm part's kernel log has no Xid


def test_registry_runs_the_gpu_gatherer():
    facts = layers.gather_facts(Sysroot(str(SYSROOTS / "h100-x86")), ["gpu"])
    assert facts["gpu"]["count"] == 8


def fake_root(tmp_path: Path, files: dict[str, str]) -> Sysroot:
    for name, text in files.items():
        path = tmp_path / ".exemplar/commands" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Sysroot(str(tmp_path))


@pytest.mark.parametrize(("name", "xml", "reason"), [
    ("bomb", BOMB, "unsafe XML refused"),
    ("truncated", sample_xml(A100)[:2000], "malformed XML"),
])
def test_bad_xml_is_unknown_with_error(tmp_path, name, xml, reason):
    facts = layer_gpu.gather(fake_root(tmp_path, {"nvidia-smi-q-x.xml": xml, "dmesg.txt": ""}))
    assert (facts["present"], facts["count"], facts["gpus"]) == (None, None, None), name
    (error,) = facts["errors"]
    assert error["fact"] == "present"
    assert error["path"] == "/.exemplar/commands/nvidia-smi-q-x.xml"
    assert reason in error["error"]
    assert facts["xids"] == []


def test_no_capture_is_absent_not_error(tmp_path):
    facts = layer_gpu.gather(fake_root(tmp_path, {"dmesg.txt": "[ 0.0] Linux version 6.8\n"}))
    assert (facts["present"], facts["count"], facts["gpus"], facts["source"]) == (
        False, 0, [], None)
    assert facts["reason"] == "/.exemplar/commands/nvidia-smi-q-x.xml: not captured"
    assert facts["errors"] == []


def test_captured_no_devices_message(tmp_path):
    root = fake_root(tmp_path, {"nvidia-smi-q-x.xml": "No devices were found\n"})
    facts = layer_gpu.gather(root)
    assert (facts["present"], facts["reason"]) == (
        False, "/.exemplar/commands/nvidia-smi-q-x.xml: No devices were found")
    # no kernel log captured: xids unknown, with an error entry
    assert (facts["xids"], facts["xid_incidents"], facts["xid_log"]) == (None, None, None)
    assert [(e["fact"], e["path"]) for e in facts["errors"]] == [
        ("xids", "/.exemplar/commands/dmesg.txt")]


# -- live-host command outcomes (commands replaced; Sysroot("/") is live) --------------------


def fake_commands(monkeypatch, outputs: dict[str, CommandOutput | None]) -> None:
    def run(argv, timeout=30):
        key = " ".join(argv[:2]) if argv[:2] == ["nvidia-smi", "nvlink"] else argv[0]
        out = outputs.get(key)  # not given: not installed
        if out is None:
            raise NotSupported(" ".join(argv), "command not found")
        return out
    monkeypatch.setattr(sysroot, "run_command", run)


NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n")


@pytest.mark.parametrize(("smi", "present", "reason", "error"), [
    (None, False, "nvidia-smi -q -x: command not found", None),
    (CommandOutput("nvidia-smi -q -x", NO_DRIVER, rc=9), False,
     "nvidia-smi -q -x: " + NO_DRIVER.strip(), None),
    (CommandOutput("nvidia-smi -q -x", "No devices were found\n", rc=6), False,
     "nvidia-smi -q -x: No devices were found", None),
    (CommandOutput("nvidia-smi -q -x", "", rc=15, stderr="Unable to determine the device handle "
                   "for GPU0000:C2:00.0: GPU is lost.\n"), None, None,
     "exit status 15: Unable to determine the device handle for GPU0000:C2:00.0: GPU is lost."),
])
def test_live_nvidia_smi_outcomes(monkeypatch, smi, present, reason, error):
    fake_commands(monkeypatch, {"nvidia-smi": smi, "dmesg": CommandOutput("dmesg", "")})
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    facts = layer_gpu.gather(Sysroot("/"))
    assert (facts["present"], facts["reason"]) == (present, reason)
    assert [e["error"] for e in facts["errors"]] == ([error] if error else [])
    assert facts["nvml"] == {"available": False,
                             "reason": "pynvml (nvidia-ml-py) is not installed"}


def test_live_dmesg_restricted(monkeypatch):
    fake_commands(monkeypatch, {
        "nvidia-smi": CommandOutput("nvidia-smi -q -x", sample_xml(L4)),
        "dmesg": CommandOutput(
            "dmesg", "", rc=1,
            stderr="dmesg: read kernel buffer failed: Operation not permitted\n"),
    })
    facts = layer_gpu.gather(Sysroot("/"))
    assert (facts["present"], facts["count"], facts["source"]) == (True, 1, "nvidia-smi")
    assert facts["xids"] is None
    # the L4 excerpt declares 2 attached GPUs and keeps one: that is reported first
    assert [e["fact"] for e in facts["errors"]] == ["attached_gpus", "xids"]
    assert facts["errors"][1:] == [{
        "fact": "xids", "path": "dmesg",
        "error": "exit status 1: dmesg: read kernel buffer failed: Operation not permitted"}]


def test_read_nvidia_smi_other_failure_is_host_state_error(monkeypatch):
    fake_commands(monkeypatch, {"nvidia-smi": CommandOutput("nvidia-smi -q -x", "", rc=255)})
    with pytest.raises(HostStateError) as err:
        nvidia_smi.read_nvidia_smi(Sysroot("/"))
    assert not isinstance(err.value, NotSupported)
    assert err.value.reason == "exit status 255"


# -- NVML (a stand-in pynvml module; the real one needs a driver) ----------------------------


class FakeNvmlError(Exception):
    pass


def fake_pynvml(init_fails: bool = False) -> types.ModuleType:
    mod = types.ModuleType("pynvml")
    mod.NVMLError = FakeNvmlError

    def refuse(*_args):
        raise FakeNvmlError("Not Supported")

    def init():
        if init_fails:
            raise FakeNvmlError("Driver Not Loaded")

    calls = {
        "nvmlInit": init, "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 1, "nvmlDeviceGetHandleByIndex": lambda i: f"h{i}",
        "nvmlSystemGetDriverVersion": lambda: "550.90.07",
        "nvmlSystemGetCudaDriverVersion": lambda: 12040,
        "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda h: "GPU-6b2475b6-cffa-5cfb-bf0d-0f76c0c8bb86",
        "nvmlDeviceGetPciInfo": lambda h: types.SimpleNamespace(
            busId=b"00000000:C2:00.0", pciDeviceId=0x233010DE),
        "nvmlDeviceGetPersistenceMode": lambda h: 0,
        "nvmlDeviceGetVirtualizationMode": lambda h: 0,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0x4 | 0x8,
        "nvmlDeviceGetEccMode": lambda h: (1, 1),
        "nvmlDeviceGetTotalEccErrors": lambda h, kind, scope: 10 * kind + scope,
        "nvmlDeviceGetRemappedRows": lambda h: (1, 0, 1, 0),
        "nvmlDeviceGetRetiredPages": refuse,
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetTemperature": lambda h, sensor: 33,
        "nvmlDeviceGetPowerUsage": lambda h: 71430,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700000,
    }
    for name, func in calls.items():
        setattr(mod, name, func)
    return mod


def test_nvml_gpu_has_the_nvidia_smi_keys(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    have = nvml.read_nvml(Sysroot("/"))
    (gpu,) = have["gpus"]
    smi_gpu = nvidia_smi.parse_nvidia_smi(sample_xml(L4))["gpus"][0]
    assert set(gpu) == set(smi_gpu)
    assert set(gpu["ecc"]) == set(smi_gpu["ecc"])
    assert set(gpu["remapped_rows"]) == set(smi_gpu["remapped_rows"])
    assert (have["driver_version"], have["cuda_version"], have["attached_gpus"]) == (
        "550.90.07", "12.4", 1)
    assert (gpu["bdf"], gpu["sysfs_bdf"]) == ("00000000:C2:00.0", "0000:c2:00.0")
    assert (gpu["product_name"], gpu["pci_device_id"]) == ("NVIDIA H100 80GB HBM3", "0x2330")
    assert gpu["persistence_mode"] is False
    assert gpu["clocks_event_reasons_active"] == ["sw_power_cap", "hw_slowdown"]
    assert gpu["ecc"]["volatile"]["uncorrectable"] == 10
    assert gpu["ecc"]["aggregate"]["correctable"] == 1
    assert gpu["remapped_rows"]["pending"] is True
    assert gpu["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
    assert (gpu["power_draw_w"], gpu["power_limit_w"]) == (71.43, 700.0)
    assert gpu["virtualization_mode"] == "None"


def test_nvml_is_quietly_none(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    assert nvml.read_nvml(Sysroot(str(SYSROOTS / "h100-x86"))) is None  # not live
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_fails=True))
    assert nvml.read_nvml(Sysroot("/")) is None  # no driver
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert nvml.read_nvml(Sysroot("/")) is None  # not installed


def test_live_falls_back_to_nvml(monkeypatch):
    fake_commands(monkeypatch, {"nvidia-smi": None, "dmesg": CommandOutput("dmesg", "")})
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    facts = layer_gpu.gather(Sysroot("/"))
    assert (facts["present"], facts["source"], facts["count"]) == (True, "nvml", 1)
    assert facts["nvml"] == {"available": True, "reason": None}
    assert facts["sources"]["gpus"] == "nvml"


# -- (c) this machine ------------------------------------------------------------------------


def test_live_host():
    """This VM has no GPU and no nvidia-smi: an ordinary answer, not an error."""
    assert shutil.which("nvidia-smi") is None
    facts = layer_gpu.gather(Sysroot("/"))
    json.dumps(facts)
    assert (facts["present"], facts["count"], facts["gpus"], facts["source"]) == (
        False, 0, [], None)
    assert facts["reason"] == "nvidia-smi -q -x: command not found"
    assert (facts["driver_version"], facts["cuda_version"]) == (None, None)
    try:
        import pynvml  # noqa: F401
        installed = True
    except ImportError:
        installed = False
    assert facts["nvml"]["available"] is installed
    # independent read of the kernel log
    log = subprocess.run(["dmesg"], capture_output=True, text=True, check=False,
                         env={"LANG": "C", "LC_ALL": "C", "PATH": "/usr/bin:/bin"})
    if log.returncode == 0:
        nvrm = [line for line in log.stdout.splitlines()
                if re.search(r"NVRM: Xid \(|GPU has fallen off the bus", line)]
        assert sum(e["lines"] for e in facts["xids"] if e["kind"] == "xid") == len(
            [line for line in nvrm if "NVRM: Xid (" in line])
        assert len(facts["xid_incidents"]) <= len(facts["xids"])
        assert facts["errors"] == []
    else:
        assert facts["xids"] is None
        assert [e["fact"] for e in facts["errors"]] == ["xids"]


@pytest.mark.parametrize("host", ["h100-x86", "healthy-h100", "gb200-grace-vm"])
def test_fixture_gpus_join_with_sysfs(host):
    """Each GPU's sysfs_bdf names its PCI device in the same tree, with the same device id
    and PCIe link (written by the cpu-placement part)."""
    root = Sysroot(str(SYSROOTS / host))
    speeds = {5: "32.0 GT/s PCIe"}
    for gpu in layer_gpu.gather(root)["gpus"]:
        dev = f"sys/bus/pci/devices/{gpu['sysfs_bdf']}"
        assert root.read_text(f"{dev}/vendor") == gpu["pci_vendor_id"]
        assert root.read_text(f"{dev}/device") == gpu["pci_device_id"]
        assert root.read_text(f"{dev}/current_link_speed") == speeds[gpu["pcie"]["gen_current"]]
        assert int(root.read_text(f"{dev}/current_link_width")) == gpu["pcie"]["width_current"]
