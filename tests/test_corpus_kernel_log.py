"""The kernel-log corpus (tests/fixtures/realworld/kernel-log): real captures read as a host's
``dmesg`` through the gpu facts, as ``current`` in readings.yaml was produced (a sysroot whose
``.exemplar/commands/dmesg.txt`` is the capture); each entry's ``check`` is asserted on the
facts (tests/corpus.py), and the gpu.xids verdict under the default policy is asserted per file.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import gpu as layer_gpu
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks.base import FAIL, PASS
from exemplar_tune.checks.gpu import check_xids
from exemplar_tune.profile import load_profile

from .conftest import SYSROOTS
from .corpus import cases, mismatches, readings

FAMILY = "kernel-log"
# The verdict each capture gets under the default policy, from NVIDIA's catalog buckets:
# 119, 79, a bus loss and 62 need a GPU reset or a reboot; 13/31/32/45 restart the application.
VERDICTS = {  # an application fault (RESTART_APP) is noted: it passes
    "leptonai-gpud-xid-testdata-dmesg-with-xid-119.log": FAIL,
    "leptonai-gpud-memory-testdata-dmesg-decode-iso-xid13-repeated.log": PASS,
    "leptonai-gpud-sxid-readme-xid79-fallen-off-bus-sxid20034.log": FAIL,
    "nvidia-nvsentinel-155-fallen-off-bus-multiline-no-xid.log": FAIL,
    "doitsujin-dxvk-1027-xid31-xid13-xid32-elided.log": PASS,
    "madmax43v3r-chia-gigahorse-301-xid31-xid62-xid45-repeated.log": FAIL,
    "nvidia-open-gpu-kernel-modules-1030-boot-marker-xid31-new-format.log": PASS,
    "tinygrad-tinygrad-6947-xid31-twice-same-gpu.log": PASS,
    "nvidia-open-gpu-kernel-modules-1230-boot-marker-gsp-heartbeat-timeout.log": PASS,
    "nvidia-open-gpu-kernel-modules-1080-journalctl-gsp-rpc-failures-no-xid.log": PASS,
    # the driver's Xid 154 asks for a node reboot
    "kargarisaac-small-lm-training-rfc3339-xid79-xid154-node-reboot.log": FAIL,
    "kargarisaac-small-lm-training-journalctl-xid79-xid154-node-reboot.log": FAIL,
}


def _facts(tmp_path: Path, capture: Path) -> dict:
    commands = tmp_path / ".exemplar" / "commands"
    commands.mkdir(parents=True)
    shutil.copyfile(capture, commands / "dmesg.txt")
    return layer_gpu.gather(Sysroot(str(tmp_path)))


def test_every_entry_has_a_check_and_a_verdict():
    entries = readings(FAMILY)
    assert [e["file"] for e in entries if not e.get("check")] == []
    assert sorted(e["file"] for e in entries) == sorted(VERDICTS)


@pytest.mark.parametrize(("path", "entry"), cases(FAMILY))
def test_capture_reading(tmp_path: Path, path: Path, entry: dict):
    facts = _facts(tmp_path, path)
    assert facts["errors"] == []
    assert mismatches(facts, None, entry["check"]) == []


@pytest.mark.parametrize(("path", "entry"), cases(FAMILY))
def test_capture_verdict(tmp_path: Path, path: Path, entry: dict):
    """The capture's Xids on a host whose GPUs are otherwise healthy (healthy-h100)."""
    facts = copy.deepcopy(gather_facts(Sysroot(str(SYSROOTS / "healthy-h100")), ["gpu"]))
    facts["gpu"]["xids"] = _facts(tmp_path, path)["xids"]
    have = check_xids(facts, load_profile("h100-x86"))
    assert have.status == VERDICTS[entry["file"]], have.detail
    counted = sum(row["incidents"] for row in have.observed)
    assert counted == entry["check"]["xid_incidents"]["len"]
