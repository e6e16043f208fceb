"""What an operator reads after ``preflight`` and ``audit`` on a fleet: hosts folded into
hostlists, findings in full, golden output on a 16-host simulated cluster of mixed states.

The cluster: gb300-exemplar-gap on node01-node16; the cpu layer applied on node[01-06] only
(through ``--limit`` with a hostlist); node10 has ``kernel.numa_balancing=2`` where the others
have 1; node16 cannot be reached (ssh to a closed port). Regenerate the golden files with
``EXEMPLAR_UPDATE_GOLDEN=1 pytest tests/test_fleet_output.py`` and read the diff.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

from exemplar_tune.fleet.hostlist import ansible_limit, compress, expand
from exemplar_tune.sim.cluster import create_cluster
from tests.slurmcluster import require_slurm
from tests.test_cli import cli

GOLDEN = Path(__file__).parent / "fixtures" / "golden"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The mixed 16-host cluster: ``(directory, inventory path)``."""
    directory = tmp_path_factory.mktemp("fleet") / "c"
    create_cluster(directory, "gb300-exemplar-gap", hosts=16, seed=3)
    applied = cli("apply", "--layer", "cpu", "-i", str(directory / "inventory.yml"),
                  "--profile", str(directory / "profile.yaml"), "--limit", "node[01-06]",
                  "--ledger", str(directory / "ledger.db"))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "  node[01-06] (6/6): changed deep_cstates, housekeeping, numa_balancing\n" in (
        applied.stdout)
    (directory / "hosts/node10/proc/sys/kernel/numa_balancing").write_text("2\n")
    inventory = yaml.safe_load((directory / "inventory.yml").read_text())
    inventory["all"]["hosts"]["node16"].update(
        {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9})
    path = directory / "mixed.yml"
    path.write_text(yaml.safe_dump(inventory))
    return directory, path


def run(fleet, command, *extra):
    directory, inventory = fleet
    return cli(command, "-i", str(inventory), "--profile", str(directory / "profile.yaml"),
               *extra)


def golden(fleet, name: str, text: str) -> None:
    """``text`` equals the golden file, with the cluster's directory written ``<cluster>`` and
    the interpreter of the simulated boot commands ``<python>``."""
    text = re.sub(r"'\S+/python[\d.]* ", "'<python> ", text.replace(str(fleet[0]), "<cluster>"))
    path = GOLDEN / name
    if os.environ.get("EXEMPLAR_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"output differs from {path}"


@pytest.mark.system
def test_preflight_folds_hosts_by_finding(fleet):
    out = run(fleet, "preflight")
    assert out.returncode == 1
    golden(fleet, "preflight-16-hosts.txt", out.stdout)
    # hosts with another observed value are their own group, never folded into the others
    assert "WARN  cpu.numa-balancing  8/15 hosts  node[07-09,11-15]  (tuning)\n" in out.stdout
    assert "WARN  cpu.numa-balancing  1/15 hosts  node10  (tuning)\n" in out.stdout
    assert "### node16: UNREACHABLE (unknown): " in out.stdout
    assert "\n### node01" not in out.stdout


@pytest.mark.system
def test_preflight_json_stays_complete_and_matches_the_groups(fleet):
    doc = json.loads(run(fleet, "preflight", "--format", "json").stdout)
    assert sorted(doc["hosts"]) == [f"node{i:02d}" for i in range(1, 16)]
    assert list(doc["unreachable"]) == ["node16"]
    per_host = Counter((r["id"], r["status"]) for h in doc["hosts"].values()
                       for r in h["results"] if r["status"] in ("fail", "warn"))
    grouped = Counter()
    for group in doc["groups"]:
        grouped[(group["id"], group["status"])] += group["count"]
        assert sorted(expand(group["hostlist"])) == group["hosts"]
    assert grouped == per_host
    order = [(g["status"] != "fail", ("high", "medium", "low").index(g["severity"]), -g["count"])
             for g in doc["groups"]]
    assert order == sorted(order)


@pytest.mark.system
def test_preflight_details_lists_every_host_sorted(fleet):
    out = run(fleet, "preflight", "--details").stdout
    sections = [line.split(":")[0] for line in out.splitlines() if line.startswith("### ")]
    assert sections == [f"### node{i:02d}" for i in range(1, 17)]


@pytest.mark.system
def test_audit_folds_hosts_by_change_and_shows_what_changes(fleet):
    out = run(fleet, "audit")
    assert out.returncode == 1
    golden(fleet, "audit-16-hosts.txt", out.stdout)
    assert "DRIFT  cpu/numa_balancing  8/15 hosts  node[07-09,11-15]\n" in out.stdout
    assert "/proc/sys/kernel/numa_balancing: '2' -> '0'" in out.stdout
    assert "..." not in out.stdout  # values are never cut


@pytest.mark.system
def test_audit_diff_and_details(fleet):
    out = run(fleet, "audit", "--layer", "cpu", "--diff", "--details").stdout
    assert "--- /etc/default/irqbalance (before)\n" in out.replace("        ", "")
    assert "more files" not in out and "more changed lines" not in out
    hosts = [line.split(":")[0].strip() for line in out.splitlines()
             if line.startswith("  node") and "UNREACHABLE" not in line]
    assert hosts == [f"node{i:02d}" for i in range(1, 16)]
    assert "  node01: no drift" in out


@pytest.mark.system
def test_a_limit_longer_than_a_command_line_reaches_ansible_in_a_file(fleet):
    """20,000 names spelt out are 240 kB, past Linux's 128 kB for one argument: before, the
    run failed with an internal 'Argument list too long'."""
    out = cli("facts", "-i", str(fleet[1]), "--limit", "node[03-04],spare[00001-20000]",
              "--format", "json")
    assert out.returncode == 0, out.stderr
    assert sorted(json.loads(out.stdout)["hosts"]) == ["node03", "node04"]


def test_hostlist_round_trips():
    rng = random.Random(5)
    for _ in range(200):
        names = {f"gpu{n:03d}" for n in rng.sample(range(1, 400), rng.randint(1, 60))}
        names |= {f"n{n}" for n in rng.sample(range(1, 200), rng.randint(0, 20))}
        names |= set(rng.sample(["login", "10.0.0.7", "rack1-n02", "gpu1", "gpu01"], 2))
        assert sorted(expand(compress(names))) == sorted(names)
    assert compress([f"gpu{n:03d}" for n in range(1, 113)] + ["gpu115"]) == "gpu[001-112,115]"
    assert expand("gpu[001-003,115]") == ["gpu001", "gpu002", "gpu003", "gpu115"]
    assert compress(["gpu9", "gpu10", "gpu011"]) == "gpu[9-10],gpu011"  # padding kept apart
    assert expand("rack[1-2]-n[1-2]") == ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]


