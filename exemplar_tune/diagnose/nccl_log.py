"""NCCL debug logs (``NCCL_DEBUG=INFO``): which topology file NCCL used, and CPU affinity.

Lines look like ``<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <message>``
(``NVIDIA/nccl:src/graph/topo.cc`` and ``xml.cc``). ``NCCL_TOPO_FILE set by environment to X``
says it was set; ``Could not open XML topology file X : reason`` says it was set but not
readable where NCCL ran (typically not mounted into the container) and NCCL fell back to
auto-detection; ``XML Topology has wrong version`` and ``XML Parse`` warnings mean the file was
found but rejected. ``Loading topology file X`` needs ``NCCL_DEBUG_SUBSYS`` with GRAPH;
``NET/OFI Adding NCCL_TOPO_FILE=X to environment`` is the aws-ofi-nccl plugin setting it.
``Setting affinity for GPU n to <cpus>`` is the CPU set NCCL derived for that GPU (per host:
two hosts' GPU 0 are two GPUs). Failures (``NCCL WARN`` lines, error returns, NCCL errors a
framework raised) become one finding per kind (``nccl_warn``). The summary counts the NCCL
ranks (host, process and device of the line prefixes) and hosts seen, and the transports
named (``Using network IB``, ``via NET/Socket/0``, ``via P2P/IPC``). ``Bootstrap : Using
[0]eth0:10.0.0.1<0>`` and ``NET/Socket : Using [0]...`` name the interfaces NCCL chose for its
bootstrap and its socket transport: a virtual one (a container bridge, a veth pair, an overlay,
a tunnel, or an address on Docker's default bridge: ``netdev_names``) among them is a warning,
since NCCL may carry traffic over it; so is a container (a host named by a 12-digit container
ID) that finds no interface in its peer's subnet: it sits on a bridge network.
With ``NCCL_DEBUG_SUBSYS=COLL`` the log also carries one line per call (``nccl_coll``): then
one INFO finding per collective names the message sizes that carry 90 % of its bytes.
``GPU Direct RDMA Enabled/Disabled for HCA`` lines say whether NCCL can use GPUDirect RDMA
(``nccl_gdr``: one ``fabric.gpudirect-rdma`` finding when the log has them)."""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.netdev_names import (
    virtual_kind,
)

from exemplar_tune.diagnose import nccl_coll, nccl_gdr, nccl_warn
from exemplar_tune.diagnose.base import (
    FAIL,
    INFO,
    PASS,
    WARN,
    Analyzer,
    DiagnoseError,
    Finding,
    Occurrences,
    Report,
    cite,
    finding,
    merge_folded,
    numbered,
    read_all,
)

KIND = "nccl-log"
CHECK_TOPO = "runtime.topo-in-container"
CHECK_AFFINITY = "cpu.job-cpus-gpu-local"
CHECK_SIZES = "workload.nccl-message-sizes"
_EVENTS = (  # (event, pattern); the first group is the path or value
    ("set", re.compile(r"NCCL_TOPO_FILE set by environment to (\S+)")),
    ("loading", re.compile(r"Loading topology file (\S+)")),
    ("cannot_open", re.compile(r"Could not open XML topology file (\S+)\s*:\s*(.*)$")),
    ("wrong_version", re.compile(r"XML Topology has wrong version (\d+)")),
    ("parse_error", re.compile(r"NCCL WARN XML Parse\s*:?\s*(.*)$")),
    ("plugin_set", re.compile(r"NET/OFI Adding NCCL_TOPO_FILE=(\S+) to environment")),
    ("dump", re.compile(r"NCCL_TOPO_DUMP_FILE set by environment to (\S+)")),
)
_AFFINITY = re.compile(r"Setting affinity for GPU (\d+) to (\S+)")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+\S*)")
_NCCL_TAG = re.compile(r"NCCL (?:INFO|WARN)\b")  # after a non-word character: is_nccl_line
_NCCL_START = re.compile(r"NCCL version \d")
# ([\w ]*\w)\s*$ and not ([\w ]+?)\s*$: a lazy name before blanks to the line's end reads a
# run of blanks again from each of its characters
_TRANSPORT = re.compile(r"\bvia (NET/[\w-]+|P2P/[\w-]+|P2P\b|SHM|CollNet\w*)|"
                        r"\bUsing network ([\w ]*\w)\s*$")
_BROKEN = ("cannot_open", "wrong_version", "parse_error")
CHECK_INTERFACES = "fabric.nccl-interfaces"
_USING = re.compile(r"\b(Bootstrap|NET/Socket)\s*: Using (.*)$")
_INTERFACE = re.compile(r"(?:^|\s)(?:\[\d+\])?([A-Za-z][\w.-]*):")  # [0]eth0:10.0.0.1<0>
_CONTAINER_ID = re.compile(r"^[0-9a-f]{12}$")  # Docker's default host name in a container
# NCCL's socket code finding no address to reach its peer from, or to listen on
_NO_ROUTE = ("No interface found in the same subnet", "No usable listening interface")



