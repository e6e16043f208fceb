"""``--profile auto``: each host gets the shipped profile of its hardware identity - its NVIDIA
GPUs by PCI device ID, its architecture - chosen the same way by preflight (from the facts)
and by the layer module (on the host); a GPU no profile names gets ``generic``."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.identity import (
    choose_profile,
    identity_from_facts,
    read_identity,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.profile import ProfileError, auto_candidates, auto_profile, profile_for_hosts
from tests.conftest import FIXTURES, SYSROOTS
from tests.realhosts import KINDS, unpack
from tests.test_cli import cli

H200_SMI = (FIXTURES / "realworld/nvidia-smi-text/"
            "utkuozdemir-nvidia_gpu_exporter-captures-linux-x86_64-nvidia-h200-590.48.01-q.txt")


def _with_gpu_id(tree: str, device: str, dest: Path) -> Path:
    """A copy of fixture ``tree`` whose NVIDIA GPUs report PCI device ID ``device``."""
    root = dest / f"{tree}-{device}"
    shutil.copytree(SYSROOTS / tree, root, symlinks=True)
    for path in (root / "sys/devices").rglob("device"):
        if path.is_file() and (path.parent / "vendor").read_text().strip() == "0x10de" and \
                (path.parent / "class").read_text().startswith("0x03"):
            path.write_text(f"{device}\n")
    return root


def _chosen(root: Path) -> tuple[str, str]:
    """(profile chosen from the facts, profile chosen on the host), by name."""
    facts = gather_facts(Sysroot(str(root)), ["vm", "cpu"])
    from_facts = auto_profile(facts)[0]["name"]
    on_host = choose_profile(list(auto_candidates()), read_identity(Sysroot(str(root))))
    assert identity_from_facts(facts) == read_identity(Sysroot(str(root)))
    return from_facts, on_host["name"]


@pytest.mark.parametrize(("tree", "device", "profile"), [
    ("h100-x86", None, "h100-x86"),
    ("gb200-grace-vm", None, "gb200-grace"),
    ("h100-x86", "0x2335", "h200-x86"),
    ("h100-x86", "0x2901", "b200-x86"),
    ("gb200-grace-vm", "0x31c2", "gb300-grace"),
    ("h100-x86", "0x2999", "generic"),  # a Blackwell ID no profile names
    ("gb200-grace-vm", "0x2330", "generic"),  # H100 on arm64: no shipped profile
])
def test_each_identity_gets_its_profile(tmp_path, tree, device, profile):
    root = SYSROOTS / tree if device is None else _with_gpu_id(tree, device, tmp_path)
    assert _chosen(root) == (profile, profile)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_real_hosts_without_an_nvidia_gpu_get_the_generic_profile(tmp_path, name):
    assert _chosen(unpack(name, tmp_path)) == ("generic", "generic")


def test_an_h200_node_is_checked_as_an_h200_node(tmp_path):
    """The issue's H200 node: its real nvidia-smi -q (one H200) and H200 PCI IDs."""
    root = _with_gpu_id("healthy-h100", "0x2335", tmp_path)
    commands = root / ".exemplar/commands"
    (commands / "nvidia-smi-q-x.xml").unlink()
    shutil.copy(H200_SMI, commands / "nvidia-smi-q.txt")
    out = cli("preflight", "--sysroot", str(root), "--layer", "gpu", "--format", "json")
    doc = json.loads(out.stdout)
    host = next(iter(doc["hosts"].values()))
    assert (doc["profile"], host["profile"]) == ("h200-x86", "h200-x86")
    assert host["profile_reason"].startswith("auto: 8x H200 (10de:2335), x86_64")
    product = next(r for r in host["results"] if r["id"] == "gpu.product")
    assert product["status"] == "pass", product["detail"]
    table = cli("preflight", "--sysroot", str(root), "--layer", "gpu").stdout
    assert "profile h200-x86 for " in table and "(auto: 8x H200 (10de:2335), x86_64)" in table


def test_a_mixed_fleet_gets_each_host_its_own_profile(tmp_path):
    kunpeng = unpack("hwloc-128arm-kunpeng920", tmp_path)
    base = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    trees = {"h100": SYSROOTS / "h100-x86", "gb200": SYSROOTS / "gb200-grace-vm",
             "arm": kunpeng}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        name: {**base, "exemplar_sysroot": str(root)} for name, root in trees.items()}}}))
    doc = json.loads(cli("preflight", "-i", str(inventory), "--format", "json").stdout)
    assert {h: d["profile"] for h, d in doc["hosts"].items()} == {
        "h100": "h100-x86", "gb200": "gb200-grace", "arm": "generic"}
    assert doc["profile"] == "auto (gb200-grace, generic, h100-x86)"
    audit = json.loads(cli("audit", "-i", str(inventory), "--layer", "gpu", "--format",
                           "json").stdout)
    assert {h: d["profile"] for h, d in audit["hosts"].items()} == {
        "h100": "h100-x86", "gb200": "gb200-grace", "arm": "generic"}
    facts = [gather_facts(Sysroot(str(root)), ["vm", "cpu"]) for root in trees.values()]
    with pytest.raises(ProfileError, match="call for different profiles"):
        profile_for_hosts("auto", facts)
