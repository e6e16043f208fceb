"""The knob registry and its planners, on fixture sysroot trees (no Ansible, fast).

Planners only read: each test hashes the tree before and after planning. Injections are
tried against every planner that renders profile text into a file.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import KnobInputError
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
    AttrChange,
    FileChange,
    Regenerate,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.engine import (
    LayerFailed,
    plan_layer,
    run_layer,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.envfile import (
    edit_text,
    plan_env_file,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import file_mode
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.journal import Journal
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.planners.cpu import GUEST
from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    JOURNAL_SCOPES,
    LAYER_NAMES,
    LAYERS,
    ROLE_LAYERS,
    get_knob,
    get_layer,
    registered_knobs,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune import registry_docs
from exemplar_tune.checks.base import CHECKS, check
from exemplar_tune.profile import load_profile
from tests.conftest import REPO
from tests.helpers import cli_env, copy_sysroot, tree_hash

CPU = {"deep_cstates": True, "governor": "performance", "turbo": True,
       "housekeeping_confined": True, "housekeeping_cpus": "0,4", "numa_balancing": 0}
ALLOW_JOBS = {"cpu_housekeeping_allow_job_units": True}


@pytest.fixture
def h100(tmp_path: Path) -> Path:
    return copy_sysroot("h100-x86", tmp_path)


def _plan(root: Path, layer: str, section: dict, variables: dict | None = None,
          only: list[str] | None = None) -> dict[str, list]:
    before = tree_hash(root)
    planned = plan_layer(Sysroot(str(root)), get_layer(layer), {layer: section},
                         variables or {}, only)
    assert tree_hash(root) == before  # planning never writes
    return {p.knob.name: p.changes for p in planned if p.not_applicable is None}


# -- the registry -------------------------------------------------------------------------

def test_every_knob_is_declared_once_under_its_layer():
    assert len(registered_knobs()) == sum(len(layer.knobs) for layer in LAYERS)
    for layer in LAYERS:
        assert all(knob.layer == layer.name for knob in layer.knobs)
    assert ROLE_LAYERS == ("gpu", "vm", "cpu", "runtime", "fabric")
    assert all(layer.has_role == bool(layer.knobs) for layer in LAYERS)
    assert get_knob("cpu.deep_cstates").reboot is False
    assert get_knob("cpu.cstate_cmdline").reboot is True


def test_every_planner_and_hook_a_knob_names_exists():
    """Names are resolved when first used (after and advice only when a knob changed): a typo
    must fail here, not on a host."""
    for knob in registered_knobs().values():
        for function in (knob.planner, knob.after, knob.advice):
            if function is not None:
                assert callable(knob.resolve(function)), (knob.id, function)


def test_every_check_names_a_registered_knob():
    named = {c.knob for c in CHECKS if c.knob}
    assert named and named <= set(registered_knobs())


def test_a_check_naming_an_unregistered_knob_is_refused():
    with pytest.raises(ValueError, match="'cpu.no_such_knob' is not in the knob registry"):
        check("cpu.test-only", severity="low", title="t", risk="r", fix="f",
              knob="cpu.no_such_knob")


@pytest.mark.parametrize("layer", ROLE_LAYERS)
def test_role_argument_specs_document_every_knob_variable_with_its_default(layer):
    specs = yaml.safe_load((REPO / "roles" / layer / "meta/argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    for knob in get_layer(layer).knobs:
        assert options[knob.switch].get("default") is True, knob.switch
        for name in knob.overrides:
            assert name in options, name
        for setting in knob.settings:
            assert setting.name in options, setting.name
            if "default" in options[setting.name] and setting.default is not None:
                assert options[setting.name]["default"] == setting.default, setting.name


def _documentation(path: str) -> dict:
    return yaml.safe_load((REPO / path).read_text().split('DOCUMENTATION = r"""', 1)[1]
                          .split('"""', 1)[0])


def test_module_docs_offer_the_registry_as_layer_choices():
    knob = _documentation("plugins/doc_fragments/knob.py")["options"]["layer"]["choices"]
    assert tuple(knob) == JOURNAL_SCOPES
    layer = _documentation("plugins/modules/layer.py")["options"]["layers"]["choices"]
    assert tuple(layer) == ROLE_LAYERS
    facts = _documentation("plugins/modules/facts.py")["options"]["layers"]
    assert tuple(facts["choices"]) == tuple(facts["default"]) == LAYER_NAMES


