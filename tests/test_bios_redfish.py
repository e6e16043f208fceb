"""BIOS C-state policy out of band: read, audit, apply, reset, restore against a real Redfish
service (the sushy-tools emulator with the BIOS driver of tests/redfish_emulator.py) on
loopback, over HTTPS with basic authentication, through the CLI and the playbooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.cpu_bios import bios_facts
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers import bios_attributes as ba
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bios import (
    choose_reset_type,
    snapshot_from_capture,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.bmc import (
    BmcConfig,
    RedfishError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.fleet.ansible_run import AnsibleRun
from tests.conftest import REPO, SYSROOTS
from tests.helpers import cli_env, copy_sysroot, tree_hash
from tests.redfish_emulator import (
    DELL_BIOS,
    DELL_LOCKS,
    GENERIC_BIOS,
    Emulator,
    free_port,
    make_certificate,
)

USER = "root"
PASSWORD = "Ex3mpl4r-bmc-S3cret"  # noqa: S105 - the emulator's test password
WRONG = "Wr0ng-bmc-passw0rd-123"  # noqa: S105
PROFILE = {"name": "bios-only", "cpu": {"bios": {"core_cstates": "enabled", "turbo": "enabled"}}}
CHANGED = {"ProcCStates": "Enabled", "SysProfile": "Custom"}
JOURNAL_DIR = "var/lib/exemplar-tune/journal"


# ---- fixtures and helpers --------------------------------------------------------------------

@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"))


def _emulator(tmp_path: Path, tls, bios, locks=None, apply_times=None):
    workdir = tmp_path / "bmc"
    workdir.mkdir()
    return Emulator(workdir, tls, USER, PASSWORD, bios, locks, apply_times).start()


@pytest.fixture
def bmc(tmp_path, tls):
    """A Dell-like BMC (iDRAC attribute names, SysProfile locks, OnReset apply time)."""
    emulator = _emulator(tmp_path, tls, DELL_BIOS, DELL_LOCKS, ["OnReset"])
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def generic_bmc(tmp_path, tls):
    """A BMC whose BIOS attribute names belong to no known vendor (no apply times either)."""
    emulator = _emulator(tmp_path, tls, GENERIC_BIOS)
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def work(tmp_path):
    """A copy of the h100-x86 host tree, a ledger directory and the profile file."""
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    return {"host": copy_sysroot("h100-x86", tmp_path), "profile": profile,
            "state": tmp_path / "state", "tmp": tmp_path}


def inventory(work, address: str, **hostvars) -> Path:
    """hosts.yml with one local host read inside the copied tree, its BMC at ``address``."""
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "exemplar_sysroot": str(work["host"]), "exemplar_bmc_address": address,
            "exemplar_bmc_user": USER, "exemplar_reboot_via": "redfish", **hostvars}
    path = work["tmp"] / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"node1": host}}}))
    return path


def cli(work, *args, password: str | None = PASSWORD, **env):
    """The exemplar-tune CLI as a subprocess (ledger in the test's state directory)."""
    environ = dict(cli_env(), EXEMPLAR_TUNE_STATE_DIR=str(work["state"]), **env)
    environ.pop("EXEMPLAR_BMC_PASSWORD", None)
    if password is not None:
        environ["EXEMPLAR_BMC_PASSWORD"] = password
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", *args], env=environ,
                         capture_output=True, text=True, check=False, timeout=300)
    assert "Traceback" not in out.stderr, out.stderr
    return out


def cpu_facts(work, inv: Path, **env) -> dict:
    out = cli(work, "facts", "-i", str(inv), "--layer", "cpu", "--format", "json", **env)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)["hosts"]["node1"]["cpu"]


def reboot(inv: Path):
    """playbooks/reboot.yml (the --allow-reboot path) on the inventory's hosts."""
    old = os.environ.get("EXEMPLAR_BMC_PASSWORD")
    os.environ["EXEMPLAR_BMC_PASSWORD"] = PASSWORD
    try:
        return AnsibleRun(str(inv), timeout=300).playbook(REPO / "playbooks" / "reboot.yml")
    finally:
        if old is None:
            os.environ.pop("EXEMPLAR_BMC_PASSWORD")
        else:
            os.environ["EXEMPLAR_BMC_PASSWORD"] = old


