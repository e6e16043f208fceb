"""``fabric.gpudirect-rdma`` on the fixture H100 host (eight ConnectX ports under
``/sys/class/infiniband``), with the driver's ``/proc/driver/nvidia/version`` in the two forms
NVIDIA's kernel modules print (``kernel-open/nvidia/nv-procfs.c``: "NVIDIA UNIX Open Kernel
Module for x86_64" for the open modules, "NVIDIA UNIX x86_64 Kernel Module" for the
proprietary ones), ``/sys/module/nvidia_peermem`` where the module is loaded, and the kernel's
own ``/boot/config-<release>``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, PASS, SKIP, WARN
from tests.conftest import SYSROOTS

CHECK = next(c for c in CHECKS if c.id == "fabric.gpudirect-rdma")
OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.195.03  Release Build  "
        "(dvs-builder@U22-I3-H04-03-1)  Sat Sep 20 00:47:16 UTC 2025\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")
PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.216.03  Thu Apr  3 01:14:19 " \
    "UTC 2025\nGCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n"


def host(tmp_path: Path, version: str | None, peermem: bool = False,
         move_notify: bool | None = True) -> Path:
    root = tmp_path / "host"
    shutil.copytree(SYSROOTS / "healthy-h100", root, symlinks=True)
    # the fixture has the driver's version file and nvidia_peermem loaded: each case says its own
    (root / "proc/driver/nvidia/version").unlink()
    shutil.rmtree(root / "sys/module/nvidia_peermem")
    if version is not None:
        (root / "proc/driver/nvidia").mkdir(parents=True, exist_ok=True)
        (root / "proc/driver/nvidia/version").write_text(version)
    if peermem:
        (root / "sys/module/nvidia_peermem").mkdir(parents=True)
        (root / "sys/module/nvidia_peermem/initstate").write_text("live\n")
    release = (root / "proc/sys/kernel/osrelease").read_text().strip()
    config = root / f"boot/config-{release}"
    if move_notify is None:
        config.unlink(missing_ok=True)
    else:
        lines = [line for line in config.read_text().splitlines()
                 if "CONFIG_DMABUF_MOVE_NOTIFY" not in line]
        lines.append("CONFIG_DMABUF_MOVE_NOTIFY=y" if move_notify
                     else "# CONFIG_DMABUF_MOVE_NOTIFY is not set")
        config.write_text("\n".join(lines) + "\n")
    return root


def judge(root: Path):
    facts = gather_facts(Sysroot(str(root)), ["gpu", "fabric"])
    return CHECK.func(facts, {})


@pytest.mark.parametrize(("version", "peermem", "move_notify", "status", "words"), [
    (PROPRIETARY, True, False, PASS, "nvidia_peermem loaded"),
    (OPEN, False, True, PASS, "dma-buf: open kernel module on Linux 5.15"),
    (OPEN, False, None, WARN, "dma-buf likely (open kernel module, Linux 5.15"),
    (OPEN, False, False, FAIL, "CONFIG_DMABUF_MOVE_NOTIFY is off"),
    (PROPRIETARY, False, True, FAIL,
     "nvidia_peermem not loaded and no dma-buf (the driver is not the open kernel module)"),
    (None, False, True, SKIP, "NVIDIA driver version not read"),
])
def test_peermem_or_dma_buf(tmp_path, version, peermem, move_notify, status, words):
    outcome = judge(host(tmp_path, version, peermem, move_notify))
    assert outcome.status == status and words in outcome.detail, outcome.detail


def test_without_rdma_nics_it_does_not_apply(tmp_path):
    root = host(tmp_path, PROPRIETARY)
    shutil.rmtree(root / "sys/class/infiniband")
    outcome = judge(root)
    assert outcome.status == SKIP and "does not apply" in outcome.detail