# -- planners -------------------------------------------------------------------------------

def test_deep_cstates_enables_the_state_by_name_on_every_cpu(h100):
    changes = _plan(h100, "cpu", CPU, ALLOW_JOBS, ["deep_cstates"])["deep_cstates"]
    attrs = [c for c in changes if isinstance(c, AttrChange)]
    assert len(attrs) == 8 and all(c.path.endswith("/state3/disable") and c.value == "0"
                                   for c in attrs)


def test_deep_cstates_writes_a_rule_without_a_shell_where_the_driver_disables_it(h100):
    for cpu in range(8):
        (h100 / f"sys/devices/system/cpu/cpu{cpu}/cpuidle/state3/default_status").write_text(
            "disabled\n")
    rule = next(c for c in _plan(h100, "cpu", CPU, None, ["deep_cstates"])["deep_cstates"]
                if isinstance(c, FileChange)).content.decode()
    assert 'ATTR{cpuidle/state3/name}=="C6", ATTR{cpuidle/state3/disable}="0"' in rule
    assert "RUN" not in rule and "sh" not in rule.split("\n", 2)[2]


@pytest.mark.parametrize("name", ["C6`touch /tmp/pwned`", "C6'; reboot; '", "C6\nRUN+=\"x\"",
                                  "C6|C1", "C*"])
def test_idle_state_names_that_could_change_the_rule_are_refused(h100, name):
    with pytest.raises(LayerFailed, match=r"^cpu\.deep_cstates: cpu\.deep_cstate_names: "):
        _plan(h100, "cpu", {**CPU, "deep_cstate_names": [name]}, None, ["deep_cstates"])


def _not_applicable(root: Path, layer: str, section: dict) -> dict[str, str]:
    planned = plan_layer(Sysroot(str(root)), get_layer(layer), {layer: section}, ALLOW_JOBS)
    return {p.knob.name: p.not_applicable for p in planned if p.not_applicable}


def test_a_name_the_host_reports_is_written_quoted_never_refused(h100):
    """The deepest state's name comes from the host: a name udev would read as syntax is
    matched through ``?`` wildcards (one character each), and the rest of the rule holds."""
    for cpu in range(8):
        state = h100 / f"sys/devices/system/cpu/cpu{cpu}/cpuidle/state3"
        (state / "name").write_text('C6 "deep"|*\n')
        (state / "default_status").write_text("disabled\n")
    rule = next(c for c in _plan(h100, "cpu", CPU, None, ["deep_cstates"])["deep_cstates"]
                if isinstance(c, FileChange)).content.decode()
    assert 'ATTR{cpuidle/state3/name}=="C6 ?deep???", ATTR{cpuidle/state3/disable}="0"' \
        in rule
    assert len(rule.splitlines()) == 2 + 4  # two comments, one line per state index


def test_a_guest_s_idle_states_are_not_applicable_and_the_layer_goes_on(h100):
    (h100 / "sys/devices/system/cpu/cpuidle/current_driver").write_text("haltpoll\n")
    assert _not_applicable(h100, "cpu", CPU) == {
        "deep_cstates": "/sys/devices/system/cpu/cpuidle/current_driver: cpuidle driver "
                        "haltpoll: a virtual machine's idle states do not set the physical "
                        "CPUs' C-states (set them on the hypervisor host)"}
    assert {"governor", "numa_balancing"} <= set(_plan(h100, "cpu", CPU, ALLOW_JOBS))
    (h100 / "sys/devices/system/cpu/cpuidle/current_driver").write_text("acpi_idle\n")
    cpuinfo = h100 / "proc/cpuinfo"
    cpuinfo.write_text(cpuinfo.read_text().replace("flags\t\t: ", "flags\t\t: hypervisor ", 1))
    assert _not_applicable(h100, "cpu", CPU)["deep_cstates"] == \
        f"/proc/cpuinfo: flag hypervisor: {GUEST}"
    cpuinfo.write_text(cpuinfo.read_text().replace("flags\t\t: hypervisor ", "flags\t\t: "))
    (h100 / "sys/class/dmi/id/sys_vendor").write_text("QEMU\n")  # an arm64 guest shows only DMI
    assert _not_applicable(h100, "cpu", CPU)["deep_cstates"].endswith(f"QEMU: {GUEST}")


