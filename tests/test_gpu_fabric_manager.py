"""``gpu.fabric-manager``: Fabric Manager must run where NVSwitches are on the host's PCI bus.

The host is a real HGX H200 VM's PCI bus (openfabric-systems/simllm's ``lspci``, sources in
``tests/fixtures/realworld/lspci/SOURCES.md``) laid out as the kernel's
``/sys/bus/pci/devices`` (vendor, device and class files) beside a real H200 ``nvidia-smi -q``;
the unit's states are those real ``systemctl status`` reports show (``active (running)`` on a
p4d A100 in bottlerocket-os/bottlerocket#3873, ``failed (Result: exit-code)`` on an H100 in
NVIDIA/NVSentinel#883), as ``systemctl show`` prints them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.fabric_manager import (
    parse_unit_state,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, PASS, SKIP
from tests.corpus import REALWORLD
from tests.helpers import captured_host

HGX_H200 = REALWORLD / "lspci" / "openfabric-simllm-vastai-hgx-h200-8x-lspci.txt"
H200_Q = (REALWORLD / "nvidia-smi-text"
          / "utkuozdemir-nvidia_gpu_exporter-captures-linux-x86_64-nvidia-h200-590.48.01-q.txt")
CHECK = next(c for c in CHECKS if c.id == "gpu.fabric-manager")
# lspci's names -> the ids sysfs holds (pci.ids)
VENDORS = {"NVIDIA": "0x10de", "Mellanox": "0x15b3", "Red": "0x1b36", "Texas": "0x104c"}
CLASSES = {"3D controller": "0x030200", "Bridge": "0x068000", "Ethernet controller": "0x020000",
           "PCI bridge": "0x060400"}
LINE = re.compile(r"^([0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) ([^:]+): (\S+).*?(?:Device ([0-9a-f]{4}))?"
                  r"(?: \(rev [0-9a-f]+\))?$")
RUNNING = "LoadState=loaded\nActiveState=active\nSubState=running\nResult=success\n" \
          "Id=nvidia-fabricmanager.service\n"
FAILED = "Id=nvidia-fabricmanager.service\nLoadState=loaded\nActiveState=failed\n" \
         "SubState=failed\nResult=exit-code\n"
ABSENT = "Id=nvidia-fabricmanager.service\nLoadState=not-found\nActiveState=inactive\n" \
         "SubState=dead\nResult=success\n"


def pci_bus(root: Path, lspci: Path) -> None:
    """``/sys/bus/pci/devices/0000:<bdf>/{vendor,device,class}`` for each ``lspci`` line."""
    for line in lspci.read_text().splitlines():
        bdf, kind, vendor, device = LINE.match(line).groups()
        node = root / "sys/bus/pci/devices" / f"0000:{bdf}"
        node.mkdir(parents=True)
        for name, value in (("vendor", VENDORS[vendor]), ("class", CLASSES[kind]),
                            ("device", f"0x{device or '0000'}")):
            (node / name).write_text(value + "\n")


def judge(tmp_path: Path, show: str | None, lspci: Path | None = HGX_H200):
    root = captured_host(tmp_path / "host", {"nvidia-smi-q.txt": H200_Q,
                                             "systemctl-show-fabricmanager.txt": show})
    if lspci is not None:
        pci_bus(root, lspci)
    facts = gather_facts(Sysroot(str(root)), ["gpu"])
    return CHECK.func(facts, {}), facts["gpu"]


def test_the_hgx_board_s_four_nvswitches_are_found_on_its_pci_bus(tmp_path):
    _, facts = judge(tmp_path, RUNNING)
    assert facts["nvswitches"] == [f"0000:{bus}:00.0" for bus in ("c3", "c4", "c5", "c6")]


def test_a_running_fabric_manager_passes(tmp_path):
    outcome, _ = judge(tmp_path, RUNNING)
    assert (outcome.status, outcome.detail) == (
        PASS, "nvidia-fabricmanager active (running) for 4 NVSwitches")


@pytest.mark.parametrize(("show", "detail"), [
    (FAILED, "4 NVSwitches and nvidia-fabricmanager failed (failed, result exit-code)"),
    (ABSENT, "4 NVSwitches and no nvidia-fabricmanager.service installed"),
    (RUNNING.replace("=active", "=inactive").replace("=running", "=dead"),
     "4 NVSwitches and nvidia-fabricmanager inactive (dead)"),
])
def test_a_stopped_failed_or_missing_fabric_manager_fails(tmp_path, show, detail):
    outcome, _ = judge(tmp_path, show)
    assert (outcome.status, outcome.detail) == (FAIL, detail)


def test_a_host_without_nvswitches_never_asks_systemd(tmp_path):
    gpus_only = tmp_path / "lspci.txt"
    gpus_only.write_text("".join(line for line in HGX_H200.read_text().splitlines(True)
                                 if "Bridge: NVIDIA" not in line))
    outcome, facts = judge(tmp_path, None, gpus_only)
    assert facts["nvswitches"] == [] and facts["fabric_manager_missing"] is None
    assert outcome.status == SKIP and "Fabric Manager is not configured here" in outcome.detail


def test_nvswitches_without_a_capture_of_the_service_say_it_was_not_read(tmp_path):
    outcome, _ = judge(tmp_path, None)
    assert outcome.status == SKIP
    assert outcome.detail.startswith("4 NVSwitches; Fabric Manager's state not read (")


def test_output_without_a_load_state_is_refused():
    with pytest.raises(ParseError, match="no LoadState= line"):
        parse_unit_state("Failed to connect to bus: Host is down\n")