def sniff(text: str) -> bool:
    """NCCL INFO/WARN lines, COLL call lines whose prefix was cut, or an NCCL error that a
    framework raised (``NCCL error in: ... unhandled system error, NCCL version 2.7.8``)."""
    return any(is_nccl_line(line) or nccl_coll.is_call_line(line)
               or nccl_warn.raised(line) for line in text.splitlines())


def is_nccl_line(line: str) -> bool:
    """An ``NCCL INFO`` or ``NCCL WARN`` line (the tag not inside a word), or one that starts
    ``NCCL version N``. The tag is found by its literal text first, which is fast."""
    for m in _NCCL_TAG.finditer(line):
        at = m.start()
        if not at or not (line[at - 1].isalnum() or line[at - 1] == "_"):
            return True
    return bool(_NCCL_START.match(line))


class LogReader:
    """The facts of an NCCL log's INFO lines, gathered as lines are fed: topology events and
    the interfaces used (folded: where each was seen), affinity per host/GPU, the version, the
    NCCL line and WARN counts, the ranks and hosts of the line prefixes, the transports."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, tuple], Occurrences] = {}  # (event, groups): where
        self.affinity: dict[str, dict[str, Any]] = {}
        self.version: str | None = None
        self.lines = self.warn = 0
        self.ranks: set[str] = set()
        self.hosts: set[str] = set()
        self.transports: set[str] = set()
        self.interfaces: dict[str, dict[str, Occurrences]] = {}
        self.addresses: dict[str, str] = {}  # interface: its first address seen
        self.gdr = nccl_gdr.GdrReader()

    def feed(self, n: int, line: str, source: str | None) -> None:
        """Read line ``n`` (``source``: where :mod:`normalize` says it came from)."""
        if "NCCL" not in line:
            return
        if not self.version and "version" in line and (m := _VERSION.search(line)):
            self.version = m.group(1).rstrip(".,")
        if not is_nccl_line(line):
            return
        self.lines += 1
        self.warn += " NCCL WARN " in line
        host, rank = nccl_warn.origin(line, source)
        if host:
            self.hosts.add(host)
        if rank:
            self.ranks.add(rank)
        if ("via " in line or "Using network" in line) and (m := _TRANSPORT.search(line)):
            self.transports.add(m.group(1) or f"NET/{m.group(2)}")
        if ": Using " in line and (m := _USING.search(line)):
            listed = m.group(2)
            for found in _INTERFACE.finditer(listed):
                name = found.group(1)
                self.interfaces.setdefault(m.group(1), {}).setdefault(
                    name, Occurrences()).add(n)
                # the address after the name, up to its <port> (bounded: one pass per line)
                tail = listed[found.end():found.end() + 64].split("<", 1)[0].split()
                self.addresses.setdefault(name, tail[0] if tail else "")
        if "RDMA" in line or "GDR" in line or "DMA-BUF" in line:
            self.gdr.feed(n, line, host)
        if "Setting affinity" in line and (m := _AFFINITY.search(line)):
            self.affinity[f"{host or '?'} GPU {m.group(1)}"] = {"cpus": m.group(2), "line": n}
        if "TOPO" in line or "opology" in line or "XML" in line:
            for event, rx in _EVENTS:
                if m := rx.search(line):
                    self.events.setdefault((event, m.groups()), Occurrences()).add(n)


    def merge(self, other: LogReader, line_offset: int) -> None:
        """Fold ``other``, the reading of the lines after these (numbered from 1 there,
        ``line_offset`` on here): what feeding this reader those lines too would hold (the
        first version and address kept, the last affinity per GPU taken)."""
        merge_folded(self.events, other.events, line_offset)
        for key, value in other.affinity.items():
            self.affinity[key] = {**value, "line": value["line"] + line_offset}
        self.version = self.version or other.version
        self.lines += other.lines
        self.warn += other.warn
        self.ranks |= other.ranks
        self.hosts |= other.hosts
        self.transports |= other.transports
        for purpose, names in other.interfaces.items():
            merge_folded(self.interfaces.setdefault(purpose, {}), names, line_offset)
        for name, address in other.addresses.items():
            self.addresses.setdefault(name, address)
        self.gdr.merge(other.gdr, line_offset)


def parse_log(text: str) -> LogReader:
    """The :class:`LogReader` of every line of ``text``."""
    reader = LogReader()
    sources = getattr(text, "sources", ())
    for n, line in numbered(text):
        reader.feed(n, line, sources[n - 1] if n <= len(sources) else None)
    return reader


def judge_topology(source: str, folded: dict[tuple[str, tuple], Occurrences]) -> Finding:
    """The topology finding of a :class:`LogReader`'s events (each seen once or more)."""
    events = sorted(((event, seen.first, groups) for (event, groups), seen in folded.items()),
                    key=lambda e: e[1])
    lines = sorted(n for seen in folded.values() for n in seen.cited())
    broken = [e for e in events if e[0] in _BROKEN]
    paths = sorted({g[0] for e, _, g in events if e in ("set", "loading", "plugin_set",
                                                         "cannot_open")})
    if broken:
        event, line, groups = broken[0]
        lines = sorted(n for (e, _), seen in folded.items() if e in _BROKEN
                       for n in seen.cited())
        why = {"cannot_open": f"could not open {groups[0]} ({groups[-1].strip()}); NCCL fell "
                              "back to auto-detection (file not mounted in the container?)",
               "wrong_version": f"topology XML has wrong version {groups[0]}; NCCL rejects it",
               "parse_error": "topology XML did not parse; NCCL init fails"}[event]
        return finding(CHECK_TOPO, FAIL, f"NCCL_TOPO_FILE not used: {why}", [cite(source, lines)],
                       topo_files=paths, problems=sorted({e for e, _, _ in broken}))
    if paths:
        return finding(CHECK_TOPO, PASS, f"NCCL read topology file {', '.join(paths)}",
                       [cite(source, lines)], topo_files=paths)
    return finding(CHECK_TOPO, INFO, "no NCCL_TOPO_FILE lines: NCCL auto-detected the topology "
                   "(or the log lacks ENV/GRAPH subsystems)")


