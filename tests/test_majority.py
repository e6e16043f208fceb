"""What differs from the fleet's majority (``facts -i INV --differ``): on the facts of real
machines' host trees (fast) and end to end over a simulated cluster through Ansible (system).
"""

from __future__ import annotations

import json
import re

import pytest

from exemplar_tune.facts import facts_from_sysroot
from exemplar_tune.fleet.majority import NOT_COMPARED, differences, flatten, host_differences
from exemplar_tune.sim.cluster import create_cluster
from tests.realhosts import KINDS, unpack
from tests.test_cli import cli


@pytest.fixture(scope="module")
def real_hosts(tmp_path_factory) -> dict[str, dict]:
    where = tmp_path_factory.mktemp("real")
    return {name: facts_from_sysroot(str(unpack(name, where)), None) for name in KINDS}


def test_real_machines_differ_where_they_are_different_machines(real_hosts):
    """Ten different real machines: the architecture splits them, and nothing that names one
    host or one moment (serials, UUIDs, times, temperatures ...) is ever compared."""
    found = {d.fact: d for d in differences(real_hosts)}
    arch = found["vm.arch"]
    assert arch.majority == "x86_64"
    assert dict(arch.others)["aarch64"] == ("ghw-arm64-graviton2", "hwloc-128arm-kunpeng920",
                                             "hwloc-nvidia-dgx-gb10")
    for fact in found:
        assert not any(NOT_COMPARED.match(part) for part in fact.split(".")), fact
    assert not any(re.search(r"\.(sources|errors)\.", f"{f}.") for f in found)


def test_identical_hosts_do_not_differ_and_one_change_is_named(real_hosts):
    base = real_hosts["pepc-gnrd0"]
    fleet = {f"gpu{i:02d}": json.loads(json.dumps(base)) for i in range(1, 17)}
    assert differences(fleet) == []
    assert {p["governor"] for p in base["cpu"]["cpufreq"]["policies"]} == {"powersave"}
    for policy in fleet["gpu07"]["cpu"]["cpufreq"]["policies"]:
        policy["governor"] = "performance"
    (found,) = differences(fleet)
    assert found.fact == "cpu.cpufreq.policies.*.governor"  # one line for all its policies
    assert found.others == (("performance", ("gpu07",)),) and len(found.majority_hosts) == 15
    assert host_differences("gpu07", [found]) == [
        "cpu.cpufreq.policies.*.governor=performance (majority powersave)"]
    assert host_differences("gpu01", [found]) == []


def test_a_fact_one_host_lacks_is_absent_there_and_lists_fold_by_item():
    one = {"cpu": {"numa": {"nodes": [{"id": 0, "cpus": "0-3"}, {"id": 1, "cpus": "4-7"}]},
                   "uuid": "a"}}
    other = {"cpu": {"numa": {"nodes": [{"id": 0, "cpus": "0-3"}, {"id": 1, "cpus": "4-6"}]},
                     "uuid": "b", "extra": 1}}
    assert flatten(one) == {"cpu.numa.nodes.0.id": 0, "cpu.numa.nodes.1.id": 1,
                            "cpu.numa.nodes.0.cpus": "0-3", "cpu.numa.nodes.1.cpus": "4-7"}
    flat = flatten(other)
    assert flat["cpu.numa.nodes.0.cpus"] == "0-3" and flat["cpu.numa.nodes.1.id"] == 1
    assert "cpu.uuid" not in flat
    found = {d.fact: d for d in differences({"a1": one, "a2": one, "b1": other})}
    assert found["cpu.extra"].majority == "absent"
    assert found["cpu.numa.nodes.1.cpus"].others == (("4-6", ("b1",)),)
    assert not found["cpu.extra"].tie
    (split,) = differences({"a1": {"l": {"k": 1}}, "b1": {"l": {"k": 2}}})
    assert split.tie and split.line() == "l.k: 1 on a1; 2 on b1 (no majority)"


@pytest.mark.system
def test_differ_names_the_host_and_fact_over_a_simulated_fleet(tmp_path):
    """Four simulated hosts through Ansible: node03's CPUs switched to powersave and node02's
    NCCL QPs set to 1 are the two differences, each on its host; nothing else differs."""
    directory = tmp_path / "c"
    create_cluster(directory, "h100-qps-incumbent", hosts=4)
    for governor in (directory / "hosts/node03/sys/devices/system/cpu/cpufreq").glob(
            "policy*/scaling_governor"):
        governor.write_text("powersave\n")
    conf = directory / "hosts/node02/etc/nccl.conf"
    conf.write_text(conf.read_text().replace("NCCL_IB_QPS_PER_CONNECTION=4",
                                             "NCCL_IB_QPS_PER_CONNECTION=1"))
    inventory = str(directory / "inventory.yml")
    out = cli("facts", "-i", inventory, "--differ", "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["hosts"] == 4 and doc["unreachable"] == {}
    by_fact = {d["fact"]: d for d in doc["differences"]}
    governor = by_fact["cpu.cpufreq.policies.*.governor"]
    assert governor["others"] == [{"value": "powersave", "hosts": "node03", "count": 1}]
    assert governor["majority"] == {"value": "performance", "hosts": "node[01-02,04]",
                                    "count": 3}
    qps = [d for d in doc["differences"] if "NCCL_IB_QPS_PER_CONNECTION" in d["fact"]]
    assert qps and all(d["others"][0]["hosts"] == "node02" for d in qps)
    assert {d["others"][0]["hosts"] for d in doc["differences"]} == {"node02", "node03"}
    text = cli("facts", "-i", inventory, "--differ", "--layer", "cpu")
    assert text.returncode == 0, text.stderr
    assert "4 hosts compared with each other: " in text.stdout
    assert "cpu.cpufreq.policies.*.governor (8 items): powersave on node03 (majority: " \
           "performance on 3 hosts)" in text.stdout
    assert "NCCL_IB_QPS" not in text.stdout  # --layer cpu: the fabric is not read
    alone = cli("facts", "--sysroot", str(directory / "hosts/node01"), "--differ")
    assert alone.returncode == 2
    assert alone.stderr.strip().splitlines() == [
        "exemplar-tune: error: --differ compares hosts with each other: give an inventory (-i)"]


def test_facts_help_teaches_differ():
    out = cli("facts", "--help")
    assert "--differ" in out.stdout and "rarest first" in out.stdout
