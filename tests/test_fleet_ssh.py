"""exemplar-tune against real SSH hosts: preflight, audit, apply, restore and the measured loop
over three network namespaces with their own sshd (the ``ssh_fleet`` fixture,
tests/sshfleet.py), each host working inside its own copy of a fixture tree.

``xtf1`` and ``xtf2`` are copies of ``h100-x86`` (problems to fix), ``xtf3`` of
``healthy-h100`` (none). Everything runs through the real CLI, ansible-runner and ssh.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from tests.conftest import SYSROOTS
from tests.helpers import EXEMPLAR_STATE, cli_env, tree_hash
from tests.sshfleet import CONTROLLER, Fleet, leftovers

pytestmark = pytest.mark.system  # slow: real Ansible/Slurm/SSH end to end

TREES = {"xtf1": "h100-x86", "xtf2": "h100-x86", "xtf3": "healthy-h100"}
PROBLEM_HOSTS = ["xtf1", "xtf2"]
# the profile the cpu role tests use; both fixtures keep their Slurm job under system.slice,
# so confining housekeeping there is allowed explicitly (as the fleet audit tests do)
CPU_PROFILE = {"name": "h100-x86-cpu",
               "cpu": {"deep_cstates": True, "governor": "performance", "turbo": True,
                       "housekeeping_confined": True, "housekeeping_cpus": "0,4",
                       "numa_balancing": 0}}
HOSTVARS = {"cpu_housekeeping_allow_job_units": True}
SITE_PROFILE = {"name": "site-h100",
                "gpu": {"count": 8, "product_contains": "H100", "persistence_mode": True},
                "vm": {"iommu_default_domain": "identity"},
                "cpu": CPU_PROFILE["cpu"],
                "runtime": {"nccl_topo_file": "/etc/nccl/topo.xml", "require_in_container": True},
                "fabric": {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4"}}}
JOURNAL = Path(EXEMPLAR_STATE)


@dataclass
class Site:
    """A fleet with its sysroots, inventory file and profiles, ready for the CLI."""

    fleet: Fleet
    tmp: Path
    roots: dict[str, Path]
    inventory: Path
    cpu_profile: Path
    site_profile: Path

    def hashes(self) -> dict[str, str]:
        """tree_hash of every host's sysroot, as it is now."""
        return {name: tree_hash(root) for name, root in self.roots.items()}

    def hashes_without_journal(self) -> dict[str, str]:
        """tree_hash of every sysroot as if exemplar-tune's own state there (journals, the
        claim) were not there."""
        return {name: tree_hash(root, EXEMPLAR_STATE) for name, root in self.roots.items()}


@pytest.fixture
def site(ssh_fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    """The three SSH hosts, each with a fresh copy of its fixture tree."""
    monkeypatch.setenv("EXEMPLAR_TUNE_STATE_DIR", str(tmp_path / "state"))
    roots = {}
    for name, tree in TREES.items():
        roots[name] = tmp_path / "roots" / name
        shutil.copytree(SYSROOTS / tree, roots[name], symlinks=True)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump(ssh_fleet.inventory(roots, HOSTVARS)))
    cpu_profile, site_profile = tmp_path / "cpu.yaml", tmp_path / "site.yaml"
    cpu_profile.write_text(yaml.safe_dump(CPU_PROFILE))
    site_profile.write_text(yaml.safe_dump(SITE_PROFILE))
    return Site(ssh_fleet, tmp_path, roots, inventory, cpu_profile, site_profile)


