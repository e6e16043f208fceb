"""A sos report (its archive, or its unpacked directory) read as a ``--sysroot``.

The report is a real one (``tests/fixtures/sos/SOURCES.md``): sos 4.2 on a 2-vCPU OpenStack VM
running Kubernetes, as canonical/hotsos committed it. What each test expects is read off that
tree: its ``proc/cpuinfo`` and topology (two single-core Haswell sockets), its kernel log (one
boot, no NVIDIA driver line), its ``lspci -nnvv`` (virtio devices only), and what it lacks (no
``sos_commands/nvidia/``). Variants (a log line, a unit renamed, a moved file) are made in a
temporary copy, each said so where it is made.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.readers import (
    fabric_manager,
    lspci,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    CommandFailed,
    NotSupported,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sos_commands import (
    MAPPED,
    NEVER,
    UNREAD,
    SosOutput,
    SosReport,
    mangle,
    parse_version,
    unit_block,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import COMMANDS, Sysroot

from exemplar_tune.bundle import open_sysroot
from exemplar_tune.facts import facts_from_sysroot
from tests.conftest import FIXTURES
from tests.helpers import cli_env

TREE = FIXTURES / "sos" / "hotsos-kubernetes-sos-4.2"
TOP = "sosreport-juju-110cc2-k8stest-4-2022-02-11-vqhxcfu"  # sos's name pattern for this host
H100_Q = (FIXTURES / "realworld" / "nvidia-smi-text" / "utkuozdemir-nvidia_gpu_exporter-captures-"
          "linux-x86_64-nvidia-h100-80gb-hbm3-590.48.01-q.txt")
FM_SHOW = " ".join(COMMANDS["systemctl-show-fabricmanager.txt"])


def sos_archive(tmp_path: Path, tree: Path = TREE, name: str = TOP) -> Path:
    """The report as sos writes it: one ``.tar.xz`` whose only top directory is ``name``."""
    archive = tmp_path / f"{name}.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(tree, arcname=name)
    return archive


def tree_copy(tmp_path: Path) -> Path:
    """A copy of the report to make one variant in (links kept as links)."""
    copy = tmp_path / TOP
    shutil.copytree(TREE, copy, symlinks=True)
    return copy


def missing(root: Path, name: str) -> str:
    """The one line a reader gets for command file ``name`` that the report lacks."""
    with pytest.raises(NotSupported) as error:
        Sysroot(str(root)).command(name)
    return str(error.value)


# -- facts from the report ---------------------------------------------------------------------

def test_cpu_facts_come_from_the_copied_proc_and_sys_files():
    cpu = facts_from_sysroot(str(TREE), ["cpu"])["cpu"]
    processor = cpu["processor"]
    assert processor["model_name"] == "Intel Core Processor (Haswell, no TSX, IBRS)"
    assert (processor["sockets"], processor["cores_per_socket"], processor["threads_per_core"],
            processor["cpus_online"]) == (2, 1, 1, 2)
    # proc/cmdline: BOOT_IMAGE=... root=LABEL=cloudimg-rootfs ro console=tty1 console=ttyS0
    assert cpu["isolation"]["cmdline"] == {"isolcpus": None, "nohz_full": None,
                                           "rcu_nocbs": None, "irqaffinity": None}


def test_the_kernel_log_is_read_through_sos_commands_kernel_dmesg():
    root = Sysroot(str(TREE))
    out = root.command("dmesg.txt")
    assert out.source == "sos_commands/kernel/dmesg"
    assert out.stdout == (TREE / "sos_commands/kernel/dmesg").read_text()
    gpu = facts_from_sysroot(str(TREE), ["gpu"])["gpu"]
    assert gpu["errors"] == []
    assert gpu["xids"] == []  # no NVRM line at all in this VM's log
    assert gpu["xid_log"]["boots"] == 1  # one "Linux version" line


def test_lspci_nnvv_is_read_as_the_lspci_report():
    """sos runs ``lspci -nnvv``: ``-vv`` already prints the ACS and ATS control lines
    (pciutils), ``-nn`` adds the ids the reader takes beside the names."""
    functions = lspci.parse_lspci(Sysroot(str(TREE)).command("lspci-vvv.txt").stdout)
    assert len(functions) == 10  # the report's ten stanza headers, 00:00.0 to 00:06.0
    assert [(f["bdf"], f["class"], f["class_id"]) for f in functions][5:7] == [
        ("0000:00:02.0", "VGA compatible controller", "0300"),  # QXL, not an NVIDIA GPU
        ("0000:00:03.0", "Ethernet controller", "0200")]  # virtio-net, not a ConnectX
    fabric = facts_from_sysroot(str(TREE), ["fabric"])["fabric"]
    assert fabric["pcie_paths_missing"] is None
    assert fabric["pcie_paths"] == {"devices": [], "bridges": {}}


def test_no_gpu_facts_and_the_reason_names_the_missing_nvidia_plugin():
    gpu = facts_from_sysroot(str(TREE), ["gpu"])["gpu"]
    assert gpu["present"] is False
    assert gpu["reason"] == ("nvidia-smi -q -x: not in this sos archive (sos runs nvidia-smi -q, "
                             "never -q -x; sos_commands/nvidia/nvidia-smi_-q absent too: the "
                             "nvidia plugin did not run)")


def test_nvidia_smi_q_of_sos_4_3_and_later_gives_the_gpu_facts(tmp_path):
    """sos keeps ``nvidia-smi -q`` (never ``-q -x``): the gpu layer reads the text instead."""
    copy = tree_copy(tmp_path)
    # variant: a real H100 ``nvidia-smi -q`` (tests/fixtures/realworld/nvidia-smi-text) laid
    # where sos 4.3 and later keep it, in a report marked as written by sos 4.3
    (copy / "version.txt").write_text("sosreport: 4.3")
    (copy / "sos_commands/nvidia").mkdir()
    shutil.copyfile(H100_Q, copy / "sos_commands/nvidia/nvidia-smi_-q")
    gpu = facts_from_sysroot(str(copy), ["gpu"])["gpu"]
    assert (gpu["present"], gpu["sources"]["gpus"], gpu["count"]) == (True, "nvidia-smi -q", 1)
    assert (gpu["driver_version"], gpu["gpus"][0]["product_name"]) == (
        "590.48.01", "NVIDIA H100 80GB HBM3")
    assert gpu["nvlink_missing"] == ("nvidia-smi nvlink -s: not in this sos archive "
                                     "(sos_commands/nvidia/nvidia-smi_nvlink_-s absent: the "
                                     "nvidia plugin ran without collecting it)")


@pytest.mark.parametrize("name, line", [
    ("nvidia-smi-q.txt", "nvidia-smi -q: not in this sos archive (sos_commands/nvidia/"
                         "nvidia-smi_-q absent: the nvidia plugin did not run)"),
    ("nvidia-smi-nvlink-e.txt", "nvidia-smi nvlink -e: not in this sos archive (sos_commands/"
                                "nvidia/nvidia-smi_nvlink_-e absent: the nvidia plugin did not "
                                "run)"),
    ("nvidia-smi-topo-m.txt", "nvidia-smi topo -m: not in this sos archive (sos never runs "
                              "nvidia-smi topo -m)"),
    ("nvidia-imex-ctl-N.txt", "nvidia-imex-ctl -N: not in this sos archive (sos never runs "
                              "nvidia-imex-ctl)"),
    ("systemctl-show-slices.txt", "systemctl show --property=Id,AllowedCPUs,EffectiveCPUs "
                                  "system.slice user.slice init.scope: not in this sos archive "
                                  "(sos shows the systemd manager and its services, no slice: "
                                  "systemctl show --all, systemctl show *service --all)"),
    ("systemctl-show-fabricmanager.txt",
     f"{FM_SHOW}: not in this sos archive (sos_commands/systemd/systemctl_show_service_--all "
     "has no nvidia-fabricmanager.service block: the unit was not loaded when sos ran)"),
])
def test_a_missing_command_names_what_the_archive_lacks(name, line):
    assert missing(TREE, name) == line


def test_the_archive_form_is_read_like_its_directory(tmp_path):
    archive = sos_archive(tmp_path)
    with open_sysroot(str(archive)) as root:
        assert Path(root).name == TOP
        assert Sysroot(root).command("dmesg.txt").stdout == \
            (TREE / "sos_commands/kernel/dmesg").read_text()
        unpacked = root
    assert not os.path.exists(unpacked)
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "facts", "--sysroot",
                          str(archive), "--layer", "gpu", "--layer", "cpu", "--format", "json"],
                         capture_output=True, text=True, env=cli_env(), check=False, timeout=300)
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    assert facts["cpu"]["processor"]["cpus_online"] == 2
    assert facts["gpu"]["xid_log"]["boots"] == 1
    assert facts["gpu"]["present"] is False


def test_a_directory_holding_only_the_unpacked_report_is_read_as_the_report(tmp_path):
    holder = tmp_path / "ticket-1234"
    holder.mkdir()
    shutil.copytree(TREE, holder / TOP, symlinks=True)
    with open_sysroot(str(holder)) as root:
        assert root == str(holder / TOP)
    with open_sysroot(str(TREE)) as root:
        assert root == str(TREE)


def test_device_nodes_and_read_only_directories_of_a_report_archive(tmp_path):
    """sos copies device nodes (``/dev/null``) and keeps directories ``r-x``: the archive is
    read all the same, the nodes left out, and the unpacked tree removed afterwards."""
    archive = tmp_path / "r.tar.xz"

    def read_only(info: tarfile.TarInfo) -> tarfile.TarInfo:
        if info.isdir():
            info.mode = 0o555
        return info

    with tarfile.open(archive, "w:xz") as tar:
        tar.add(TREE, arcname=TOP, filter=read_only)
        null = tarfile.TarInfo(f"{TOP}/dev/null")
        null.type, null.devmajor, null.devminor = tarfile.CHRTYPE, 1, 3
        tar.addfile(null)
    with open_sysroot(str(archive)) as root:
        assert Sysroot(root).kind("dev/null") is None
        assert stat.S_IMODE(os.stat(Path(root) / "proc").st_mode) & 0o700 == 0o700
        assert Sysroot(root).read_text("proc/cmdline").endswith("console=ttyS0")
        unpacked = Path(root).parent
    assert not unpacked.exists()


# -- where an output comes from, and why one is absent ------------------------------------------

def test_a_capture_in_the_tree_wins_over_the_reports_output(tmp_path):
    copy = tree_copy(tmp_path)
    (copy / ".exemplar/commands").mkdir(parents=True)
    (copy / ".exemplar/commands/dmesg.txt").write_text("[    0.000000] Linux version 6.8\n")
    out = Sysroot(str(copy)).command("dmesg.txt")
    assert (out.source, out.stdout) == ("/.exemplar/commands/dmesg.txt",
                                        "[    0.000000] Linux version 6.8\n")


def test_the_fabric_manager_unit_is_its_own_block_of_systemctl_show_service(tmp_path):
    text = (TREE / "sos_commands/systemd/systemctl_show_service_--all").read_text()
    containerd = unit_block(text, "containerd.service")
    assert containerd is not None
    assert {"LoadState=loaded", "ActiveState=active", "SubState=running"} <= \
        set(containerd.splitlines())
    # variant: the first block (pollinate.service, inactive) named nvidia-fabricmanager.service
    copy = tree_copy(tmp_path)
    shown = copy / "sos_commands/systemd/systemctl_show_service_--all"
    shown.write_text(text.replace("Id=pollinate.service\n", "Id=nvidia-fabricmanager.service\n"))
    state = fabric_manager.read_fabric_manager(Sysroot(str(copy)))
    assert state == {"load": "loaded", "active": "inactive", "sub": "dead", "result": "success"}
    assert Sysroot(str(copy)).command("systemctl-show-fabricmanager.txt").source == \
        "sos_commands/systemd/systemctl_show_service_--all (nvidia-fabricmanager.service)"


def test_a_plugin_timeout_in_sos_logs_is_named(tmp_path):
    copy = tree_copy(tmp_path)
    (copy / "sos_logs").mkdir()
    # canonical/hotsos#95 quotes this ui.log of a run whose networking plugin timed out; the
    # nvidia line is written the way sos/report/__init__.py writes it (ui_log.error)
    (copy / "sos_logs/ui.log").write_text("2021-05-17 08:20:48,602 ERROR:\n"
                                          " Plugin networking timed out\n")
    assert missing(copy, "nvidia-smi-q.txt").endswith("absent: the nvidia plugin did not run)")
    with (copy / "sos_logs/ui.log").open("a") as log:
        log.write("2021-05-17 08:25:48,602 ERROR: \n Plugin nvidia timed out\n\n")
    assert missing(copy, "nvidia-smi-q.txt") == (
        "nvidia-smi -q: not in this sos archive (sos_commands/nvidia/nvidia-smi_-q absent: the "
        "nvidia plugin timed out (sos_logs/ui.log))")


def test_a_command_sos_skipped_is_named_with_sos_reason(tmp_path):
    copy = tree_copy(tmp_path)
    (copy / "sos_logs").mkdir()
    # line 420 of the sos.log of the same hotsos report (commit 7d6f1612), as sos wrote it
    (copy / "sos_logs/sos.log").write_text(
        "2022-02-11 19:23:35,853 WARNING: [plugin:networking] skipped command 'ip -s macsec "
        "show': required kmods missing: macsec.   Use '--allow-system-changes' to enable "
        "collection.\n")
    report = Sysroot(str(copy)).sos_report()
    assert report is not None
    assert report.missing_reason(SosOutput("networking", "ip -s macsec show")) == (
        "sos_commands/networking/ip_-s_macsec_show absent: sos skipped it: required kmods "
        "missing: macsec. Use '--allow-system-changes' to enable collection. (sos_logs/sos.log)")


def test_an_older_sos_that_ran_the_plugin_is_named_as_predating_the_command(tmp_path):
    copy = tree_copy(tmp_path)
    (copy / "sos_commands/nvidia").mkdir()  # variant: the nvidia plugin ran (sos 4.2 has one)
    assert missing(copy, "nvidia-smi-nvlink-s.txt") == (
        "nvidia-smi nvlink -s: not in this sos archive (sos_commands/nvidia/nvidia-smi_nvlink_-s "
        "absent: sos 4.2 predates it (collected since sos 4.3))")


def test_lspci_nvv_of_sos_before_3_3_is_named_not_read(tmp_path):
    copy = tree_copy(tmp_path)
    # variant: the file name sos 3.2 gave its numeric lspci (this report's file, renamed)
    (copy / "sos_commands/pci/lspci_-nnvv").rename(copy / "sos_commands/pci/lspci_-nvv")
    assert missing(copy, "lspci-vvv.txt") == (
        "lspci -vvv: not in this sos archive in a form read here (sos_commands/pci/lspci_-nvv: "
        "collected as lspci -nvv, not read: numeric ids without class names (sos before 3.3))")
    assert not Sysroot(str(copy)).exists(".exemplar/commands/lspci-vvv.txt")


def test_an_output_sos_cut_to_its_tail_says_so(tmp_path):
    copy = tree_copy(tmp_path)
    # variant: the kernel log laid out as sos lays out an output over its size limit
    (copy / "sos_strings/kernel").mkdir(parents=True)
    (copy / "sos_commands/kernel/dmesg").rename(copy / "sos_strings/kernel/dmesg.tailed")
    (copy / "sos_commands/kernel/dmesg").symlink_to("../../sos_strings/kernel/dmesg.tailed")
    out = Sysroot(str(copy)).command("dmesg.txt")
    assert out.source == "sos_commands/kernel/dmesg (its tail: sos cut it at its size limit)"
    assert "Linux version 5.4.0-99-generic" in out.stdout


def test_the_manifest_exit_status_of_a_command_is_kept(tmp_path):
    copy = tree_copy(tmp_path)
    # variant: a sos 4 manifest (the layout of the hotsos report's own) saying dmesg failed
    (copy / "sos_reports").mkdir()
    manifest = {"components": {"report": {"plugins": {"kernel": {"commands": [
        {"command": "dmesg", "parameters": [], "exec": "dmesg",
         "filepath": "sos_commands/kernel/dmesg", "return_code": 1}]}}}}}
    (copy / "sos_reports/manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CommandFailed, match=r"^sos_commands/kernel/dmesg: exit status 1: "):
        Sysroot(str(copy)).command("dmesg.txt").checked()
    manifest["components"]["report"]["plugins"]["kernel"]["commands"][0].update(
        filepath=None, return_code=127)
    (copy / "sos_reports/manifest.json").write_text(json.dumps(manifest))
    (copy / "sos_commands/kernel/dmesg").unlink()
    assert missing(copy, "dmesg.txt") == ("dmesg: not in this sos archive (sos_commands/kernel/"
                                          "dmesg absent: dmesg was not found when sos ran)")


# -- the mapping ----------------------------------------------------------------------------------

def test_every_command_file_is_mapped_or_named_as_never_collected():
    assert set(MAPPED) | set(NEVER) == set(COMMANDS)
    assert not set(MAPPED) & set(NEVER)
    assert set(UNREAD) <= set(MAPPED)


def test_file_names_are_made_as_sos_makes_them():
    """sos's own names, as they lie in the report (and in its manifest)."""
    assert mangle("lspci -nnvv") == "lspci_-nnvv"
    assert mangle("systemctl show *service --all") == "systemctl_show_service_--all"
    assert mangle("uname -a") == "uname_-a"
    assert mangle("/usr/sbin/ip -s macsec show") == "ip_-s_macsec_show"
    for out in (SosOutput("kernel", "dmesg"), SosOutput("pci", "lspci -nnvv"),
                SosOutput("pci", "lspci -tv"), SosOutput("kernel", "uname -a")):
        assert (TREE / out.path).is_file()


