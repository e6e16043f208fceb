"""Peer-memory module evidence, as operators paste it: ``lsmod`` (whole, or ``lsmod | grep
PATTERN`` after a shell prompt), ``modprobe``/``modinfo`` of the module and its kernel
messages; judged as the preflight check ``fabric.gpudirect-rdma`` (is GPUDirect RDMA through
peer memory possible).

The peer-memory module is ``nvidia_peermem`` (driver 465 and later) or ``nv_peer_mem``
(Mellanox's, before it). An ``lsmod`` row ``nvidia_peermem  16384  0`` means it is loaded.
A grep whose pattern would match a module and that printed nothing (the next line is a
prompt, or the capture ends) means that module is not loaded: evidence of absence, not an
unreadable capture. ``modprobe: ERROR: could not insert 'nv_peer_mem': Unknown symbol`` and
kernel lines ``nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -22)`` /
``disagrees about version of symbol`` mean it cannot load (built against another ``ib_core``:
MLNX_OFED and the inbox RDMA stack mixed). dma-buf (the open kernel module on Linux 5.12+)
is the other way to GPUDirect RDMA; these captures cannot show it, so the messages say
"through peer memory". A whole ``lsmod`` without ``nvidia`` or ``ib_core`` is a host where
GPUDirect RDMA does not apply (no NVIDIA driver, or no RDMA stack): not applicable.
Whether NCCL uses GPUDirect RDMA is in its log (:mod:`.nccl_log`).

A full kernel log that carries such lines among others is the kernel-log format's; this one
reads captures made of peer-memory evidence only (greps, pastes of a few lines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.lsmod import ROW

from exemplar_tune.diagnose.base import (
    FAIL,
    INFO,
    PASS,
    Analyzer,
    DiagnoseError,
    Finding,
    Report,
    cite,
    finding,
)

KIND = "lsmod"
CHECK = "fabric.gpudirect-rdma"
MODULES = ("nvidia_peermem", "nv_peer_mem")
STACK = {"nvidia": "the NVIDIA driver", "ib_core": "the RDMA stack"}  # GPUDirect RDMA needs both
# a shell prompt: an optional (venv), then [user@host dir] or user@host:dir, then # or $
_PROMPT = re.compile(r"^(?:\([\w.-]{1,64}\) ?)?(?:\[[^\[\]]{1,200}\]|[\w.@:~/-]{1,200})?"
                     r"[#$] ?(.*)$")
_HEADER = re.compile(r"^Module\s+Size\s+Used by\s*$")
_MODPROBE = re.compile(r"^(?:modprobe|insmod): (?:ERROR|FATAL): (.*)$")
_INSMOD = re.compile(r"^insmod \S+$")
_MODINFO = re.compile(r"^(filename|version|name|vermagic|description|license|author|"
                      r"srcversion|depends|retpoline|signat|signer|sig_key|sig_hashalgo|"
                      r"alias|intree|parm):\s*(.*)$")
_KERNEL = re.compile(r"^(?:\[[^\[\]]{1,64}\] ?)?(nvidia[_-]peermem|nv_peer_mem)\b[^:]{0,40}: "
                     r"(.*)$")
_STAMP = re.compile(r"^\[([^\[\]]{1,64})\]")
_BAD = re.compile(r"Unknown symbol|disagrees about version|(?<!no )errors?\b|failed|"
                  r"[Ii]nvalid", re.I)
_NOTES = re.compile(r"^(?:\.{3,}|From dmesg:?|dmesg.*|\s*)$")


@dataclass
class Evidence:
    """What the capture shows, line numbers kept per fact."""

    loaded: dict[str, int] = field(default_factory=dict)  # module: its lsmod row
    users: dict[str, str] = field(default_factory=dict)  # module: its "Used by" column
    rows: int = 0  # lsmod rows read
    greps: list[dict[str, Any]] = field(default_factory=list)  # {line, patterns, printed}
    whole: int = 0  # line of a whole lsmod's header
    stack: set[str] = field(default_factory=set)  # of STACK, the modules seen loaded
    failures: list[tuple[int, str, str]] = field(default_factory=list)  # (line, module, text)
    modinfo: dict[str, str] = field(default_factory=dict)
    modinfo_line: int = 0
    stamps: set[str] = field(default_factory=set)  # kernel stamps of failure lines


def _grep_patterns(command: str) -> list[str] | None:
    """The literal patterns of ``lsmod | grep ...`` (``-e P``, ``-E "a|b"``, ``a\\|b``), in
    lower case; ``None`` when the command is not an lsmod grep."""
    if not re.match(r"^\s*(?:sudo\s+)?/?(?:\w+/)*lsmod\s*\|\s*(?:e|f)?grep\b", command):
        return None
    words = [w.strip("'\"") for w in command.split("|", 1)[1].split()[1:]]
    patterns = [w for w in words if w and not w.startswith("-")]
    return [p.strip("^$").lower() for text in patterns for p in re.split(r"\\?\|", text) if p]


def _shown_by(patterns: list[str], module: str) -> bool:
    """Whether a grep for ``patterns`` would print ``module``'s row (``-``/``_`` alike)."""
    name = module.replace("-", "_")
    return any(p.replace("-", "_") in name for p in patterns)