def journals(work) -> list[dict]:
    directory = work["host"] / JOURNAL_DIR
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))] \
        if directory.is_dir() else []


def secrets_absent(work, *outputs, secrets=(PASSWORD, WRONG)) -> None:
    """No password in any output, host journal or ledger file."""
    texts = [o.stdout + o.stderr for o in outputs]
    texts += [p.read_bytes().decode(errors="replace")
              for root in (work["host"] / "var", work["state"]) if root.exists()
              for p in root.rglob("*") if p.is_file()]
    for secret in secrets:
        assert all(secret not in text for text in texts), f"{secret} leaked"


# ---- read ------------------------------------------------------------------------------------

def test_facts_read_bios_over_redfish(bmc, work, tls):
    inv = inventory(work, bmc.address, exemplar_bmc_ca=str(tls[0]))
    cpu = cpu_facts(work, inv)
    bios = cpu["bios"]
    assert bios["present"] and bios["vendor"] == "dell" and bios["vendor_known"]
    assert bios["vendor_source"] == "attribute names"  # the emulator says "Sushy Emulator"
    assert {f: bios[f] for f in ba.FIELDS} == {
        "core_cstates": "disabled", "package_cstate": "disabled", "c1e": "disabled",
        "turbo": "enabled", "profile": "performance"}
    assert bios["raw"] == {k: DELL_BIOS[k] for k in (
        "ProcCStates", "PackageCStates", "ProcC1E", "ProcTurboMode", "SysProfile")}
    assert bios["pending"] == {} and bios["apply_times"] == ["OnReset"]
    assert cpu["sources"]["bios"] == f"{bmc.url}/redfish/v1 (Redfish)"
    assert "GracefulRestart" in bios["reset_types"]


def test_no_bmc_configured_and_captured_file(tmp_path):
    root = copy_sysroot("h100-x86", tmp_path)
    assert gather_facts(Sysroot(str(root)), ["cpu"])["cpu"]["bios"] == {
        "present": False, "reason": "no BMC configured"}
    capture = {"ServiceRoot": {"Vendor": "Dell"},
               "System": {"@odata.id": "/redfish/v1/Systems/System.Embedded.1",
                          "Manufacturer": "Dell Inc."},
               "Bios": {"@odata.id": "/redfish/v1/Systems/System.Embedded.1/Bios",
                        "Attributes": DELL_BIOS, "@Redfish.Settings": {"SettingsObject": {
                            "@odata.id": "/redfish/v1/Systems/System.Embedded.1/Bios/Settings"}}},
               "BiosSettings": {"Attributes": {"ProcC1E": "Enabled"}}}
    target = root / ".exemplar/commands/redfish-bios.json"
    target.write_text(json.dumps(capture))
    cpu = gather_facts(Sysroot(str(root)), ["cpu"])["cpu"]
    assert cpu["bios"]["vendor_source"] == "manufacturer"
    assert cpu["bios"]["c1e"] == "disabled" and cpu["bios"]["pending"] == {"c1e": "enabled"}
    assert cpu["sources"]["bios"] == "/.exemplar/commands/redfish-bios.json"
    target.write_text("{not json")
    cpu = gather_facts(Sysroot(str(root)), ["cpu"])["cpu"]
    assert cpu["bios"] is None and cpu["errors"][-1]["fact"] == "bios"


# ---- audit (check mode), apply, reset, restore -----------------------------------------------

