"""Plain-text ``nvidia-smi -q``: the reader, the sysroot fallback, the snapshot, bad input.

Inputs are the real captures of tests/fixtures/realworld/nvidia-smi-text (sources in its
SOURCES.md); a few parser cases use single lines, and fault cases edit one value of a capture.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import gpu as layer_gpu
from ansible_collections.exemplar.tune.plugins.module_utils.readers import nvidia_smi_text
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import COMMANDS, Sysroot

from exemplar_tune.diagnose import DiagnoseError, diagnose_text
from tests.helpers import cli_env

CORPUS = Path(__file__).parent / "fixtures" / "realworld"
TEXTS = CORPUS / "nvidia-smi-text"
UO = "utkuozdemir-nvidia_gpu_exporter-captures-linux-x86_64-nvidia-"
H100 = TEXTS / f"{UO}h100-80gb-hbm3-590.48.01-q.txt"
R610 = TEXTS / f"{UO}geforce-rtx-2080-super-610.57.04-q.txt"
H100X8 = TEXTS / "thamada-nvidia-smi-nvsim-h100sxmx8-565.57.01-a.txt"
EXCERPT = TEXTS / "stas00-ml-engineering-debug-a100-xid63-q-excerpt.txt"
A10G_XML = CORPUS / "nvidia-smi-xml" / "influxdata-telegraf-nvidia_smi-testdata-a10g.xml"


# -- the parser -------------------------------------------------------------------------------


@pytest.mark.parametrize(("label", "key"), [
    ("Product Name", "product_name"),
    ("GPU T.Limit Temp", "gpu_tlimit_temp"),
    ("SRAM Uncorrectable SEC-DED", "sram_uncorrectable_secded"),
    ("GPU Memory Power Readings ", "gpu_memory_power_readings"),
    ("[...]", ""),
])
def test_label_key(label, key):
    assert nvidia_smi_text.label_key(label) == key


@pytest.mark.parametrize(("line", "label", "value"), [
    ("Driver Version       : 610.57.04 [Deprecated; will be removed in CUDA 14.0. Use KMD "
     "Version instead]", "Driver Version", "610.57.04"),
    ("        Pending      : Yes                      <===", "Pending", "Yes"),
    ("        Pending      : [N/A]", "Pending", "[N/A]"),
    ("Timestamp            : Fri Jul  3 08:33:38 2026", "Timestamp", "Fri Jul  3 08:33:38 2026"),
    ("        Bus Id       : 00000000:00:09.0", "Bus Id", "00000000:00:09.0"),
    ("    Remapped Rows", "Remapped Rows", None),
])
def test_one_line(line, label, value):
    (node,) = nvidia_smi_text.outline(line)
    assert (node.label, node.value) == (label, value)


def test_nested_lines_of_a_valued_line_are_its_siblings():
    """HW Thermal Slowdown is printed under HW Slowdown; the XML has them side by side."""
    tree = nvidia_smi_text.to_tree(H100.read_text())
    reasons = tree.find("gpu/clocks_event_reasons")
    assert [child.tag for child in reasons][3:6] == [
        "clocks_event_reason_hw_slowdown", "clocks_event_reason_hw_thermal_slowdown",
        "clocks_event_reason_hw_power_brake_slowdown"]


def test_r610_power_limits_under_a_sub_heading_and_deprecation_notes():
    have = nvidia_smi_text.parse_nvidia_smi_text(R610.read_text())
    (gpu,) = have["gpus"]
    assert (have["driver_version"], have["cuda_version"]) == ("610.57.04", "13.3")
    assert (gpu["power_limit_w"], gpu["power_default_limit_w"]) == (250.0, 250.0)
    assert gpu["temperature_limits"]["absolute_c"]["shutdown"] == 100
    assert have["errors"] == []


def test_eight_gpu_blocks():
    have = nvidia_smi_text.parse_nvidia_smi_text(H100X8.read_text())
    assert [g["index"] for g in have["gpus"]] == list(range(8))
    assert [g["minor_number"] for g in have["gpus"]] == list(range(8))
    assert len({g["serial"] for g in have["gpus"]}) == 8
    assert have["attached_gpus"] == 8 and have["errors"] == []


def test_excerpt_absent_sections_are_none_not_errors():
    have = nvidia_smi_text.parse_nvidia_smi_text(EXCERPT.read_text())
    (gpu,) = have["gpus"]
    assert gpu["persistence_mode"] is None
    assert gpu["pcie"]["gen_current"] is None and gpu["temperature_c"] is None
    assert gpu["remapped_rows"]["pending"] is True
    assert [e["fact"] for e in have["errors"]] == ["attached_gpus"]


def test_bad_value_is_none_with_its_line():
    text = H100.read_text().replace(": 0x233010DE", ": [REDACTED]")
    line = next(n for n, t in enumerate(text.splitlines(), 1) if "[REDACTED]" in t)
    have = nvidia_smi_text.parse_nvidia_smi_text(text, "ticket.txt")
    (gpu,) = have["gpus"]
    assert (gpu["pci_device_id"], gpu["product_name"]) == (None, "NVIDIA H100 80GB HBM3")
    assert have["errors"] == [{"fact": "gpus.0", "path": f"ticket.txt: line {line} (Device Id)",
                               "error": "not an 8-digit PCI id: '[REDACTED]'"}]


@pytest.mark.parametrize(("text", "reason"), [
    ("", "empty output"),
    ("hello world\nthis is not nvidia-smi\n", "no 'NVSMI LOG' banner"),
    ("<nvidia_smi_log/>", "XML, not the plain-text report"),
])
def test_refusals(text, reason):
    with pytest.raises(ParseError) as err:
        nvidia_smi_text.parse_nvidia_smi_text(text, "f.txt")
    assert reason in err.value.reason


# -- sysroot: the XML when captured, else the text --------------------------------------------


def root_with(tmp_path: Path, files: dict[str, str]) -> Sysroot:
    commands = tmp_path / ".exemplar" / "commands"
    commands.mkdir(parents=True)
    for name, text in files.items():
        (commands / name).write_text(text)
    return Sysroot(str(tmp_path))


def test_sysroot_prefers_the_xml(tmp_path):
    facts = layer_gpu.gather(root_with(tmp_path, {"nvidia-smi-q-x.xml": A10G_XML.read_text(),
                                                  "nvidia-smi-q.txt": H100.read_text()}))
    assert facts["gpus"][0]["product_name"] == "NVIDIA A10G"
    assert facts["sources"]["gpus"] == "nvidia-smi -q -x"


def test_sysroot_reads_the_text_without_the_xml(tmp_path):
    facts = layer_gpu.gather(root_with(tmp_path, {"nvidia-smi-q.txt": H100.read_text()}))
    assert (facts["present"], facts["source"], facts["count"]) == (True, "nvidia-smi", 1)
    assert facts["sources"]["gpus"] == "nvidia-smi -q"
    assert facts["gpus"][0]["bdf"] == "00000000:00:09.0"


@pytest.mark.parametrize(("text", "present", "reason", "error"), [
    ("No devices were found\n", False,
     "/.exemplar/commands/nvidia-smi-q.txt: No devices were found", None),
    ("Segmentation fault\n", None, None, "not nvidia-smi -q output"),
])
def test_sysroot_text_without_gpus(tmp_path, text, present, reason, error):
    facts = layer_gpu.gather(root_with(tmp_path, {"nvidia-smi-q.txt": text, "dmesg.txt": ""}))
    assert (facts["present"], facts["reason"]) == (present, reason)
    assert [error in e["error"] for e in facts["errors"]] == ([True] if error else [])


# -- snapshot: both forms captured where nvidia-smi exists -------------------------------------


def test_snapshot_captures_both_forms(tmp_path):
    """A stand-in nvidia-smi on PATH prints the real captures; the archive keeps both and
    ``facts --sysroot`` reads the XML from it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "nvidia-smi"
    stub.write_text(f"#!/bin/sh\ncase \"$*\" in *-x*) exec cat '{A10G_XML}';; "
                    f"*) exec cat '{H100}';; esac\n")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    env = dict(cli_env(), PATH=os.pathsep.join([str(bin_dir), cli_env()["PATH"]]))
    archive = tmp_path / "node.tar.gz"
    run = [sys.executable, "-m", "exemplar_tune.cli"]
    out = subprocess.run([*run, "snapshot", "-o", str(archive)], capture_output=True, text=True,
                         env=env, check=False, timeout=300)
    assert out.returncode == 0, out.stderr
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile(".exemplar/manifest.json"))
        text = tar.extractfile(".exemplar/commands/nvidia-smi-q.txt").read().decode()
    assert COMMANDS["nvidia-smi-q.txt"] == ["nvidia-smi", "-q"]
    assert manifest["commands"]["nvidia-smi-q.txt"]["captured"] is True
    assert manifest["commands"]["nvidia-smi-q-x.xml"]["captured"] is True
    assert text == H100.read_text()
    facts = subprocess.run([*run, "facts", "--sysroot", str(archive), "--layer", "gpu",
                            "--format", "json"], capture_output=True, text=True, env=cli_env(),
                           check=False, timeout=300)
    assert json.loads(facts.stdout)["gpu"]["gpus"][0]["product_name"] == "NVIDIA A10G"


