"""exemplar.tune.layer through real ansible-runner on fixture sysroot copies: check mode
writes nothing (owners and mtimes included), owners and modes survive apply and restore, a
knob failing mid-layer puts the whole layer back, and the bootloader rebuild runs at apply and
again at restore."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from tests.conftest import REPO
from tests.helpers import copy_sysroot, tree_state

PROFILE = {"name": "t",
           "cpu": {"deep_cstates": True, "governor": "performance", "turbo": True,
                   "housekeeping_confined": True, "housekeeping_cpus": "0,4",
                   "numa_balancing": 0},
           "fabric": {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4"}},
           "gpu": {"persistence_mode": True},
           "vm": {"iommu_default_domain": "DMA"}}
VARIABLES = {"cpu_housekeeping_allow_job_units": True}
LAYERS = ["gpu", "vm", "cpu", "runtime", "fabric"]
JOURNAL = "var/lib/exemplar-tune"
OWNED = {"etc/default/irqbalance": (1234, 5678, 0o640), "etc/nccl.conf": (4321, 8765, 0o600)}


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """h100-x86 with two group-owned config files and a value file without a final newline."""
    root = copy_sysroot("h100-x86", tmp_path)
    for rel, (uid, gid, mode) in OWNED.items():
        os.chown(root / rel, uid, gid)
        os.chmod(root / rel, mode)
    (root / "sys/devices/system/cpu/cpufreq/policy3/scaling_governor").write_bytes(b"powersave")
    return root


def _layer(root: Path, layers: list[str], check: bool = False, run_id: str | None = "r1",
           **variables):
    args = {"layers": layers, "profile": PROFILE, "variables": {**VARIABLES, **variables},
            "sysroot": str(root)}
    if run_id and not check:
        args["run_id"] = run_id
    outcome = AnsibleRun(local_inventory(), timeout=300, check=check).module(
        "exemplar.tune.layer", args)
    return outcome.hosts["localhost"]


def _restore(root: Path):
    outcome = AnsibleRun(local_inventory(), timeout=300).playbook(
        REPO / "playbooks/restore.yml", {"exemplar_run_id": "r1", "exemplar_sysroot": str(root)})
    return outcome.hosts["localhost"]


def _content(state: dict) -> dict:
    """Paths with type, mode, owner, group and bytes (no mtimes), outside the journal."""
    return {p: (v[0], v[1], v[2], v[4]) for p, v in state.items() if not p.startswith("var")}


def _result(host) -> dict:
    return host.tasks[-1]["result"]


def test_audit_of_every_layer_is_one_call_and_writes_nothing(host):
    before = tree_state(host)
    result = _layer(host, LAYERS, check=True)
    assert result.status == "ok" and result.changed, result.message
    assert len(result.tasks) == 1
    knobs = {f"{k['layer']}.{k['knob']}" for k in _result(result)["knobs"] if k["changed"]}
    assert {"gpu.persistence_mode", "vm.iommu_passthrough", "cpu.deep_cstates",
            "cpu.governor", "cpu.housekeeping", "fabric.nccl_conf"} <= knobs
    assert tree_state(host) == before  # contents, modes, owners and mtimes, journal included


def test_owners_and_modes_survive_apply_and_restore_byte_exact(host):
    before = _content(tree_state(host))
    applied = _layer(host, ["cpu", "fabric"])
    assert applied.status == "ok" and applied.changed, applied.message
    for rel, (uid, gid, mode) in OWNED.items():
        info = (host / rel).stat()
        assert (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (uid, gid, mode), rel
    assert b"NCCL_IB_QPS_PER_CONNECTION=4" in (host / "etc/nccl.conf").read_bytes()
    again = _layer(host, ["cpu", "fabric"])
    assert again.status == "ok" and not any(k["changed"] for k in _result(again)["knobs"])
    restored = _restore(host)
    assert restored.status == "ok" and restored.changed, restored.message
    assert _content(tree_state(host)) == before
    policy3 = host / "sys/devices/system/cpu/cpufreq/policy3/scaling_governor"
    assert policy3.read_bytes() == b"powersave"  # no newline added on the way back


def test_a_knob_failing_mid_layer_leaves_the_host_as_it_was(host):
    """tuned is the 3rd cpu knob: the idle states and the udev rule before it are put back."""
    mode = host / "etc/tuned/profile_mode"
    mode.unlink()
    mode.mkdir()
    before = _content(tree_state(host))
    result = _layer(host, ["cpu"])
    assert result.status == "failed"
    assert result.message.startswith("cpu.tuned_profile: /etc/tuned/profile_mode: ")
    assert _result(result)["knob"] == "cpu.tuned_profile"
    assert _content(tree_state(host)) == before


def test_bootloader_rebuild_runs_at_apply_and_again_at_restore(host, tmp_path):
    """On a sysroot the rebuild runs only when a command is given: here a script that logs
    the kernel arguments it finds, as update-grub would read them."""
    log = tmp_path / "rebuilds.log"
    script = tmp_path / "rebuild.py"
    script.write_text("import sys\nfrom pathlib import Path\n"
                      "grub = Path(sys.argv[2]).read_text()\n"
                      "line = next(l for l in grub.splitlines()\n"
                      "            if l.startswith('GRUB_CMDLINE_LINUX='))\n"
                      "with open(sys.argv[1], 'a') as out:\n    out.write(line + '\\n')\n")
    command = [sys.executable, str(script), str(log), str(host / "etc/default/grub")]
    original = next(line for line in (host / "etc/default/grub").read_text().splitlines()
                    if line.startswith("GRUB_CMDLINE_LINUX="))
    applied = _layer(host, ["vm"], exemplar_bootloader_command=command)
    assert applied.status == "ok" and applied.changed, applied.message
    assert log.read_text().splitlines() == ['GRUB_CMDLINE_LINUX="intel_iommu=on iommu.strict=1"']
    restored = _restore(host)
    assert restored.status == "ok" and restored.changed, restored.message
    assert log.read_text().splitlines()[-1] == original  # rebuilt from the restored defaults
    again = _restore(host)
    assert again.status == "ok" and len(log.read_text().splitlines()) == 2


def test_injected_profile_text_is_refused_before_anything_changes(host):
    before = tree_state(host)
    profile_text = {"cpu_deep_cstate_names_target": ["C6`touch /tmp/exemplar-pwned`"]}
    result = _layer(host, ["cpu"], **profile_text)
    assert result.status == "failed"
    assert result.message.startswith("cpu.deep_cstates: cpu.deep_cstate_names: ")
    assert tree_state(host) == before
    assert not Path("/tmp/exemplar-pwned").exists()


def test_missing_run_id_fails_in_one_line(host):
    before = tree_state(host)
    result = _layer(host, ["fabric"], run_id=None)
    assert result.status == "failed"
    assert result.message.startswith("run_id is required to change anything")
    assert tree_state(host) == before


def test_a_task_without_arguments_reads_the_host_variables(host: Path):
    """``exemplar.tune.layer: {}``: the layers, profile, sysroot and knob variables come from
    the host's variables (the action plugin, on the controller); a knob switched off there
    (cpu_governor: false) is left alone while the rest of the layer is audited."""
    hostvars = {"exemplar_sysroot": str(host), "exemplar_layers": ["cpu"],
                "exemplar_profile": PROFILE, **VARIABLES}

    def audit(**more):
        inventory = local_inventory(["localhost"], {"localhost": {**hostvars, **more}})
        outcome = AnsibleRun(inventory, timeout=300, check=True).module("exemplar.tune.layer", {})
        result = outcome.hosts["localhost"]
        assert result.status in ("ok", "changed"), result.message
        return {k["knob"] for k in result.tasks[-1]["result"]["knobs"] if k["changed"]}

    assert "governor" in audit()  # policy3 is powersave in the fixture
    assert "governor" not in audit(cpu_governor=False)
    assert audit(cpu_governor=False) == audit() - {"governor"}


def test_the_earlier_audit_layers_variable_still_chooses_the_layers(host: Path):
    hostvars = {"exemplar_sysroot": str(host), "exemplar_audit_layers": ["fabric"],
                "exemplar_profile": PROFILE, **VARIABLES}
    outcome = AnsibleRun(local_inventory(["localhost"], {"localhost": hostvars}), timeout=300,
                         check=True).module("exemplar.tune.layer", {})
    result = outcome.hosts["localhost"]
    assert result.status in ("ok", "changed"), result.message
    assert [layer["layer"] for layer in result.tasks[-1]["result"]["layers"]] == ["fabric"]


def test_a_knob_variable_by_its_earlier_name_is_read_with_a_deprecation(host: Path):
    """``vm_iommu_default_domain`` (now ``vm_iommu_default_domain_target``) still overrides the
    profile, with a deprecation warning; given both, the new name wins."""
    def planned(**variables):
        result = _layer(host, ["vm"], check=True, **variables)
        assert result.status in ("ok", "changed"), result.message
        task = result.tasks[-1]["result"]
        return ([d["after"] for d in task["diff"]],
                [d["msg"] for d in task.get("deprecations") or []])

    new, none = planned(vm_iommu_default_domain_target="identity")
    old, warned = planned(vm_iommu_default_domain="identity")
    profile_only, _ = planned()
    assert new == old != profile_only and none == []
    assert warned == ["vm_iommu_default_domain is renamed vm_iommu_default_domain_target"]
    assert planned(vm_iommu_default_domain="identity",
                   vm_iommu_default_domain_target="DMA")[0] == profile_only


def test_a_failing_layer_does_not_hide_the_other_layers(host):
    """The housekeeping knob refuses units holding Slurm jobs: the cpu layer fails; gpu, vm,
    runtime and fabric are still audited, and each layer's status says which is which."""
    before = tree_state(host)
    result = _layer(host, LAYERS, check=True, cpu_housekeeping_allow_job_units=False)
    assert result.status == "failed"
    assert result.message.startswith("cpu.housekeeping: system.slice: hold Slurm job cgroups")
    task = _result(result)
    assert {layer["layer"]: layer["status"] for layer in task["layers"]} == {
        "gpu": "ok", "vm": "ok", "cpu": "failed", "runtime": "ok", "fabric": "ok"}
    changed = {f"{k['layer']}.{k['knob']}" for k in task["knobs"] if k["changed"]}
    assert {"gpu.persistence_mode", "vm.iommu_passthrough", "fabric.nccl_conf"} <= changed
    assert not any(k.startswith("cpu.") for k in changed)
    assert tree_state(host) == before


def test_a_host_without_bootloader_defaults_applies_every_other_knob(host):
    (host / "etc/default/grub").unlink()
    applied = _layer(host, ["vm", "cpu"])
    assert applied.status == "ok", applied.message
    knobs = {f"{k['layer']}.{k['knob']}": k for k in _result(applied)["knobs"]}
    assert knobs["vm.iommu_passthrough"]["not_applicable"].startswith(
        "/etc/default/grub: not present")
    assert not knobs["vm.iommu_passthrough"]["changed"]
    assert knobs["cpu.governor"]["changed"] and knobs["cpu.governor"]["not_applicable"] is None
