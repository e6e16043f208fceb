"""Time linear in the input, as a class: every diagnose format and every host-file reader.

Each case feeds adversarial lines (no separators, a run of separators in one line or over
blank lines, a huge number, deep nesting, one token repeated, one line repeated) at two sizes
64x apart (:data:`SMALL`, :data:`LARGE`) and fails when the time grows more than :data:`LIMIT`
times: linear work grows 64x, quadratic work 4096x. A line is built from a real line of a
capture (the seed) and put back into that capture, after that line, so the parser meets it
where its format is recognised; a seed of ``""`` gives the bare shapes.

Diagnose formats are taken from the real-world corpus: one capture per kind and format it
shows, per family and shape of capture (every kind of ``ANALYZERS`` must be among them), read
alone and as one of a job's rank files (``--ranks``). Readers are every public function of the
readers package that takes the text (or bytes) it parses, found by its signature, so a new
one is fed without being listed; every other public ``parse_*``/``read_*`` function must say
which of them it hands its text to, or that it reads none.

Each input must be read, or refused with the project's own error (``DiagnoseError``,
``UserError``, ``HostStateError``): anything else fails. A run is timed with
``time.perf_counter``, the garbage collector off, the better of 3 runs; a small run under
:data:`FLOOR` counts as that long (timer noise), a large run is stopped a little past the
limit (a quadratic parser would run for minutes), and a case past the limit is measured once
more before it fails (a busy machine).
"""

from __future__ import annotations

import gc
import importlib
import inspect
import pkgutil
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils import readers
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError

from exemplar_tune.diagnose import ANALYZERS, DiagnoseError, diagnose_job, diagnose_text
from exemplar_tune.errors import UserError
from tests.conftest import FIXTURES, SAMPLES
from tests.corpus import REALWORLD

SMALL, LARGE = 4 << 10, 256 << 10  # characters of an adversarial line: 64x apart
# the most the time may grow from SMALL to LARGE: linear is 64x, quadratic 4096x; the margin
# above linear is for a machine busy with the tests' other workers (pytest -n)
LIMIT = 250
FLOOR = 1e-3  # seconds: a faster small run counts as this long
STOP = 1.2  # a large run is stopped at this many times the time allowed
RUNS = 3
DECLARED = (DiagnoseError, UserError, HostStateError)


# -- the adversarial lines ------------------------------------------------------------------