# -- diagnose: one-line refusals, never a traceback --------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("==============NVSMI LOG==============\n\nNo devices were found\n",
     "t: nvidia-smi report lists no GPU"),
    ("<nvidia_smi_log><gpu id='00000000:01:00.0'>", "t: malformed XML"),
    ('<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
     "\n<nvidia_smi_log><driver_version>&x;</driver_version></nvidia_smi_log>",
     "t: unsafe XML refused"),
])
def test_diagnose_refusals(text, message):
    with pytest.raises(DiagnoseError) as err:
        diagnose_text(text, "t")
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_diagnose_cli_nothing_readable_is_one_line(tmp_path):
    path = tmp_path / "smi.txt"
    path.write_text("==============NVSMI LOG==============\nGPU 00000000:01:00.0\n"
                    "    Persistence Mode : sometimes\n    }}}} :: ::\n    Temperature\n"
                    "        GPU Current Temp : hot\n")
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "diagnose", str(path)],
                         capture_output=True, text=True, env=cli_env(), check=False, timeout=300)
    assert out.returncode == 2
    assert out.stderr == (
        f"exemplar-tune: error: {path}: nvidia-smi report without any field the gpu checks "
        "judge (persistence mode, ECC, row remapping, page retirement, PCIe link, clock "
        f"events, temperature); 2 field(s) unreadable, first {path}: line 3 (Persistence "
        "Mode): not a yes/no value: 'sometimes'\n")


def test_diagnose_default_profile_is_what_every_shipped_profile_shares():
    report = diagnose_text(H100.read_text(), "h100.txt")
    assert report.kind == "nvidia-smi"
    assert report.summary["profile"] == {"persistence_mode": True, "temperature_max_c": 85}
    other = diagnose_text(H100.read_text(), "h100.txt",
                          {"profile": {"gpu": {"persistence_mode": False}}})
    (finding,) = [f for f in other.findings if f.check_id == "gpu.persistence-mode"]
    assert finding.status == "fail"
