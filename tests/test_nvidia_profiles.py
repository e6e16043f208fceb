"""NVIDIA's published TuneD host profiles (``tests/fixtures/realworld/nvidia-tuned``, real files)
against exemplar-tune's shipped translations of the same names.

Every setting of each vendor profile (its ``include=`` chain resolved by exemplar-tune's own
TuneD reader) is set by the shipped profile through a declaration with the same value, or
listed in its ``unexpressed`` with the line it stands on; the shipped profile sets nothing
else. A host where TuneD applied ``nvidia-gb200-performance`` (NVIDIA's files, and the values
TuneD writes from them) is recognised in facts and audits free of drift; the same host before
TuneD drifts on those settings.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.families import (
    KernelArg,
    Sysctl,
    host_value,
)
from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    gather_facts,
    registered_knobs,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.cmdline import parse_cmdline
from ansible_collections.exemplar.tune.plugins.module_utils.readers.tuned import load_profile
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks.run import run_checks
from exemplar_tune.profile import auto_candidates, load_profile as load_exemplar_profile
from tests.corpus import REALWORLD
from tests.helpers import copy_sysroot, tree_hash
from tests.test_cli import cli

VENDOR = REALWORLD / "nvidia-tuned"
PROFILES = sorted(p.name for p in VENDOR.iterdir() if (p / "tuned.conf").is_file())
KNOBS = registered_knobs().values()
SYSCTLS = {k.state.label: k for k in KNOBS if isinstance(k.state, Sysctl)}
KERNEL_ARGS = {k.state.label: k for k in KNOBS if isinstance(k.state, KernelArg)}
# kernel arguments another declaration sets: (argument, value) -> (layer, key, value)
BOOT = {("iommu", "pt"): ("vm", "iommu_default_domain", "identity"),
        ("iommu.passthrough", "1"): ("vm", "iommu_default_domain", "identity"),
        ("numa_balancing", "disable"): ("cpu", "numa_balancing", 0)}
NOT_SETTINGS = {"name", "description", "extends", "unexpressed"}


@pytest.fixture(scope="module")
def vendor_root(tmp_path_factory: pytest.TempPathFactory) -> Sysroot:
    """NVIDIA's profiles where the package installs them: ``/etc/tuned/<name>``."""
    root = tmp_path_factory.mktemp("tuned")
    for name in PROFILES:
        shutil.copytree(VENDOR / name, root / "etc/tuned" / name)
    return Sysroot(str(root))


def _settings(root: Sysroot, name: str) -> list[tuple[str, str, str, str]]:
    """``(section, option, value, file)`` of every setting of profile ``name``, includes
    merged as TuneD merges them."""
    files: list[str] = []
    merged = load_profile(root, name, files)
    return [(section, option, value, origin) for section, options in merged.items()
            if section != "main" for option, (value, origin) in options.items()]


def _declared(section: str, option: str, value: str) -> list[tuple[str, str, Any]]:
    """The ``(layer, key, value)`` declarations that say this vendor setting; ``[]`` when
    none can."""
    if section == "sysctl" and option in SYSCTLS:
        knob = SYSCTLS[option]
        return [(knob.layer, knob.name, host_value(value, knob.state.schema, option))]
    if section == "cpu" and option == "governor":
        return [("cpu", "governor", value)]
    if section == "bootloader":
        return _boot(value)
    if section == "script" and value.endswith("/containerd_service.sh"):
        script = (VENDOR / "nvidia-gb200-performance" / "containerd_service.sh").read_text()
        (limit,) = set(re.findall(r"^LimitSTACK=(\d+)$", script, re.M))
        return [("runtime", "containerd_limit_stack", int(limit))]
    return []


def _boot(cmdline: str) -> list[tuple[str, str, Any]]:
    words = cmdline.split()
    if words and all(w.startswith(("hugepagesz=", "hugepages=")) for w in words):
        pairs = zip(words[::2], words[1::2], strict=True)
        return [("cpu", f"hugepages_{size.split('=')[1].lower()}", int(count.split("=")[1]))
                for size, count in pairs]
    found = []
    for arg, value in parse_cmdline(cmdline).items():
        if (arg, value) in BOOT:
            found.append(BOOT[(arg, value)])
        elif arg in KERNEL_ARGS:
            knob = KERNEL_ARGS[arg]
            found.append((knob.layer, knob.name, host_value(value, knob.state.schema, arg)))
        else:
            return []  # one argument no declaration sets: the whole line is unexpressed
    return found


def _unexpressed(profile: dict[str, Any], section: str, option: str, value: str) -> bool:
    line = f"{option}={value}"
    return any(f"[{section}]" in u["setting"] and (line in u["setting"].replace(" = ", "=")
                                                   or value in u["setting"])
               for u in profile.get("unexpressed", []))


@pytest.mark.parametrize("name", PROFILES)
def test_every_vendor_setting_is_declared_or_listed_as_unexpressed(vendor_root, name):
    profile = load_exemplar_profile(name)
    wanted: set[tuple[str, str]] = set()
    for section, option, value, _ in _settings(vendor_root, name):
        declared = _declared(section, option, value)
        if not declared:
            assert _unexpressed(profile, section, option, value), (section, option, value)
            continue
        for layer, key, want in declared:
            assert profile.get(layer, {}).get(key) == want, (layer, key, want)
            wanted.add((layer, key))
    have = {(layer, key) for layer, keys in profile.items() if layer not in NOT_SETTINGS
            for key in keys}
    assert have == wanted, f"set without a vendor line: {have - wanted}"


