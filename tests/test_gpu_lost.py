"""A GPU that fell off the bus: nvidia-smi fails, the kernel log holds the Xid 79 incident.

The host tree is ``healthy-h100`` with two real outputs put in: the kernel log of a GPU that
fell off the bus (``realworld/kernel-log``, leptonai/gpud, Xid 79 on 0000:91:00.0), and what
nvidia-smi prints then, with its documented exit status for a GPU fallen off the bus, 15
(nvidia-smi(1), RETURN VALUE); the message as users reported it (JosephKJ/OWOD#81,
AlexeyAB/darknet#86), with that GPU's address. The capture keeps the failed run as
``nvidia-smi-q-x.xml.rc`` and ``.stderr``, as ``exemplar-tune snapshot`` writes it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from exemplar_tune.checks.base import makes_unfit
from tests.conftest import FIXTURES, SYSROOTS
from tests.test_cli import cli

KERNEL_LOGS = FIXTURES / "realworld" / "kernel-log"
XID79 = KERNEL_LOGS / "leptonai-gpud-sxid-readme-xid79-fallen-off-bus-sxid20034.log"
LOST = ("Unable to determine the device handle for GPU 0000:91:00.0: GPU is lost.  Reboot the "
        "system to recover this GPU\n")


@pytest.fixture
def lost(tmp_path: Path) -> Path:
    root = tmp_path / "lost"
    shutil.copytree(SYSROOTS / "healthy-h100", root, symlinks=True)
    commands = root / ".exemplar/commands"
    (commands / "nvidia-smi-q-x.xml").unlink()
    (commands / "nvidia-smi-q-x.xml.rc").write_text("15\n")
    (commands / "nvidia-smi-q-x.xml.stderr").write_text(LOST)
    shutil.copy(XID79, commands / "dmesg.txt")
    return root


def test_the_xid_is_judged_and_the_failing_nvidia_smi_is_a_finding(lost: Path):
    out = cli("preflight", "--sysroot", str(lost), "--profile", "h100-x86", "--layer", "gpu",
              "--format", "json")
    assert out.returncode == 1, out.stderr
    results = {r["id"]: r for r in next(iter(json.loads(out.stdout)["hosts"].values()))["results"]}
    smi = results["gpu.nvidia-smi"]
    assert smi["status"] == "fail"
    assert smi["detail"] == f"nvidia-smi -q -x: exit status 15: {LOST.strip()}"
    xids = results["gpu.xids"]
    assert xids["status"] == "fail"
    assert xids["detail"].startswith("00000000:91:00.0 Xid 79 (GPU has fallen off the bus)")
    assert "-> REBOOT" in xids["detail"]
    assert results["gpu.count"]["status"] == "skip"  # the inventory is unknown, not zero
    assert makes_unfit(smi) and makes_unfit(xids)


def test_facts_keep_the_failure_as_an_error_not_as_no_gpu(lost: Path):
    out = cli("facts", "--sysroot", str(lost), "--layer", "gpu", "--format", "json")
    gpu = json.loads(out.stdout)["gpu"]
    assert gpu["present"] is None and gpu["count"] is None
    assert {"fact": "present", "path": "nvidia-smi -q -x",
            "error": f"exit status 15: {LOST.strip()}"} in gpu["errors"]
    assert [i["xid"] for i in gpu["xid_incidents"]] == [79]


@pytest.mark.parametrize(("name", "status"), [
    ("leptonai-gpud-sxid-readme-xid79-fallen-off-bus-sxid20034.log", "fail"),  # REBOOT
    ("leptonai-gpud-xid-testdata-dmesg-with-xid-119.log", "fail"),  # dmesg -T, RESET_GPU
    ("nvidia-nvsentinel-155-fallen-off-bus-multiline-no-xid.log", "fail"),  # no Xid line
    ("leptonai-gpud-memory-testdata-dmesg-decode-iso-xid13-repeated.log", "info"),  # iso
    ("doitsujin-dxvk-1027-xid31-xid13-xid32-elided.log", "info"),  # RESTART_APP only: noted
    ("nvidia-open-gpu-kernel-modules-1080-journalctl-gsp-rpc-failures-no-xid.log", "pass"),
])
def test_diagnose_reads_kernel_logs_with_the_preflight_xid_policy(name: str, status: str):
    out = cli("diagnose", str(KERNEL_LOGS / name), "--format", "json")
    doc = json.loads(out.stdout)
    (report,) = doc["reports"]
    assert report["kind"] == "kernel log"
    assert [(f["check_id"], f["status"]) for f in report["findings"]] == [("gpu.xids", status)]
    assert out.returncode == (1 if status == "fail" else 0)