def judge_interfaces(source: str, log: LogReader, problems: list[nccl_warn.Problem]
                     ) -> Finding | None:
    """A warning when NCCL's bootstrap or socket interfaces include a virtual one, or when a
    container finds no interface to reach its peer from (:func:`judge_bridged`)."""
    interfaces = log.interfaces
    if not interfaces:
        return judge_bridged(source, problems)
    used = {purpose: sorted(names) for purpose, names in interfaces.items()}
    kinds = {name: kind for names in used.values() for name in names
             if (kind := virtual_kind(name, log.addresses.get(name)))}
    lines = [n for names in interfaces.values() for found in names.values()
             for n in found.cited()]
    shown = "; ".join(f"{purpose}: {', '.join(names)}" for purpose, names in used.items())
    if not kinds:
        return finding(CHECK_INTERFACES, PASS, f"NCCL uses physical interfaces ({shown})",
                       [cite(source, lines)], interfaces=used)
    bad = sorted(kinds)
    physical = sorted({n for names in used.values() for n in names if n not in kinds})
    fix = (f"set NCCL_SOCKET_IFNAME={','.join(physical)}" if physical else
           "set NCCL_SOCKET_IFNAME to the host's physical interface (none is listed here; "
           "a container needs the host's network: docker run --network host)")
    where = [n for purpose in interfaces for name, found in interfaces[purpose].items()
             if name in bad for n in found.cited()]
    what = ", ".join(f"{name} ({kinds[name]})" for name in bad)
    return finding(CHECK_INTERFACES, WARN, f"NCCL may carry traffic over virtual interface"
                   f"{'s' if len(bad) > 1 else ''} {what} ({shown}): {fix}",
                   [cite(source, where)], interfaces=used, virtual=bad)


def judge_bridged(source: str, problems: list[nccl_warn.Problem]) -> Finding | None:
    """A warning when hosts named by a container ID find no interface in their peer's subnet
    or none to listen on: the container sits on a bridge network its peers cannot reach."""
    found = [p for p in problems if any(text in p.label for text in _NO_ROUTE)]
    hosts = sorted({h for p in found for h in p.hosts if _CONTAINER_ID.match(h)})
    if not hosts:
        return None
    lines = sorted(n for p in found for n in p.seen.cited())
    return finding(CHECK_INTERFACES, WARN, f"NCCL runs in a container ({', '.join(hosts[:4])}: "
                   "a Docker container ID as host name) and finds no interface that reaches "
                   "its peer: the container is on a bridge network, not the host's; run it "
                   "with the host's network (docker run --network host) and set "
                   "NCCL_SOCKET_IFNAME to the host's NIC", [cite(source, lines)],
                   containers=hosts)


def judge_affinity(source: str, affinity: dict[str, dict[str, Any]]) -> Finding:
    if not affinity:
        return finding(CHECK_AFFINITY, INFO, "no 'Setting affinity for GPU' lines in the log")
    shown = "; ".join(f"{k}: {v['cpus']}" for k, v in sorted(affinity.items()))
    return finding(CHECK_AFFINITY, INFO, f"NCCL CPU affinity: {shown}",
                   [cite(source, [v["line"] for v in affinity.values()])],
                   affinity={k: v["cpus"] for k, v in affinity.items()})


