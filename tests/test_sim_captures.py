"""The command captures of simulated hosts and of the ``healthy-h100`` fixture
(``exemplar_tune/sim/captures.py``): complete enough that the preflight judges every check it
runs (none ``unknown``), healthy where the hardware is, and derived from the host's own facts.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from exemplar_tune.sim.captures import NVL_TRAYS, imex_domains, write_captures
from exemplar_tune.sim.cluster import create_cluster
from exemplar_tune.sim.model import load_scenario, shipped_scenarios
from tests.conftest import SYSROOTS
from tests.helpers import tree_hash
from tests.test_cli import cli

HEALTHY = SYSROOTS / "healthy-h100"


def preflight(*args: str) -> dict:
    out = cli("preflight", "-q", *args, "--format", "json")
    assert out.returncode in (0, 1), out.stdout + out.stderr
    return json.loads(out.stdout)


def results(doc: dict, host: str) -> dict[str, dict]:
    return {r["id"]: r for r in doc["hosts"][host]["results"]}


def unknown(doc: dict) -> list[str]:
    return [f"{host} {r['id']}: {r['detail']}" for host, x in doc["hosts"].items()
            for r in x["results"] if r["class"] == "unknown"]


@pytest.mark.parametrize("scenario", shipped_scenarios())
def test_every_simulated_host_is_judged_on_every_check(scenario, tmp_path):
    """No check of a new cluster's hosts is unknown; a scenario without faults leaves its
    hosts ok, one with faults leaves them to tune (never health: the hardware is sound)."""
    create_cluster(tmp_path / "c", scenario, hosts=2)
    for profile in ([], ["--profile", str(tmp_path / "c/profile.yaml")]):
        doc = preflight("-i", str(tmp_path / "c/inventory.yml"), *profile)
        assert sorted(doc["hosts"]) == ["node01", "node02"] and doc["unreachable"] == {}
        assert unknown(doc) == []
        want = "tuning" if load_scenario(scenario)["faults"] else "ok"
        assert {h: v["class"] for h, v in doc["verdicts"].items()} == \
            {"node01": want, "node02": want}, doc["verdicts"]


def test_the_healthy_fixture_is_ok_on_every_check():
    doc = preflight("--sysroot", str(HEALTHY))
    assert unknown(doc) == []
    assert doc["verdicts"]["healthy-h100"]["class"] == "ok"
    found = results(doc, "healthy-h100")
    for check, words in (("gpu.nvlink-links", "all 144 NVLink links of 8 GPUs active at 26.562"),
                         ("gpu.nvlink-errors", "144 NVLink links of 8 GPUs within"),
                         ("fabric.gpu-nic-locality", "every one of 8 GPUs has a NIC behind its"),
                         ("fabric.gpudirect-rdma", "nvidia_peermem loaded"),
                         ("fabric.pcie-acs", "ACS redirection off on the 16 switch ports")):
        assert found[check]["status"] == "pass" and words in found[check]["detail"], found[check]
    assert found["gpu.imex"]["class"] == "not_applicable"  # no multi-node NVLink domain


def test_the_fixture_captures_are_what_the_simulator_derives_from_its_facts(tmp_path):
    """The fixture's captures are write_captures' output on the fixture itself: rebuilt from
    its nvidia-smi report, sysfs, topology file and kernel log, nothing changes."""
    copy = tmp_path / "healthy-h100"
    subprocess.run(["cp", "-a", str(HEALTHY), str(copy)], check=True)
    write_captures(copy)
    assert tree_hash(copy) == tree_hash(HEALTHY)


def test_gb300_hosts_see_their_rack_as_one_imex_domain(tmp_path):
    """Each GB300 host's IMEX domain is its cluster's hosts (one NVL72 rack), every node READY;
    the GPU-NIC locality and ACS checks say why they do not apply to a Grace tray."""
    create_cluster(tmp_path / "c", "gb300-exemplar-gap", hosts=3)
    doc = preflight("-i", str(tmp_path / "c/inventory.yml"))
    for host in ("node01", "node03"):
        found = results(doc, host)
        assert found["gpu.imex"]["status"] == "pass"
        assert "IMEX domain UP: 3 node(s) READY" in found["gpu.imex"]["detail"]
        assert "all 72 NVLink links of 4 GPUs active at 53.125" in \
            found["gpu.nvlink-links"]["detail"]
        assert found["fabric.gpudirect-rdma"]["status"] == "pass"
        assert found["fabric.gpu-nic-locality"]["class"] == "not_applicable"
        assert "no NIC in nvidia-smi topo -m" in found["fabric.gpu-nic-locality"]["detail"]
        assert found["fabric.pcie-acs"]["class"] == "not_applicable"
    config = (tmp_path / "c/hosts/node02/etc/nvidia-imex/nodes_config.cfg").read_text()
    assert config == "10.0.0.1\n10.0.0.2\n10.0.0.3\n"


def test_imex_domains_are_racks_of_eighteen_trays():
    names = [f"node{i:02d}" for i in range(1, 21)]
    domains = imex_domains(names)
    assert domains["node01"] == domains["node18"] and len(domains["node01"]) == NVL_TRAYS
    assert domains["node19"] == domains["node20"] == ["10.0.1.1", "10.0.1.2"]