@pytest.mark.parametrize("name", PROFILES)
def test_each_unexpressed_setting_stands_where_it_says(name):
    for item in load_exemplar_profile(name).get("unexpressed", []):
        file, line = re.fullmatch(r"(\S+) line (\d+)", item["source"]).groups()
        text = (VENDOR / file).read_text().splitlines()[int(line) - 1]
        assert item["setting"].split("] ", 1)[1].replace(" = ", "=") == text.replace(" = ", "=")
        assert item["why"] and "\n" not in item["why"]


def test_the_translations_are_named_never_chosen_by_hardware():
    assert not {p["name"] for p in auto_candidates()} & set(PROFILES)


# -- a host where TuneD applied nvidia-gb200-performance --------------------------------------

# the values a GB200 guest kernel shows before any tuning (kernel defaults; threads-max and
# min_free_kbytes as the kernel sizes them for this guest's memory)
DEFAULTS = {"vm.max_map_count": "65530", "vm.min_free_kbytes": "45056",
            "vm.overcommit_memory": "0", "fs.inotify.max_user_instances": "128",
            "fs.inotify.max_user_watches": "65536", "kernel.threads-max": "1029471",
            "kernel.numa_balancing": "1", "net.ipv4.conf.all.arp_announce": "0",
            "net.ipv4.conf.default.arp_announce": "0", "net.ipv4.conf.all.arp_ignore": "0",
            "net.ipv4.conf.default.arp_ignore": "0"}
TUNED = "nvidia-gb200-performance"


def _host(tmp_path: Path, tuned: bool) -> Path:
    """The gb200-grace-vm fixture at kernel defaults; with ``tuned``, as TuneD leaves it once
    NVIDIA's package ran ``tuned-adm profile nvidia-gb200-performance`` and the host
    rebooted: the profiles in /etc/tuned, the active profile recorded, the [sysctl] values
    written, the [bootloader] arguments in TUNED_BOOT_CMDLINE and on the running kernel's
    command line, and the script's containerd drop-in."""
    root = copy_sysroot("gb200-grace-vm", tmp_path)
    values = dict(DEFAULTS)
    if tuned:
        for name in PROFILES:
            shutil.copytree(VENDOR / name, root / "etc/tuned" / name)
        (root / "etc/tuned/active_profile").write_text(f"{TUNED}\n")
        (root / "etc/tuned/profile_mode").write_text("manual\n")
        settings = _settings(Sysroot(str(root)), TUNED)
        values |= {option: value for section, option, value, _ in settings
                   if section == "sysctl"}
        boot = " ".join(value for section, _, value, _ in settings if section == "bootloader")
        (root / "etc/tuned/bootcmdline").write_text(f'TUNED_BOOT_CMDLINE="{boot}"\n'
                                                    'TUNED_BOOT_INITRD_ADD=""\n')
        cmdline = root / "proc/cmdline"
        cmdline.write_text(f"{cmdline.read_text().strip()} {boot}\n")
        values["kernel.numa_balancing"] = "0"  # numa_balancing=disable at boot
        for group in (root / "sys/kernel/iommu_groups").glob("*/type"):
            group.write_text("identity\n")  # iommu.passthrough=1 at boot
        dropin = root / "etc/systemd/system/containerd.service.d/containerd.conf"
        dropin.parent.mkdir(parents=True)
        dropin.write_text("[Service]\nLimitSTACK=67108864\n")
    for parameter, value in values.items():
        path = root / "proc/sys" / parameter.replace(".", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n")
    return root


def _drift(root: Path) -> set[str]:
    out = cli("audit", "--sysroot", str(root), "--profile", TUNED, "--format", "json")
    assert out.returncode in (0, 1) and "Traceback" not in out.stderr, out.stderr[-2000:]
    return {f"{d['layer']}.{d['knob']}" for d in json.loads(out.stdout)["drift"]}


def test_a_host_running_the_tuned_profile_is_recognised_and_free_of_drift(tmp_path):
    root = _host(tmp_path / "tuned", tuned=True)
    tuned = gather_facts(Sysroot(str(root)), ["cpu"])["cpu"]["tuned"]
    assert tuned["active_profiles"] == [TUNED]
    assert f"/etc/tuned/{TUNED}/tuned.conf" in " ".join(tuned["files"])
    before = tree_hash(root)
    assert _drift(root) == set()
    assert tree_hash(root) == before  # an audit writes nothing
    facts = gather_facts(Sysroot(str(root)), ["vm"])
    cmdqv = next(r for r in run_checks(facts, load_exemplar_profile("gb200-grace"), ["vm"])
                 if r.id == "vm.cmdqv")  # a profile that requires CMDQV: moot here
    assert (cmdqv.status, cmdqv.klass) == ("skip", "not_applicable")
    assert "every IOMMU group is identity" in cmdqv.detail
    untuned = _drift(_host(tmp_path / "plain", tuned=False))
    assert {"cpu.vm_max_map_count", "cpu.threads_max", "cpu.vm_overcommit_memory",
            "cpu.numa_balancing", "cpu.init_on_alloc", "fabric.arp_ignore_all",
            "vm.iommu_passthrough"} <= untuned, untuned