def test_a_host_without_bootloader_defaults_skips_only_the_kernel_argument_knobs(h100):
    (h100 / "etc/default/grub").unlink()
    reason = ("/etc/default/grub: not present: this host's kernel arguments are not set by "
              "GRUB defaults (direct kernel, netboot or container boot)")
    assert _not_applicable(h100, "vm", {"iommu_default_domain": "identity"}) == {
        "iommu_passthrough": reason}
    assert _not_applicable(h100, "cpu", CPU) == {"cstate_cmdline": reason}
    assert {"deep_cstates", "governor"} <= set(_plan(h100, "cpu", CPU, ALLOW_JOBS))


def test_housekeeping_refuses_units_that_hold_slurm_jobs(h100):
    with pytest.raises(LayerFailed, match="system.slice: hold Slurm job cgroups"):
        _plan(h100, "cpu", CPU, None, ["housekeeping"])


def test_housekeeping_plans_cpusets_dropins_and_irqbalance(h100):
    changes = _plan(h100, "cpu", CPU, ALLOW_JOBS, ["housekeeping"])["housekeeping"]
    units = ("system.slice", "user.slice", "init.scope")
    assert {c.path: c.value for c in changes if isinstance(c, AttrChange)} == {
        f"sys/fs/cgroup/{u}/cpuset.cpus{tail}": "0,4" for u in units
        for tail in ("", ".effective")}  # in a sysroot the kernel's answer is modelled too
    files = {c.path: c for c in changes if isinstance(c, FileChange)}
    assert b'IRQBALANCE_BANNED_CPULIST="1-3,5-7"' in files["/etc/default/irqbalance"].content
    show = next(c for path, c in files.items() if path.endswith("systemctl-show-slices.txt"))
    assert show.content.decode().count("AllowedCPUs=0 4\nEffectiveCPUs=0 4\n") == 3
    # made effective: systemd reads the drop-ins, irqbalance reads its ban (recorded here)
    assert [(c.argv, c.run) for c in changes if isinstance(c, Regenerate)] == [
        (("systemctl", "daemon-reload"), False), (("systemctl", "try-restart", "irqbalance"),
                                                  False)]


@pytest.mark.parametrize(("cpus", "reason"), [("0-", "cpu.housekeeping_cpus"),
                                             ("0,4; rm -rf /", "cpu.housekeeping_cpus")])
def test_bad_cpulists_are_refused(h100, cpus, reason):
    with pytest.raises(LayerFailed, match=reason):
        _plan(h100, "cpu", {**CPU, "housekeeping_cpus": cpus}, ALLOW_JOBS, ["housekeeping"])


def test_turbo_uses_intel_pstate_no_turbo(h100):
    changes = _plan(h100, "cpu", {**CPU, "turbo": False}, None, ["turbo"])["turbo"]
    assert changes == [AttrChange("sys/devices/system/cpu/intel_pstate/no_turbo", "1")]


def test_cmdline_change_is_followed_by_a_journaled_bootloader_rebuild(h100):
    grub = h100 / "etc/default/grub"
    grub.write_text(grub.read_text().replace("quiet splash",
                                             "quiet splash intel_idle.max_cstate=1"))
    changes = _plan(h100, "cpu", CPU, {"exemplar_bootloader_command": ["/bin/true", "x"]},
                    ["cstate_cmdline"])["cstate_cmdline"]
    assert isinstance(changes[0], FileChange) and b"max_cstate" not in changes[0].content
    assert changes[1] == Regenerate("bootloader configuration", ("/bin/true", "x"))
    recorded = _plan(h100, "cpu", CPU, None, ["cstate_cmdline"])["cstate_cmdline"][1]
    assert recorded.run is False  # a sysroot without a command of its own: recorded, not run


