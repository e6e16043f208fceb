"""CPU isolation and IRQ placement: boot knobs, sysfs readback, IRQ affinity, irqbalance.

Files: ``Documentation/admin-guide/kernel-parameters.txt`` (``isolcpus=[flags,]<cpulist>``,
``nohz_full=``, ``rcu_nocbs=``, ``irqaffinity=`` in ``/proc/cmdline``),
``Documentation/ABI/testing/sysfs-devices-system-cpu`` (``/sys/devices/system/cpu/isolated``,
``nohz_full``), ``Documentation/core-api/irq/irq-affinity.rst`` (``/proc/irq/<N>/
smp_affinity_list``, ``effective_affinity_list``, ``/proc/irq/default_smp_affinity``),
``/proc/interrupts`` (``kernel/irq/proc.c`` ``show_interrupts``) and irqbalance
(``cputree.c setup_banned_cpus``: ``IRQBALANCE_BANNED_CPUS`` mask, else
``IRQBALANCE_BANNED_CPULIST`` if set, even empty, else isolated + nohz_full CPUs), whose
environment file is ``/etc/default/irqbalance`` (Debian) or ``/etc/sysconfig/irqbalance`` (RHEL).
"""

from __future__ import annotations

import shlex
from collections import Counter
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.cmdline import (
    pick,
    read_cmdline,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpulist import (
    format_cpulist,
    parse_cpulist,
    parse_cpumask,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.values import parse_count
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

CPU_DIR = "sys/devices/system/cpu"
IRQ_DIR = "proc/irq"
INTERRUPTS = "proc/interrupts"
BOOT_KNOBS = ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity")
ISOLCPUS_FLAGS = ("nohz", "domain", "managed_irq")
IRQBALANCE_FILES = ("etc/default/irqbalance", "etc/sysconfig/irqbalance")


def parse_isolcpus(value: str, source: str = "isolcpus") -> dict[str, Any]:
    """``"managed_irq,domain,2-7"`` -> ``{"flags": ["managed_irq", "domain"], "cpus": "2-7"}``."""
    words = value.split(",")
    flags = [w for w in words if w in ISOLCPUS_FLAGS]
    rest = ",".join(w for w in words if w not in ISOLCPUS_FLAGS)
    return {"flags": flags, "cpus": format_cpulist(parse_cpulist(rest, source))}


def parse_sysfs_cpus(text: str, source: str = "cpulist") -> str:
    """Readback files: blank or ``(null)`` (mask never allocated) -> ``""``, else canonical."""
    text = text.strip()
    return "" if text in ("", "(null)") else format_cpulist(parse_cpulist(text, source))


def _sysfs_cpus(root: Sysroot, rel: str) -> str | None:
    text = root.read_optional(rel)
    return None if text is None else parse_sysfs_cpus(text, root.display(rel))


def read_isolation(root: Sysroot) -> dict[str, Any]:
    """Boot knobs as given (raw), ``isolcpus`` parsed, and the kernel's readback.

    ``isolated``/``nohz_full`` are ``None`` when the file is absent (old kernel, or no
    ``CONFIG_NO_HZ_FULL``) and ``""`` when nothing is isolated.
    """
    knobs = pick(read_cmdline(root), BOOT_KNOBS)
    isolcpus = knobs.get("isolcpus")
    return {
        "cmdline": {name: knobs.get(name) for name in BOOT_KNOBS},
        "isolcpus": None if isolcpus is None else parse_isolcpus(isolcpus, "/proc/cmdline"),
        "isolated": _sysfs_cpus(root, f"{CPU_DIR}/isolated"),
        "nohz_full": _sysfs_cpus(root, f"{CPU_DIR}/nohz_full"),
    }


def parse_interrupts(text: str, source: str = "/" + INTERRUPTS) -> dict[int, str]:
    """``/proc/interrupts`` -> ``{irq: action name}`` for numbered IRQs (NMI, LOC ... skipped)."""
    lines = text.splitlines()
    if not lines or not lines[0].split() or not lines[0].split()[0].startswith("CPU"):
        raise ParseError(source, text, "no CPU header line")
    ncpus = len(lines[0].split())
    names: dict[int, str] = {}
    for line in lines[1:]:
        label, sep, rest = line.partition(":")
        if not sep or not label.strip().isdigit():
            continue
        words = rest.split()
        tail = words[ncpus:]
        if len(words) < ncpus or not tail:
            continue
        names[parse_count(label, source)] = _action_name(tail)
    return names


def _action_name(tail: list[str]) -> str:
    """The action name(s) at the end of an interrupts line (``"acpi, foo"`` kept joined)."""
    name = [tail[-1]]
    for word in reversed(tail[:-1]):
        if not word.endswith(","):
            break
        name.insert(0, word)
    return " ".join(name)


def read_irqs(root: Sysroot) -> list[dict[str, Any]]:
    """Every ``/proc/irq/<N>`` with its affinity, effective affinity and name (if known)."""
    text = root.read_optional(INTERRUPTS)
    names = {} if text is None else parse_interrupts(text, root.display(INTERRUPTS))
    irqs = []
    for entry in root.listdir(IRQ_DIR):
        if not entry.isdigit():
            continue
        base = f"{IRQ_DIR}/{entry}"
        irqs.append({
            "irq": int(entry),
            "name": names.get(int(entry)),
            "affinity": _sysfs_cpus(root, f"{base}/smp_affinity_list"),
            "effective": _sysfs_cpus(root, f"{base}/effective_affinity_list"),
        })
    return sorted(irqs, key=lambda irq: irq["irq"])


def summarize_irqs(irqs: list[dict[str, Any]], housekeeping: list[int] | None,
                   default_affinity: str | None) -> dict[str, Any]:
    """Counts of IRQs per affinity/effective CPU set; the IRQs firing outside housekeeping.

    An IRQ is outside when its effective CPUs (its affinity where the kernel has no
    effective list) include a CPU not in ``housekeeping``; ``None`` housekeeping: not judged.
    """
    allowed = None if housekeeping is None else set(housekeeping)
    outside = []
    for irq in irqs:
        where = irq["effective"] if irq["effective"] is not None else irq["affinity"]
        if allowed is not None and where and set(parse_cpulist(where)) - allowed:
            outside.append({"irq": irq["irq"], "name": irq["name"], "effective": where})
    return {
        "default_affinity": default_affinity,
        "count": len(irqs),
        "by_affinity": dict(sorted(Counter(str(i["affinity"]) for i in irqs).items())),
        "by_effective": dict(sorted(Counter(str(i["effective"]) for i in irqs).items())),
        "housekeeping": None if housekeeping is None else format_cpulist(housekeeping),
        "outside_housekeeping": None if allowed is None else outside,
    }


def read_default_affinity(root: Sysroot) -> str | None:
    """``/proc/irq/default_smp_affinity`` (hex mask) as a cpulist; ``None`` when absent."""
    rel = f"{IRQ_DIR}/default_smp_affinity"
    text = root.read_optional(rel)
    return None if text is None else format_cpulist(parse_cpumask(text, root.display(rel)))


def parse_env_file(text: str) -> dict[str, str]:
    """``KEY=value`` lines of a systemd ``EnvironmentFile`` (quotes removed, ``#`` comments)."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        if not sep:
            continue
        try:
            env[key.strip()] = " ".join(shlex.split(value, comments=True))
        except ValueError:
            env[key.strip()] = value.strip()
    return env


def irqbalance_banned(env: dict[str, str], auto: list[int]) -> tuple[str, str]:
    """(banned cpulist, where it comes from) following irqbalance's ``setup_banned_cpus``."""
    mask = env.get("IRQBALANCE_BANNED_CPUS", "")
    if mask:
        return format_cpulist(parse_cpumask(mask, "IRQBALANCE_BANNED_CPUS")), \
            "IRQBALANCE_BANNED_CPUS"
    if "IRQBALANCE_BANNED_CPULIST" in env:
        cpus = parse_cpulist(env["IRQBALANCE_BANNED_CPULIST"], "IRQBALANCE_BANNED_CPULIST")
        return format_cpulist(cpus), "IRQBALANCE_BANNED_CPULIST"
    return format_cpulist(auto), "isolated+nohz_full"


def irqbalance_pids(root: Sysroot) -> list[int]:
    """PIDs whose ``/proc/<pid>/comm`` is ``irqbalance``."""
    return [int(pid) for pid in root.listdir("proc")
            if pid.isdigit() and root.read_optional(f"proc/{pid}/comm") == "irqbalance"]


def read_irqbalance(root: Sysroot, auto: list[int]) -> dict[str, Any]:
    """Whether irqbalance runs, its environment files and the CPUs it will not use.

    ``auto`` is isolated + nohz_full CPUs (irqbalance's own default when nothing is set).
    """
    files = [rel for rel in IRQBALANCE_FILES if root.exists(rel)]
    env: dict[str, str] = {}
    for rel in files:
        env.update(parse_env_file(root.read_text(rel)))
    banned, origin = irqbalance_banned(env, auto)
    pids = irqbalance_pids(root)
    return {
        "running": bool(pids),
        "pids": pids,
        "files": [root.display(rel) for rel in files],
        "banned_cpulist_setting": env.get("IRQBALANCE_BANNED_CPULIST"),
        "banned_cpus_setting": env.get("IRQBALANCE_BANNED_CPUS"),
        "banned": banned,
        "banned_from": origin,
    }