def _fill(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


def no_separators(seed: str, n: int) -> str:
    """The seed's characters without blanks, repeated: one word ``n`` long."""
    return _fill("".join(seed.split()) or "a", n)


def separator_run(seed: str, n: int) -> str:
    """The seed with its first gap (or its end) widened to ``n`` blanks."""
    head, _, tail = seed.partition(" ")
    return f"{head}{' ' * n}{tail or 'x'}"


def blank_lines(seed: str, n: int) -> str:
    """The seed followed by lines of 16 blanks, ``n`` characters in all: a run of separators
    over many lines (a pattern that reads blanks across lines reads them again per line)."""
    return seed + _fill("\n" + " \t" * 8, n)


def huge_number(seed: str, n: int) -> str:
    """The seed with its first number (or a number after it) ``n`` digits long."""
    m = re.search(r"\d+", seed)
    return f"{seed[:m.start()]}{'9' * n}{seed[m.end():]}" if m else f"{seed} {'9' * n}"


def deep_nesting(seed: str, n: int) -> str:
    """The seed followed by ``n`` characters of nested elements (XML) or brackets."""
    unit = ("<a>", "</a>") if seed.lstrip().startswith("<") else ("[({", "})]")
    depth = n // (len(unit[0]) + len(unit[1]))
    return seed + unit[0] * depth + unit[1] * depth


def token_repeated(seed: str, n: int) -> str:
    """The seed followed by its first word, repeated to ``n`` characters."""
    words = seed.split()
    return f"{seed} {_fill((words[0] if words else 'a') + ' ', n)}"


def line_repeated(seed: str, n: int) -> str:
    """The seed repeated on one line, ``n`` characters in all."""
    return _fill(f"{seed} " if seed.strip() else "a ", n)


SHAPES = (no_separators, separator_run, blank_lines, huge_number, deep_nesting, token_repeated,
          line_repeated)


def inserted(text: str, position: str, shape: Callable[[str, int], str]
             ) -> Callable[[int], str]:
    """``n -> text`` with the shape of one of its written lines (the ``middle`` one, the
    ``longest``, or the last) added after that line; ``text == ""`` gives the shape of ``""``
    alone."""
    if not text.strip():
        return lambda n: shape("", n)
    lines = text.split("\n")
    written = [i for i, line in enumerate(lines) if line.strip()]
    at = {"middle": written[len(written) // 2],
          "longest": max(written, key=lambda i: len(lines[i]))}.get(position, written[-1])
    return lambda n: "\n".join([*lines[:at + 1], shape(lines[at], n), *lines[at + 1:]])


# -- timing ---------------------------------------------------------------------------------

class TooSlow(BaseException):
    """A run stopped past its budget (a BaseException: code under test catches Exception)."""


@contextmanager
def _budget(seconds: float) -> Iterator[None]:
    """Raise :class:`TooSlow` in the block once it has run ``seconds``."""
    def stop(*_: object) -> None:
        raise TooSlow
    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _timed(call: Callable[[], object], budget: float) -> float:
    """Seconds ``call`` took (at least ``budget`` when it was stopped there)."""
    start = time.perf_counter()
    try:
        with _budget(budget):
            call()
    except TooSlow:
        pass
    return time.perf_counter() - start


def growth(call: Callable[[str], object], make: Callable[[int], str]) -> tuple[float, float]:
    """The better of :data:`RUNS` times of ``call(make(SMALL))`` and of
    ``call(make(LARGE))``; the large runs stop once one is within the limit (the better of
    three is then no worse) and each is stopped a little past it (:data:`STOP`)."""
    small, large = make(SMALL), make(LARGE)
    gc.disable()
    try:
        t_small = min(_timed(lambda: call(small), 60.0) for _ in range(RUNS))
        allowed = LIMIT * max(t_small, FLOOR)
        t_large = float("inf")
        for _ in range(RUNS):
            t_large = min(t_large, _timed(lambda: call(large), STOP * allowed))
            if t_large <= allowed:
                break
    finally:
        gc.enable()
    return t_small, t_large


def grows_too_fast(call: Callable[[str], object], make: Callable[[int], str]) -> str | None:
    """The times of a case that grows more than :data:`LIMIT` times, measured twice (a busy
    machine may slow one measurement's large runs and not its small ones); ``None`` when it
    does not."""
    for _ in range(2):
        t_small, t_large = growth(call, make)
        allowed = LIMIT * max(t_small, FLOOR)
        if t_large <= allowed:
            return None
    stopped = " (stopped)" if t_large >= STOP * allowed else ""
    return (f"{SMALL >> 10} KiB {t_small * 1e3:.1f} ms, {LARGE >> 10} KiB "
            f"{t_large * 1e3:.0f} ms{stopped}")


def assert_linear(call: Callable[[str], object], cases: dict[str, Callable[[int], str]]
                  ) -> None:
    """Every case grows at most :data:`LIMIT` times from SMALL to LARGE; the failure lists
    each case that grew more, with its times."""
    gc.collect()  # once: what is left to collect is then what the cases leave
    slow = [f"{name}: {times}" for name, make in cases.items()
            if (times := grows_too_fast(call, make))]
    assert not slow, "time grows faster than the input:\n" + "\n".join(slow)


def _declared(func: Callable[..., object], *args: Any,
              errors: tuple[type[Exception], ...] = ()) -> Callable[[str], object]:
    """``text -> func(text, *args)``, the project's own errors (and ``errors``) being an
    answer too."""
    def call(text: str) -> object:
        try:
            return func(text, *args)
        except (*DECLARED, *errors) as exc:
            return exc
    return call


def shaped(text: str, positions: tuple[str, ...]) -> dict[str, Callable[[int], str]]:
    """Every shape at every position of ``text`` (the bare shapes when it is empty)."""
    return {f"{position} {shape.__name__}": inserted(text, position, shape)
            for position in positions for shape in SHAPES}


# -- diagnose -------------------------------------------------------------------------------

# Formats the real-world corpus holds no capture of: a sample, and step-time families written
# as their programs log them.
SAMPLED = ("nsys_stats_csv_allgather_after.csv",)
WRITTEN = {
    "step_time": "".join(f"step {i} loss 2.{i} step_time=0.{400 + i}s\n" for i in range(12)),
    "plain": "".join(f"0.{500 + i}\n" for i in range(12)),
}


@cache
def formats() -> dict[str, tuple[str, str]]:
    """``kind/format/family/shape -> (capture name, text)``: the smallest capture that
    ``diagnose`` reads as each kind and format (the one a report names in its summary, if
    any), per family of the real-world corpus (its folder: NCCL COLL lines and other NCCL logs
    are both NCCL logs) and shape (a document, JSON or XML, or lines); then the samples and
    written logs of formats the corpus lacks."""
    paths = sorted((p for p in REALWORLD.rglob("*")
                    if p.is_file() and p.suffix not in (".md", ".yaml")), key=_size)
    captures = [(p.parent.name, p.name, p.read_text(errors="replace"))
                for p in [*paths, *(SAMPLES / name for name in SAMPLED)]]
    captures += [("written", name, text) for name, text in WRITTEN.items()]
    found: dict[str, tuple[str, str]] = {}
    for family, name, text in captures:
        try:
            report = diagnose_text(text, name)
        except DECLARED:
            continue
        shape = "document" if re.search(r"^\s*(?:<|\{\s*$)", text[:4096], re.M) else "lines"
        key = f"{report.kind}/{report.summary.get('format') or ''}/{family}/{shape}"
        found.setdefault(key, (name, text))
    return found


def _size(path: Path) -> int:
    return path.stat().st_size


def test_every_diagnose_kind_has_a_capture():
    assert {key.split("/")[0] for key in formats()} == {a.kind for a in ANALYZERS}


def test_a_line_alone_is_linear_whatever_its_shape():
    assert_linear(_declared(diagnose_text, "line"), shaped("", ("alone",)))


@pytest.mark.parametrize("key", sorted(formats()))
def test_diagnose_is_linear_in_a_hostile_line(key):
    name, text = formats()[key]
    assert_linear(_declared(diagnose_text, name), shaped(text, ("middle", "longest", "end")))


@pytest.mark.parametrize("key", [k for k in sorted(formats()) if k.startswith("step-time/")])
def test_a_job_of_rank_files_is_linear_in_a_hostile_line(key, tmp_path):
    name, text = formats()[key]
    (tmp_path / "rank0.log").write_text(text)

    def job(log: str) -> object:
        (tmp_path / "rank1.log").write_text(log)
        return diagnose_job([str(tmp_path)])
    assert_linear(_declared(job), shaped(text, ("end",)))


# -- host-file readers ----------------------------------------------------------------------

TEXT_TYPES = ("str", "bytes", "str | None")
# The arguments after the text of the readers that take more than the text.
EXTRA: dict[str, tuple[Any, ...]] = {
    "bios_attributes.detect_vendor": (None, [], {}),
    "cmdqv.derive_state": (None, {}),
    "enroot.covers": ("/usr/lib",),
    "hypervisor.classify": (None, {}, None),
    "identity.identity": ([],),
    "nvidia_smi.parse_flag": ("flag",),
    "nvidia_smi.parse_quantity": (("MiB", "W"), "quantity"),
    "nvidia_smi_text.parse_report": ("report",),
    "safe_xml.parse_xml": ("document",),
    "systemd.parse_unit_file": ("CPUAffinity",),
    "topo_xml.parse_topo_xml": ("topo.xml",),
    "tuned.resolve_force_latency": ([],),
}
# Converters of one value whose documented answer to anything else is ValueError (their
# callers pass what a pattern matched, or catch it).
OWN_ERRORS: dict[str, tuple[type[Exception], ...]] = {
    "nvidia_smi.normalize_bdf": (ValueError,),
    "nvidia_smi.sysfs_bdf": (ValueError,),
}
SYSROOT = "sysroots/healthy-h100"
CPU = "sysroots/h100-x86/sys/devices/system/cpu"
PCI = "sysroots/h100-x86/sys/devices/pci0000:00/0000:00:01.0/0000:e9:00.0"
IB = "realworld/sysfs-infiniband/prometheus-procfs/sys/class/infiniband/mlx5_0/ports/1"
# A real file each reader is written for: its shapes also go into that file.
SEEDS = {
    "cpufreq.parse_cpu_words": f"{CPU}/cpufreq/policy3/affected_cpus",
    "cpulist.parse_cpulist": f"{CPU}/online",
    "cpulist.parse_cpumask": "sysroots/h100-x86/proc/irq/default_smp_affinity",
    "infiniband.parse_rate": f"{IB}/rate",
    "infiniband.parse_state": f"{IB}/state",
    "iommu.parse_group_type": "sysroots/h100-x86/sys/kernel/iommu_groups/0/type",
    "isolation.parse_sysfs_cpus": f"{PCI}/local_cpulist",
    "pci.parse_hex_id": f"{PCI}/vendor",
    "pci.parse_link_speed": f"{PCI}/current_link_speed",
    "pci.parse_numa_node": f"{PCI}/numa_node",
    "pmqos.parse_resume_latency": f"{CPU}/cpu6/power/pm_qos_resume_latency_us",
    "tuned.parse_active_profile": "sysroots/h100-x86/etc/tuned/active_profile",
    "cmdline.parse_cmdline": f"{SYSROOT}/proc/cmdline",
    "cmdqv.parse_interrupts_has": f"{SYSROOT}/proc/interrupts",
    "cmdqv.parse_kconfig": f"{SYSROOT}/boot/config-5.15.0-122-generic",
    "cmdqv.parse_kernel_log": f"{SYSROOT}/.exemplar/commands/dmesg.txt",
    "cpuinfo.parse_cpuinfo": "realworld/cpuinfo/eessi-software-layer-archdetect-aws-xeon-8488c"
                             "-sapphire-rapids-cpu0.txt",
    "enroot.parse_environ": f"{SYSROOT}/etc/enroot/environ.d/50-nccl.env",
    "enroot.parse_fstab": "sysroots/h100-x86/etc/enroot/mounts.d/10-system.fstab",
    "enroot.parse_plugstack": f"{SYSROOT}/etc/slurm/plugstack.conf.d/pyxis.conf",
    "fabric_manager.parse_unit_state": f"{SYSROOT}/.exemplar/commands/systemctl-show-slices.txt",
    "gpu_topology.parse_topology": f"{SYSROOT}/.exemplar/commands/nvidia-smi-topo-m.txt",
    "hypervisor.parse_cpuinfo_arch": "realworld/cpuinfo/eessi-software-layer-archdetect-aws-"
                                     "graviton3-cpu0.txt",
    "hypervisor.parse_cpuinfo_flags": "realworld/cpuinfo/eessi-software-layer-archdetect-aws-"
                                      "xeon-8488c-sapphire-rapids-cpu0.txt",
    "hypervisor.parse_detected_hypervisor": f"{SYSROOT}/.exemplar/commands/dmesg.txt",
    "imex.parse_imex_nodes": "realworld/imex/jgehrcke-jpsnips-nv-gh200-2node-imex-ctl-q-N.txt",
    "isolation.parse_env_file": f"{SYSROOT}/etc/default/irqbalance",
    "isolation.parse_interrupts": f"{SYSROOT}/proc/interrupts",
    "kernel_log.read_lines": "realworld/kernel-log/leptonai-gpud-sxid-readme-xid79-fallen-off-"
                             "bus-sxid20034.log",
    "link_events.parse_link_events": "realworld/link-events/lkml-acme-20241204-dmesg-tail-mlx5-"
                                     "link-down.txt",
    "lspci.parse_lspci": f"{SYSROOT}/.exemplar/commands/lspci-vvv.txt",
    "nccl_conf.parse_nccl_conf": f"{SYSROOT}/etc/nccl.conf",
    "numa.parse_distance": "sysroots/h100-x86/sys/devices/system/node/node0/distance",
    "numa.parse_node_meminfo": "sysroots/h100-x86/sys/devices/system/node/node0/meminfo",
    "nvidia_smi.parse_nvidia_smi": f"{SYSROOT}/.exemplar/commands/nvidia-smi-q-x.xml",
    "nvidia_smi_text.looks_like_text_report": "realworld/nvidia-smi-text/stas00-ml-engineering-"
                                              "debug-a100-xid63-q-excerpt.txt",
    "nvidia_smi_text.outline": "realworld/nvidia-smi-text/stas00-ml-engineering-debug-a100-"
                               "xid63-q-excerpt.txt",
    "nvidia_smi_text.parse_nvidia_smi_text": "realworld/nvidia-smi-text/stas00-ml-engineering-"
                                             "debug-a100-xid63-q-excerpt.txt",
    "nvidia_smi_text.parse_report": "realworld/nvidia-smi-text/stas00-ml-engineering-debug-"
                                    "a100-xid63-q-excerpt.txt",
    "nvidia_smi_text.to_tree": "realworld/nvidia-smi-text/stas00-ml-engineering-debug-a100-"
                               "xid63-q-excerpt.txt",
    "nvlink.parse_nvlink_errors": f"{SYSROOT}/.exemplar/commands/nvidia-smi-nvlink-e.txt",
    "nvlink.parse_nvlink_status": f"{SYSROOT}/.exemplar/commands/nvidia-smi-nvlink-s.txt",
    "safe_xml.parse_xml": "realworld/topology/azure-azhpc-images-topology-ndv2-topo.xml",
    "systemd.parse_systemctl_show": f"{SYSROOT}/.exemplar/commands/systemctl-show-slices.txt",
    "systemd.parse_systemctl_show_units": f"{SYSROOT}/.exemplar/commands/systemctl-show-"
                                          "slices.txt",
    "systemd.parse_unit_file": f"{SYSROOT}/etc/systemd/system.conf",
    "topo_xml.parse_topo_xml": "realworld/topology/azure-azhpc-images-topology-ndv2-topo.xml",
    "tuned.parse_profile": f"{SYSROOT}/usr/lib/tuned/throughput-performance/tuned.conf",
    "xid.parse_kernel_log": f"{SYSROOT}/.exemplar/commands/dmesg.txt",
    "xid.parse_xid_events": "realworld/kernel-log/madmax43v3r-chia-gigahorse-301-xid31-xid62-"
                            "xid45-repeated.log",
}


@cache
def reader_functions() -> dict[str, Callable[..., Any]]:
    """``module.name -> function``: every public function of the readers package."""
    found = {}
    for info in pkgutil.iter_modules(readers.__path__):
        module = importlib.import_module(f"{readers.__name__}.{info.name}")
        found.update({f"{info.name}.{name}": func for name, func in vars(module).items()
                      if inspect.isfunction(func) and func.__module__ == module.__name__
                      and not name.startswith("_")})
    return found


def takes_text(func: Callable[..., Any]) -> bool:
    """Whether the function's first parameter is the text (or bytes) it reads."""
    first = next(iter(inspect.signature(func).parameters.values()), None)
    return first is not None and first.annotation in TEXT_TYPES


def takes_bytes(name: str) -> bool:
    """Whether reader ``name`` reads bytes rather than text."""
    first = next(iter(inspect.signature(reader_functions()[name]).parameters.values()))
    return first.annotation == "bytes"


TEXT_READERS = sorted(name for name, func in reader_functions().items() if takes_text(func))


def bound(name: str) -> Callable[[str], object]:
    """``text -> reader(text, *EXTRA)``, bytes for a reader of bytes; the project's errors, and
    a converter's own (:data:`OWN_ERRORS`), are an answer."""
    call = _declared(reader_functions()[name], *EXTRA.get(name, ()),
                     errors=OWN_ERRORS.get(name, ()))
    return (lambda text: call(text.encode())) if takes_bytes(name) else call


def test_every_reader_of_text_can_be_called():
    """A reader that needs more than its text names its other arguments in EXTRA."""
    missing = []
    for name in TEXT_READERS:
        params = list(inspect.signature(reader_functions()[name]).parameters.values())[1:]
        needed = [p for p in params if p.default is p.empty and p.kind is not p.VAR_POSITIONAL]
        if len(needed) != len(EXTRA.get(name, ())):
            missing.append(f"{name}: {[p.name for p in needed]}")
    assert not missing
    assert set(EXTRA) | set(SEEDS) | set(OWN_ERRORS) <= set(TEXT_READERS)


# The other public parse_*/read_* functions of the readers: each hands the text it reads to
# the reader named (which is fed above), or reaches it through the functions it calls.
THROUGH = {
    "cgroup.read_cgroup": "cpulist.parse_cpulist",
    "cgroup.read_cpuset": "cpulist.parse_cpulist",
    "cgroup.read_slurm_jobs": "cpulist.parse_cpulist",
    "cgroup.read_unit_cpuset": "cpulist.parse_cpulist",
    "cmdline.read_cmdline": "cmdline.parse_cmdline",
    "cmdqv.read_acpi_devices": "values.parse_count",
    "cmdqv.read_irq": "cmdqv.parse_interrupts_has",
    "cmdqv.read_kconfig": "cmdqv.parse_kconfig",
    "cmdqv.read_params": "cmdqv.parse_bool_param",
    "cpu_topology.read_online": "cpulist.parse_cpulist",
    "cpu_topology.read_place": "cpulist.parse_cpulist",
    "cpu_topology.read_places": "cpulist.parse_cpulist",
    "cpufreq.read_cpufreq": "values.parse_int",
    "cpufreq.read_energy_perf_bias": "values.parse_int",
    "cpufreq.read_intel_pstate": "values.parse_int",
    "cpufreq.read_policies": "cpufreq.parse_cpu_words",
    "cpufreq.read_policy": "cpufreq.parse_cpu_words",
    "cpuidle.read_cpu_states": "values.parse_int",
    "cpuidle.read_cpuidle": "values.parse_int",
    "cpuidle.read_cstate_limits": "cmdline.parse_cmdline",
    "cpuidle.read_state": "values.parse_int",
    "enroot.read_enroot": "enroot.parse_environ",
    "enroot.read_pyxis": "enroot.parse_plugstack",
    "fabric_manager.read_fabric_manager": "fabric_manager.parse_unit_state",
    "gpu_topology.read_topology": "gpu_topology.parse_topology",
    "hypervisor.read_arch": "hypervisor.parse_cpuinfo_arch",
    "hypervisor.read_cpu_flags": "hypervisor.parse_cpuinfo_flags",
    "hypervisor.parse_dmi_hypervisor": "hypervisor.classify",
    "identity.read_identity": "hypervisor.parse_cpuinfo_arch",
    "imex.read_imex_nodes": "imex.parse_imex_nodes",
    "infiniband.read_counters": "infiniband.parse_counter",
    "infiniband.read_ib_device": "infiniband.parse_state",
    "infiniband.read_ib_devices": "infiniband.parse_rate",
    "infiniband.read_port": "infiniband.parse_counter",
    "iommu.read_iommu_groups": "iommu.parse_group_type",
    "iommu.read_iommu_units": "iommu.unit_kind",
    "isolation.read_default_affinity": "cpulist.parse_cpumask",
    "isolation.read_irqbalance": "isolation.parse_env_file",
    "isolation.read_irqs": "isolation.parse_interrupts",
    "isolation.read_isolation": "isolation.parse_isolcpus",
    "link_events.read_link_events": "link_events.parse_link_events",
    "lspci.read_pcie_paths": "lspci.parse_lspci",
    "nccl_conf.read_conf_file": "nccl_conf.parse_nccl_conf",
    "nccl_conf.read_nccl_config": "nccl_conf.parse_nccl_conf",
    "numa.read_node": "numa.parse_node_meminfo",
    "numa.read_node_list": "cpulist.parse_cpulist",
    "numa.read_numa": "numa.parse_distance",
    "nvidia_smi.parse_gpu": "nvidia_smi.parse_nvidia_smi",
    "nvidia_smi.parse_log": "nvidia_smi.parse_nvidia_smi",
    "nvidia_smi.read_nvidia_smi": "nvidia_smi.parse_nvidia_smi",
    "nvidia_smi_text.read_nvidia_smi_text": "nvidia_smi_text.parse_nvidia_smi_text",
    "nvlink.read_nvlink_errors": "nvlink.parse_nvlink_errors",
    "nvlink.read_nvlink_status": "nvlink.parse_nvlink_status",
    "pci.read_pci_device": "pci.parse_hex_id",
    "pmqos.read_dma_latency": "pmqos.parse_dma_latency",
    "pmqos.read_pm_qos": "pmqos.parse_resume_latency",
    "pmqos.read_resume_latency": "pmqos.parse_resume_latency",
    "soc.read_soc": "soc.soc_name",
    "systemd.read_allowed_cpus_dropins": "systemd.parse_unit_file",
    "systemd.read_cpu_affinity": "systemd.parse_cpu_set",
    "systemd.read_systemctl_show": "systemd.parse_systemctl_show_units",
    "topo_xml.read_topo_file": "topo_xml.parse_topo_xml",
    "tuned.read_tuned": "tuned.parse_profile",
    "xid.read_kernel_log": "xid.parse_kernel_log",
    "xid.read_xid_events": "xid.parse_kernel_log",
}
# Those that read no text, or keep it as it is: why.
NO_TEXT = {
    "bios.read_snapshot": "Redfish documents, JSON read by the Redfish client",
    "cmdqv.read_kernel_log": "the kernel log as it is (cmdqv.parse_kernel_log reads it)",
    "cpuidle.read_value": "hands a file's text to the value parser it is given",
    "hypervisor.read_dmi": "DMI strings as they are (parse_dmi_hypervisor reads them)",
    "hypervisor.read_kernel_release": "the release string, checked for blanks",
    "hypervisor.read_xen_type": "the hypervisor type as it is",
    "nvml.read_gpu": "NVML calls, no text",
    "nvml.read_nvml": "NVML calls, no text",
}


@cache
def _sources() -> dict[str, str]:
    """``module.name -> body``: the source of every function of the readers (private ones
    too), without its ``def`` line."""
    found = {}
    for info in pkgutil.iter_modules(readers.__path__):
        module = importlib.import_module(f"{readers.__name__}.{info.name}")
        for name, func in vars(module).items():
            if inspect.isfunction(func) and func.__module__ == module.__name__:
                found[f"{info.name}.{name}"] = inspect.getsource(func).split("\n", 1)[-1]
    return found


def reaches(start: str, goal: str, depth: int = 4) -> bool:
    """Whether ``start`` names ``goal``, or a function that does, ``depth`` calls deep (by
    name: a function handed on as an argument counts)."""
    names = {start}
    for _ in range(depth):
        if goal in names:
            return True
        names |= {callee for name in names for callee in _sources()
                  if re.search(rf"\b{callee.split('.')[1]}\b", _sources()[name])}
    return goal in names


def test_every_parser_and_reader_is_fed_or_accounted_for():
    """A public ``parse_*``/``read_*`` function either takes text (and is fed above), or
    hands what it reads on to one that is (:data:`THROUGH`: checked by its source), or reads
    no text (:data:`NO_TEXT`)."""
    named = {n for n in reader_functions() if n.split(".")[1].startswith(("parse_", "read_"))}
    fed = set(TEXT_READERS)
    assert named - fed - set(THROUGH) - set(NO_TEXT) == set(), "new readers: list them"
    assert not (set(THROUGH) | set(NO_TEXT)) - named, "stale entries"
    assert not (set(THROUGH) & set(NO_TEXT)) and not (set(THROUGH) | set(NO_TEXT)) & fed
    assert set(THROUGH.values()) <= fed
    unlinked = [f"{name} -> {goal}" for name, goal in THROUGH.items()
                if not (reaches(name, goal) or reaches(goal, name))]
    assert not unlinked


@pytest.mark.parametrize("name", TEXT_READERS)
def test_reader_is_linear_in_a_hostile_line(name):
    cases = shaped("", ("alone",))
    if name in SEEDS:
        cases |= shaped((FIXTURES / SEEDS[name]).read_text(errors="replace"),
                        ("middle", "longest"))
    assert_linear(bound(name), cases)


# -- controller-side parsers of host-given text ------------------------------------------------


def test_hostlist_compress_is_linear_in_a_hostile_host_name():
    from exemplar_tune.fleet.hostlist import compress

    assert_linear(lambda name: compress([name, "gpu01"]), {
        "digits then more digits": lambda n: "1" * n + "x1",
        "letters and digits": lambda n: "a1" * (n // 2),
    })


def test_dcgmi_table_rows_are_linear_in_blank_runs():
    from exemplar_tune.dcgm import parse_table

    def table(text: str) -> object:
        try:
            return parse_table(text)
        except ValueError:
            return None

    assert_linear(table, {
        "a row of blanks": lambda n: "| Deployment" + " " * n + "x\n",
        "a row of bars": lambda n: "|" * n + "\n",
    })