@pytest.mark.parametrize("value", ["4\nNCCL_DEBUG=TRACE", "4\r", "4\x00"])
def test_nccl_values_with_line_breaks_are_refused(h100, value):
    with pytest.raises(LayerFailed, match=r"fabric\.nccl_conf: fabric\.nccl\.NCCL_IB_QPS"):
        _plan(h100, "fabric", {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": value}})


@pytest.mark.parametrize("key", ["NCCL_IB_QPS=4\nX", "LD_PRELOAD", "nccl_debug"])
def test_nccl_keys_outside_the_nccl_namespace_are_refused(h100, key):
    with pytest.raises(LayerFailed, match=r"fabric\.nccl_conf: fabric\.nccl: "):
        _plan(h100, "fabric", {"nccl": {key: "1"}})


@pytest.mark.parametrize("path", ["etc/nccl/topo.xml", "/etc/../root/.ssh/authorized_keys",
                                  "/etc/nccl//topo.xml", "/etc/nccl/topo xml", "/etc/nccl/\n"])
def test_topology_paths_must_be_absolute_and_clean(h100, path):
    with pytest.raises(LayerFailed, match=r"runtime\.nccl_conf: runtime\.nccl_topo_file: "):
        _plan(h100, "runtime", {"nccl_topo_file": path})


def test_two_knobs_editing_one_file_compose(h100):
    """runtime.nccl_conf drops stale lines and runtime.topo_file sets the key in the same
    /etc/nccl.conf: the second knob plans on top of the first."""
    conf = h100 / "etc/nccl.conf"
    conf.write_text("NCCL_TOPO_FILE=/old/topo.xml\nNCCL_IB_QPS_PER_CONNECTION=1\n")
    variables = {"runtime_require_in_container_target": False}
    plans = _plan(h100, "runtime", {"nccl_topo_file": "/etc/nccl/topo.xml"}, variables)
    stale = next(c for c in plans["nccl_conf"] if c.path == "/etc/nccl.conf")
    topo = next(c for c in plans["topo_file"] if c.path == "/etc/nccl.conf")
    assert stale.content == b"NCCL_IB_QPS_PER_CONNECTION=1\n"
    assert topo.content == b"NCCL_IB_QPS_PER_CONNECTION=1\nNCCL_TOPO_FILE=/etc/nccl/topo.xml\n"


def test_switched_off_knobs_are_not_planned(h100):
    off = {f"cpu_{k.name}": False for k in get_layer("cpu").knobs}
    assert _plan(h100, "cpu", CPU, off) == {}
    gpu = {"persistence_mode": False}  # h100-x86's GPUs have persistence on: a change
    assert list(_plan(h100, "gpu", gpu)) == ["persistence_mode"]
    assert _plan(h100, "gpu", gpu, {"gpu_persistence_mode": False}) == {}  # the switch
    with pytest.raises(HostStateError, match="cpu_governor: 'maybe' is not a boolean"):
        _plan(h100, "cpu", CPU, {"cpu_governor": "maybe"})



@pytest.mark.parametrize(("given", "mode"), [("0644", 0o644), ("640", 0o640), ("0755", 0o755),
                                             (420, 0o644), (0o600, 0o600)])
def test_file_mode_reads_what_ansible_takes(given, mode):
    assert file_mode(given, "m") == mode


@pytest.mark.parametrize("given", ["u+rw", "0999", "", "0644\n", True, -1, 0o10000, 6.44])
def test_file_mode_refuses_anything_else(given):
    with pytest.raises(KnobInputError, match="^m: .* is not a file mode"):
        file_mode(given, "m")


@pytest.mark.parametrize(("layer", "want", "message"), [
    ("runtime", {"nccl_topo_file": "/etc/${HOME}/topo.xml"}, "trailing '/', spaces, '$', '`'"),
    ("fabric", {"nccl": {"NCCL_DEBUG": "INFO\u2028NCCL_IB_HCA=x"}}, "holds a newline or control"),
])
def test_planners_refuse_what_a_reader_would_expand_or_break_lines_at(h100, layer, want,
                                                                      message):
    """The same checks hold without the controller's schema (a playbook of the user's own)."""
    with pytest.raises(HostStateError, match=re.escape(message)):
        _plan(h100, layer, want, {}, None)


def test_a_bad_topology_mode_is_refused_before_anything_is_planned(h100):
    with pytest.raises(HostStateError, match="runtime_topo_mode: .u[+]rw. is not a file mode"):
        _plan(h100, "runtime", {"nccl_topo_file": "/etc/nccl/topo.xml"},
              {"runtime_topo_mode": "u+rw"}, ["topo_file"])

def test_boolean_settings_take_only_booleans(h100):
    """A boolean setting (the safety override that lets housekeeping confine Slurm job units)
    is read as Ansible reads booleans: ``"no"`` is false, ``"maybe"`` is refused, never true."""
    only = ["housekeeping"]
    with pytest.raises(KnobInputError, match="cpu_housekeeping_allow_job_units: 'maybe' is "
                                             "not a boolean"):
        _plan(h100, "cpu", CPU, {"cpu_housekeeping_allow_job_units": "maybe"}, only)
    with pytest.raises(HostStateError, match="hold Slurm job cgroups"):
        _plan(h100, "cpu", CPU, {"cpu_housekeeping_allow_job_units": "no"}, only)
    assert _plan(h100, "cpu", CPU, {"cpu_housekeeping_allow_job_units": "yes"}, only)



def test_shipped_profiles_plan_on_their_trees(tmp_path):
    """Every shipped profile plans cleanly on a fixture of its platform."""
    for name, tree in (("h100-x86", "h100-x86"), ("gb200-grace", "gb200-grace-vm")):
        root = copy_sysroot(tree, tmp_path / name)
        profile = load_profile(name)
        for layer in ("gpu", "vm", "cpu", "fabric"):
            plan_layer(Sysroot(str(root)), get_layer(layer), profile, ALLOW_JOBS)


@pytest.mark.parametrize("profile", [
    {"fabric": {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4\nNCCL_DEBUG=TRACE"}}},
    {"fabric": {"nccl": {"LD_PRELOAD": "/tmp/x.so"}}},
    {"cpu": {"deep_cstate_names": ["C6`touch /tmp/exemplar-pwned`"]}},
    {"runtime": {"nccl_topo_file": "/etc/nccl/../../root/topo.xml"}},
    # enroot expands ${VAR} in environ.d, where the topology path goes
    {"runtime": {"nccl_topo_file": "/etc/${HOME}/topo.xml"}},
    {"runtime": {"nccl_topo_file": "/etc/nccl/topo\u2028.xml"}},
    # Python's splitlines (and so any reader of the file written in Python) breaks here
    {"fabric": {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4\u2028NCCL_DEBUG=TRACE"}}},
    {"fabric": {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4\x85NCCL_DEBUG=TRACE"}}},
])
def test_profile_injections_are_one_line_exit_2_before_anything_runs(h100, tmp_path, profile):
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump({"name": "site", **profile}))
    before = tree_hash(h100)
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "apply", "--layer",
                          next(iter(profile)), "--profile", str(path), "--sysroot", str(h100),
                          "--ledger", str(tmp_path / "ledger.db")],
                         capture_output=True, text=True, check=False, env=cli_env())
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "does not match" in out.stderr
    assert tree_hash(h100) == before and not (tmp_path / "ledger.db").exists()


def test_generated_files_are_up_to_date_with_the_registry():
    """The role argument specs, the profile schema and the README tables are generated;
    a declaration changed without regenerating fails here, naming the files."""
    assert [str(path.relative_to(REPO)) for path in registry_docs.stale()] == []


def test_the_generated_tables_list_every_knob_and_check_once():
    readme = (REPO / "README.md").read_text()

    def first_column(name: str) -> list[str]:
        block = readme.split(f"<!-- generated: {name} -->", 1)[1].split(f"<!-- end: {name} -->")[0]
        return [line.split("|")[1].strip().strip("`") for line in block.strip().splitlines()[2:]]

    knobs = first_column("knobs")
    assert knobs == list(registered_knobs())
    checks = first_column("checks")
    assert sorted(checks) == sorted(c.id for c in CHECKS) and len(set(checks)) == len(checks)


def test_a_stale_generated_file_is_named_and_fails_the_check(tmp_path, monkeypatch):
    schema = tmp_path / "schema.json"
    schema.write_text(registry_docs.SCHEMA.read_text().replace(
        '"maximum": 3', '"maximum": 9', 1))
    monkeypatch.setattr(registry_docs, "SCHEMA", schema)
    assert schema in registry_docs.stale()
    assert registry_docs.main(["--check"]) == 1


def test_the_schema_is_written_whole_so_a_removed_or_extra_key_is_stale(tmp_path, monkeypatch):
    """A knob whose declaration is gone takes its key with it; a key added by hand to the
    generated schema (one no declaration or base owns) fails --check."""
    import json

    base = json.loads(registry_docs.SCHEMA_BASE.read_text())
    whole = json.loads(registry_docs.profile_schema(base))
    assert "vm_max_map_count" in whole["properties"]["cpu"]["properties"]
    assert "vm_max_map_count" not in base["properties"]["cpu"]["properties"]
    knobs = {name: knob for name, knob in registered_knobs().items()
             if name != "cpu.vm_max_map_count"}
    monkeypatch.setattr(registry_docs, "registered_knobs", lambda: knobs)
    without = json.loads(registry_docs.profile_schema(base))
    assert "vm_max_map_count" not in without["properties"]["cpu"]["properties"]
    assert without["properties"]["cpu"]["properties"].keys() == \
        whole["properties"]["cpu"]["properties"].keys() - {"vm_max_map_count"}
    monkeypatch.undo()
    extra = json.loads(registry_docs.SCHEMA.read_text())
    extra["properties"]["gpu"]["properties"]["stale_key"] = {"type": "integer"}
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(extra, indent=2) + "\n")
    monkeypatch.setattr(registry_docs, "SCHEMA", schema)
    assert schema in registry_docs.stale()
    assert registry_docs.main(["--check"]) == 1


def test_a_key_owned_by_a_declaration_and_by_the_base_is_refused(tmp_path, monkeypatch):
    import json

    base = json.loads(registry_docs.SCHEMA_BASE.read_text())
    base["properties"]["cpu"]["properties"]["numa_balancing"] = {"type": "integer"}
    with pytest.raises(ValueError, match="cpu.numa_balancing is owned by knob "
                                         "cpu.numa_balancing: remove it from schema-base.json"):
        registry_docs.profile_schema(base)


@pytest.mark.parametrize("value", ["$(touch {marker})", "`touch {marker}`", '"; touch {marker}; "',
                                   "\\$(touch {marker})"])
def test_shell_env_values_are_literal_when_the_file_is_sourced(tmp_path, value):
    """A value written in the shell syntax is read back as written by sh, and runs nothing."""
    marker = tmp_path / "ran"
    value = value.format(marker=marker)
    text = edit_text("", {"KEY": value}, "shell")
    out = subprocess.run(["sh", "-c", '. "$0"; printf %s "$KEY"', str(_write(tmp_path, text))],
                         capture_output=True, text=True, check=True)
    assert out.stdout == value and not marker.exists()
    assert edit_text(text, {"KEY": value}, "shell") == text  # read back as the same value


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "env"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("settings", "what"), [({"KEY": "a\nEVIL=1"}, "KEY"),
                                                ({"KEY=1\nEVIL": "x"}, "key")])
def test_env_file_refuses_values_and_keys_that_add_lines(h100, settings, what):
    with pytest.raises(KnobInputError, match=what):
        plan_env_file(Sysroot(str(h100)), "/etc/default/irqbalance", settings, "shell")


def test_apply_defaults_to_the_profile_of_the_hosts_architecture(tmp_path):
    """On an aarch64 host ``--profile auto`` (the default) means gb200-grace: no x86 IOMMU
    target is planned there, while h100-x86 named explicitly would plan one."""
    root = copy_sysroot("gb200-grace-vm", tmp_path)

    def vm_knobs(*profile: str) -> tuple[str, list[str]]:
        out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "apply", "--layer", "vm",
                              "--check", "--sysroot", str(root), "--format", "json", *profile],
                             capture_output=True, text=True, check=False, env=cli_env())
        doc = json.loads(out.stdout)
        return doc["profile"], [k["knob"] for host in doc["hosts"].values()
                                for k in host["changed"]]

    assert vm_knobs() == ("auto", [])
    assert vm_knobs("--profile", "h100-x86") == ("h100-x86", ["iommu_passthrough"])


def test_a_layer_rebuilds_the_bootloader_once_after_all_its_kernel_argument_changes(tmp_path):
    """vm.cmdqv_params and vm.iommu_passthrough both edit grub: one rebuild, after both."""
    root = copy_sysroot("gb200-grace-vm", tmp_path)
    grub = root / "etc/default/grub"
    grub.write_text(grub.read_text().replace("init_on_alloc=0",
                                             "init_on_alloc=0 arm_smmu_v3.disable_cmdqv=1"))
    log = tmp_path / "rebuilds.log"
    command = [sys.executable, "-c", "import sys; open(sys.argv[1], 'a').write("
               "open(sys.argv[2]).read().count('disable_cmdqv') * 'x' + "
               "str('iommu.passthrough=1' in open(sys.argv[2]).read()) + '\\n')",
               str(log), str(grub)]
    sysroot = Sysroot(str(root))
    result = run_layer(sysroot, "vm", {"vm": {"require_cmdqv": True,
                                              "iommu_default_domain": "identity"}},
                       {"exemplar_bootloader_command": command}, Journal(sysroot, "r1"), False)
    assert [k["knob"] for k in result["knobs"] if k["changed"]] == ["cmdqv_params",
                                                                    "iommu_passthrough"]
    assert log.read_text() == "True\n"  # once, and it saw both edits