def cli(*args: str | Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The exemplar-tune CLI of this venv as a subprocess; never a traceback."""
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", *map(str, args)],
                         capture_output=True, text=True, env=cli_env(), check=False,
                         timeout=timeout)
    assert "Traceback" not in out.stderr, out.stderr
    return out


def as_json(out: subprocess.CompletedProcess[str]) -> dict:
    """The JSON document a command printed (with its output in the message if it is not)."""
    try:
        return json.loads(out.stdout)
    except ValueError:
        pytest.fail(f"not JSON (rc {out.returncode}):\n{out.stdout}\n{out.stderr}")


def logins(fleet: Fleet, name: str) -> int:
    """Key logins from the controller's bridge address that host ``name``'s sshd accepted."""
    return fleet.sshd_log(name).count(f"Accepted publickey for root from {CONTROLLER} ")


def changed_knobs(doc: dict) -> dict[str, set[str]]:
    """Per reachable host: the knobs an apply changed."""
    return {host: {k["knob"] for k in data["changed"]} for host, data in doc["hosts"].items()}


# -- the fixture itself ------------------------------------------------------------------------


def test_each_host_is_its_own_machine_on_the_network_and_teardown_leaves_nothing(ssh_fleet):
    for host in ssh_fleet.hosts:
        answer = ssh_fleet.ssh(host.name, "hostname")
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.strip() == host.name
        addresses = ssh_fleet.ssh(host.name, "ip", "-4", "-o", "addr", "show", "dev", "eth0")
        assert f"inet {host.address}/24" in addresses.stdout
        cache = ssh_fleet.ssh(host.name, "printenv", "EXEMPLAR_TUNE_BYTECODE_CACHE")
        assert cache.stdout.strip() == os.environ["EXEMPLAR_TUNE_BYTECODE_CACHE"]
    ssh_fleet.stop_sshd("xtf2")
    assert ssh_fleet.ssh("xtf2", "true").returncode == 255
    assert ssh_fleet.ssh("xtf1", "true").returncode == 0
    ssh_fleet.start_sshd("xtf2")
    assert ssh_fleet.ssh("xtf2", "hostname").stdout.strip() == "xtf2"
    ssh_fleet.teardown()
    assert leftovers() == []
    for command in (["ip", "netns", "list"], ["ip", "-o", "link"], ["pgrep", "-a", "sshd"]):
        listing = subprocess.run(command, capture_output=True, text=True, check=False).stdout
        assert "xtf" not in listing, (command, listing)


# -- preflight and audit -----------------------------------------------------------------------


def failing_checks(doc: dict) -> dict[str, set[str]]:
    """Per host: the ids of the checks that failed."""
    return {host: {r["id"] for r in data["results"] if r["status"] == "fail"}
            for host, data in doc["hosts"].items()}


def test_preflight_reads_every_host_through_its_own_sshd(site):
    before = {name: logins(site.fleet, name) for name in TREES}
    out = cli("preflight", "-i", site.inventory, "--format", "json")
    doc = as_json(out)
    assert out.returncode == 1
    assert doc["unreachable"] == {}
    failing = failing_checks(doc)
    assert sorted(failing) == ["xtf1", "xtf2", "xtf3"]
    for name in PROBLEM_HOSTS:
        assert "cpu.deep-cstates-disabled" in failing[name]
    assert failing["xtf3"] == set()
    # every host's own sshd (on its own address) accepted the controller's key
    assert [name for name in TREES if logins(site.fleet, name) > before[name]] == list(TREES)

    site.fleet.stop_sshd("xtf2")
    out = cli("preflight", "-i", site.inventory, "--format", "json")
    doc = as_json(out)
    assert out.returncode == 1
    assert list(doc["unreachable"]) == ["xtf2"]
    assert "Connection refused" in doc["unreachable"]["xtf2"]
    assert sorted(doc["hosts"]) == ["xtf1", "xtf3"]
    assert "cpu.deep-cstates-disabled" in failing_checks(doc)["xtf1"]


def test_audit_reports_the_problem_hosts_drift_and_writes_nothing(site):
    before = site.hashes()
    out = cli("audit", "-i", site.inventory, "--profile", site.site_profile, "--format", "json")
    doc = as_json(out)
    assert out.returncode == 1, out.stdout + out.stderr
    assert doc["unreachable"] == {} and doc["failed"] == {}
    groups = {(g["layer"], g["knob"]): (g["hosts"], g["total"]) for g in doc["drift"]}
    assert groups[("cpu", "deep_cstates")] == (PROBLEM_HOSTS, 3)
    assert all(hosts == PROBLEM_HOSTS for hosts, _ in groups.values()), groups
    assert doc["hosts"]["xtf3"]["changed"] == []
    assert site.hashes() == before


# -- apply, idempotence, restore ---------------------------------------------------------------


def apply_cpu(site: Site, *extra: str) -> subprocess.CompletedProcess[str]:
    """``exemplar-tune apply --layer cpu`` on the fleet with the cpu profile, JSON output."""
    return cli("apply", "--layer", "cpu", "-i", site.inventory, "--profile", site.cpu_profile,
               "--format", "json", *extra)


def test_apply_is_idempotent_and_restore_is_byte_exact(site):
    before = site.hashes()
    content = site.hashes_without_journal()  # the claim leaves its (empty) directory
    out = apply_cpu(site)
    doc = as_json(out)
    assert out.returncode == 0, out.stdout + out.stderr
    knobs = changed_knobs(doc)
    for name in PROBLEM_HOSTS:
        assert "deep_cstates" in knobs[name]
        assert (site.roots[name] / JOURNAL / "journal" / f"{doc['run_id']}.json").is_file()
    assert knobs["xtf3"] == set()
    after = site.hashes_without_journal()
    assert [name for name in TREES if after[name] != content[name]] == PROBLEM_HOSTS

    again = apply_cpu(site)
    assert again.returncode == 0, again.stdout + again.stderr
    assert changed_knobs(as_json(again)) == dict.fromkeys(TREES, set())

    restored = cli("restore", "--run", doc["run_id"])
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert site.hashes_without_journal() == before


def test_a_host_unreachable_before_apply_is_named_and_rollback_restores_the_others(site):
    before = site.hashes()
    site.fleet.stop_sshd("xtf2")
    out = apply_cpu(site)
    doc = as_json(out)
    assert out.returncode == 1
    assert list(doc["unreachable"]) == ["xtf2"]
    assert "deep_cstates" in changed_knobs(doc)["xtf1"]
    assert site.hashes()["xtf2"] == before["xtf2"]

    site.fleet.start_sshd("xtf2")
    back = cli("rollback", "--run", doc["experiment"])
    assert back.returncode == 0, back.stdout + back.stderr
    assert site.hashes_without_journal() == before


# -- the measured loop with a host lost mid-run ------------------------------------------------

STOPPER = '''\
"""Benchmark stand-in: logs whether the layer is on the lost host, prints a value, and stops
that host's sshd at the end of the run chosen by ``when``."""
import sys
import time
from pathlib import Path

from tests.sshfleet import stop_host

workdir, when, namespace, control_path, probe = sys.argv[1:6]
log = Path(workdir, "runs.log")
n = len(log.read_text().splitlines()) + 1 if log.exists() else 1
applied = Path(probe).read_text().strip() == "0"
print(f"value: {1.0 + 0.002 * (n % 3):.4f}")
stopped = Path(workdir, "stopped")
if not stopped.exists() and (when == "first-run" and n == 1 or when == "first-applied-run"
                             and applied or when.startswith("run-") and n == int(when[4:])):
    stop_host(namespace, Path(control_path))
    stopped.touch()
with log.open("a") as out:
    out.write(f"{time.time()} {'applied' if applied else 'pristine'}\\n")
'''
# the cpu layer enables C6 on every CPU of the h100-x86 tree: this file goes from 1 to 0
PROBE = "sys/devices/system/cpu/cpu0/cpuidle/state3/disable"


def bench_file(site: Site, when: str) -> Path:
    """A benchmark that stops xtf2's sshd at the end of run ``when`` (see STOPPER)."""
    script = site.tmp / "stopper.py"
    script.write_text(STOPPER)
    host = site.fleet.host("xtf2")
    command = [sys.executable, str(script), str(site.tmp), when, host.name,
               str(host.control_path), str(site.roots["xtf2"] / PROBE)]
    path = site.tmp / "bench.yaml"
    path.write_text(yaml.safe_dump({"shapes": [{
        "name": "dense", "command": command, "parser": "regex",
        "pattern": "value: ([0-9.]+)", "higher_is_better": False}]}))
    return path


def xtf2_state_per_sample(site: Site, samples: list[dict]) -> list[tuple[str, str]]:
    """(arm, state of xtf2 during that run) for each sample, matched by time."""
    runs = [(float(t), state) for t, state in
            (line.split() for line in (site.tmp / "runs.log").read_text().splitlines())]
    matched = []
    for sample in samples:
        at = datetime.fromisoformat(sample["recorded_at"].replace("Z", "+00:00")).timestamp()
        matched.append((sample["arm"], [state for end, state in runs if end <= at][-1]))
    return matched


# first-run: a baseline run, so xtf2 is lost before the layer is ever applied;
# first-applied-run: xtf2 is lost while changed, in the middle of the A/B runs;
# run-6: the last run of --min-runs 3 --max-runs 3 (one look, after run 6), xtf2 lost while
# changed just before the final restore.
@pytest.mark.parametrize("when", ["first-run", "first-applied-run", "run-6"])
def test_a_host_lost_during_the_measured_loop_fails_it_and_rollback_restores(site, when):
    before = site.hashes()
    out = cli("apply", "--layer", "cpu", "-i", site.inventory, "--profile", site.cpu_profile,
              "--bench", bench_file(site, when), "--min-runs", "3", "--max-runs", "3")
    report = out.stdout + out.stderr
    assert (site.tmp / "stopped").exists(), f"the benchmark never stopped xtf2:\n{report}"
    assert out.returncode == 1, report
    assert any("xtf2" in line and "unreachable" in line for line in out.stdout.splitlines()), \
        report
    experiment = out.stdout.split()[1]
    show = as_json(cli("show", experiment, "--format", "json"))
    assert show["experiment"]["status"] == "failed", show["experiment"]
    samples = sorted((s for s in show["samples"] if s["layer"] == "cpu"),
                     key=lambda s: s["recorded_at"])
    states = xtf2_state_per_sample(site, samples)
    assert ("baseline", "applied") not in states, f"a baseline run measured a changed host: " \
        f"{states}"
    now = site.hashes_without_journal()
    lost_changed = when != "first-run"
    assert [name for name in TREES if now[name] != before[name]] == \
        (["xtf2"] if lost_changed else []), "the reachable hosts are restored by the loop"

    site.fleet.start_sshd("xtf2")
    back = cli("rollback", "--run", experiment)
    assert back.returncode == 0, back.stdout + back.stderr
    assert site.hashes_without_journal() == before