def test_audit_and_check_mode_write_nothing(bmc, work, tls):
    inv = inventory(work, bmc.address, exemplar_bmc_ca=str(tls[0]))
    before, tree = bmc.state_bytes(), tree_hash(work["host"])
    audit = cli(work, "audit", "-i", str(inv), "--layer", "cpu", "--profile", str(work["profile"]))
    assert audit.returncode == 1, audit.stdout + audit.stderr
    assert "DRIFT  cpu/bios  1/1 hosts" in audit.stdout
    assert "DRIFT  cpu/bios  1/1 hosts  node1\n" in audit.stdout
    assert f"        {bmc.url}/redfish/v1/Systems/" in audit.stdout
    assert "          -ProcCStates=Disabled\n          +ProcCStates=Enabled\n" in audit.stdout
    check = cli(work, "apply", "--layer", "cpu", "-i", str(inv), "--profile",
                str(work["profile"]), "--check", "--diff")
    assert check.returncode == 0 and "would change bios; REBOOT REQUIRED" in check.stdout
    assert "-ProcCStates=Disabled" in check.stdout and "+ProcCStates=Enabled" in check.stdout
    assert bmc.state_bytes() == before and bmc.state()["patches"] == []
    assert tree_hash(work["host"]) == tree and journals(work) == []
    secrets_absent(work, audit, check)


def test_apply_pending_reset_restore_round_trip(bmc, work, tls):
    inv = inventory(work, bmc.address, exemplar_bmc_ca=str(tls[0]))
    profile = str(work["profile"])
    applied = cli(work, "apply", "--layer", "cpu", "-i", str(inv), "--profile", profile)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "changed bios; REBOOT REQUIRED" in applied.stdout
    state = bmc.state()
    assert state["bios"] == DELL_BIOS and state["pending"] == CHANGED
    assert state["patches"] == [{"Attributes": CHANGED, "ApplyTime": "OnReset"}]
    (entry,) = journals(work)[0]["entries"]
    assert entry["kind"] == "redfish" and entry["bmc"] == bmc.url
    assert entry["previous"] == {"ProcCStates": "Disabled", "ProcTurboMode": "Enabled",
                                 "SysProfile": "PerfOptimized"}

    bios = cpu_facts(work, inv)["bios"]  # pending shown until the reset
    assert bios["core_cstates"] == "disabled"
    assert bios["pending"] == {"core_cstates": "enabled", "profile": "custom"}
    again = cli(work, "apply", "--layer", "cpu", "-i", str(inv), "--profile", profile)
    assert again.returncode == 0 and "changed nothing" in again.stdout
    assert len(bmc.state()["patches"]) == 1  # pending already equal: idempotent

    assert reboot(inv).status == "successful"
    state = bmc.state()
    assert state["resets"] == ["GracefulRestart"] and state["pending"] == {}
    assert state["bios"] == {**DELL_BIOS, **CHANGED}
    bios = cpu_facts(work, inv)["bios"]
    assert bios["core_cstates"] == "enabled" and bios["pending"] == {}

    restored = cli(work, "restore", "--run", "latest")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "cpu node1 (1/1): 1 change(s) put back" in restored.stdout
    assert "REBOOT REQUIRED on node1 to take effect: " in restored.stdout  # staged again
    # the preset profile is put back alone: the BIOS refuses writes to what it locks, and
    # brings the preset's own values (ProcCStates=Disabled ...) at the next boot
    assert bmc.state()["pending"] == {"SysProfile": "PerfOptimized"}
    assert reboot(inv).status == "successful"
    assert bmc.state()["bios"] == DELL_BIOS and bmc.state()["pending"] == {}  # exact originals
    patches = len(bmc.state()["patches"])
    assert cli(work, "restore", "--run", "latest").returncode == 0
    assert len(bmc.state()["patches"]) == patches  # restoring twice changes nothing
    secrets_absent(work, applied, again, restored)


def test_preflight_reconciles_bios_and_os(bmc, work, tls):
    inv = inventory(work, bmc.address, exemplar_bmc_ca=str(tls[0]))
    profile = {"name": "deep", "cpu": {"deep_cstates": True, "bios": {"turbo": "enabled"}}}
    path = work["tmp"] / "deep.yaml"
    path.write_text(yaml.safe_dump(profile))
    out = cli(work, "preflight", "-i", str(inv), "--profile", str(path), "--layer", "cpu",
              "--format", "json")
    (result,) = [r for r in json.loads(out.stdout)["hosts"]["node1"]["results"]
                 if r["id"] == "cpu.bios-cstates"]
    assert result["status"] == "fail"
    assert "BIOS core_cstates=disabled (ProcCStates=Disabled), profile wants enabled" in \
        result["detail"]
    assert result["evidence"][0] == f"{bmc.url}/redfish/v1 (Redfish)"


