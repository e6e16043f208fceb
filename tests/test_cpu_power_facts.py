"""cpu layer, power part: cpuidle, C-state limits, PM QoS, TuneD, cpufreq.

Parsers are tested on tables; readers on the fixture sysroots (HOSTS.md), on the seven real
pepc sysfs captures (tests/fixtures/samples/sysfs_cpuidle_cpufreq_*_intel-pepc.txt, turned into
a sysroot in tmp_path) and on this machine's own /sys and /proc.
"""

from __future__ import annotations

import glob
import json
import os
import struct
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import (
    cpu_power as layer_cpu_power,
)
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers import (
    cpufreq,
    cpuidle,
    pmqos,
    tuned,
    values,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    NotSupported,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.conftest import SAMPLES, SYSROOTS

ALL_CPUS = list(range(8))
NO_DMA_LATENCY = {"fact": "pm_qos", "path": "/dev/cpu_dma_latency", "error": "not present"}
SPR_STATES = [("POLL", "CPUIDLE CORE POLL IDLE", 0, 0), ("C1", "MWAIT 0x00", 1, 1),
              ("C1E", "MWAIT 0x01", 2, 4), ("C6", "MWAIT 0x20", 290, 800)]


def gather(root: str | Path) -> dict:
    sheet = FactSheet()
    layer_cpu_power.gather_into(sheet, Sysroot(str(root)))
    result = sheet.result()
    assert json.loads(json.dumps(result)) == result  # JSON-serialisable, nothing lost
    return result


def per_cpu(root: str | Path) -> dict:
    """Per-CPU idle states, which the reader has but the layer facts leave out."""
    return cpuidle.read_cpuidle(Sysroot(str(root)), [])["per_cpu"]


def pepc_sysroot(sample: str, dest: Path) -> Path:
    """Write the ``rw|/path|value`` lines of a pepc sample as files under ``dest``.

    A path given again with another value is a further line of the same file
    (``stats/trans_table``); a repeat with the same value is ignored.
    """
    files: dict[str, list[str]] = {}
    for line in (SAMPLES / sample).read_text().splitlines():
        if line.startswith("#") or line.count("|") < 2:
            continue
        _, path, value = line.split("|", 2)
        lines = files.setdefault(path, [])
        if value not in lines:
            lines.append(value)
    for path, lines in files.items():
        target = dest / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n")
    return dest


# -- parsers -------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "want"), [
    ("290\n", 290), ("0", 0), (" 16215052166 ", 16215052166), ("-1", -1),
    ("", ParseError), ("2 9", ParseError), ("C6", ParseError), ("29O", ParseError),
])
def test_parse_int(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            values.parse_int(text, "/sys/x")
    else:
        assert values.parse_int(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ("1\n", True), ("0", False), ("Y", True), ("N\n", False),
    ("", ParseError), ("2", ParseError), ("yes", ParseError),
])
def test_parse_flag(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            values.parse_flag(text)
    else:
        assert values.parse_flag(text) is want


@pytest.mark.parametrize(("data", "want"), [
    (struct.pack("<i", 99), 99), (struct.pack("<i", 2_000_000_000), 2_000_000_000),
    (b"\x00\x00\x00\x00", 0), (b"\xff\xff\xff\xff", -1),
    (b"", ParseError), (b"\x63\x00", ParseError), (b"99\n\x00\x00", ParseError),
])
def test_parse_dma_latency(data, want):
    if want is ParseError:
        with pytest.raises(ParseError) as info:
            pmqos.parse_dma_latency(data, "/dev/cpu_dma_latency")
        assert info.value.path == "/dev/cpu_dma_latency"
    else:
        assert pmqos.parse_dma_latency(data) == want


@pytest.mark.parametrize(("text", "want"), [
    ("0\n", 0), ("20", 20), ("n/a\n", "n/a"), ("", ParseError), ("-5", ParseError),
    ("none", ParseError),
])
def test_parse_resume_latency(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            pmqos.parse_resume_latency(text)
    else:
        assert pmqos.parse_resume_latency(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ("0\n", [0]), ("0 64", [0, 64]), ("3 1 2", [1, 2, 3]), ("", []),
    ("0-3", ParseError), ("0,1", ParseError),
])
def test_parse_cpu_words(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            cpufreq.parse_cpu_words(text)
    else:
        assert cpufreq.parse_cpu_words(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ("accelerator-performance\n", ["accelerator-performance"]),
    ("throughput-performance virtual-guest", ["throughput-performance", "virtual-guest"]),
    ("", []), ("../../etc", ParseError), ("a/b", ParseError),
])
def test_parse_active_profile(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            tuned.parse_active_profile(text)
    else:
        assert tuned.parse_active_profile(text) == want


def test_parse_profile_valid_and_garbage():
    text = "#\n[main]\ninclude=throughput-performance\n\n[cpu]\nforce_latency=99\n" \
           "[vm]\ndirty_bytes = 40%\n"
    assert tuned.parse_profile(text) == {
        "main": {"include": "throughput-performance"}, "cpu": {"force_latency": "99"},
        "vm": {"dirty_bytes": "40%"}}
    assert tuned.parse_profile("") == {}
    with pytest.raises(ParseError):
        tuned.parse_profile("force_latency=99\n")  # no section header
    with pytest.raises(ParseError):
        tuned.parse_profile("[cpu\ngovernor=performance\n")  # truncated header


@pytest.mark.parametrize(("value", "want"), [
    ("a,b", ["a", "b"]), ("a, b", ["a", "b"]), ("a b", ["a", "b"]), ("", []), (None, []),
])
def test_parse_includes(value, want):
    assert tuned.parse_includes(value) == want


SPR_CPU0 = [{"index": i, "name": n, "latency_us": lat} for i, (n, _, lat, _) in
            enumerate(SPR_STATES)]


@pytest.mark.parametrize(("value", "want"), [
    ("99", 99), ("0", 0), ("cstate.id_no_zero:1|3", 1), ("cstate.id:0", 0),
    ("cstate.id_no_zero:0|3", 3), ("cstate.name:C6", 290), ("cstate.name_no_zero:POLL", None),
    ("cstate.name:C9|cstate.name:C1E", 2), ("cstate.id:7", None), ("none", None),
    ("None", None), (None, None), ("", None), ("garbage", None),
])
def test_resolve_force_latency(value, want):
    assert tuned.resolve_force_latency(value, SPR_CPU0) == want


def _state(index, name, latency=1, disabled=False, desc="d"):
    return cpuidle.CpuidleState(index, name, desc, latency, 2, disabled, "enabled", 5, 7)


def test_aggregate_states_by_name():
    per_cpu = {
        0: [_state(0, "POLL", 0), _state(1, "C1"), _state(2, "C6", 290, disabled=True)],
        1: [_state(0, "POLL", 0), _state(1, "C1"), _state(2, "C6", 170)],
        2: [_state(0, "POLL", 0), _state(1, "C1", desc="other")],
    }
    states = cpuidle.aggregate_states(per_cpu)
    assert [s["name"] for s in states] == ["POLL", "C1", "C6"]
    c1, c6 = states[1], states[2]
    assert c1["values_differ"] == ["desc"] and c1["missing_cpus"] == []
    assert c1["usage"] == 15 and c1["time_us"] == 21
    assert c6["disabled_cpus"] == [0] and c6["missing_cpus"] == [2]
    assert c6["values_differ"] == ["latency_us"] and c6["latency_us"] == 290
    assert cpuidle.deepest(states)["name"] == "C6"
    assert cpuidle.deepest([]) is None


def test_numbered():
    assert cpuidle.numbered(["cpu10", "cpu2", "cpufreq", "cpuidle", "cpu0"], "cpu") == [0, 2, 10]
    assert cpuidle.numbered(["state1", "state0", "driver"], "state") == [0, 1]


# -- fixture sysroots ----------------------------------------------------------------------


def test_h100_x86_power_facts():
    facts = gather(SYSROOTS / "h100-x86")
    assert facts["errors"] == []
    idle = facts["cpuidle"]
    assert (idle["driver"], idle["governor"]) == ("intel_idle", "menu")
    assert idle["cpus"] == ALL_CPUS and idle["states_exposed"] == 4
    assert [(s["name"], s["desc"], s["latency_us"], s["residency_us"]) for s in idle["states"]] \
        == SPR_STATES
    c6 = idle["states"][3]
    assert c6["disabled_cpus"] == ALL_CPUS and c6["default_status"] == "disabled"
    assert c6["values_differ"] == [] and c6["missing_cpus"] == []
    assert all(s["disabled_cpus"] == [] for s in idle["states"][:3])
    assert idle["deepest_state"] == "C6" and idle["deepest_state_disabled_anywhere"] is True
    assert idle["deepest_state_disabled_cpus"] == ALL_CPUS
    assert "per_cpu" not in idle
    assert per_cpu(SYSROOTS / "h100-x86")["7"][3] == {
        "index": 3, "name": "C6", "desc": "MWAIT 0x20", "latency_us": 290, "residency_us": 800,
        "disabled": True, "default_status": "disabled", "usage": 0, "time_us": 0}
    assert facts["cstate_limits"] == {
        "cmdline": {}, "processor": None,
        "intel_idle": {"max_cstate": 9, "states_off": 0, "use_acpi": False, "no_acpi": False}}
    qos = facts["pm_qos"]
    assert qos["cpu_dma_latency_us"] == 99 and qos["cpu_dma_latency_constrained"] is True
    assert qos["holders"] == [{"pid": 1432, "comm": "tuned", "fds": [9]}]
    assert qos["resume_latency_us"] == {"0": ALL_CPUS}
    assert qos["resume_latency_constrained_cpus"] == []
    t = facts["tuned"]
    assert t["active_profiles"] == ["accelerator-performance"] and t["profile_mode"] == "manual"
    assert t["force_latency"] == "99" and t["force_latency_us"] == 99
    assert t["force_latency_profile"] == "accelerator-performance"
    assert t["cpu"]["governor"] == "performance"  # from the included throughput-performance
    assert t["cpu"]["energy_perf_bias"] == "performance" and t["cpu"]["boost"] is None
    assert t["files"] == ["/usr/lib/tuned/accelerator-performance/tuned.conf",
                          "/usr/lib/tuned/throughput-performance/tuned.conf"]
    assert facts["sources"]["tuned"] == (
        "/etc/tuned/active_profile, /etc/tuned/profile_mode, "
        "/usr/lib/tuned/accelerator-performance/tuned.conf, "
        "/usr/lib/tuned/throughput-performance/tuned.conf")
    freq = facts["cpufreq"]
    assert freq["drivers"] == ["intel_pstate"]
    assert freq["governors"] == {"performance": ALL_CPUS}
    assert freq["energy_performance_preferences"] == {"performance": ALL_CPUS}
    assert freq["turbo"] == {"enabled": True,
                             "control": "/sys/devices/system/cpu/intel_pstate/no_turbo"}
    assert freq["intel_pstate"]["status"] == "active" and freq["intel_pstate"]["no_turbo"] == 0
    assert freq["boost"] is None
    assert [p["cpus"] for p in freq["policies"]] == [[n] for n in ALL_CPUS]
    assert freq["policies"][0]["cpuinfo_max_khz"] == 3800000
    assert freq["policies"][0]["scaling_min_khz"] == 800000
    assert freq["policies"][0]["base_khz"] == 2200000
    assert facts["sources"]["pm_qos"].startswith("/dev/cpu_dma_latency, /proc/*/fd")


def test_h100_x86_cpufreq_links_resolve_to_policies():
    root = Sysroot(str(SYSROOTS / "h100-x86"))
    for n in ALL_CPUS:
        assert root.realpath(f"sys/devices/system/cpu/cpu{n}/cpufreq") == \
            f"/sys/devices/system/cpu/cpufreq/policy{n}"


def test_healthy_h100_power_facts():
    facts = gather(SYSROOTS / "healthy-h100")
    assert facts["errors"] == []
    idle = facts["cpuidle"]
    assert [(s["name"], s["desc"], s["latency_us"], s["residency_us"]) for s in idle["states"]] \
        == SPR_STATES
    assert all(s["disabled_cpus"] == [] and s["default_status"] == "enabled"
               for s in idle["states"])
    assert idle["deepest_state"] == "C6" and idle["deepest_state_disabled_anywhere"] is False
    qos = facts["pm_qos"]
    assert qos["cpu_dma_latency_us"] == 2_000_000_000
    assert qos["cpu_dma_latency_constrained"] is False
    assert qos["holders"] == []  # tuned runs (pid 1432) but holds no latency request
    t = facts["tuned"]
    assert t["active_profiles"] == ["throughput-performance"]
    assert t["force_latency"] is None and t["force_latency_us"] is None
    assert t["force_latency_profile"] is None and t["cpu"]["governor"] == "performance"
    assert facts["cpufreq"]["governors"] == {"performance": ALL_CPUS}


def test_gb200_grace_vm_power_facts():
    facts = gather(SYSROOTS / "gb200-grace-vm")
    assert facts["errors"] == []
    idle = facts["cpuidle"]
    assert idle["driver"] == "none" and idle["states_exposed"] == 0 and idle["states"] == []
    assert idle["cpus"] == [] and idle["deepest_state"] is None
    assert idle["deepest_state_disabled_anywhere"] is False
    assert facts["cstate_limits"]["intel_idle"] is None
    assert facts["pm_qos"]["cpu_dma_latency_us"] == 2_000_000_000
    assert facts["pm_qos"]["holders"] == []
    assert facts["pm_qos"]["resume_latency_us"] == {"0": ALL_CPUS}
    assert facts["tuned"]["active_profiles"] == [] and facts["tuned"]["files"] == []
    freq = facts["cpufreq"]
    assert freq["policies"] == [] and freq["governors"] == {} and freq["intel_pstate"] is None
    assert freq["turbo"] == {"enabled": None, "control": None}
    assert freq["energy_perf_bias"] == {}


# -- real pepc captures --------------------------------------------------------------------

PEPC = {
    # dataset: driver, [(name, latency, residency)], scaling driver, governor, turbo control
    "spr1": ("intel_idle", [("POLL", 0, 0), ("C1", 1, 1), ("C1E", 2, 4), ("C6", 290, 800)],
             "intel_pstate", "powersave", "intel_pstate/no_turbo"),
    "emr0": ("intel_idle", [("POLL", 0, 0), ("C1", 1, 1), ("C1E", 2, 4), ("C6", 290, 800)],
             "intel_pstate", "powersave", "intel_pstate/no_turbo"),
    "gnr0": ("intel_idle", [("POLL", 0, 0), ("C1", 1, 1), ("C1E", 4, 4), ("C6", 170, 650),
                            ("C6P", 210, 1000)], "intel_pstate", "powersave",
             "intel_pstate/no_turbo"),
    "spr-nomwait": ("intel_idle", [("POLL", 0, 0), ("C1", 1, 1), ("C1E", 2, 4),
                                   ("C6", 290, 800)], "intel_pstate", "powersave",
                    "intel_pstate/no_turbo"),
    "milan0": ("acpi_idle", [("POLL", 0, 0), ("C1", 1, 2), ("C2", 30, 60)], "acpi-cpufreq",
               "schedutil", "cpufreq/boost"),
    "genoa0": ("acpi_idle", [("POLL", 0, 0), ("C1", 1, 2), ("C2", 800, 1600)], "acpi-cpufreq",
               "schedutil", "cpufreq/boost"),
    "turin0": ("acpi_idle", [("POLL", 0, 0), ("C1", 1, 2), ("C2", 100, 200)], "amd-pstate-epp",
               "performance", "cpufreq/boost"),
}


@pytest.mark.parametrize("dataset", sorted(PEPC))
def test_pepc_samples(dataset, tmp_path):
    driver, states, scaling_driver, governor, control = PEPC[dataset]
    root = pepc_sysroot(f"sysfs_cpuidle_cpufreq_{dataset}_intel-pepc.txt", tmp_path)
    facts = gather(root)
    assert facts["errors"] == [NO_DMA_LATENCY]  # pepc does not capture /dev
    idle = facts["cpuidle"]
    assert (idle["driver"], idle["governor"], idle["cpus"]) == (driver, "menu", [0])
    assert [(s["name"], s["latency_us"], s["residency_us"]) for s in idle["states"]] == states
    assert all(s["disabled_cpus"] == [] and s["default_status"] == "enabled"
               for s in idle["states"])
    assert idle["deepest_state"] == states[-1][0]
    assert idle["deepest_state_disabled_anywhere"] is False
    freq = facts["cpufreq"]
    assert freq["drivers"] == [scaling_driver]
    assert freq["governors"] == {governor: [0]}
    assert freq["turbo"] == {"enabled": True, "control": f"/sys/devices/system/cpu/{control}"}
    assert facts["pm_qos"]["resume_latency_us"] == {"0": [0]}
    assert facts["pm_qos"]["cpu_dma_latency_us"] is None


def test_pepc_genoa0_details(tmp_path):
    facts = gather(pepc_sysroot("sysfs_cpuidle_cpufreq_genoa0_intel-pepc.txt", tmp_path))
    c2 = facts["cpuidle"]["states"][2]
    assert (c2["name"], c2["desc"], c2["latency_us"], c2["residency_us"]) == \
        ("C2", "ACPI IOPORT 0x414", 800, 1600)
    policy = facts["cpufreq"]["policies"][0]
    assert policy["scaling_max_khz"] == 3250000 and policy["cpuinfo_max_khz"] == 3800241
    assert policy["boost"] is True and policy["energy_performance_preference"] is None
    assert facts["cpufreq"]["boost"] is True and facts["cpufreq"]["intel_pstate"] is None


def test_pepc_spr1_details(tmp_path):
    root = pepc_sysroot("sysfs_cpuidle_cpufreq_spr1_intel-pepc.txt", tmp_path)
    facts = gather(root)
    c6 = per_cpu(root)["0"][3]
    assert c6 == {"index": 3, "name": "C6", "desc": "MWAIT 0x20", "latency_us": 290,
                  "residency_us": 800, "disabled": False, "default_status": "enabled",
                  "usage": 173931, "time_us": 16215052166}
    freq = facts["cpufreq"]
    assert freq["energy_performance_preferences"] == {"balance_performance": [0]}
    assert freq["energy_perf_bias"] == {"6": [0]}
    assert freq["intel_pstate"] == {"status": "active", "no_turbo": 0, "max_perf_pct": 100,
                                    "min_perf_pct": 21, "turbo_pct": 52, "num_pstates": 31,
                                    "hwp_dynamic_boost": 1}
    assert freq["boost"] is None and freq["amd_pstate_status"] is None


# -- errors become None + an entry in errors -----------------------------------------------


def test_malformed_latency_is_none_and_an_error(tmp_path):
    root = pepc_sysroot("sysfs_cpuidle_cpufreq_spr1_intel-pepc.txt", tmp_path)
    (root / "sys/devices/system/cpu/cpu0/cpuidle/state3/latency").write_text("2x0\n")
    facts = gather(root)
    c6 = facts["cpuidle"]["states"][3]
    assert c6["name"] == "C6" and c6["latency_us"] is None and c6["residency_us"] == 800
    assert facts["cpuidle"]["states_exposed"] == 4  # the other facts are kept
    assert facts["cpufreq"]["drivers"] == ["intel_pstate"]
    assert facts["errors"] == [{
        "fact": "cpuidle", "path": "/sys/devices/system/cpu/cpu0/cpuidle/state3/latency",
        "error": "not an integer: '2x0'"}, NO_DMA_LATENCY]
    with pytest.raises(ParseError):  # strict when no problem list is given
        cpuidle.read_cpuidle(Sysroot(str(root)))


def test_state_without_name_is_an_error(tmp_path):
    root = pepc_sysroot("sysfs_cpuidle_cpufreq_genoa0_intel-pepc.txt", tmp_path)
    (root / "sys/devices/system/cpu/cpu0/cpuidle/state1/name").unlink()
    facts = gather(root)
    assert [s["name"] for s in facts["cpuidle"]["states"]] == ["POLL", "C2"]
    assert facts["errors"][0]["path"] == "/sys/devices/system/cpu/cpu0/cpuidle/state1/name"
    with pytest.raises(NotSupported):
        cpuidle.read_cpu_states(Sysroot(str(root)), 0)


def test_short_cpu_dma_latency_is_none_and_an_error(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/cpu_dma_latency").write_bytes(b"\x63\x00")
    fd_dir = tmp_path / "proc/77/fd"
    fd_dir.mkdir(parents=True)
    (tmp_path / "proc/77/comm").write_text("cyclictest\n")
    os.symlink("/dev/cpu_dma_latency", fd_dir / "3")
    os.symlink("/dev/null", fd_dir / "0")
    facts = gather(tmp_path)
    qos = facts["pm_qos"]
    assert qos["cpu_dma_latency_us"] is None and qos["cpu_dma_latency_constrained"] is None
    assert qos["holders"] == [{"pid": 77, "comm": "cyclictest", "fds": [3]}]
    assert facts["errors"] == [{"fact": "pm_qos", "path": "/dev/cpu_dma_latency",
                                "error": "expected 4 bytes, got 2: '6300'"}]


def test_missing_cpu_dma_latency_is_none_and_an_error(tmp_path):
    facts = gather(tmp_path)
    assert facts["pm_qos"]["cpu_dma_latency_us"] is None
    assert facts["errors"] == [NO_DMA_LATENCY]
    assert facts["cpuidle"]["driver"] is None and facts["cpuidle"]["states"] == []
    assert facts["cstate_limits"] == {"cmdline": None, "intel_idle": None, "processor": None}


def test_resume_latency_constrained_cpus(tmp_path):
    for cpu, value in ((0, "0"), (1, "n/a"), (2, "20"), (3, "bad")):
        path = tmp_path / f"sys/devices/system/cpu/cpu{cpu}/power/pm_qos_resume_latency_us"
        path.parent.mkdir(parents=True)
        path.write_text(value + "\n")
    problems: list = []
    result = pmqos.read_resume_latency(Sysroot(str(tmp_path)), problems)
    assert result == {"0": [0], "n/a": [1], "20": [2]}
    assert [p.path for p in problems] == [
        "/sys/devices/system/cpu/cpu3/power/pm_qos_resume_latency_us"]


# -- C-state limits and tuned resolution ---------------------------------------------------


def test_cstate_limits_from_cmdline_and_modules(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cmdline").write_text(
        "ro intel_idle.max_cstate=1 processor.max_cstate=0 idle=poll quiet\n")
    params = tmp_path / "sys/module/processor/parameters"
    params.mkdir(parents=True)
    (params / "max_cstate").write_text("1\n")
    limits = cpuidle.read_cstate_limits(Sysroot(str(tmp_path)))
    assert limits == {
        "cmdline": {"intel_idle.max_cstate": "1", "processor.max_cstate": "0", "idle": "poll"},
        "intel_idle": None, "processor": {"max_cstate": 1}}


def _profile(root: Path, base: str, name: str, text: str) -> None:
    path = root / base / name / "tuned.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_tuned_lookup_order_includes_and_several_profiles(tmp_path):
    (tmp_path / "etc/tuned").mkdir(parents=True)
    (tmp_path / "etc/tuned/active_profile").write_text("latency-performance site\n")
    (tmp_path / "etc/tuned/profile_mode").write_text("auto\n")
    _profile(tmp_path, "usr/lib/tuned/profiles", "latency-performance",
             "[cpu]\nforce_latency=cstate.id_no_zero:1|3\ngovernor=performance\nboost=1\n")
    _profile(tmp_path, "usr/lib/tuned", "site", "[main]\ninclude=base\n[cpu]\ngovernor=x\n")
    _profile(tmp_path, "usr/lib/tuned", "base", "[cpu]\nenergy_perf_bias=performance\n")
    _profile(tmp_path, "etc/tuned", "base", "[cpu]\nenergy_perf_bias=normal\n")  # /etc wins
    result = tuned.read_tuned(Sysroot(str(tmp_path)), None, SPR_CPU0)
    assert result["active_profiles"] == ["latency-performance", "site"]
    assert result["profile_mode"] == "auto"
    assert result["files"] == ["/usr/lib/tuned/profiles/latency-performance/tuned.conf",
                               "/usr/lib/tuned/site/tuned.conf", "/etc/tuned/base/tuned.conf"]
    assert result["cpu"]["governor"] == "x" and result["cpu"]["boost"] == "1"
    assert result["cpu"]["energy_perf_bias"] == "normal"
    assert result["force_latency"] == "cstate.id_no_zero:1|3"
    assert result["force_latency_profile"] == "latency-performance"
    assert result["force_latency_us"] == 1


def test_tuned_missing_and_circular_includes(tmp_path):
    (tmp_path / "etc/tuned").mkdir(parents=True)
    (tmp_path / "etc/tuned/active_profile").write_text("loop orphan\n")
    _profile(tmp_path, "usr/lib/tuned", "loop", "[main]\ninclude=loop\n[cpu]\nforce_latency=1\n")
    _profile(tmp_path, "usr/lib/tuned", "orphan", "[main]\ninclude=gone\n")
    problems: list = []
    result = tuned.read_tuned(Sysroot(str(tmp_path)), problems)
    assert result["active_profiles"] == ["loop", "orphan"] and result["force_latency"] is None
    assert [type(p) for p in problems] == [ParseError, NotSupported]
    assert problems[1].path == "/usr/lib/tuned/gone/tuned.conf"
    with pytest.raises(ParseError):
        tuned.read_tuned(Sysroot(str(tmp_path)))


# -- this machine --------------------------------------------------------------------------


def _direct(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def _direct_states(cpu_dir: str) -> list[tuple]:
    states = sorted(glob.glob(f"{cpu_dir}/cpuidle/state[0-9]*"),
                    key=lambda p: int(p.rsplit("state", 1)[1]))
    return [(_direct(f"{s}/name"), _direct(f"{s}/desc"), int(_direct(f"{s}/latency")),
             int(_direct(f"{s}/residency")), _direct(f"{s}/disable") == "1",
             _direct(f"{s}/default_status")) for s in states]


def test_live_host_matches_direct_reads():
    facts = gather("/")
    base = "/sys/devices/system/cpu"
    idle = facts["cpuidle"]
    assert idle["driver"] == _direct(f"{base}/cpuidle/current_driver")
    assert idle["governor"] == (_direct(f"{base}/cpuidle/current_governor_ro")
                                or _direct(f"{base}/cpuidle/current_governor"))
    cpu_dirs = {int(p.rsplit("cpu", 1)[1]): p for p in glob.glob(f"{base}/cpu[0-9]*")}
    with_states = {cpu: _direct_states(d) for cpu, d in cpu_dirs.items() if _direct_states(d)}
    assert idle["cpus"] == sorted(with_states)
    for cpu, states in with_states.items():
        have = [(s["name"], s["desc"], s["latency_us"], s["residency_us"], s["disabled"],
                 s["default_status"]) for s in per_cpu("/")[str(cpu)]]
        assert have == states
    names = {s[0] for states in with_states.values() for s in states}
    assert idle["states_exposed"] == len(names)
    policies = sorted(glob.glob(f"{base}/cpufreq/policy[0-9]*"))
    freq = facts["cpufreq"]
    assert len(freq["policies"]) == len(policies)
    assert freq["drivers"] == sorted({_direct(f"{p}/scaling_driver") for p in policies})
    if not policies:  # a VM without cpufreq: a normal answer
        assert freq["governors"] == {} and freq["turbo"]["enabled"] is None
    assert (freq["intel_pstate"] is None) == (not os.path.isdir(f"{base}/intel_pstate"))
    assert facts["cstate_limits"]["intel_idle"] is None or \
        facts["cstate_limits"]["intel_idle"]["max_cstate"] == \
        int(_direct("/sys/module/intel_idle/parameters/max_cstate"))
    assert facts["tuned"]["active_profiles"] == \
        (_direct("/etc/tuned/active_profile") or "").split()


def test_live_pm_qos_matches_direct_reads():
    facts = gather("/")
    qos = facts["pm_qos"]
    try:
        with open("/dev/cpu_dma_latency", "rb") as handle:
            want = struct.unpack("<i", handle.read(4))[0]
    except OSError:
        want = None
    assert qos["cpu_dma_latency_us"] == want
    if want is None:  # not root: None plus an error, never a traceback
        assert any(e["path"] == "/dev/cpu_dma_latency" for e in facts["errors"])
    holders = []
    for fd_dir in glob.glob("/proc/[0-9]*/fd"):
        try:
            fds = [fd for fd in os.listdir(fd_dir)
                   if os.readlink(f"{fd_dir}/{fd}") == "/dev/cpu_dma_latency"]
        except OSError:
            continue
        if fds:
            holders.append(int(fd_dir.split("/")[2]))
    assert [h["pid"] for h in qos["holders"]] == sorted(holders)
    resume: dict[str, list[int]] = {}
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/power/pm_qos_resume_latency_us"):
        resume.setdefault(_direct(path), []).append(int(path.split("/")[5][3:]))
    assert qos["resume_latency_us"] == {k: sorted(v) for k, v in resume.items()}
