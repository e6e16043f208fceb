"""Sysroot: path resolution stays inside the root; commands come from captured files."""

from __future__ import annotations

import os
import shutil

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    NotSupported,
    UnsafePath,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.conftest import SYSROOTS


def test_absolute_symlink_resolves_inside_root(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "cpu_dma_latency").write_bytes(b"\x63\x00\x00\x00")
    fd = tmp_path / "proc" / "1432" / "fd"
    fd.mkdir(parents=True)
    os.symlink("/dev/cpu_dma_latency", fd / "9")
    root = Sysroot(str(tmp_path))
    assert root.readlink("proc/1432/fd/9") == "/dev/cpu_dma_latency"
    assert root.read_bytes("proc/1432/fd/9") == b"\x63\x00\x00\x00"


def test_symlink_to_host_file_is_not_followed_out(tmp_path):
    (tmp_path / "etc").mkdir()
    os.symlink("/etc/hostname", tmp_path / "etc" / "nccl.conf")
    root = Sysroot(str(tmp_path))
    assert root.path("etc/nccl.conf") == str(tmp_path / "etc" / "hostname")
    with pytest.raises(NotSupported):
        root.read_text("etc/nccl.conf")


def test_dotdot_cannot_climb_above_root(tmp_path):
    root = Sysroot(str(tmp_path))
    assert root.path("../../etc/passwd") == str(tmp_path / "etc" / "passwd")
    assert root.read_optional("../../etc/passwd") is None


def test_symlink_loop_is_reported(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(UnsafePath):
        Sysroot(str(tmp_path)).read_text("a")


def test_relative_sysfs_style_links(tmp_path):
    dev = tmp_path / "sys" / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:a4:00.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("0\n")
    bus = tmp_path / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:01.0/0000:a4:00.0", bus / "0000:a4:00.0")
    root = Sysroot(str(tmp_path))
    assert root.read_text("sys/bus/pci/devices/0000:a4:00.0/numa_node") == "0"
    assert root.realpath("sys/bus/pci/devices/0000:a4:00.0") == (
        "/sys/devices/pci0000:00/0000:00:01.0/0000:a4:00.0")


def test_sysroot_reads_captured_command_and_never_runs_it(tmp_path):
    root = Sysroot(str(tmp_path))
    with pytest.raises(NotSupported) as err:
        root.command("nvidia-smi-q-x.xml")
    assert err.value.path == "/.exemplar/commands/nvidia-smi-q-x.xml"
    (tmp_path / ".exemplar" / "commands").mkdir(parents=True)
    (tmp_path / ".exemplar" / "commands" / "dmesg.txt").write_text("line\n")
    out = root.command("dmesg.txt")
    assert (out.stdout, out.rc, out.source) == ("line\n", 0, "/.exemplar/commands/dmesg.txt")


def test_environment_of_a_sysroot_keeps_only_reader_variables(tmp_path):
    (tmp_path / ".exemplar" / "commands").mkdir(parents=True)
    (tmp_path / ".exemplar" / "commands" / "environment.txt").write_text(
        "NCCL_TOPO_FILE=/etc/nccl/topo.xml\nAWS_SECRET_ACCESS_KEY=x\nHOME=/root\n")
    assert Sysroot(str(tmp_path)).environ() == {
        "NCCL_TOPO_FILE": "/etc/nccl/topo.xml", "HOME": "/root"}


def test_live_root_reads_this_machine():
    root = Sysroot("/")
    with open("/proc/sys/kernel/osrelease") as handle:
        assert root.read_text("proc/sys/kernel/osrelease") == handle.read().strip()
    assert root.listdir("sys/devices/system/cpu") == sorted(os.listdir("/sys/devices/system/cpu"))


def test_live_missing_command_is_not_supported():
    with pytest.raises(NotSupported) as err:
        Sysroot("/").command("nvidia-smi-q-x.xml")
    assert "not found" in err.value.reason


def test_recording_notes_what_was_read(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hostname").write_text("n1\n")
    seen: set[str] = set()
    root = Sysroot(str(tmp_path), record=seen)
    root.read_text("etc/hostname")
    root.read_optional("etc/absent")
    root.listdir("etc")
    assert seen == {"/etc/hostname", "/etc"}


def test_a_live_command_runs_once_per_sysroot(tmp_path, monkeypatch):
    """The gpu (Xids) and vm (CMDQV) layers both read the kernel log: one ``dmesg``."""
    from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts

    real = shutil.which("dmesg")
    assert real, "dmesg is in util-linux (.ci/packages.txt)"
    calls = tmp_path / "calls"
    wrapper = tmp_path / "bin" / "dmesg"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho run >> "{calls}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:{os.environ['PATH']}")
    facts = gather_facts(Sysroot("/"), ["gpu", "vm"])
    assert calls.read_text() == "run\n"
    assert facts["vm"]["cmdqv"]["dmesg"] is not None
    gather_facts(Sysroot("/"), ["vm"])  # a new Sysroot reads the host again
    assert calls.read_text() == "run\nrun\n"


def test_a_missing_live_command_is_remembered_per_sysroot(tmp_path, monkeypatch):
    """Absence is remembered too (each caller gets its own exception); a new Sysroot looks
    again."""
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    root = Sysroot("/")
    with pytest.raises(NotSupported) as first:
        root.command("nvidia-smi-q-x.xml")
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho '<nvidia_smi_log/>'\n")
    fake.chmod(0o755)
    with pytest.raises(NotSupported) as second:
        root.command("nvidia-smi-q-x.xml")
    assert second.value is not first.value
    assert (second.value.path, second.value.reason) == (first.value.path, first.value.reason)
    assert Sysroot("/").command("nvidia-smi-q-x.xml").stdout.strip() == "<nvidia_smi_log/>"


def test_remembered_directories_resolve_as_a_fresh_walk(tmp_path):
    """Paths resolved after others (sharing their directories) resolve exactly as each does
    alone, through relative, absolute, chained and escaping links and ``..``."""
    tree = shutil.copytree(SYSROOTS / "h100-x86", tmp_path / "t", symlinks=True)
    (tree / "sys/bus").mkdir(parents=True, exist_ok=True)
    os.symlink("../devices", tree / "sys/bus/dev")  # relative, chained through sys/devices
    os.symlink("/sys/bus/dev", tree / "alias")  # absolute, onto a link
    os.symlink("../../../..", tree / "sys/bus/up")  # climbs above the root
    paths = [str(p.relative_to(tree)) for p in tree.rglob("*")]
    paths += ["alias/system/cpu/cpu0", "sys/bus/up/etc/passwd", "sys/bus/dev/../bus/dev/system",
              "alias/../alias/system/cpu/online", "sys/bus/up/../sys/bus/dev/system"]
    shared = Sysroot(str(tree))
    for rel in paths + paths[::-1]:
        assert shared.path(rel) == Sysroot(str(tree)).path(rel), rel