# ---- failures ------------------------------------------------------------------------------

def test_wrong_password_is_one_clear_line_and_never_shown(bmc, work, tls):
    inv = inventory(work, bmc.address, exemplar_bmc_ca=str(tls[0]))
    out = cli(work, "apply", "--layer", "cpu", "-i", str(inv), "--profile",
              str(work["profile"]), password=WRONG)
    assert out.returncode == 1
    (line,) = [x for x in out.stdout.splitlines() if "FAILED" in x]
    assert line.strip() == (f"node1: FAILED: cpu.bios: {bmc.url}: authentication failed (HTTP "
                            "401) for user 'root': check exemplar_bmc_user and "
                            "exemplar_bmc_password (or EXEMPLAR_BMC_PASSWORD); nothing was "
                            "changed")
    facts = cli(work, "facts", "-i", str(inv), "--layer", "cpu", "--format", "json",
                password=WRONG)
    cpu = json.loads(facts.stdout)["hosts"]["node1"]["cpu"]
    assert cpu["bios"] is None
    assert [e for e in cpu["errors"] if e["fact"] == "bios"][0]["error"].startswith(
        "authentication failed (HTTP 401)")
    assert bmc.state()["patches"] == []
    secrets_absent(work, out, facts)


def test_unreachable_bmc_is_a_clear_error(work):
    port = free_port()
    inv = inventory(work, f"127.0.0.1:{port}")
    out = cli(work, "apply", "--layer", "cpu", "-i", str(inv), "--profile", str(work["profile"]),
              "--check")
    assert out.returncode == 1
    assert (f"node1: FAILED: cpu.bios: https://127.0.0.1:{port}: cannot connect: Connection "
            "refused") in \
        out.stdout


def test_untrusted_certificate_then_pinned_ca(bmc, work, tls):
    inv = inventory(work, bmc.address)
    out = cli(work, "apply", "--layer", "cpu", "-i", str(inv), "--profile", str(work["profile"]),
              "--check")
    assert out.returncode == 1
    assert (f"node1: FAILED: cpu.bios: {bmc.url}: TLS certificate not trusted (self-signed "
            "certificate): "
            "pin the BMC's CA with exemplar_bmc_ca=/path/ca.pem") in out.stdout
    pinned = inventory(work, bmc.address, exemplar_bmc_ca=str(tls[0]))
    assert cpu_facts(work, pinned)["bios"]["vendor"] == "dell"
    unverified = inventory(work, bmc.address, exemplar_bmc_validate_certs=False)
    assert cpu_facts(work, unverified)["bios"]["vendor"] == "dell"


def test_unknown_vendor_is_read_raw_and_never_changed(generic_bmc, work, tls):
    inv = inventory(work, generic_bmc.address, exemplar_bmc_ca=str(tls[0]))
    bios = cpu_facts(work, inv)["bios"]
    assert bios["vendor"] == "unknown" and not bios["vendor_known"]
    assert bios["raw"] == GENERIC_BIOS and bios["core_cstates"] is None
    before = generic_bmc.state_bytes()
    out = cli(work, "apply", "--layer", "cpu", "-i", str(inv), "--profile", str(work["profile"]))
    assert out.returncode == 1
    assert (f"node1: FAILED: cpu.bios: {generic_bmc.url}: BMC vendor unknown (manufacturer 'Sushy "
            "Emulator'): BIOS attributes are reported raw but not changed") in out.stdout
    assert generic_bmc.state_bytes() == before