def read(text: str) -> tuple[Evidence, int, int]:
    """The evidence of every line, how many non-blank lines were recognised, and how many
    there were."""
    ev = Evidence()
    known = total = 0
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        total += 1
        known += _read_line(ev, n, line)
    return ev, known, total


def _read_line(ev: Evidence, n: int, line: str) -> bool:
    """Fold one line into ``ev``; whether it was one of the shapes this format knows."""
    if prompt := _PROMPT.match(line):
        command = prompt.group(1).strip()
        patterns = _grep_patterns(command) if command else None
        if patterns is not None:
            ev.greps.append({"line": n, "command": command, "patterns": patterns,
                             "printed": 0})
        elif command.startswith("lsmod"):
            ev.greps.append({"line": n, "command": command, "patterns": None, "printed": 0})
        return True
    if _HEADER.match(line):
        ev.whole = n
        return True
    if row := ROW.match(line):
        ev.rows += 1
        if ev.greps:
            ev.greps[-1]["printed"] += 1
        if row.group(1) in STACK:
            ev.stack.add(row.group(1))
        if row.group(1) in MODULES:
            ev.loaded[row.group(1)] = n
            ev.users[row.group(1)] = row.group(4) or ""
        return True
    if failed := _MODPROBE.match(line):
        module = next((m for m in MODULES if m in failed.group(1).replace("-", "_")), "?")
        ev.failures.append((n, module, failed.group(1)))
        return True
    if kernel := _KERNEL.match(line.strip()):
        if _BAD.search(kernel.group(2)):
            ev.failures.append((n, kernel.group(1).replace("-", "_"), kernel.group(2)))
            if stamp := _STAMP.match(line.strip()):
                ev.stamps.add(stamp.group(1))
        return True
    if info := _MODINFO.match(line):
        ev.modinfo.setdefault(info.group(1), info.group(2).strip())
        ev.modinfo_line = ev.modinfo_line or n
        return True
    return bool(_INSMOD.match(line) or _NOTES.match(line))


def sniff(text: str) -> bool:
    """A capture made of peer-memory evidence: an ``lsmod`` command line or header, or a
    peer-memory module's load failure, with (nearly) every line one this format reads."""
    head = "\n".join(text.splitlines()[:200])
    if not any(word in head for word in ("lsmod", "peer_mem", "peermem", "Used by")):
        return False
    ev, known, total = read(head)
    anchored = any(g for g in ev.greps) or ev.whole or ev.failures
    return bool(anchored) and known * 5 >= total * 4


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    """The report of the capture: one ``fabric.gpudirect-rdma`` finding."""
    del expectations
    ev, _, _ = read(text)
    found = _judge(ev, source)
    if found is None:
        raise DiagnoseError(f"{source}: lsmod: no lsmod rows, 'lsmod | grep' command with its "
                            "output, nor nvidia_peermem / nv_peer_mem load messages")
    summary = {"loaded": sorted(ev.loaded), "used_by": ev.users, "lsmod_rows": ev.rows,
               "whole_lsmod": bool(ev.whole),
               "greps": [{k: g[k] for k in ("line", "command", "printed")} for g in ev.greps],
               "load_failures": [{"line": n, "module": m, "message": t}
                                 for n, m, t in ev.failures],
               "modinfo": ev.modinfo}
    return Report(source, KIND, summary, [found])


