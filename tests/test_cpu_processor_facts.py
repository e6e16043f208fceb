"""cpu layer, ``processor`` fact: CPU identity (/proc/cpuinfo), sockets/cores/threads (sysfs
topology, else the x86 package lines), online CPUs and the arm64 SoC."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import (
    cpu as layer_cpu,
    cpu_processor as layer_cpu_processor,
)
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers import (
    cpu_ids,
    cpu_topology,
    cpuinfo,
    soc,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpulist import parse_cpulist
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.conftest import SYSROOTS
from tests.helpers import cli_env

REALWORLD = Path(__file__).parent / "fixtures" / "realworld" / "cpuinfo"
I7_8650U = REALWORLD / "prometheus-procfs-fixtures-i7-8650u-cpuinfo.txt"
GRACE = REALWORLD / "eessi-software-layer-archdetect-grace-jureca-rocky95-cpu0.txt"
TOPOLOGY = "sys/devices/system/cpu/cpu{}/topology"


def gather(root: Path | str) -> dict:
    sheet = FactSheet()
    layer_cpu_processor.gather_into(sheet, Sysroot(str(root)))
    return sheet.result()


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def smt_host(root: Path, capture: Path = I7_8650U) -> Path:
    """A sysroot with a real /proc/cpuinfo and the i7-8650U's sysfs topology: 4 cores, CPU n
    and n+4 on core n; only ``thread_siblings_list`` (its cpu0 file reads ``0,4`` in
    prometheus/procfs's fixtures), as kernels before ``core_cpus_list`` wrote it."""
    write(root, "proc/cpuinfo", capture.read_text())
    write(root, "sys/devices/system/cpu/online", "0-7\n")
    for cpu in range(8):
        base = TOPOLOGY.format(cpu)
        write(root, f"{base}/physical_package_id", "0\n")
        write(root, f"{base}/core_id", f"{cpu % 4}\n")
        write(root, f"{base}/thread_siblings_list", f"{cpu % 4},{cpu % 4 + 4}\n")
    return root


# -- (a) parsers and tables -----------------------------------------------------------------

def test_parse_cpuinfo_keeps_cpu_blocks_only():
    text = ("processor\t: 0\nmodel name\t: A\n\nprocessor : 1\nmodel name : A\n\n"
            "Hardware\t: BCM2835\n")
    assert [block["processor"] for block in cpuinfo.parse_cpuinfo(text)] == ["0", "1"]


@pytest.mark.parametrize(("text", "reason"), [
    ("", "no 'processor' entry"),
    ("Architecture:  aarch64\nCPU(s):  64\n", "no 'processor' entry"),
    ("processor\t: 0\ngarbage line\n", "not a 'key : value' line"),
])
def test_parse_cpuinfo_refuses(text, reason):
    with pytest.raises(ParseError, match=reason):
        cpuinfo.parse_cpuinfo(text)


def test_identity_garbled_number_is_a_parse_error():
    cpus = cpuinfo.parse_cpuinfo("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: six\n")
    with pytest.raises(ParseError, match="cpu family: six"):
        cpuinfo.identity(cpus)


def test_identity_unknown_stepping_is_none():
    cpus = cpuinfo.parse_cpuinfo("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
                                 "model\t\t: 143\nstepping\t: unknown\n")
    assert cpuinfo.identity(cpus)["stepping"] is None


def test_x86_topology_rounds_threads_up_when_a_thread_is_offline():
    """siblings 191 / cpu cores 96 (one SMT thread offline) is still 2 threads per core."""
    cpus = [{"processor": "0", "physical id": "0", "siblings": "191", "cpu cores": "96"}]
    assert cpuinfo.topology(cpus) == {"sockets": 1, "cores_per_socket": 96, "threads_per_core": 2}


def test_x86_topology_counts_core_ids_without_package_lines():
    cpus = [{"processor": str(n), "physical id": "0", "core id": str(n % 2)} for n in range(4)]
    assert cpuinfo.topology(cpus) == {"sockets": 1, "cores_per_socket": 2, "threads_per_core": 2}


@pytest.mark.parametrize(("implementer", "part", "vendor", "name"), [
    (0x41, 0xD4F, "Arm", "Neoverse-V2"),
    (0x41, 0xD0C, "Arm", "Neoverse-N1"),
    (0x4E, 0x004, "NVIDIA", "Carmel"),
    (0xC0, 0xAC3, "Ampere", "Ampere-1"),
    (0x46, 0x001, "Fujitsu", "A64FX"),
    (0x41, 0x001, "Arm", None),
    (0x99, 0xD4F, None, None),
])
def test_arm_ids(implementer, part, vendor, name):
    assert cpu_ids.arm_vendor(implementer) == vendor
    assert cpu_ids.arm_part(implementer, part) == name


def test_x86_vendor_strings():
    assert cpu_ids.x86_vendor("GenuineIntel") == "Intel"
    assert cpu_ids.x86_vendor("  Shanghai  ") == "Zhaoxin"
    assert cpu_ids.x86_vendor("VIA VIA VIA ") == "VIA VIA VIA"


def test_summarize_hybrid_and_offline():
    """Package 0: core 0 with CPUs 0+1, core 1 with CPU 2; CPU 3 (core 1's sibling) offline."""
    places = [cpu_topology.CpuPlace(0, 0, 0, (0, 1)), cpu_topology.CpuPlace(1, 0, 0, (0, 1)),
              cpu_topology.CpuPlace(2, 0, 1, (2, 3))]
    assert cpu_topology.summarize(places) == {
        "sockets": 1, "cores_per_socket": 2, "threads_per_core": 2}


# -- (b) the fact on fixture hosts and composed trees -----------------------------------------

@pytest.mark.parametrize(("host", "want"), [
    ("h100-x86", {"vendor": "Intel", "model_name": "Intel(R) Xeon(R) Platinum 8460H",
                  "family": 6, "model": 143, "stepping": 8, "implementer": None}),
    ("healthy-h100", {"vendor": "Intel", "model": 143}),
    ("gb200-grace-vm", {"vendor": "Arm", "model_name": "Neoverse-V2", "implementer": "0x41",
                        "part": "0xd4f", "variant": 0, "revision": 0, "family": None}),
])
def test_fixture_hosts(host, want):
    facts = gather(SYSROOTS / host)
    proc = facts["processor"]
    assert {key: proc[key] for key in want} == want
    assert (proc["sockets"], proc["cores_per_socket"], proc["threads_per_core"]) == (2, 4, 1)
    assert proc["cpus_online"] == 8 and proc["topology_source"] == "sysfs"
    assert proc["soc"] is None and facts["errors"] == []
    assert "/proc/cpuinfo" in facts["sources"]["processor"]


def test_processor_is_part_of_the_cpu_layer():
    facts = layer_cpu.gather(Sysroot(str(SYSROOTS / "h100-x86")))
    assert facts["processor"]["model_name"] == "Intel(R) Xeon(R) Platinum 8460H"
    assert facts["cpuidle"] is not None


def test_smt_from_thread_siblings_list(tmp_path):
    proc = gather(smt_host(tmp_path))["processor"]
    assert (proc["sockets"], proc["cores_per_socket"], proc["threads_per_core"]) == (1, 4, 2)
    assert proc["topology_source"] == "sysfs"


def test_offline_cpu_is_not_counted(tmp_path):
    """CPU 7 offline: no topology directory, its sibling's list no longer names it."""
    root = smt_host(tmp_path)
    write(root, "sys/devices/system/cpu/online", "0-6\n")
    shutil.rmtree(root / TOPOLOGY.format(7))
    write(root, f"{TOPOLOGY.format(3)}/thread_siblings_list", "3\n")
    facts = gather(root)
    proc = facts["processor"]
    assert proc["cpus_online"] == 7 and proc["threads_per_core"] == 2
    assert proc["cores_per_socket"] == 4 and facts["errors"] == []


def test_garbled_topology_is_one_error_and_cpuinfo_counts(tmp_path):
    root = smt_host(tmp_path)
    write(root, f"{TOPOLOGY.format(5)}/core_id", "five\n")
    facts = gather(root)
    assert facts["errors"] == [{"fact": "processor",
                                "path": f"/{TOPOLOGY.format(5)}/core_id",
                                "error": "not an integer: 'five'"}]
    proc = facts["processor"]
    assert proc["topology_source"] == "cpuinfo"
    assert (proc["sockets"], proc["cores_per_socket"], proc["threads_per_core"]) == (1, 4, 2)


def test_online_cpu_without_topology_is_an_error(tmp_path):
    root = smt_host(tmp_path)
    shutil.rmtree(root / TOPOLOGY.format(2))
    facts = gather(root)
    assert [e["path"] for e in facts["errors"]] == [f"/{TOPOLOGY.format(2)}"]
    assert facts["processor"]["topology_source"] == "cpuinfo"


def test_absent_files_are_null_without_errors(tmp_path):
    facts = gather(tmp_path)
    assert facts["errors"] == []
    assert set(facts["processor"].values()) == {None}


def test_unreadable_cpuinfo_is_one_error(tmp_path):
    (tmp_path / "proc" / "cpuinfo").mkdir(parents=True)
    write(tmp_path, "sys/devices/system/cpu/online", "0-3\n")
    facts = gather(tmp_path)
    assert [(e["path"], e["error"]) for e in facts["errors"]] == [
        ("/proc/cpuinfo", "is a directory")]
    assert facts["processor"]["cpus_online"] == 4 and facts["processor"]["vendor"] is None


def test_garbled_online_is_one_error(tmp_path):
    write(tmp_path, "proc/cpuinfo", I7_8650U.read_text())
    write(tmp_path, "sys/devices/system/cpu/online", "0-x\n")
    facts = gather(tmp_path)
    assert [e["path"] for e in facts["errors"]] == ["/sys/devices/system/cpu/online"]
    assert facts["processor"]["cpus_online"] == 8      # /proc/cpuinfo lists the online CPUs


def test_grace_soc(tmp_path):
    """The SMCCC SOC_ID files of an ACPI Grace host (no ``machine`` on ACPI)."""
    write(tmp_path, "proc/cpuinfo", GRACE.read_text())
    write(tmp_path, "sys/devices/soc0/family", "jep106:036b\n")
    write(tmp_path, "sys/devices/soc0/soc_id", "jep106:036b:0241\n")
    proc = gather(tmp_path)["processor"]
    assert proc["soc"] == {"family": "jep106:036b", "machine": None,
                           "soc_id": "jep106:036b:0241", "name": "NVIDIA Grace"}
    assert soc.soc_name("jep106:0a16:0001") is None


def test_facts_table_shows_the_cpu():
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "facts", "--layer", "cpu",
                          "--sysroot", str(SYSROOTS / "gb200-grace-vm")],
                         capture_output=True, text=True, check=True, env=cli_env(), timeout=300)
    lines = out.stdout.splitlines()
    assert lines[1] == "== cpu"
    assert lines[2] == ("  CPU: Neoverse-V2 (Arm implementer 0x41 part 0xd4f), "
                        "2 sockets x 4 cores x 1 thread, 8 CPUs online")


# -- (c) this machine --------------------------------------------------------------------------

def test_live_matches_lscpu():
    """This host's fact against util-linux ``lscpu``, a separate reader of the same files."""
    lscpu = {f["field"].rstrip(":"): f["data"] for f in json.loads(subprocess.run(
        ["lscpu", "-J"], capture_output=True, text=True, check=True,
        env={"LANG": "C", "LC_ALL": "C", "PATH": "/usr/bin:/bin"}).stdout)["lscpu"]}
    facts = gather("/")
    proc = facts["processor"]
    assert facts["errors"] == []
    assert proc["model_name"] == lscpu["Model name"]
    assert proc["cpus_online"] == len(parse_cpulist(lscpu["On-line CPU(s) list"]))
    assert proc["threads_per_core"] == int(lscpu["Thread(s) per core"])
    assert proc["cores_per_socket"] == int(lscpu["Core(s) per socket"])
    assert proc["sockets"] == int(lscpu["Socket(s)"])
    if "CPU family" in lscpu:
        assert (proc["family"], proc["model"]) == (int(lscpu["CPU family"]), int(lscpu["Model"]))

