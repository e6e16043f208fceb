"""Runtime layer (NCCL topology file, enroot, pyxis) and fabric layer (IB ports, NCCL settings).

Parser tests are table-driven; reader tests run on the fixture sysroots (values from
tests/fixtures/sysroots/HOSTS.md), on small trees in tmp_path, and on this machine (Sysroot("/")).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import (
    fabric as layer_fabric,
    runtime as layer_runtime,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.enroot import (
    covers,
    parse_environ,
    parse_fstab,
    parse_plugstack,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.infiniband import (
    parse_numa_node,
    parse_rate,
    parse_state,
    read_ib_devices,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.nccl_conf import (
    conf_paths,
    effective_settings,
    parse_nccl_conf,
    read_nccl_config,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.topo_xml import (
    normalize_bdf,
    parse_topo_xml,
    read_topo_file,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.conftest import SAMPLES, SYSROOTS

H100_GPUS = ["0000:a4:00.0", "0000:ae:00.0", "0000:b8:00.0", "0000:c2:00.0",
             "0000:cc:00.0", "0000:d6:00.0", "0000:e0:00.0", "0000:ea:00.0"]
H100_NICS = {"mlx5_7": "0000:a3:00.0", "mlx5_6": "0000:ad:00.0", "mlx5_5": "0000:b7:00.0",
             "mlx5_4": "0000:c1:00.0", "mlx5_3": "0000:cb:00.0", "mlx5_2": "0000:d5:00.0",
             "mlx5_1": "0000:df:00.0", "mlx5_0": "0000:e9:00.0"}
H100_NIC_NODE = {"mlx5_7": 0, "mlx5_6": 0, "mlx5_5": 0, "mlx5_4": 0,
                 "mlx5_3": 1, "mlx5_2": 1, "mlx5_1": 1, "mlx5_0": 1}
GB200_NICS = {"mlx5_0": ("0000:03:00.0", 0), "mlx5_1": ("0002:03:00.0", 0),
              "mlx5_2": ("0010:03:00.0", 1), "mlx5_3": ("0012:03:00.0", 1)}
SHIPPED_MOUNTS = ["/proc", "/sys", "/dev", "tmpfs", "tmpfs", "tmpfs", "/dev/shm",
                  "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/etc/localtime",
                  "/etc/machine-id"]


def tree(root: Path, files: dict[str, str]) -> Sysroot:
    """A sysroot at ``root`` holding ``files`` (host path -> text)."""
    for rel, text in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, newline="")
    return Sysroot(str(root))


def fixture(host: str) -> Sysroot:
    return Sysroot(str(SYSROOTS / host))


# -- nccl.conf ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text", "want"), [
    ("empty", "", []),
    ("valid", "NCCL_DEBUG=INFO\n", [(1, "NCCL_DEBUG", "INFO")]),
    ("comment at column 0", "#NCCL_DEBUG=INFO\nNCCL_A=1\n", [(2, "NCCL_A", "1")]),
    ("comment not at column 0", " #NCCL_DEBUG=INFO\n", [(1, " #NCCL_DEBUG", "INFO")]),
    ("no trimming", "NCCL_DEBUG = INFO \n", [(1, "NCCL_DEBUG ", " INFO ")]),
    ("crlf", "NCCL_A=1\r\nNCCL_B=2\r\n", [(1, "NCCL_A", "1"), (2, "NCCL_B", "2")]),
    ("no equals ignored", "NCCL_A\nexport\n\n", []),
    ("empty key ignored", "=1\n", []),
    ("value keeps later equals", "NCCL_X=a=b\n", [(1, "NCCL_X", "a=b")]),
    ("empty value", "NCCL_X=\n", [(1, "NCCL_X", "")]),
    ("truncated last line", "NCCL_A=1\nNCCL_B", [(1, "NCCL_A", "1")]),
    ("truncated without newline", "NCCL_A=1", [(1, "NCCL_A", "1")]),
    ("garbage", "\x00\ufffd\ufffd binary \x07\n", []),
])
def test_parse_nccl_conf(name, text, want):
    have = [(e["line"], e["key"], e["value"]) for e in parse_nccl_conf(text)]
    assert have == want, name


def test_parse_nccl_conf_truncates_key_and_value_at_1023():
    entry = parse_nccl_conf("K" * 2000 + "=" + "v" * 2000)[0]
    assert (len(entry["key"]), len(entry["value"])) == (1023, 1023)


@pytest.mark.parametrize(("env", "want"), [
    ({}, ["/root/.nccl.conf", "/etc/nccl.conf"]),
    ({"HOME": "/home/alice/"}, ["/home/alice/.nccl.conf", "/etc/nccl.conf"]),
    ({"HOME": "/home/alice", "NCCL_CONF_FILE": "/opt/nccl.conf"},
     ["/opt/nccl.conf", "/etc/nccl.conf"]),
    ({"HOME": "/home/alice", "NCCL_CONF_FILE": ""}, ["/home/alice/.nccl.conf", "/etc/nccl.conf"]),
])
def test_conf_paths_follow_nccl_conf_file_then_home(env, want):
    assert conf_paths(env) == want


def test_precedence_environment_then_user_then_system_first_line_wins():
    files = {
        "/root/.nccl.conf": [{"line": 1, "key": "NCCL_A", "value": "user"},
                             {"line": 2, "key": "NCCL_B", "value": "user"},
                             {"line": 3, "key": "NCCL_B", "value": "user-second"}],
        "/etc/nccl.conf": [{"line": 1, "key": "NCCL_A", "value": "sys"},
                           {"line": 2, "key": "NCCL_C", "value": "sys"}],
    }
    have = effective_settings({"NCCL_A": "env", "HOME": "/root"}, files)
    assert have == {
        "NCCL_A": {"value": "env", "source": "environment"},
        "NCCL_B": {"value": "user", "source": "/root/.nccl.conf"},
        "NCCL_C": {"value": "sys", "source": "/etc/nccl.conf"},
    }


def test_read_nccl_config_from_a_tree(tmp_path):
    root = tree(tmp_path, {
        ".exemplar/commands/environment.txt": "HOME=/home/u\nNCCL_IB_HCA=mlx5_0\n",
        "home/u/.nccl.conf": "NCCL_DEBUG = INFO\r\nNCCL_IB_HCA=mlx5_9\r\n",
        "etc/nccl.conf": "# system\nNCCL_DEBUG=WARN\nNCCL_TOPO_FILE=/etc/nccl/topo.xml\n",
    })
    have = read_nccl_config(root)
    assert have["effective"] == {
        "NCCL_IB_HCA": {"value": "mlx5_0", "source": "environment"},
        "NCCL_DEBUG ": {"value": " INFO", "source": "/home/u/.nccl.conf"},
        "NCCL_DEBUG": {"value": "WARN", "source": "/etc/nccl.conf"},
        "NCCL_TOPO_FILE": {"value": "/etc/nccl/topo.xml", "source": "/etc/nccl.conf"},
    }
    assert list(have["files"]) == ["/home/u/.nccl.conf", "/etc/nccl.conf"]
    assert have["suspicious_keys"] == [{"path": "/home/u/.nccl.conf", "line": 1,
                                        "key": "NCCL_DEBUG ", "meant": "NCCL_DEBUG"}]


def test_read_nccl_config_without_files_is_empty_not_an_error(tmp_path):
    have = read_nccl_config(tree(tmp_path, {"etc/hostname": "x\n"}))
    assert have == {"effective": {}, "files": {"/root/.nccl.conf": None, "/etc/nccl.conf": None},
                    "suspicious_keys": []}


def test_unreadable_user_file_is_none_plus_an_error_and_system_file_still_counts(tmp_path):
    root = tree(tmp_path, {"etc/nccl.conf": "NCCL_IB_QPS_PER_CONNECTION=4\n"})
    (tmp_path / "root").mkdir()
    (tmp_path / "root/.nccl.conf").symlink_to(".nccl.conf")  # a loop: cannot be resolved
    facts = layer_fabric.gather(root)
    assert facts["nccl_files"] == {"/root/.nccl.conf": None,
                                   "/etc/nccl.conf": [{"line": 1, "value": "4",
                                                       "key": "NCCL_IB_QPS_PER_CONNECTION"}]}
    assert facts["nccl_settings"] == {
        "NCCL_IB_QPS_PER_CONNECTION": {"value": "4", "source": "/etc/nccl.conf"}}
    assert [(e["fact"], e["path"]) for e in facts["errors"]] == [
        ("nccl_settings", "/root/.nccl.conf")]


# -- topology XML -------------------------------------------------------------------------------

BOMB = ('<?xml version="1.0"?>\n<!DOCTYPE system [<!ENTITY a "aaaaaaaaaa">'
        '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>'
        '<system version="1"><cpu numaid="&c;"/></system>')


def test_topo_ibm_cloud_dump_has_8_gpus_8_nics_8_nets():
    text = (SAMPLES / "nccl_topo_ibmcloud_h100_dumped.xml").read_text()
    have = parse_topo_xml(text, "ibm")
    assert (have["valid"], have["version"], have["error"]) == (True, "1", None)
    assert have["gpus"] == H100_GPUS
    assert have["nics"] == sorted(H100_NICS.values())
    assert have["nets"] == [f"mlx5_{n}" for n in range(7, -1, -1)]


def test_topo_azure_ndv5_gpus_and_nics_by_class_only():
    text = (SAMPLES / "nccl_topo_azure_ndv5_h100.xml").read_text()
    have = parse_topo_xml(text, "azure")
    assert have["valid"] is True
    assert have["gpus"] == ["0001:00:00.0", "0002:00:00.0", "0003:00:00.0", "0008:00:00.0",
                            "0009:00:00.0", "000a:00:00.0", "000b:00:00.0", "000c:00:00.0"]
    assert have["nics"] == [f"01{n:02x}:00:00.0" for n in range(1, 9)]
    assert have["nets"] == []


@pytest.mark.parametrize(("name", "text", "want"), [
    ("wrong version", '<system version="2"><cpu/></system>',
     (False, "2", "XML Topology has wrong version 2, 1 needed")),
    ("no version", "<system/>", (False, None, "<system> has no version attribute")),
    ("wrong root", '<topology version="1"/>',
     (False, "1", "root element is <topology>, NCCL needs <system>")),
    ("minimal valid", '<system version="1"/>', (True, "1", None)),
])
def test_topo_validity(name, text, want):
    have = parse_topo_xml(text, "t")
    assert (have["valid"], have["version"], have["error"]) == want, name


@pytest.mark.parametrize(("name", "text", "reason"), [
    ("empty", "", "malformed XML"),
    ("truncated", '<system version="1"><cpu numaid="0">', "malformed XML"),
    ("garbage", "NCCL_TOPO_FILE=/etc/nccl/topo.xml", "malformed XML"),
    ("entity bomb", BOMB, "unsafe XML refused"),
])
def test_topo_unparsable_raises_parse_error(name, text, reason):
    with pytest.raises(ParseError) as info:
        parse_topo_xml(text, "/etc/nccl/topo.xml")
    assert info.value.path == "/etc/nccl/topo.xml"
    assert info.value.reason.startswith(reason), name


def test_topo_gpu_and_nic_by_child_elements_and_uppercase_busid():
    text = ('<system version="1"><cpu><pci busid="0000:1A:00.0"><gpu dev="0"/></pci>'
            '<pci busid="1b:00.0"><nic><net name="ib0"/></nic></pci>'
            '<pci busid="0000:1c:00.0" class="0x060400"/></cpu></system>')
    have = parse_topo_xml(text, "t")
    assert (have["gpus"], have["nics"], have["nets"]) == (["0000:1a:00.0"], ["0000:1b:00.0"],
                                                          ["ib0"])


@pytest.mark.parametrize(("text", "want"), [
    ("0000:A4:00.0", "0000:a4:00.0"), ("a4:00.0", "0000:a4:00.0"),
    ("0008:01:00.0", "0008:01:00.0"), ("not-a-bdf", "not-a-bdf"),
])
def test_normalize_bdf(text, want):
    assert normalize_bdf(text) == want


@pytest.mark.parametrize("defused", [True, False])
def test_read_topo_file_bomb_is_invalid_not_a_traceback(tmp_path, monkeypatch, defused):
    if not defused:  # a managed host without defusedxml: the guarded fallback must refuse it
        monkeypatch.setitem(sys.modules, "defusedxml", None)  # import defusedxml: ImportError
    root = tree(tmp_path, {"etc/nccl/topo.xml": BOMB})
    have = read_topo_file(root, "/etc/nccl/topo.xml")
    assert (have["valid"], have["gpus"]) == (False, None)
    why = "EntitiesForbidden" if defused else "entity declaration"
    assert have["error"].startswith(f"/etc/nccl/topo.xml: unsafe XML refused ({why})")


def test_topo_file_naming_a_gpu_the_host_lacks(tmp_path):
    topo = ('<system version="1"><cpu numaid="0">'
            '<pci busid="0000:a4:00.0" class="0x030200"/>'
            '<pci busid="0000:AE:00.0" class="0x030200"/>'
            '<pci busid="0000:a3:00.0" class="0x020700"><nic><net name="mlx5_0"/></nic></pci>'
            '</cpu></system>')
    root = tree(tmp_path, {
        ".exemplar/commands/environment.txt": "NCCL_TOPO_FILE=/opt/topo.xml\n",
        "opt/topo.xml": topo,
        "sys/devices/pci0000:00/0000:00:01.0/0000:a4:00.0/class": "0x030200\n",
        "sys/devices/pci0000:00/0000:00:01.0/0000:a3:00.0/class": "0x020700\n",
    })
    devices = tmp_path / "sys/bus/pci/devices"
    devices.mkdir(parents=True)
    for bdf in ("0000:a4:00.0", "0000:a3:00.0"):
        (devices / bdf).symlink_to(f"../../../devices/pci0000:00/0000:00:01.0/{bdf}")
    have = layer_runtime.gather(root)["nccl_topo_file"]
    assert (have["value"], have["source"], have["exists"], have["readable"]) == (
        "/opt/topo.xml", "environment", True, True)
    assert have["gpus_missing_on_host"] == ["0000:ae:00.0"]
    assert have["nics_missing_on_host"] == []


def test_topo_file_set_but_absent(tmp_path):
    root = tree(tmp_path, {"etc/nccl.conf": "NCCL_TOPO_FILE=/etc/nccl/topo.xml \n"})
    facts = layer_runtime.gather(root)
    have = facts["nccl_topo_file"]
    # the trailing space is part of the value, as NCCL keeps it: that file does not exist
    assert (have["value"], have["source"], have["exists"], have["readable"], have["parse"]) == (
        "/etc/nccl/topo.xml ", "/etc/nccl.conf", False, False, None)
    assert facts["nccl_conf_topo_keys"] == [{"key": "NCCL_TOPO_FILE",
                                             "value": "/etc/nccl/topo.xml ",
                                             "file": "/etc/nccl.conf", "line": 1}]
    assert facts["errors"] == []


# -- enroot / pyxis parsers ---------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text", "want"), [
    ("empty", "", []),
    ("shipped terminal", "TERM=${TERM}\n", [(1, "TERM", "${TERM}")]),
    ("comments and blanks", "# c\n\nNCCL_TOPO_FILE=/etc/nccl/topo.xml\n",
     [(3, "NCCL_TOPO_FILE", "/etc/nccl/topo.xml")]),
    ("export prefix", "export A=1\n", [(1, "A", "1")]),
    ("garbage", "just words\n=x\n", []),
])
def test_parse_environ(name, text, want):
    assert [(e["line"], e["key"], e["value"]) for e in parse_environ(text)] == want, name


@pytest.mark.parametrize(("name", "text", "want"), [
    ("empty", "", []),
    ("full", "/etc/nccl/topo.xml /etc/nccl/topo.xml none x-create=file,bind,ro\n",
     [("/etc/nccl/topo.xml", "/etc/nccl/topo.xml", "none", ["x-create=file", "bind", "ro"])]),
    ("omitted fields", "# c\n/data\n", [("/data", None, None, [])]),
    ("tabs", "tmpfs\t/tmp\ttmpfs\trw 0 0\n", [("tmpfs", "/tmp", "tmpfs", ["rw"])]),
])
def test_parse_fstab(name, text, want):
    have = [(e["source"], e["target"], e["fstype"], e["options"]) for e in parse_fstab(text)]
    assert have == want, name


@pytest.mark.parametrize(("name", "text", "want"), [
    ("empty", "", []),
    ("pyxis with options",
     "required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis sbatch_support\n",
     [("required", "/usr/local/lib/slurm/spank_pyxis.so",
       {"runtime_path": "/run/pyxis", "sbatch_support": None})]),
    ("commented out", "#required /usr/local/lib/slurm/spank_pyxis.so\n", []),
    ("other plugin and include", "optional stunnel.so\ninclude /etc/slurm/plugstack.conf.d/*\n",
     []),
    ("trailing comment", "optional spank_pyxis.so # pyxis\n",
     [("optional", "spank_pyxis.so", {})]),
])
def test_parse_plugstack(name, text, want):
    have = [(e["kind"], e["plugin"], e["options"]) for e in parse_plugstack(text)]
    assert have == want, name


@pytest.mark.parametrize(("source", "path", "want"), [
    ("/etc/nccl/topo.xml", "/etc/nccl/topo.xml", True),
    ("/etc/nccl", "/etc/nccl/topo.xml", True),
    ("/etc/nccl/", "/etc/nccl/topo.xml", True),
    ("/etc/ncc", "/etc/nccl/topo.xml", False),
    ("/", "/etc/nccl/topo.xml", False),
    ("tmpfs", "/etc/nccl/topo.xml", False),
    ("${HOME}/topo.xml", "/etc/nccl/topo.xml", False),
    (None, "/etc/nccl/topo.xml", False),
])
def test_covers(source, path, want):
    assert covers(source, path) is want


def test_enroot_sysconf_path_from_environment_and_user_topo_target(tmp_path):
    root = tree(tmp_path, {
        ".exemplar/commands/environment.txt": "ENROOT_SYSCONF_PATH=/opt/enroot/etc\n",
        "opt/enroot/etc/enroot.conf": "",
        "opt/enroot/etc/environ.d/60-topo.env": "NCCL_TOPO_FILE=/opt/topo/h100.xml\n",
        "opt/enroot/etc/mounts.d/60-topo.fstab": "/shared/topo/h100.xml /opt/topo/h100.xml\n",
        "opt/enroot/etc/mounts.d/README": "/etc/nccl /etc/nccl none bind\n",
    })
    have = layer_runtime.gather(root)
    assert have["enroot"]["sysconf_path"] == "/opt/enroot/etc"
    assert (have["enroot"]["carries_topo_env"], have["enroot"]["carries_topo_mount"]) == (
        True, True)
    assert [m["file"] for m in have["enroot"]["mounts_d"]] == [
        "/opt/enroot/etc/mounts.d/60-topo.fstab"]
    assert have["sources"]["enroot"].startswith("/opt/enroot/etc/enroot.conf")
    carried = have["enroot_topo_file"]  # the host file behind the bind, which is not there
    assert (carried["value"], carried["host_path"], carried["exists"], carried["parse"]) == (
        "/opt/topo/h100.xml", "/shared/topo/h100.xml", False, None)


@pytest.mark.parametrize(("mounts", "path", "want"), [
    ([{"source": "/opt/topo/nc.xml", "target": "/etc/nccl/topo.xml"}], "/etc/nccl/topo.xml",
     "/opt/topo/nc.xml"),
    ([{"source": "/shared/nccl", "target": "/etc/nccl"}], "/etc/nccl/topo.xml",
     "/shared/nccl/topo.xml"),
    ([{"source": "/etc/nccl/topo.xml", "target": None}], "/etc/nccl/topo.xml",
     "/etc/nccl/topo.xml"),
    ([{"source": "tmpfs", "target": "/etc/nccl"}], "/etc/nccl/topo.xml", "/etc/nccl/topo.xml"),
    ([], "/etc/nccl/topo.xml", "/etc/nccl/topo.xml"),
])
def test_host_path_behind_a_container_path(mounts, path, want):
    assert layer_runtime.host_path_of(mounts, path) == want


REALWORLD_TOPO = Path(__file__).parent / "fixtures" / "realworld" / "topology"


def test_enroot_only_topo_file_is_parsed_and_a_graph_dump_is_invalid(tmp_path):
    """NCCL_TOPO_FILE only in enroot's environ.d: the file behind its mount is read, and an
    NCCL_GRAPH_DUMP_FILE (<graphs> root, Azure's ncv4-graph.xml) is no topology."""
    graphs = (REALWORLD_TOPO / "azure-azhpc-images-topology-ncv4-graph.xml").read_text()
    root = tree(tmp_path, {
        "etc/enroot/enroot.conf": "",
        "etc/enroot/environ.d/50-nccl.env": "NCCL_TOPO_FILE=/etc/nccl/topo.xml\n",
        "etc/enroot/mounts.d/50-nccl.fstab": "/opt/topo/nc.xml /etc/nccl/topo.xml none bind\n",
        "opt/topo/nc.xml": graphs,
    })
    facts = layer_runtime.gather(root)
    assert facts["nccl_topo_file"]["value"] is None
    carried = facts["enroot_topo_file"]
    assert (carried["value"], carried["source"], carried["host_path"], carried["readable"]) == (
        "/etc/nccl/topo.xml", "/etc/enroot/environ.d/50-nccl.env", "/opt/topo/nc.xml", True)
    assert (carried["parse"]["valid"], carried["parse"]["root"]) == (False, "graphs")
    assert "/opt/topo/nc.xml" in facts["sources"]["enroot_topo_file"]


def test_no_enroot_topo_line_is_no_carried_file(tmp_path):
    root = tree(tmp_path, {"etc/enroot/enroot.conf": "",
                           "etc/enroot/environ.d/10-term.env": "TERM=${TERM}\n"})
    assert layer_runtime.gather(root)["enroot_topo_file"] is None
    root = tree(tmp_path, {"etc/enroot/environ.d/60-topo.env": "NCCL_TOPO_FILE=${TOPO}\n"})
    carried = layer_runtime.gather(root)["enroot_topo_file"]
    assert (carried["value"], carried["host_path"], carried["parse"]) == ("${TOPO}", None, None)


# -- InfiniBand parsers -------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text", "want"), [
    ("active", "4: ACTIVE\n", {"code": 4, "name": "ACTIVE"}),
    ("linkup", "5: LinkUp", {"code": 5, "name": "LinkUp"}),
    ("down", "1: DOWN", {"code": 1, "name": "DOWN"}),
    ("empty", "", ParseError),
    ("truncated", "4:", ParseError),
    ("garbage", "ACTIVE", ParseError),
])
def test_parse_state(name, text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            parse_state(text)
    else:
        assert parse_state(text) == want, name


@pytest.mark.parametrize(("name", "text", "want"), [
    ("hdr", "200 Gb/sec (4X HDR)\n", {"gbps": 200.0, "text": "200 Gb/sec (4X HDR)"}),
    ("ndr", "400 Gb/sec (4X NDR)", {"gbps": 400.0, "text": "400 Gb/sec (4X NDR)"}),
    ("sdr half", "2.5 Gb/sec (1X SDR)", {"gbps": 2.5, "text": "2.5 Gb/sec (1X SDR)"}),
    ("no width", "100 Gb/sec", {"gbps": 100.0, "text": "100 Gb/sec"}),
    ("empty", "", ParseError),
    ("truncated", "200 Gb/", ParseError),
    ("garbage", "fast", ParseError),
])
def test_parse_rate(name, text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            parse_rate(text)
    else:
        assert parse_rate(text) == want, name


def test_no_infiniband_class_is_an_empty_list(tmp_path):
    errors = []
    assert read_ib_devices(tree(tmp_path, {"sys/class/net/lo/ifindex": "1\n"}), errors) == []
    assert errors == []


@pytest.mark.parametrize(("text", "want"), [("0\n", 0), ("1", 1), ("-1", None)])
def test_parse_numa_node(text, want):
    assert parse_numa_node(text) == want


@pytest.mark.parametrize("text", ["", "x", "1.5"])
def test_parse_numa_node_rejects_garbage(text):
    with pytest.raises(ParseError):
        parse_numa_node(text)


def test_malformed_port_file_is_none_plus_an_error(tmp_path):
    dev = "sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0"
    root = tree(tmp_path, {
        f"{dev}/numa_node": "-1\n",
        f"{dev}/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
        f"{dev}/infiniband/mlx5_0/ports/1/rate": "garbage\n",
        f"{dev}/infiniband/mlx5_0/ports/1/link_layer": "InfiniBand\n",
        f"{dev}/infiniband/mlx5_10/ports/1/state": "1: DOWN\n",
    })
    (tmp_path / dev / "infiniband/mlx5_0/device").symlink_to("../../../0000:03:00.0")
    (tmp_path / "sys/class/infiniband").mkdir(parents=True)
    for name in ("mlx5_0", "mlx5_10"):
        (tmp_path / "sys/class/infiniband" / name).symlink_to(
            f"../../devices/pci0000:00/0000:00:01.0/0000:03:00.0/infiniband/{name}")
    facts = layer_fabric.gather(root)
    first, second = facts["ib_devices"]
    assert (first["name"], first["bdf"], first["numa_node"], first["netdevs"]) == (
        "mlx5_0", "0000:03:00.0", None, [])
    assert first["ports"] == [{"port": 1, "state": {"code": 4, "name": "ACTIVE"},
                               "phys_state": None, "rate_gbps": None, "rate": None,
                               "link_layer": "InfiniBand", "counters": {}}]
    assert (second["name"], second["bdf"]) == ("mlx5_10", None)
    assert facts["errors"] == [{"fact": "ib_devices",
                                "path": "/sys/class/infiniband/mlx5_0/ports/1/rate",
                                "error": "expected '<number> Gb/sec (<width><speed>)': "
                                         "'garbage'"}]


# -- fixture hosts ------------------------------------------------------------------------------

def test_h100_x86_runtime_topo_on_host_but_not_in_containers():
    facts = layer_runtime.gather(fixture("h100-x86"))
    topo = facts["nccl_topo_file"]
    assert (topo["value"], topo["source"], topo["exists"], topo["readable"]) == (
        "/etc/nccl/topo.xml", "/etc/nccl.conf", True, True)
    assert (topo["parse"]["valid"], topo["parse"]["gpus"]) == (True, H100_GPUS)
    assert topo["parse"]["nics"] == sorted(H100_NICS.values())
    assert (topo["gpus_missing_on_host"], topo["nics_missing_on_host"]) == ([], [])
    assert facts["default_topo_files"] == {
        "/etc/nccl/topo.xml": True, "/var/run/nvidia-topologyd/virtualTopology.xml": False}
    assert facts["nccl_conf_topo_keys"] == [{"key": "NCCL_TOPO_FILE",
                                             "value": "/etc/nccl/topo.xml",
                                             "file": "/etc/nccl.conf", "line": 2}]
    enroot = facts["enroot"]
    assert (enroot["installed"], enroot["carries_topo_env"], enroot["carries_topo_mount"]) == (
        True, False, False)
    assert [(e["key"], e["value"]) for e in enroot["environ_d"]] == [("TERM", "${TERM}")]
    assert [m["source"] for m in enroot["mounts_d"]] == SHIPPED_MOUNTS
    assert facts["pyxis"]["present"] is True
    assert facts["pyxis"]["plugstack_lines"][0]["file"] == "/etc/slurm/plugstack.conf.d/pyxis.conf"
    assert facts["sources"]["nccl_topo_file"] == (
        "environment, /root/.nccl.conf, /etc/nccl.conf, /etc/nccl/topo.xml, /sys/bus/pci/devices")
    assert facts["errors"] == []
    json.dumps(facts)


def test_healthy_h100_runtime_enroot_carries_env_and_mount():
    facts = layer_runtime.gather(fixture("healthy-h100"))
    topo = facts["nccl_topo_file"]
    assert (topo["value"], topo["source"], topo["parse"]) == (None, None, None)
    assert facts["default_topo_files"]["/etc/nccl/topo.xml"] is True
    assert facts["nccl_conf_topo_keys"] == []
    enroot = facts["enroot"]
    assert (enroot["carries_topo_env"], enroot["carries_topo_mount"]) == (True, True)
    assert ("/etc/enroot/environ.d/50-nccl.env", "NCCL_TOPO_FILE", "/etc/nccl/topo.xml") in [
        (e["file"], e["key"], e["value"]) for e in enroot["environ_d"]]
    topo_mount = [m for m in enroot["mounts_d"] if m["file"].endswith("50-nccl-topo.fstab")]
    assert [(m["source"], m["target"], m["options"][:3]) for m in topo_mount] == [
        ("/etc/nccl/topo.xml", "/etc/nccl/topo.xml", ["x-create=file", "bind", "ro"])]
    assert facts["pyxis"]["present"] is True
    assert facts["errors"] == []


def test_gb200_runtime_has_nothing():
    facts = layer_runtime.gather(fixture("gb200-grace-vm"))
    assert facts["nccl_topo_file"] == {
        "value": None, "source": None, "exists": False, "readable": False, "parse": None,
        "gpus_missing_on_host": None, "nics_missing_on_host": None}
    assert facts["default_topo_files"] == {
        "/etc/nccl/topo.xml": False, "/var/run/nvidia-topologyd/virtualTopology.xml": False}
    assert facts["nccl_conf_topo_keys"] == []
    assert facts["enroot"] == {
        "installed": False, "sysconf_path": "/etc/enroot", "conf_present": False,
        "environ_d": [], "mounts_d": [], "carries_topo_env": False, "carries_topo_mount": False}
    assert facts["pyxis"] == {"present": False, "plugstack_lines": []}
    assert facts["errors"] == []


@pytest.mark.parametrize(("host", "qps"), [("h100-x86", "1"), ("healthy-h100", "4")])
def test_h100_fabric_roce_ports_and_nccl_settings(host, qps):
    facts = layer_fabric.gather(fixture(host))
    assert facts["present"] is True
    devices = facts["ib_devices"]
    assert [d["name"] for d in devices] == [f"mlx5_{n}" for n in range(8)]
    for dev in devices:
        assert (dev["bdf"], dev["numa_node"]) == (H100_NICS[dev["name"]],
                                                  H100_NIC_NODE[dev["name"]])
        assert len(dev["netdevs"]) == 1
        assert dev["ports"] == [{"port": 1, "state": {"code": 4, "name": "ACTIVE"},
                                 "phys_state": {"code": 5, "name": "LinkUp"},
                                 "rate_gbps": 200.0, "rate": "200 Gb/sec (4X HDR)",
                                 "link_layer": "Ethernet", "counters": {}}]
    settings = facts["nccl_settings"]
    assert settings["NCCL_IB_QPS_PER_CONNECTION"] == {"value": qps, "source": "/etc/nccl.conf"}
    assert ("NCCL_TOPO_FILE" in settings) is (host == "h100-x86")
    assert facts["nccl_files"]["/root/.nccl.conf"] is None
    assert facts["nccl_suspicious_keys"] == []
    assert facts["errors"] == []


def test_gb200_fabric_infiniband_ndr_and_no_nccl_files():
    facts = layer_fabric.gather(fixture("gb200-grace-vm"))
    assert facts["present"] is True
    for dev in facts["ib_devices"]:
        assert (dev["bdf"], dev["numa_node"]) == GB200_NICS[dev["name"]]
        port = dev["ports"][0]
        assert (port["state"]["name"], port["rate_gbps"], port["link_layer"]) == (
            "ACTIVE", 400.0, "InfiniBand")
    assert [d["name"] for d in facts["ib_devices"]] == list(GB200_NICS)
    assert facts["nccl_settings"] == {}
    assert facts["nccl_files"] == {"/root/.nccl.conf": None, "/etc/nccl.conf": None}
    assert facts["sources"]["ib_devices"] == "/sys/class/infiniband"
    assert facts["errors"] == []


# -- this machine -------------------------------------------------------------------------------

def test_live_fabric_matches_direct_reads():
    facts = layer_fabric.gather(Sysroot("/"))
    names = sorted(os.listdir("/sys/class/infiniband")) if os.path.isdir(
        "/sys/class/infiniband") else []
    assert sorted(d["name"] for d in facts["ib_devices"]) == names
    assert facts["present"] is bool(names)
    env_nccl = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    assert {k: v["value"] for k, v in facts["nccl_settings"].items()
            if v["source"] == "environment"} == env_nccl
    assert (facts["nccl_files"]["/etc/nccl.conf"] is None) is (
        not os.path.isfile("/etc/nccl.conf"))
    assert facts["errors"] == []


def test_live_runtime_matches_direct_reads():
    facts = layer_runtime.gather(Sysroot("/"))
    assert facts["default_topo_files"] == {
        path: os.path.exists(path) for path in layer_runtime.DEFAULT_TOPO_FILES}
    enroot_conf = os.path.join(os.environ.get("ENROOT_SYSCONF_PATH") or "/etc/enroot",
                               "enroot.conf")
    assert facts["enroot"]["conf_present"] is os.path.exists(enroot_conf)
    assert facts["enroot"]["installed"] is (os.path.exists(enroot_conf)
                                            or os.path.exists("/usr/bin/enroot"))
    plugstack = "/etc/slurm/plugstack.conf"
    pyxis_here = os.path.isfile(plugstack) and "spank_pyxis.so" in Path(plugstack).read_text()
    if not os.path.isdir("/etc/slurm"):
        assert facts["pyxis"] == {"present": False, "plugstack_lines": []}
    assert facts["pyxis"]["present"] >= pyxis_here
    topo = facts["nccl_topo_file"]
    if topo["value"] is None:
        assert topo["exists"] is False
    else:
        assert topo["exists"] is os.path.exists(topo["value"])
    assert facts["errors"] == []
    json.dumps(facts)