def test_vaulted_password(bmc, work, tls):
    vault_pass = work["tmp"] / "vault-pass"
    vault_pass.write_text("vault-test-key\n")
    bindir = os.path.dirname(sys.executable)
    encrypted = subprocess.run(
        [f"{bindir}/ansible-vault", "encrypt_string", "--vault-password-file", str(vault_pass),
         PASSWORD, "--name", "exemplar_bmc_password"],
        capture_output=True, text=True, check=True, env=cli_env()).stdout
    inv = inventory(work, bmc.address, exemplar_bmc_ca=str(tls[0]))
    text = inv.read_text() + "".join(f"      {line}\n" for line in encrypted.splitlines())
    inv.write_text(text)
    cpu = cpu_facts(work, inv, password=None, ANSIBLE_VAULT_PASSWORD_FILE=str(vault_pass))
    assert cpu["bios"]["vendor"] == "dell"


# ---- the vendor map on real attribute sets ----------------------------------------------------

# Excerpts of captured BMC responses (sources in plugins/module_utils/readers/bios_attributes.py).
SAMPLES = {
    "dell": ({"ProcCStates": "Disabled", "ProcC1E": "Disabled", "ProcTurboMode": "Enabled",
              "SysProfile": "PerfOptimized"},
             {"core_cstates": "disabled", "package_cstate": None, "c1e": "disabled",
              "turbo": "enabled", "profile": "performance"}),
    "hpe": ({"MinProcIdlePower": "NoCStates", "MinProcIdlePkgState": "NoState",
             "ProcTurbo": "Enabled", "WorkloadProfile": "GeneralPowerEfficientCompute"},
            {"core_cstates": "disabled", "package_cstate": "disabled", "c1e": None,
             "turbo": "enabled", "profile": "efficiency"}),
    "lenovo": ({"Processors_CStates": "Autonomous", "Processors_C1EnhancedMode": "Enabled",
                "Processors_TurboMode": "Enabled",
                "OperatingModes_ChooseOperatingMode": "Efficiency_FavorPerformance"},
               {"core_cstates": "enabled", "package_cstate": None, "c1e": "enabled",
                "turbo": "enabled", "profile": "balanced"}),
    "supermicro": ({"CPUC6Report_3D22": "Auto", "EnhancedHaltState_C1E__3D23": "Enable",
                    "PackageCState_3D25": "Auto", "TurboMode_3D06": "Enable",
                    "PowerTechnology_FF77": "Custom"},
                   {"core_cstates": "enabled", "package_cstate": "auto", "c1e": "enabled",
                    "turbo": "enabled", "profile": "custom"}),
}


@pytest.mark.parametrize("vendor", sorted(SAMPLES))
def test_vendor_map_reads_real_attribute_sets(vendor):
    attributes, want = SAMPLES[vendor]
    assert ba.vendor_by_attributes(attributes) == vendor
    have = ba.normalise(ba.VENDORS[vendor], attributes)
    assert {f: have[f] for f in ba.FIELDS} == want


@pytest.mark.parametrize("manufacturer, vendor", [
    ("Dell Inc.", "dell"), ("HPE", "hpe"), ("Hewlett Packard Enterprise", "hpe"),
    ("Lenovo", "lenovo"), ("Supermicro", "supermicro"), ("Sushy Emulator", None)])
def test_vendor_by_manufacturer(manufacturer, vendor):
    assert ba.vendor_by_name(manufacturer) == vendor


@pytest.mark.parametrize("vendor, target, want", [
    ("dell", {"core_cstates": "enabled"}, {"ProcCStates": "Enabled", "SysProfile": "Custom"}),
    ("dell", {"profile": "efficiency"}, {"SysProfile": "PerfPerWattOptimizedDapc"}),
    ("hpe", {"core_cstates": "enabled", "package_cstate": "enabled"},
     {"MinProcIdlePower": "C6", "MinProcIdlePkgState": "C6Retention", "WorkloadProfile": "Custom"}),
    ("supermicro", {"core_cstates": "disabled", "turbo": "disabled"},
     {"CPUC6Report_3D22": "Disable", "TurboMode_3D06": "Disable"}),
])
def test_translate_to_vendor_attributes(vendor, target, want):
    attributes = SAMPLES[vendor][0]
    have = ba.translate(ba.VENDORS[vendor], attributes, target, "bmc")
    assert {k: v for k, v in have.items() if attributes.get(k) != v} == want