@pytest.mark.parametrize("bad", ["gpu[1-", "gpu1]", "gpu[3-1]", "gpu[x]", "a,,b", "gpu[1-]"])
def test_a_malformed_hostlist_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="bad hostlist") as err:
        expand(bad)
    assert "\n" not in str(err.value)


def test_slurm_reads_our_hostlists(tmp_path):
    """``scontrol show hostnames`` (a real Slurm) expands what :func:`compress` writes; where
    scontrol is missing the test fails naming the package (before: a bare FileNotFoundError)."""
    require_slurm("scontrol")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p "
                    "Nodes=n1\n")
    names = [f"gpu{n:03d}" for n in (*range(1, 40), 77, 115)] + ["login1", "login2", "x9", "x10"]
    out = subprocess.run(["scontrol", "show", "hostnames", compress(names)], capture_output=True,
                         text=True, env={**os.environ, "SLURM_CONF": str(conf)}, check=True)
    assert sorted(out.stdout.split()) == sorted(names)


def test_limit_takes_hostlists_beside_ansible_patterns():
    assert ansible_limit("node[01-03],!node02") == "node01,node02,node03,!node02"
    assert ansible_limit("!gpu[1,3]") == "!gpu1,!gpu3"
    for pattern in ("web[0:2]", "~node0[1-3]", "gpu*", "rack1:&compute", None):
        assert ansible_limit(pattern) == pattern


@pytest.mark.parametrize("bad", ["[", "]", "node[", "gpu]1", "web[]", "web[a:b]"])
def test_a_limit_with_stray_brackets_is_refused_not_taken_for_every_host(bad):
    """A lone ``[`` reached Ansible as a pattern that matches every host."""
    with pytest.raises(ValueError, match="neither a hostlist .* nor a group subscript"):
        ansible_limit(bad)
    for kept in ("web[-1]", "web[0:2]", "web[1:]", "!web[:3]"):  # web[0] is a hostlist
        assert ansible_limit(kept) == kept


@pytest.mark.parametrize("huge", ["gpu[0-99999999999999999999]", "node[01-02],!node[00-99999999]",
                                  "r[1-1000]-n[1-1000]"])
def test_a_hostlist_naming_too_many_hosts_is_refused_before_it_is_spelt_out(huge):
    """Counted first: before, expanding these took gigabytes."""
    with pytest.raises(ValueError, match=r"names \d+ hosts, more than 100000"):
        ansible_limit(huge)
    out = cli("preflight", "-i", "x,", "--limit", huge)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_restore_folds_hosts_like_apply():
    """Before, restore printed one line per host: 256 lines for a 256-host rollback (the
    result as ``run_playbook`` gives it: failed hosts among the hosts and named apart)."""
    from exemplar_tune.commands.change import _restore_lines

    hosts = {f"gpu{i:03d}": {"status": "ok", "restored": [1, 2], "error": None}
             for i in range(1, 251)}
    hosts.update({f"gpu{i:03d}": {"status": "ok", "restored": [], "error": None}
                  for i in range(251, 255)})
    hosts["gpu255"] = {"status": "failed", "restored": [], "error": "journal corrupted"}
    lines = _restore_lines("cpu", {"hosts": hosts, "failed": {"gpu255": "journal corrupted"},
                                   "unreachable": {"gpu256": "timed out"}})
    assert lines == ["  cpu gpu[001-250] (250/256): 2 change(s) put back",
                     "  cpu gpu[251-254] (4/256): 0 change(s) put back",
                     "  cpu gpu255: FAILED: journal corrupted",
                     "  cpu gpu256: UNREACHABLE: timed out"]
