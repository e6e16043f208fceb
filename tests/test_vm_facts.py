"""vm layer: hypervisor/arch, IOMMU and CMDQV readers, the gatherer on fixtures and live."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.vm import gather
from ansible_collections.exemplar.tune.plugins.module_utils.readers import cmdqv, hypervisor, iommu
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    NotSupported,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.conftest import SYSROOTS

GRACE = "gb200-grace-vm"
X86_HOSTS = ("h100-x86", "healthy-h100")
SMMU = "smmu3.0x0000000009050000"
FOUND_LINE = ("[    0.402301] arm-smmu-v3 arm-smmu-v3.0.auto: found companion CMDQV device: "
              "NVDA200C:00")
FALLBACK_LINE = ("[    0.402400] acpi NVDA200C:00: tegra241_cmdqv: Falling back to standard "
                 "SMMU CMDQ")
DISABLED_LINE = "[    0.402390] acpi NVDA200C:00: tegra241_cmdqv: Detected disable_cmdqv=true"
IRQ_FAIL_LINE = "[    0.402380] acpi NVDA200C:00: tegra241_cmdqv: failed to request irq (38): -22"
NO_IRQ_LINE = ("[    0.402350] arm-smmu-v3 arm-smmu-v3.0.auto: tegra241_cmdqv: no interrupt. "
               "errors will not be reported")
X86_CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme lm hypervisor\n"
ARM_CPUINFO = "processor\t: 0\nFeatures\t: fp asimd\nCPU architecture: 8\nCPU part\t: 0xd4f\n"


# -- (a) parsers -------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "want"), [
    (X86_CPUINFO, "x86_64"),
    (ARM_CPUINFO, "aarch64"),
    ("processor\t: 0\nCPU architecture: 7\n", "armv7l"),
    ("", ParseError),
    ("processor\t: 0\n", ParseError),          # truncated
    ("\x00\x01garbage\n", ParseError),
])
def test_parse_cpuinfo_arch(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            hypervisor.parse_cpuinfo_arch(text)
    else:
        assert hypervisor.parse_cpuinfo_arch(text) == want


@pytest.mark.parametrize(("text", "want"), [
    (X86_CPUINFO, ["fpu", "vme", "lm", "hypervisor"]),
    (ARM_CPUINFO, []),
    ("", []),
    ("flags\t\t:\n", []),
])
def test_parse_cpuinfo_flags(text, want):
    assert hypervisor.parse_cpuinfo_flags(text) == want


def _dmi(product=None, vendor=None, board=None, bios=None, version=None):
    return {"product_name": product, "sys_vendor": vendor, "board_vendor": board,
            "bios_vendor": bios, "product_version": version}


@pytest.mark.parametrize(("dmi", "want"), [
    (_dmi("KVM Virtual Machine", "QEMU", version="virt-8.2"), ("KVM", ["product_name",
                                                                      "sys_vendor"])),
    (_dmi("Standard PC (Q35 + ICH9, 2009)", "QEMU", bios="SeaBIOS"), ("QEMU", ["sys_vendor"])),
    (_dmi("VMware7,1", "VMware, Inc.", "Intel Corporation", "VMware, Inc."),
     ("VMware", ["product_name", "sys_vendor", "bios_vendor"])),
    (_dmi("Virtual Machine", "Microsoft Corporation"), ("Hyper-V", ["sys_vendor",
                                                                    "product_name"])),
    (_dmi("Surface Laptop 4", "Microsoft Corporation"), (None, [])),
    (_dmi("m5.large", "Amazon EC2", bios="Amazon EC2"), ("Amazon EC2",
                                                         ["sys_vendor", "bios_vendor"])),
    (_dmi("m5.metal", "Amazon EC2", bios="Amazon EC2"), (None, [])),
    (_dmi("Google Compute Engine", "Google"), ("Google Compute Engine", ["product_name"])),
    (_dmi("OpenStack Nova", "OpenStack Foundation"), ("OpenStack", ["product_name",
                                                                    "sys_vendor"])),
    (_dmi("HVM domU", "Xen", bios="Xen"), ("Xen", ["sys_vendor", "bios_vendor"])),
    (_dmi("SYS-821GE-TNHR", "Supermicro", "Supermicro",
          "American Megatrends International, LLC."), (None, [])),
    (_dmi(), (None, [])),
])
def test_parse_dmi_hypervisor(dmi, want):
    assert hypervisor.parse_dmi_hypervisor(dmi) == want


@pytest.mark.parametrize(("text", "want"), [
    ("[    0.000000] Hypervisor detected: KVM\n", "KVM"),
    ("[    0.000000] Hypervisor detected: Microsoft Hyper-V  \n", "Microsoft Hyper-V"),
    ("", None),
    ("[    0.000000] Hypervisor", None),             # truncated
    ("\x00garbage\n", None),
])
def test_parse_detected_hypervisor(text, want):
    assert hypervisor.parse_detected_hypervisor(text) == want


@pytest.mark.parametrize(("args", "want"), [
    (("x86_64", ["fpu", "hypervisor"], _dmi(), None, ("dmesg", "KVM")),
     (True, "KVM", ["dmesg: Hypervisor detected: KVM", "/proc/cpuinfo: flag hypervisor"])),
    (("x86_64", ["fpu", "hypervisor"], _dmi(), None, None),
     (True, None, ["/proc/cpuinfo: flag hypervisor"])),
    (("x86_64", ["fpu", "lm"], _dmi("SYS-821GE-TNHR", "Supermicro"), None, None),
     (False, None, [])),
    (("x86_64", ["fpu"], _dmi("HVM domU", "Xen"), "xen", None),
     (True, "Xen", ["/sys/hypervisor/type: xen", "/sys/class/dmi/id/sys_vendor: Xen"])),
    (("aarch64", [], _dmi("KVM Virtual Machine", "QEMU"), None, None),
     (True, "KVM", ["/sys/class/dmi/id/product_name: KVM Virtual Machine",
                    "/sys/class/dmi/id/sys_vendor: QEMU"])),
    (("aarch64", [], _dmi("NVIDIA GB200 NVL", "NVIDIA"), None, None), (False, None, [])),
    (("aarch64", [], _dmi(), None, None), (None, None, [])),       # arm64, no DMI: unknown
    (("x86_64", None, _dmi(), None, None), (None, None, [])),      # cpuinfo unreadable
])
def test_classify(args, want):
    got = hypervisor.classify(*args)
    assert (got.virtualized, got.hypervisor, got.evidence) == want


@pytest.mark.parametrize(("name", "want"), [
    (SMMU, "smmu_v3"), ("smmu.0x0000000012c00000", "smmu"), ("dmar0", "intel_dmar"),
    ("ivhd0", "amd_iommu"), ("amd-iommu0", "amd_iommu"), ("virtio0", "other"), ("", "other"),
])
def test_unit_kind(name, want):
    assert iommu.unit_kind(name) == want


@pytest.mark.parametrize(("text", "want"), [
    ("DMA\n", "DMA"), ("DMA-FQ", "DMA-FQ"), ("identity\n", "identity"),
    ("unmanaged", "unmanaged"), ("", ParseError), ("\n", ParseError),
    ("DMA FQ", ParseError),
])
def test_parse_group_type(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            iommu.parse_group_type(text)
    else:
        assert iommu.parse_group_type(text) == want


def test_iommu_cmdline_picks_iommu_parameters_only():
    params = {"ro": None, "iommu": "pt", "intel_iommu": "on", "quiet": None,
              "arm_smmu_v3.disable_cmdqv": "1", "iommu.strict": "0", "iommu.passthrough": "1"}
    assert iommu.iommu_cmdline(params) == {
        "iommu": "pt", "iommu.passthrough": "1", "iommu.strict": "0", "intel_iommu": "on",
        "arm_smmu_v3.disable_cmdqv": "1"}
    assert iommu.iommu_cmdline({}) == {}


@pytest.mark.parametrize(("text", "want"), [
    ("Y\n", True), ("N", False), ("", ParseError), ("1", ParseError), ("yes", ParseError),
])
def test_parse_bool_param(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            cmdqv.parse_bool_param(text)
    else:
        assert cmdqv.parse_bool_param(text) is want


@pytest.mark.parametrize(("text", "want"), [
    (f"{FOUND_LINE}\n", (True, [FOUND_LINE], [], [])),
    (f"{FOUND_LINE}\n{NO_IRQ_LINE}\n", (True, [FOUND_LINE], [], [NO_IRQ_LINE])),
    (f"{FOUND_LINE}\n{IRQ_FAIL_LINE}\n{FALLBACK_LINE}\n",
     (True, [FOUND_LINE], [IRQ_FAIL_LINE, FALLBACK_LINE], [])),
    (f"{DISABLED_LINE}\n{FALLBACK_LINE}\n", (False, [], [DISABLED_LINE, FALLBACK_LINE], [])),
    ("", (False, [], [], [])),
    ("arm-smmu-v3 arm-smmu-v3.0.auto: found companion", (False, [], [], [])),  # truncated
    ("\x00\xff garbage\n", (False, [], [], [])),
])
def test_parse_kernel_log(text, want):
    got = cmdqv.parse_kernel_log(text)
    assert (got["found"], got["found_lines"], got["fallback_lines"], got["other_lines"]) == want


INTERRUPTS_HEAD = "           CPU0       CPU1\n"


@pytest.mark.parametrize(("text", "want"), [
    (INTERRUPTS_HEAD + " 34:          0          0  ITS-MSI 1 Edge      tegra241-cmdqv\n", True),
    (INTERRUPTS_HEAD + " 11:      21311      19440     GICv3  27 Level     arch_timer\n", False),
    (INTERRUPTS_HEAD, False),
    ("", False),
    (INTERRUPTS_HEAD + " 35:   0   0  ITS-MSI 2 Edge   tegra241-cmdqv-x\n", False),
])
def test_parse_interrupts_has(text, want):
    assert cmdqv.parse_interrupts_has(text) is want


@pytest.mark.parametrize(("text", "want"), [
    ("# comment\nCONFIG_ARM_SMMU_V3=y\nCONFIG_TEGRA241_CMDQV=y\n",
     {"CONFIG_ARM_SMMU_V3": "y", "CONFIG_TEGRA241_CMDQV": "y"}),
    ("CONFIG_ARM_SMMU_V3=m\n# CONFIG_TEGRA241_CMDQV is not set\n\n",
     {"CONFIG_ARM_SMMU_V3": "m"}),
    ('CONFIG_CC_VERSION_TEXT="gcc (GCC) 15.3.0"\n', {"CONFIG_CC_VERSION_TEXT": "gcc (GCC) 15.3.0"}),
    ("", ParseError),
    ("# only comments\n", ParseError),
    ("CONFIG_ARM_SMMU_V3\n", ParseError),        # truncated
    ("\x7fELF\x02\x01garbage\n", ParseError),
])
def test_parse_kconfig(text, want):
    if want is ParseError:
        with pytest.raises(ParseError):
            cmdqv.parse_kconfig(text)
    else:
        assert cmdqv.parse_kconfig(text) == want


def _evidence(acpi=(), params=None, log="", irq=False, kconfig="y"):
    return {"acpi_devices": list(acpi),
            "params": params or {"disable_cmdqv": None, "bypass_vcmdq": None},
            "dmesg": None if log is None else cmdqv.parse_kernel_log(log), "irq": irq,
            "kconfig": None if kconfig is None else {"CONFIG_TEGRA241_CMDQV": kconfig,
                                                     "CONFIG_ARM_SMMU_V3": "y"},
            "kconfig_source": "/boot/config-x"}


NVDA = [{"name": "NVDA200C:00", "uid": "0", "status": 15}]


@pytest.mark.parametrize(("arch", "smmu", "evidence", "want"), [
    ("x86_64", False, _evidence(), "not_applicable"),
    ("aarch64", False, _evidence(), "not_applicable"),
    (None, True, _evidence(), "unknown"),
    ("aarch64", True, _evidence(NVDA, log=FOUND_LINE), "active"),
    ("aarch64", True, _evidence(NVDA, log="", irq=True), "active"),
    ("aarch64", True, _evidence(NVDA, log=f"{FOUND_LINE}\n{FALLBACK_LINE}"), "fallback"),
    ("aarch64", True, _evidence(NVDA, log=f"{DISABLED_LINE}\n{FALLBACK_LINE}"),
     "disabled_by_param"),
    ("aarch64", True, _evidence(NVDA, {"disable_cmdqv": True, "bypass_vcmdq": False}),
     "disabled_by_param"),
    ("aarch64", True, _evidence(NVDA, {"disable_cmdqv": False, "bypass_vcmdq": True},
                                log=FOUND_LINE), "disabled_by_param"),
    ("aarch64", True, _evidence(kconfig=None), "no_device"),
    ("aarch64", True, _evidence(NVDA, kconfig=None), "unknown"),
    ("aarch64", True, _evidence(NVDA, log=None), "unknown"),
    ("aarch64", True, _evidence(NVDA), "unknown"),
    ("aarch64", True, _evidence(), "no_device"),
    ("aarch64", True, {**_evidence(), "kconfig": {"CONFIG_TEGRA241_CMDQV": None}},
     "not_in_kernel"),
])
def test_derive_state(arch, smmu, evidence, want):
    state, reasons = cmdqv.derive_state(arch, smmu, evidence)
    assert state == want
    assert reasons and all(isinstance(r, str) and r for r in reasons)


# -- (b) fixture sysroots ----------------------------------------------------------------------

def _expected_optional_errors(host_dir: Path) -> list[dict[str, str]]:
    """Errors for the files other parts write (``/proc/interrupts``, x86 dmesg) when absent."""
    errors = []
    if not (host_dir / ".exemplar/commands/dmesg.txt").exists():
        errors.append({"fact": "cmdqv.dmesg", "path": "/.exemplar/commands/dmesg.txt",
                       "error": "not present"})
    if not (host_dir / "proc/interrupts").exists():
        errors.append({"fact": "cmdqv.irq", "path": "/proc/interrupts", "error": "not present"})
    return errors


def test_gb200_grace_vm_facts():
    facts = gather(Sysroot(str(SYSROOTS / GRACE)))
    assert facts["arch"] == "aarch64"
    assert facts["kernel_release"] == "6.8.0-1017-nvidia-64k"
    assert facts["virtualized"] is True
    assert facts["hypervisor"] == "KVM"
    assert facts["virt_evidence"] == ["/sys/class/dmi/id/product_name: KVM Virtual Machine",
                                      "/sys/class/dmi/id/sys_vendor: QEMU"]
    assert facts["dmi"]["sys_vendor"] == "QEMU"
    assert facts["iommu"] == {
        "present": True, "units": [{"name": SMMU, "kind": "smmu_v3"}], "group_count": 16,
        "groups_by_type": {"DMA": 16}, "cmdline": {"iommu.passthrough": "0"}}
    assert facts["smmu_v3"] is True
    got = facts["cmdqv"]
    assert got["state"] == "not_in_kernel"
    assert got["reasons"] == [
        "CONFIG_TEGRA241_CMDQV is not set in /boot/config-6.8.0-1017-nvidia-64k",
        "no NVDA200C ACPI device: the firmware or VMM exposes no CMDQV"]
    assert got["acpi_devices"] == []
    assert got["params"] == {"disable_cmdqv": None, "bypass_vcmdq": None}
    assert got["dmesg"] == {"found": False, "found_lines": [], "fallback_lines": [],
                            "other_lines": []}
    assert got["kconfig"] == {"CONFIG_TEGRA241_CMDQV": None, "CONFIG_ARM_SMMU_V3": "y"}
    assert got["kconfig_source"] == "/boot/config-6.8.0-1017-nvidia-64k"
    has_interrupts = (SYSROOTS / GRACE / "proc/interrupts").exists()
    assert got["irq"] is (False if has_interrupts else None)
    assert facts["errors"] == _expected_optional_errors(SYSROOTS / GRACE)
    assert facts["sources"]["arch"] == "/proc/sys/kernel/arch"
    assert facts["sources"]["cmdqv"] == (
        "/sys/bus/acpi/devices, /sys/module/arm_smmu_v3/parameters, "
        "/.exemplar/commands/dmesg.txt, /proc/interrupts, /boot/config-6.8.0-1017-nvidia-64k")


def test_gb200_kernel_log_has_smmu_probe_and_driver_lines():
    text = Sysroot(str(SYSROOTS / GRACE)).command("dmesg.txt").stdout
    assert "arm-smmu-v3 arm-smmu-v3.0.auto: option mask 0x0" in text
    assert "570.133.20" in text
    assert "CMDQV" not in text and "tegra241" not in text


@pytest.mark.parametrize("host", X86_HOSTS)
def test_x86_bare_metal_facts(host):
    facts = gather(Sysroot(str(SYSROOTS / host)))
    assert facts["arch"] == "x86_64"
    assert facts["sources"]["arch"] == "/proc/cpuinfo"      # 5.15 has no /proc/sys/kernel/arch
    assert facts["kernel_release"] == "5.15.0-122-generic"
    assert (facts["virtualized"], facts["hypervisor"], facts["virt_evidence"]) == (
        False, None, [])
    assert facts["dmi"]["sys_vendor"] == "Supermicro"
    assert facts["dmi"]["product_name"] == "SYS-821GE-TNHR"
    assert facts["iommu"] == {
        "present": True,
        "units": [{"name": "dmar0", "kind": "intel_dmar"}, {"name": "dmar1",
                                                            "kind": "intel_dmar"}],
        "group_count": 17, "groups_by_type": {"identity": 17},
        "cmdline": {"iommu": "pt", "intel_iommu": "on"}}
    assert facts["smmu_v3"] is False
    got = facts["cmdqv"]
    assert got["state"] == "not_applicable"
    assert got["reasons"] == ["arch x86_64: CMDQV is an arm64 (Grace) SMMUv3 extension"]
    assert got["kconfig"] == {"CONFIG_TEGRA241_CMDQV": None, "CONFIG_ARM_SMMU_V3": None}
    assert got["params"] == {"disable_cmdqv": None, "bypass_vcmdq": None}
    assert got["acpi_devices"] == []
    assert facts["errors"] == _expected_optional_errors(SYSROOTS / host)


@pytest.mark.parametrize("host", (*X86_HOSTS, GRACE))
def test_facts_are_json_and_every_fact_has_a_source(host):
    facts = gather(Sysroot(str(SYSROOTS / host)))
    assert json.loads(json.dumps(facts)) == facts
    keys = set(facts) - {"sources", "errors"}
    assert keys == {"arch", "kernel_release", "virtualized", "hypervisor", "virt_evidence",
                    "dmi", "iommu", "smmu_v3", "cmdqv"}
    assert set(facts["sources"]) == keys


def test_iommu_unit_and_group_links_resolve_inside_the_tree():
    root = Sysroot(str(SYSROOTS / GRACE))
    assert root.realpath(f"sys/class/iommu/{SMMU}") == (
        f"/sys/devices/platform/arm-smmu-v3.0.auto/iommu/{SMMU}")
    assert root.listdir("sys/kernel/iommu_groups/1/devices") == ["0000:03:00.0"]
    x86 = Sysroot(str(SYSROOTS / "h100-x86"))
    assert x86.realpath("sys/class/iommu/dmar0") == "/sys/devices/virtual/iommu/dmar0"
    assert x86.realpath("sys/class/dmi/id") == "/sys/devices/virtual/dmi/id"


# tmp_path copies of gb200-grace-vm, changed to prove each CMDQV state

def _grace_copy(tmp_path: Path, log_lines: list[str] | None = None, cmdqv_config: bool = True,
                nvda: bool = True, params: dict[str, str] | None = None,
                irq: bool = False) -> Path:
    root = tmp_path / GRACE
    shutil.copytree(SYSROOTS / GRACE, root, symlinks=True)
    if nvda:
        dev = root / "sys/devices/LNXSYSTM:00/LNXSYBUS:00/NVDA200C:00"
        dev.mkdir(parents=True)
        for name, value in {"hid": "NVDA200C", "uid": "0", "status": "15",
                            "path": "\\_SB_.SMU0.CQV0"}.items():
            (dev / name).write_text(value + "\n")
        (root / "sys/bus/acpi/devices/NVDA200C:00").symlink_to(
            "../../../devices/LNXSYSTM:00/LNXSYBUS:00/NVDA200C:00")
    if cmdqv_config:
        config = root / "boot/config-6.8.0-1017-nvidia-64k"
        config.write_text(config.read_text() + "CONFIG_TEGRA241_CMDQV=y\n")
    for name, value in (params or {}).items():
        (root / "sys/module/arm_smmu_v3/parameters" / name).write_text(value + "\n")
    log = root / ".exemplar/commands/dmesg.txt"
    if log_lines is not None:
        log.write_text(log.read_text() + "".join(line + "\n" for line in log_lines))
    irq_line = " 34:          0          0  ITS-MSI 1 Edge      tegra241-cmdqv\n" if irq else ""
    (root / "proc/interrupts").write_text(
        INTERRUPTS_HEAD + " 11:      21311      19440     GICv3  27 Level     arch_timer\n"
        + irq_line)
    return root


NO_PARAMS = {"disable_cmdqv": "N", "bypass_vcmdq": "N"}


def test_state_active(tmp_path):
    facts = gather(Sysroot(str(_grace_copy(tmp_path, [FOUND_LINE], params=NO_PARAMS,
                                           irq=True))))
    got = facts["cmdqv"]
    assert got["state"] == "active"
    assert got["acpi_devices"] == [{"name": "NVDA200C:00", "uid": "0", "status": 15}]
    assert got["params"] == {"disable_cmdqv": False, "bypass_vcmdq": False}
    assert got["dmesg"]["found_lines"] == [FOUND_LINE]
    assert got["irq"] is True
    assert got["kconfig"]["CONFIG_TEGRA241_CMDQV"] == "y"
    assert got["reasons"] == [f"kernel log: {FOUND_LINE}",
                              "/proc/interrupts: tegra241-cmdqv IRQ"]
    assert facts["errors"] == []


def test_state_fallback(tmp_path):
    lines = [FOUND_LINE, IRQ_FAIL_LINE, FALLBACK_LINE]
    got = gather(Sysroot(str(_grace_copy(tmp_path, lines, params=NO_PARAMS))))["cmdqv"]
    assert got["state"] == "fallback"
    assert got["dmesg"]["fallback_lines"] == [IRQ_FAIL_LINE, FALLBACK_LINE]
    assert got["reasons"] == [f"kernel log: {IRQ_FAIL_LINE}", f"kernel log: {FALLBACK_LINE}"]


def test_state_disabled_by_param(tmp_path):
    root = _grace_copy(tmp_path, [FOUND_LINE, DISABLED_LINE, FALLBACK_LINE],
                       params={"disable_cmdqv": "Y", "bypass_vcmdq": "N"})
    got = gather(Sysroot(str(root)))["cmdqv"]
    assert got["state"] == "disabled_by_param"
    assert got["params"] == {"disable_cmdqv": True, "bypass_vcmdq": False}
    assert got["reasons"] == ["/sys/module/arm_smmu_v3/parameters/disable_cmdqv: Y"]


def test_state_no_device_with_cmdqv_kernel(tmp_path):
    got = gather(Sysroot(str(_grace_copy(tmp_path, nvda=False))))["cmdqv"]
    assert got["state"] == "no_device"
    assert got["acpi_devices"] == []


def test_garbage_config_and_missing_log_are_errors_not_tracebacks(tmp_path):
    root = _grace_copy(tmp_path)
    (root / "boot/config-6.8.0-1017-nvidia-64k").write_bytes(b"\x7fELF\x02\x01\x01garbage\n")
    (root / ".exemplar/commands/dmesg.txt").unlink()
    (root / "sys/module/arm_smmu_v3/parameters/disable_cmdqv").write_text("maybe\n")
    facts = gather(Sysroot(str(root)))
    got = facts["cmdqv"]
    assert (got["kconfig"], got["dmesg"], got["params"]) == (None, None, None)
    assert got["state"] == "unknown"
    assert got["reasons"] == ["kernel log unavailable"]
    assert [(e["fact"], e["path"]) for e in facts["errors"]] == [
        ("cmdqv.dmesg", "/.exemplar/commands/dmesg.txt"),
        ("cmdqv.params", "/sys/module/arm_smmu_v3/parameters/disable_cmdqv"),
        ("cmdqv.kconfig", "/boot/config-6.8.0-1017-nvidia-64k")]
    assert facts["hypervisor"] == "KVM"          # the other facts are still there


def test_proc_config_gz_is_used_without_boot_config(tmp_path):
    root = _grace_copy(tmp_path)
    config = root / "boot/config-6.8.0-1017-nvidia-64k"
    (root / "proc/config.gz").write_bytes(gzip.compress(config.read_bytes()))
    config.unlink()
    got = gather(Sysroot(str(root)))["cmdqv"]
    assert got["kconfig_source"] == "/proc/config.gz"
    assert got["kconfig"] == {"CONFIG_TEGRA241_CMDQV": "y", "CONFIG_ARM_SMMU_V3": "y"}
    (root / "proc/config.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ParseError):
        cmdqv.read_kconfig(Sysroot(str(root)), "6.8.0-1017-nvidia-64k")


def test_missing_required_files_raise_not_supported(tmp_path):
    empty = Sysroot(str(tmp_path))
    with pytest.raises(NotSupported):
        hypervisor.read_kernel_release(empty)
    with pytest.raises(NotSupported):
        hypervisor.read_arch(empty)
    with pytest.raises(NotSupported):
        cmdqv.read_kconfig(empty, "6.8.0")
    assert iommu.read_iommu_units(empty) == []
    assert iommu.read_iommu_groups(empty) == {}
    assert cmdqv.read_params(empty) == {"disable_cmdqv": None, "bypass_vcmdq": None}
    facts = gather(empty)
    assert facts["arch"] is None and facts["cmdqv"]["state"] == "unknown"


# -- (c) this machine ---------------------------------------------------------------------------

def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _live_log() -> str | None:
    proc = subprocess.run(["dmesg"], capture_output=True, text=True, errors="replace",
                          check=False)
    return proc.stdout if proc.returncode == 0 else None


def test_live_host_facts():
    facts = gather(Sysroot("/"))
    assert facts["arch"] == os.uname().machine
    assert facts["kernel_release"] == os.uname().release
    cpuinfo = _read("/proc/cpuinfo") or ""
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines()
                  if line.startswith("flags")), [])
    dmi = {name: _read(f"/sys/class/dmi/id/{name}") for name in hypervisor.DMI_FIELDS}
    assert facts["dmi"] == dmi
    log = _live_log()
    detected = None
    for line in (log or "").splitlines():
        if "Hypervisor detected: " in line:
            detected = line.split("Hypervisor detected: ", 1)[1].strip()
    if "hypervisor" in flags:
        assert facts["virtualized"] is True
        assert "/proc/cpuinfo: flag hypervisor" in facts["virt_evidence"]
    if not any(dmi.values()) and _read("/sys/hypervisor/type") is None:
        assert facts["hypervisor"] == detected
    units = sorted(os.listdir("/sys/class/iommu")) if os.path.isdir("/sys/class/iommu") else []
    assert [u["name"] for u in facts["iommu"]["units"]] == units
    assert facts["iommu"]["present"] is bool(units)
    groups = os.listdir("/sys/kernel/iommu_groups") if os.path.isdir(
        "/sys/kernel/iommu_groups") else []
    assert facts["iommu"]["group_count"] == len(groups)
    assert facts["smmu_v3"] is any(u.startswith("smmu3.") for u in units)
    got = facts["cmdqv"]
    if os.uname().machine != "aarch64":
        assert got["state"] == "not_applicable"
    assert got["irq"] is ("tegra241-cmdqv" in (_read("/proc/interrupts") or ""))
    nvda = [n for n in os.listdir("/sys/bus/acpi/devices") if n.startswith("NVDA200C:")] \
        if os.path.isdir("/sys/bus/acpi/devices") else []
    assert [d["name"] for d in got["acpi_devices"]] == sorted(nvda)
    assert got["dmesg"] == (None if log is None else cmdqv.parse_kernel_log(log))
    assert [e["fact"] for e in facts["errors"]] == ([] if log is not None else ["cmdqv.dmesg"])


def test_live_host_this_vm_is_a_kvm_guest_without_dmi():
    """This machine (firecracker, x86_64): cpuinfo `hypervisor` flag, no DMI, no IOMMU."""
    facts = gather(Sysroot("/"))
    assert facts["arch"] == "x86_64"
    assert facts["virtualized"] is True
    assert all(value is None for value in facts["dmi"].values())
    assert facts["iommu"]["present"] is False
    assert facts["cmdqv"]["params"] == {"disable_cmdqv": None, "bypass_vcmdq": None}


def test_live_kernel_config_matches_a_direct_read():
    release = os.uname().release
    boot = f"/boot/config-{release}"
    if os.path.exists(boot):
        text = Path(boot).read_text(errors="replace")
        source = boot
    else:
        text = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode(errors="replace")
        source = "/proc/config.gz"
    want = {}
    for name in cmdqv.KCONFIG_NAMES:
        want[name] = next((line.split("=", 1)[1] for line in text.splitlines()
                           if line.startswith(name + "=")), None)
    got = gather(Sysroot("/"))["cmdqv"]
    assert (got["kconfig_source"], got["kconfig"]) == (source, want)