def test_translate_follows_the_spelling_in_use():
    old_xcc = {"Processors_CStates": "Disable", "Processors_C1EnhancedMode": "Disable",
               "OperatingModes_ChooseOperatingMode": "CustomMode"}
    have = ba.translate(ba.LENOVO, old_xcc, {"c1e": "enabled"}, "bmc")
    assert have["Processors_C1EnhancedMode"] == "Enable"


@pytest.mark.parametrize("vendor, target, message", [
    ("dell", {"core_cstates": "enabled", "profile": "performance"},
     "dell: core_cstates can only be set with the custom profile (SysProfile)"),
    ("hpe", {"c1e": "disabled"}, "hpe: no BIOS attribute for c1e in the attribute map"),
    ("dell", {"package_cstate": "enabled"}, "dell: this BIOS does not offer PackageCStates"),
    ("dell", {"core_cstates": "C1E"}, "dell ProcCStates cannot be set to core_cstates=C1E"),
])
def test_translate_refuses_what_it_cannot_express(vendor, target, message):
    with pytest.raises(ba.BiosMapError, match="^bmc: ") as err:
        ba.translate(ba.VENDORS[vendor], SAMPLES[vendor][0], target, "bmc")
    assert message in str(err.value)


@pytest.mark.parametrize("values, want", [
    ({"SysProfile": "PerfOptimized", "ProcCStates": "Disabled"}, {"SysProfile": "PerfOptimized"}),
    ({"SysProfile": "Custom", "ProcCStates": "Enabled"},
     {"SysProfile": "Custom", "ProcCStates": "Enabled"}),
    ({"ProcC1E": "Disabled"}, {}),  # the profile in force is a preset: C1E is locked
])
def test_a_preset_profile_is_written_alone(values, want):
    assert ba.unlocked(ba.DELL, SAMPLES["dell"][0], values) == want


@pytest.mark.parametrize("power, allowed, wanted, want", [
    ("On", ["On", "ForceOff", "GracefulRestart", "ForceRestart"], "auto", "GracefulRestart"),
    ("On", ["On", "ForceOff", "ForceRestart"], "auto", "ForceRestart"),
    ("On", [], "auto", "GracefulRestart"),  # not advertised
    ("Off", ["On", "ForceRestart"], "auto", "On"),
    ("On", ["ForceRestart"], "ForceRestart", "ForceRestart"),
])
def test_reset_type_is_chosen_from_the_allowed_values(power, allowed, wanted, want):
    snapshot = snapshot_from_capture({"System": {"PowerState": power}, "Bios": {}}, "bmc")
    assert choose_reset_type(snapshot, allowed, wanted) == want


def test_reset_type_not_allowed_is_refused():
    snapshot = snapshot_from_capture({"System": {"PowerState": "On"}, "Bios": {}}, "bmc")
    with pytest.raises(RedfishError, match="reset type GracefulRestart not allowed; the system "
                                           "accepts On, ForceOff"):
        choose_reset_type(snapshot, ["On", "ForceOff"], "GracefulRestart")
    with pytest.raises(RedfishError, match="allows no restart"):
        choose_reset_type(snapshot, ["On", "ForceOff"])


@pytest.mark.parametrize("address, base", [
    ("10.0.0.5", "https://10.0.0.5"), ("bmc7:8443", "https://bmc7:8443"),
    ("https://bmc7/", "https://bmc7"), ("http://bmc7:8000", "http://bmc7:8000")])
def test_bmc_address_forms(address, base):
    assert BmcConfig(address).base_url == base


def test_credentials_in_the_address_are_refused_without_echoing_them():
    with pytest.raises(RedfishError) as err:
        _ = BmcConfig(f"https://root:{PASSWORD}@bmc7").base_url
    assert PASSWORD not in str(err.value) and "exemplar_bmc_user" in str(err.value)
    assert PASSWORD not in repr(BmcConfig("bmc7", "root", PASSWORD))