def _judge(ev: Evidence, source: str) -> Finding | None:
    if ev.loaded:
        names = sorted(ev.loaded)
        users = "; ".join(f"{m} used by {ev.users[m]}" for m in names if ev.users.get(m))
        return finding(CHECK, PASS, f"{' and '.join(names)} loaded"
                       + (f" ({users})" if users else "") + ": GPUDirect RDMA through peer "
                       "memory is possible (whether NCCL uses it is in its log: 'GPU Direct "
                       "RDMA Enabled for HCA')", [cite(source, ev.loaded.values())],
                       loaded=names)
    if ev.failures:
        return _failed(ev, source)
    absent = _absent(ev)
    if not absent:
        return None
    if ev.whole and (lacking := [m for m in STACK if m not in ev.stack]):
        shown = " and ".join(f"{m} ({STACK[m]})" for m in lacking)
        return finding(CHECK, INFO, f"not applicable: lsmod lists no {shown}: GPUDirect RDMA "
                       "does not apply to this host as captured", [cite(source, [ev.whole])],
                       not_loaded=lacking)
    lines = [g["line"] for g in ev.greps] + ([ev.whole] if ev.whole else [])
    installed = ""
    if ev.modinfo.get("name") in absent or any(m in ev.modinfo.get("filename", "")
                                               for m in absent):
        installed = (f" although modinfo finds it installed (version "
                     f"{ev.modinfo.get('version', '?')}): load it (modprobe "
                     f"{ev.modinfo.get('name', absent[0])}) and list it in /etc/modules-load.d")
        lines.append(ev.modinfo_line)
    unseen = [m for m in MODULES if m not in absent]
    how = "lsmod lists no row of it" if ev.whole else "lsmod | grep printed nothing"
    return finding(CHECK, FAIL, f"{' and '.join(absent)} not loaded ({how})"
                   f"{installed}: GPUDirect RDMA through peer memory is off"
                   + (f" ({', '.join(unseen)} not looked for)" if unseen else ""),
                   [cite(source, lines)], not_loaded=absent, not_looked_for=unseen)


def _absent(ev: Evidence) -> list[str]:
    """The peer-memory modules the capture shows are not loaded: a whole lsmod without their
    rows, or a grep that would have printed them and printed nothing."""
    if ev.whole:
        return list(MODULES)
    return [m for m in MODULES if any(
        g["patterns"] and not g["printed"] and _shown_by(g["patterns"], m) for g in ev.greps)]


_IN_LOG = re.compile(r"(nvidia[_-]peermem|nv_peer_mem)\b[^:\n]{0,40}: (.*)$")


def kernel_failures(text: str, source: str) -> Finding | None:
    """The peer-memory module's load failures in a whole kernel log (any line prefix: dmesg,
    journalctl, syslog), as one failing finding; ``None`` when the log shows none."""
    ev = Evidence()
    for n, line in enumerate(text.splitlines(), start=1):
        if ("peermem" in line or "peer_mem" in line) and (found := _IN_LOG.search(line)) \
                and _BAD.search(found.group(2)):
            ev.failures.append((n, found.group(1).replace("-", "_"), found.group(2)))
            if stamp := _STAMP.match(line.strip()):
                ev.stamps.add(stamp.group(1))
    return _failed(ev, source) if ev.failures else None


def _failed(ev: Evidence, source: str) -> Finding:
    modules = sorted({m for _, m, _ in ev.failures if m != "?"}) or ["the peer-memory module"]
    said = " ".join(text for _, _, text in ev.failures)
    symbols = sorted(set(re.findall(r"symbol (?!in\b)(\w+)", said)))
    why = "unknown symbols " + ", ".join(symbols) if symbols else ev.failures[0][2]
    attempts = f", {len(ev.stamps)} load attempts ({', '.join(sorted(ev.stamps))})" \
        if len(ev.stamps) > 1 else ""
    hint = (" (built against another ib_core: MLNX_OFED and the inbox RDMA stack mixed; "
            "rebuild it against the running one)") if "peer_memory_client" in why else ""
    return finding(CHECK, FAIL, f"{' and '.join(modules)} does not load: {why}{attempts}"
                   f"{hint}: GPUDirect RDMA through peer memory is off",
                   [cite(source, [n for n, _, _ in ev.failures])], not_loaded=modules,
                   symbols=symbols)


ANALYZER = Analyzer(KIND, sniff, analyze)