def test_a_tree_that_is_no_sos_report_is_not_read_as_one(tmp_path):
    (tmp_path / "sos_commands").mkdir()  # no version.txt, no manifest: not a report's top
    assert Sysroot(str(tmp_path)).sos_report() is None
    assert missing(tmp_path, "dmesg.txt") == "/.exemplar/commands/dmesg.txt: not captured"


def test_the_sos_release_is_read_from_version_txt():
    assert SosReport(Sysroot(str(TREE))).version() == (4, 2)  # "sosreport: 4.2"
    assert parse_version("sos report: 4.8.1\n") == (4, 8, 1)  # the spelling of later releases
    assert parse_version("sosreport: 3.2\nkernel: unversioned") == (3, 2)  # 3.x: and plugins


IBSTAT = (FIXTURES / "realworld" / "ib-tools" /
          "leptonai-gpud-testdata-ibstat-h100-8ib-400-ethernet-down.txt")
PEERMEM_LSMOD = (FIXTURES / "realworld" / "gpudirect" /
                 "nvidia-nccl-issue1737-lsmod-grep-nvidia-peermem-loaded-gdrdrv.txt")


def test_rdma_devices_of_a_report_without_its_ibstat_are_unknown_not_absent():
    """sos copies no /sys/class/infiniband: without its ibstat the devices are unknown."""
    fabric = facts_from_sysroot(str(TREE), ["fabric"])["fabric"]
    assert (fabric["ib_devices"], fabric["present"]) == (None, False)
    (error,) = [e for e in fabric["errors"] if e["fact"] == "ib_devices"]
    assert error["error"] == ("not in a sos report; ibstat: not in this sos archive "
                              "(sos_commands/infiniband/ibstat absent: the infiniband plugin "
                              "did not run)")