def test_unknown_vendor_facts_are_raw():
    capture = {"System": {"Manufacturer": "Acme"}, "Bios": {"Attributes": GENERIC_BIOS}}
    facts = bios_facts(snapshot_from_capture(capture, "file"))
    assert facts["vendor"] == "unknown" and facts["raw"] == GENERIC_BIOS


# ---- the check, branch by branch -------------------------------------------------------------

def _facts(host: str, bios: dict | None) -> dict:
    facts = gather_facts(Sysroot(str(SYSROOTS / host)))
    facts["cpu"]["bios"] = bios
    facts["cpu"]["sources"]["bios"] = "https://bmc/redfish/v1 (Redfish)"
    return facts


def _bios(attributes: dict, pending: dict | None = None) -> dict:
    capture = {"System": {"Manufacturer": "Dell Inc."},
               "Bios": {"Attributes": attributes},
               "BiosSettings": {"Attributes": pending or {}}}
    return bios_facts(snapshot_from_capture(capture, "file"))


def _run(facts: dict, profile: dict):
    from exemplar_tune.checks import CHECKS

    (found,) = [c for c in CHECKS if c.id == "cpu.bios-cstates"]
    return found.func(facts, profile)


DEEP = {"name": "p", "cpu": {"deep_cstates": True}}
NO_DEEP_STATES = {"cpu.cpuidle": {"driver": "intel_idle", "states": [
    {"name": "POLL", "latency_us": 0, "disabled_cpus": []},
    {"name": "C1", "latency_us": 1, "disabled_cpus": []}]}}


@pytest.mark.parametrize("host, bios, edits, profile, status, detail", [
    ("healthy-h100", {"present": False, "reason": "no BMC configured"}, {}, DEEP, "skip",
     "no BMC configured"),
    ("healthy-h100", _bios(DELL_BIOS), {}, {"name": "p", "cpu": {}}, "skip",
     "profile sets no cpu.bios targets and no deep_cstates"),
    ("healthy-h100", _bios(DELL_BIOS), NO_DEEP_STATES, DEEP, "fail",
     "cause found: BIOS ProcCStates=Disabled hides the deep C-states from the OS (states "
     "exposed: POLL, C1); BIOS core_cstates=disabled (ProcCStates=Disabled), profile wants "
     "enabled: fix in the BIOS (knob cpu.bios), then reboot"),
    ("h100-x86", _bios({**DELL_BIOS, **CHANGED}), {}, DEEP, "fail",
     "BIOS allows C-states (ProcCStates=Enabled) but the OS blocks them: C6 disabled in "
     "cpuidle (cpu.deep-cstates-disabled, knob cpu.deep_cstates); /dev/cpu_dma_latency = 99 us "
     "< 290 us, held by tuned (pid 1432)"),
    ("healthy-h100", _bios(DELL_BIOS, CHANGED), {}, DEEP, "warn",
     "BIOS change pending, not applied yet: core_cstates disabled -> enabled, profile "
     "performance -> custom; reboot needed"),
    ("healthy-h100", _bios({**DELL_BIOS, **CHANGED}), {}, DEEP, "pass",
     "BIOS ProcCStates=Enabled as the profile wants; the OS uses C6"),
])
def test_bios_check_branches(host, bios, edits, profile, status, detail):
    facts = _facts(host, bios)
    for path, value in edits.items():
        layer, key = path.split(".")
        facts[layer][key] = value
    outcome = _run(facts, profile)
    assert outcome.status == status
    assert detail in outcome.detail


# ---- documentation ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind, name", [
    ("module", "bios_settings"), ("module", "bios_facts"), ("module", "bmc_reset"),
    ("module", "restore"), ("module", "facts"), ("lookup", "bmc")])
def test_documented(kind, name):
    bindir = os.path.dirname(sys.executable)
    out = subprocess.run([f"{bindir}/ansible-doc", "-t", kind, f"exemplar.tune.{name}"],
                         capture_output=True, text=True, check=False, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "bmc" in out.stdout.lower()