def _calls_text(n: int) -> str:
    return f"{n} call" + ("s" if n != 1 else "") if n < 1000 else f"{n / 1000:.1f} k calls"


def _size_text(size: int) -> str:
    """``64 MiB`` when exact in the largest unit that fits, else ``1.5 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size // scale} {unit}" if size % scale == 0 else f"{size / scale:.1f} {unit}"
    return f"{size} B"


def judge_sizes(source: str, coll: nccl_coll.CollCounter) -> list[Finding]:
    """One INFO finding per collective: the sizes carrying 90 % of its bytes (at most 8)."""
    findings = []
    for name, sizes in coll.message_sizes().items():
        carried = sum(s.share for s in sizes)
        calls = sum(seen.count for seen in coll.sizes[name].values())
        shown = ", ".join(_size_text(s.size) for s in sizes)
        findings.append(finding(
            CHECK_SIZES, INFO, f"{name}: {_calls_text(calls)}, {carried * 100:.0f} % of "
            f"bytes at {shown}", [coll.seen[name].cite(source)],
            collective=name, calls=calls, first=coll.seen[name].first,
            last=coll.seen[name].last,
            bytes=sum(size * seen.count for size, seen in coll.sizes[name].items()),
            sizes=[{"size": s.size, "calls": s.calls, "share": round(s.share, 4)}
                   for s in sizes]))
    return findings


def coll_summary(coll: nccl_coll.CollCounter) -> dict[str, Any]:
    out = {"lines": coll.lines, "calls": coll.calls,
           "unknown_datatype_lines": coll.skipped["datatype"],
           "unknown_collective_lines": coll.skipped["collective"]}
    if coll.forgotten:
        out["calls_forgotten"] = coll.forgotten
    return out


class NcclLogReader:
    """An NCCL log read as a stream (:class:`~.base.LineReader`): INFO facts, failures and
    COLL calls, each folded as it is fed."""

    def __init__(self, source: str, expectations: dict[str, Any]) -> None:
        self.source = source
        self.log = LogReader()
        self.coll = nccl_coll.CollCounter()
        self.problems = nccl_warn.ProblemReader()

    def feed(self, n: int, line: str, source: str | None, raw: str) -> None:
        self.log.feed(n, line, source)
        self.coll.feed(n, line)
        self.problems.feed(n, line, source)

    # a job read in chunks (:class:`~.base.ChunkReader`): only the COLL counter's matching
    # of calls across ranks depends on what came before
    def later(self) -> None:
        self.coll.later()

    def seal(self) -> None:
        """Nothing to do: the state travels as it is."""

    def reopen(self) -> None:
        """Nothing to do: lines are fed as usual."""

    def fits(self, other: NcclLogReader) -> str | None:
        return self.coll.fits(other.coll)

    def merge(self, other: NcclLogReader, line_offset: int) -> None:
        self.log.merge(other.log, line_offset)
        self.coll.merge(other.coll, line_offset)
        self.problems.merge(other.problems, line_offset)

    def report(self, files: tuple[tuple[str, int], ...]) -> Report:
        log, coll, source = self.log, self.coll, self.source
        problems = self.problems.problems()
        if not log.lines and not coll.lines and not problems:
            raise DiagnoseError(f"{source}: no NCCL log lines")
        findings = nccl_warn.judge_problems(source, problems)
        findings += [judge_topology(source, log.events), judge_affinity(source, log.affinity)]
        findings += [f for f in (judge_interfaces(source, log, problems),
                                 log.gdr.judge(source, log.version or coll.version)) if f]
        findings += judge_sizes(source, coll)
        summary = {"nccl_version": log.version or coll.version, "nccl_lines": log.lines,
                   "warnings": log.warn, "problems": [p.to_dict() for p in problems],
                   "ranks": len(log.ranks) or None, "hosts": len(log.hosts) or None,
                   "transports": sorted(log.transports),
                   "topology_events": [{"event": e, "line": seen.first, "value": g[0],
                                        "count": seen.count}
                                       for (e, g), seen in sorted(log.events.items(),
                                                                  key=lambda kv: kv[1].first)],
                   "affinity": {k: v["cpus"] for k, v in log.affinity.items()},
                   "interfaces": {k: sorted(v) for k, v in log.interfaces.items()},
                   "gpudirect_rdma": log.gdr.summary(),
                   "coll": coll_summary(coll)}
        return Report(source, KIND, summary, findings)


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    """The report of a whole log (:class:`NcclLogReader` fed every line)."""
    return read_all(NcclLogReader(source, expectations), text)


ANALYZER = Analyzer(KIND, sniff, analyze, NcclLogReader)
