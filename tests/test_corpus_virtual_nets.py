"""Virtual interfaces where NCCL would carry traffic (realworld/topology-virtual-nets/):
NCCL logs of containers on Docker's bridge (an ``eth0`` with a 172.17.0.0/16 address, or no
interface in the peer's subnet) and topology files whose network device is a veth pair or the
docker bridge. Each is read as ``exemplar-tune diagnose`` reads it; the interface names and
addresses are classified by ``readers.netdev_names``, which the topology reader shares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.readers.netdev_names import (
    virtual_kind,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.topo_xml import read_topo_file
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.corpus import REALWORLD, cases, diagnosed, mismatches


@pytest.mark.parametrize(("path", "entry"), cases("topology-virtual-nets"))
def test_virtual_interfaces_are_flagged_as_the_source_says(path: Path, entry: dict[str, Any]):
    doc, error = diagnosed(path)
    assert mismatches(doc, error, entry["check"]) == []


@pytest.mark.parametrize(("name", "address", "kind"), [
    ("veth1a2b3c", None, "a veth pair"), ("docker0", None, "a container or VM bridge"),
    ("br-3e86ee0c2536", None, "a container or VM bridge"), ("flannel.1", None, "an overlay"),
    ("tunl0", None, "a tunnel"), ("lo", None, "the loopback"),
    ("eth0", "172.17.0.3", "Docker's default bridge"), ("eth0", "10.0.0.4", None),
    ("ens1f0np0", None, None), ("mlx5_0", None, None), ("eth0", "not an address", None),
])
def test_interface_kinds(name: str, address: str | None, kind: str | None):
    found = virtual_kind(name, address)
    assert (found is None) if kind is None else (kind in found)


def test_a_physical_network_in_a_topology_file_passes():
    doc, _ = diagnosed(REALWORLD / "topology" / "azure-azhpc-images-topology-ncv4-topo.xml")
    assert doc is not None and doc["kind"] == "nccl topology"
    nets = [f for f in doc["findings"] if f["check_id"] == "fabric.nccl-interfaces"]
    assert [(f["status"], f["evidence"]) for f in nets] == [
        ("pass", ["azure-azhpc-images-topology-ncv4-topo.xml:9"])]


def test_the_host_facts_name_the_virtual_nets_of_a_topology_file():
    """The facts read NCCL_TOPO_FILE with the same reader: runtime.topo-file then fails it."""
    root = Sysroot(str(REALWORLD / "topology-virtual-nets"))
    parsed = read_topo_file(root, "/derived-azure-ncv4-topo-net-renamed-veth.xml")
    assert (parsed["valid"], parsed["virtual_nets"]) == (True, ["veth3f2a1b0"])
    plain = read_topo_file(Sysroot(str(REALWORLD / "topology")),
                           "/azure-azhpc-images-topology-ncv4-topo.xml")
    assert (plain["nets"], plain["virtual_nets"]) == (["eth0"], [])