def test_rdma_devices_are_read_from_the_reports_ibstat(tmp_path):
    """A real H100 ibstat (8 IB ports at 400, one Ethernet port down) where sos keeps it:
    the same devices and port states the sysfs reader gives, and the rails judged."""
    copy = tree_copy(tmp_path)
    (copy / "sos_commands/infiniband").mkdir()
    shutil.copyfile(IBSTAT, copy / "sos_commands/infiniband/ibstat")
    fabric = facts_from_sysroot(str(copy), ["fabric"])["fabric"]
    assert fabric["sources"]["ib_devices"] == "sos_commands/infiniband/ibstat"
    ports = [(d["name"], p["state"]["name"], p["phys_state"]["name"], p["rate_gbps"],
              p["link_layer"]) for d in fabric["ib_devices"] for p in d["ports"]]
    ib = [p for p in ports if p[4] == "InfiniBand"]
    assert len(ib) == 8 and {p[1:4] for p in ib} == {("ACTIVE", "LinkUp", 400.0)}
    assert [p for p in ports if p[4] == "Ethernet" and p[1] != "ACTIVE"]  # the front-end port


def test_a_sysroot_capture_of_ibstat_stands_for_the_class_directory(tmp_path):
    """Outside a sos report too: a snapshot's ``ibstat.txt`` is read when the tree has no
    /sys/class/infiniband; a tree with neither has no RDMA device."""
    (tmp_path / ".exemplar/commands").mkdir(parents=True)
    assert facts_from_sysroot(str(tmp_path), ["fabric"])["fabric"]["ib_devices"] == []
    shutil.copyfile(IBSTAT, tmp_path / ".exemplar/commands/ibstat.txt")
    fabric = facts_from_sysroot(str(tmp_path), ["fabric"])["fabric"]
    assert len(fabric["ib_devices"]) == len(
        {line for line in IBSTAT.read_text().splitlines() if line.startswith("CA '")})


def test_a_peer_memory_module_is_read_from_lsmod_without_sys_module(tmp_path):
    """The report's own lsmod (a Kubernetes VM: no peer-memory module), then a real lsmod
    line showing nvidia_peermem loaded laid where sos keeps it."""
    fabric = facts_from_sysroot(str(TREE), ["fabric"])["fabric"]
    assert fabric["gpudirect"]["peermem"] is False
    assert fabric["sources"]["gpudirect"] == "sos_commands/kernel/lsmod"
    copy = tree_copy(tmp_path)
    (copy / "sos_commands/kernel/lsmod").unlink()
    shutil.copyfile(PEERMEM_LSMOD, copy / "sos_commands/kernel/lsmod")
    assert facts_from_sysroot(str(copy), ["fabric"])["fabric"]["gpudirect"]["peermem"] is True
    (copy / "sos_commands/kernel/lsmod").unlink()
    assert facts_from_sysroot(str(copy), ["fabric"])["fabric"]["gpudirect"]["peermem"] is None
