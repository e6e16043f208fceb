"""The runtime role (through tests/playbooks/role.yml) and the apply playbook, through real
ansible-runner runs on sysroot copies.

h100-x86 has /etc/nccl/topo.xml (named in /etc/nccl.conf) and enroot + pyxis that carry
neither into containers; gb200-grace-vm has no topology file, no nccl.conf and no enroot.
"""

from __future__ import annotations

import shutil

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks.run import run_checks
from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from tests.conftest import REPO, SAMPLES
from tests.helpers import copy_sysroot, tree_hash

TOPO = "/etc/nccl/topo.xml"
SAMPLE = SAMPLES / "nccl_topo_ibmcloud_h100_dumped.xml"
ENVIRON = "etc/enroot/environ.d/50-nccl.env"
MOUNT = "etc/enroot/mounts.d/50-nccl-topo.fstab"
JOURNAL = "var/lib/exemplar-tune"
ROLE = REPO / "tests" / "playbooks" / "role.yml"
APPLY = REPO / "playbooks" / "apply.yml"
RESTORE = REPO / "playbooks" / "restore.yml"
BOMB = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
<system version="1"><cpu numaid="0">&lol2;</cpu></system>
"""


def _profile(**runtime):
    return {"name": "test", "runtime": {"nccl_topo_file": TOPO, "require_in_container": True,
                                        **runtime}}


def _run(playbook, root, profile=None, check=False, run_id="r1", hostvars=None, **extra):
    extravars = {"layer": "runtime", "exemplar_run_id": run_id, "exemplar_sysroot": str(root),
                 "exemplar_profile": profile or _profile(), **extra}
    inventory = local_inventory(hostvars=({"localhost": hostvars} if hostvars else None))
    outcome = AnsibleRun(inventory, timeout=180, check=check).playbook(
        playbook, extravars)
    return outcome.hosts["localhost"]


def _apply(root, profile=None, **kwargs):
    return _run(ROLE, root, profile, **kwargs)


def _changed(host):
    """The knobs the layer module changed (or would change)."""
    return [f"{k['layer']}.{k['knob']}" for t in host.tasks
            for k in t["result"].get("knobs") or [] if k["changed"]]


def _statuses(root, profile):
    facts = gather_facts(Sysroot(str(root)), ["runtime"])
    return {r.id: r.status for r in run_checks(facts, profile, ["runtime"])}


def _files_hash(root):
    """Tree hash without the journal and the directories the run left empty."""
    copy = root.parent / "compare"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root, copy, symlinks=True, ignore=shutil.ignore_patterns("exemplar-tune"))
    for path in sorted(copy.rglob("*"), reverse=True):
        if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
            path.rmdir()
    return tree_hash(copy)


@pytest.fixture
def h100(tmp_path):
    return copy_sysroot("h100-x86", tmp_path)


@pytest.fixture
def gb200(tmp_path):
    return copy_sysroot("gb200-grace-vm", tmp_path)


def test_gb200_installs_the_topology_from_a_source(gb200, tmp_path):
    source = tmp_path / "topo.xml"
    shutil.copy(SAMPLE, source)
    profile = _profile(topo_source=str(source))
    host = _apply(gb200, profile)
    assert host.status == "ok", host.message
    assert (gb200 / TOPO[1:]).read_bytes() == SAMPLE.read_bytes()
    assert (gb200 / TOPO[1:]).stat().st_mode & 0o777 == 0o644
    assert (gb200 / "etc/nccl.conf").read_text() == f"NCCL_TOPO_FILE={TOPO}\n"
    assert not (gb200 / "etc/enroot").exists()  # no enroot on this host: nothing carried
    facts = gather_facts(Sysroot(str(gb200)), ["runtime"])["runtime"]["nccl_topo_file"]
    assert facts["value"] == TOPO and facts["parse"]["valid"]
    assert facts["gpus_missing_on_host"]  # an H100 file on a GB200 host is reported
    again = _apply(gb200, profile)
    assert again.status == "ok" and _changed(again) == []


@pytest.mark.parametrize("playbook", [ROLE, APPLY], ids=["role", "apply-playbook"])
def test_per_host_template_is_rendered_and_installed(gb200, tmp_path, playbook):
    template = tmp_path / "topo.xml.j2"
    template.write_text('<system version="1" name="{{ inventory_hostname }}">\n'
                        '  <cpu numaid="0" arch="arm64"/>\n</system>\n')
    host = _run(playbook, gb200, hostvars={"runtime_topo_template": str(template)})
    assert host.status == "ok", host.message
    assert (gb200 / TOPO[1:]).read_text() == \
        '<system version="1" name="localhost">\n  <cpu numaid="0" arch="arm64"/>\n</system>\n'


def test_h100_enroot_carries_the_topology_and_the_check_passes(h100):
    profile = _profile()
    assert _statuses(h100, profile)["runtime.topo-in-container"] == "fail"
    host = _apply(h100, profile)
    assert host.status == "ok", host.message
    assert (h100 / ENVIRON).read_text() == f"NCCL_TOPO_FILE={TOPO}\n"
    assert (h100 / MOUNT).read_text() == \
        f"{TOPO} {TOPO} none x-create=file,bind,ro,nosuid,nodev,noexec,private\n"
    statuses = _statuses(h100, profile)
    for check in ("runtime.topo-file", "runtime.topo-in-container", "runtime.stale-nccl-conf"):
        assert statuses[check] == "pass", check
    again = _apply(h100, profile)
    assert again.status == "ok" and _changed(again) == []


def test_check_mode_writes_nothing_and_keeps_no_journal(h100):
    before = tree_hash(h100)
    host = _apply(h100, check=True)
    assert host.status == "ok", host.message
    assert _changed(host)  # the enroot files would be written
    assert tree_hash(h100) == before
    assert not (h100 / JOURNAL).exists()


def test_restore_puts_the_tree_back_byte_for_byte(h100):
    before = tree_hash(h100)
    (h100 / "etc/nccl.conf").write_text(
        "# site NCCL defaults\nNCCL_TOPO_FILE=/opt/old-topo.xml\nNCCL_GRAPH_FILE=/gone.xml\n"
        "NCCL_IB_QPS_PER_CONNECTION=1\n")
    stale = tree_hash(h100)
    assert _statuses(h100, _profile())["runtime.stale-nccl-conf"] == "warn"
    host = _apply(h100)
    assert host.status == "ok", host.message
    # enroot is installed here: its environ.d entry carries NCCL_TOPO_FILE, the host file keeps
    # only what it had that is not stale
    assert (h100 / "etc/nccl.conf").read_text() == \
        "# site NCCL defaults\nNCCL_IB_QPS_PER_CONNECTION=1\n"
    assert _statuses(h100, _profile())["runtime.stale-nccl-conf"] == "pass"
    restored = _run(RESTORE, h100)
    assert restored.status == "ok" and restored.changed, restored.message
    again = _run(RESTORE, h100)
    assert again.status == "ok" and not again.changed
    shutil.rmtree(h100 / JOURNAL)
    for empty in ("var/lib", "var"):
        if not any((h100 / empty).iterdir()):
            (h100 / empty).rmdir()
    assert tree_hash(h100) == stale != before


def test_restore_after_installing_a_file_removes_it(gb200, tmp_path):
    before = _files_hash(gb200)
    source = tmp_path / "topo.xml"
    shutil.copy(SAMPLE, source)
    assert _apply(gb200, _profile(topo_source=str(source))).status == "ok"
    assert _run(RESTORE, gb200).status == "ok"
    assert not (gb200 / TOPO[1:]).exists() and not (gb200 / "etc/nccl.conf").exists()
    assert _files_hash(gb200) == before


@pytest.mark.parametrize("content, reason", [
    ('<system version="2"><cpu/></system>\n', "wrong version 2, 1 needed"),
    ("<topology/>\n", "root element is <topology>"),
    (BOMB, "unsafe XML refused"),
    ("<system version='1'>\n", "malformed XML"),
])
def test_invalid_topology_is_refused_and_nothing_is_written(h100, tmp_path, content, reason):
    source = tmp_path / "bad.xml"
    source.write_text(content)
    before = tree_hash(h100)
    host = _apply(h100, _profile(topo_source=str(source)))
    assert host.status == "failed"
    assert host.message.startswith(f"runtime.topo_file: {TOPO}: refusing to install: "), \
        host.message
    assert reason in host.message and host.message.endswith("; nothing was changed")
    assert tree_hash(h100) == before


def test_no_source_and_no_file_on_the_host_fails_naming_the_variable(gb200):
    before = tree_hash(gb200)
    host = _apply(gb200)
    assert host.status == "failed"
    assert host.message.startswith(
        f"runtime.topo_file: {TOPO}: absent on this host and no topology was given")
    assert "runtime_topo_source" in host.message
    assert tree_hash(gb200) == before


def test_unreadable_source_fails_naming_the_variable(gb200, tmp_path):
    before = tree_hash(gb200)
    host = _apply(gb200, _profile(topo_source=str(tmp_path / "absent.xml")))
    assert host.status == "failed"
    assert host.message.endswith(f"runtime_topo_source {tmp_path / 'absent.xml'} is missing "
                                 "or empty on the controller")
    assert tree_hash(gb200) == before


def test_no_container_requirement_skips_the_enroot_files(h100):
    host = _apply(h100, _profile(require_in_container=False))
    assert host.status == "ok", host.message
    assert not (h100 / ENVIRON).exists() and not (h100 / MOUNT).exists()
    assert _changed(host) == []


def test_profile_without_topology_file_removes_every_topo_line(h100):
    profile = {"name": "none", "runtime": {"nccl_topo_file": None}}
    host = _apply(h100, profile)
    assert host.status == "ok", host.message
    assert (h100 / "etc/nccl.conf").read_text() == \
        "# site NCCL defaults\nNCCL_IB_QPS_PER_CONNECTION=1\n"
    assert (h100 / TOPO[1:]).exists()  # the file itself is left alone
    assert not (h100 / ENVIRON).exists()
    assert _statuses(h100, profile)["runtime.topo-file"] == "pass"

