"""Host trees captured from real machines by other people (``fixtures/realworld/hosts``),
unpacked into sysroots: the machine kinds this project's own fixtures are not.

Each archive is kept as published (see that folder's ``SOURCES.md``); :func:`unpack` turns it
into a directory mirroring ``/``:

* hwloc, ghw and node-tuning-operator archives, and ``exemplar-tune snapshot`` bundles, are
  trees already (one top-level folder, or ``proc/`` and ``sys/`` at the top);
* Intel pepc's emulation data (``tests/emul-data/<machine>/``) keeps ``proc/`` as files and
  every sysfs file as one ``ro|/sys/path|value`` line of ``sys/inlinefiles.txt``, written back
  here as the files the kernel shows (the value and a newline).
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

HOSTS = Path(__file__).resolve().parent / "fixtures" / "realworld" / "hosts"
# name -> what the machine is (SOURCES.md has the origin of each)
KINDS = {
    "pepc-genoa0": "AMD EPYC 9354 (Genoa), 2 sockets, 128 CPUs, acpi_idle, acpi-cpufreq, "
                   "PXE boot",
    "pepc-gnrd0": "Intel Xeon 6 (Granite Rapids-D), 84 CPUs, intel_idle C6/C6P, intel_pstate",
    "hwloc-128arm-kunpeng920": "Huawei Kunpeng 920 arm64 server, 128 CPUs, no cpufreq, no "
                               "cpuidle",
    "hwloc-nvidia-dgx-gb10": "NVIDIA DGX Spark GB10 arm64, 20 CPUs, cppc_cpufreq",
    "hwloc-kvm-guest-2pa": "CloudStack KVM guest, 2 vCPUs, cpuidle driver none, no cpufreq",
    "nto-r740xd-isolcpus": "Dell R740xd, 2x Xeon Gold 6230, RT kernel, isolcpus/nohz_full, "
                           "idle=poll, intel_pstate=disable",
    "nto-gce-kvm-isolcpus": "Google Compute Engine KVM guest, 2 vCPUs, isolcpus/nohz_full",
    "ghw-arm64-graviton2": "AWS Graviton2 (Neoverse N1) Nitro instance, 1 vCPU",
    "snapshot-kvm-haltpoll": "KVM guest, 2 AMD EPYC vCPUs, cpuidle driver haltpoll (the "
                             "machine this project's tests were developed on, as exemplar-tune "
                             "snapshot captured it)",
    "snapshot-bwrap-sandbox": "a bubblewrap container on that machine (PID, UTS and IPC "
                              "namespaces, read-only root): PID 1 is not an init system",
}


def archive(name: str) -> Path:
    """The archive of host ``name`` (a key of :data:`KINDS`)."""
    found = sorted(HOSTS.glob(f"{name}.t*"))
    if len(found) != 1:
        raise FileNotFoundError(f"{name}: no single archive under {HOSTS}")
    return found[0]


def unpack(name: str, dest: Path) -> Path:
    """Host ``name`` as a sysroot under ``dest`` (returned)."""
    work = dest / f".{name}.unpacked"
    with tarfile.open(archive(name)) as tar:
        tar.extractall(work, filter="data")
    root = dest / name
    pepc = next(work.glob("*/tests/emul-data/*"), None)
    if pepc is not None:
        _from_pepc(pepc, root)
    else:
        top = [p for p in work.iterdir() if p.name not in ("machineinfo.json",)]
        tree = top[0] if len(top) == 1 and not (work / "proc").exists() else work
        shutil.move(str(tree), root)
    shutil.rmtree(work, ignore_errors=True)
    return root


def _from_pepc(data: Path, root: Path) -> None:
    shutil.copytree(data / "proc", root / "proc")
    for line in (data / "sys" / "inlinefiles.txt").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        _mode, path, value = line.split("|", 2)
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(value + "\n")
