"""NCCL failures in captured text, grouped by kind: one finding per kind, with count and lines.

NCCL reports trouble three ways (``NVIDIA/nccl:src/include/debug.h`` and ``checks.h``):

* ``host:pid:tid [dev] file.cc:line NCCL WARN <message>``: IB work completions with an error
  status (``NET/IB : Got completion from peer X with error 12`` or ``status=12``, the
  ``ibv_wc_status`` of ``infiniband/verbs.h``), IB async events (``port error``, ``local
  catastrophic error``), failed verbs calls (``Call to ibv_create_qp failed``), refused
  connections, libraries that do not load, fatal communicator errors;
* the failing return value traced at INFO up the call chain: ``NCCL INFO init.cc:577 -> 2``
  (the ``ncclResult_t`` of ``nccl.h``: 2 is a system error, 6 a remote/network error);
* frameworks re-raise it: ``NCCL error in: ...ProcessGroupNCCL.cpp:825, unhandled system
  error, NCCL version 2.7.8`` and ``ncclSystemError: System call (socket, ...) failed.``

Lines are read wherever their NCCL prefix stands (after launcher prefixes :mod:`normalize`
did not know, or an author's prose); GitHub's auto-links (``[net_ib.cc:101](http://...)``)
are read as their text. XML topology warnings are left to the topology judgement.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from exemplar_tune.diagnose.base import (
    FAIL,
    WARN,
    Finding,
    Occurrences,
    finding,
    numbered,
    occurrences_merged,
    shifted_occurrences,
)
from exemplar_tune.diagnose.normalize import natural
from exemplar_tune.fleet.hostlist import compress

CHECK = "fabric.nccl-errors"
# a host name is at most 253 characters (DNS): a longer word is no host
PREFIX = re.compile(r"(?:^|(?<=[\s`\[(]))(?P<host>[^\s:`\[\]()]{1,253}):(?P<pid>\d+):"
                    r"(?P<tid>\d+) \[(?P<dev>\d+)\]")
# the text of a link holds no "[": each "[" of a long run of them would read the rest again
_LINK = re.compile(r"\[([^\[\]\n]*)\]\(https?://[^)\s]*\)?")
_WARN = re.compile(r"\bNCCL WARN\s+(?P<msg>.*)$")
# Each pattern below is searched from where its literal starts, once per line: a literal
# followed by ".*?" and searched as one pattern is tried again from each of its occurrences,
# each reading the rest of the line (quadratic in a line that repeats it).
_INFO = re.compile(r"\bNCCL INFO ")
# (?<![\w./-]): a file name starts where its run of characters does (see _BAR in steplog)
_RETURN = re.compile(r"(?<![\w./-])(?P<where>[\w./-]+\.\w+:\d+) -> (?P<code>\d+)\b")
_ERROR = re.compile(r"\bNCCL error\b")
_WHY = re.compile(r",\s*(?P<why>unhandled system error|unhandled cuda error|internal error|"
                  r"invalid argument|invalid usage|remote process exited or there was a "
                  r"network error)")
_ERROR_NAME = re.compile(r"\b(?P<name>nccl(?:UnhandledCuda|System|Internal|InvalidArgument|"
                         r"InvalidUsage|Remote)Error)\b")
_TOPOLOGY = re.compile(r"^XML\b|XML Topology")
_NET_IB = re.compile(r"^\s*NET/IB\s*:\s*")

# ncclResult_t (nccl.h); 7 (ncclInProgress) is not a failure
RESULTS = {1: ("ncclUnhandledCudaError", "unhandled cuda error"),
           2: ("ncclSystemError", "unhandled system error"),
           3: ("ncclInternalError", "internal error"),
           4: ("ncclInvalidArgument", "invalid argument"),
           5: ("ncclInvalidUsage", "invalid usage"),
           6: ("ncclRemoteError", "remote process exited or there was a network error")}
# ibv_wc_status (infiniband/verbs.h), by value
WC_STATUS = ("success", "local length error", "local QP operation error",
             "local EE context operation error", "local protection error",
             "work request flushed error", "memory management operation error",
             "bad response error", "local access error", "remote invalid request error",
             "remote access error", "remote operation error", "transport retry counter exceeded",
             "RNR retry counter exceeded", "local RDD violation error",
             "remote invalid RD request", "aborted error", "invalid EE context number",
             "invalid EE context state", "fatal error", "response timeout error", "general error")


MAX_DETAILS = 64  # distinct details (peers, call sites) a problem names


@dataclass
class Problem:
    """One kind of failure, folded: a label, a status, where it was seen (count, first and
    last line), the hosts that logged it and up to :data:`MAX_DETAILS` details."""

    label: str
    status: str
    kind: str = "warn"  # warn (a WARN line), return (an error return traced), raised
    seen: Occurrences = field(default_factory=Occurrences)
    hosts: set[str] = field(default_factory=set)
    details: dict[str, None] = field(default_factory=dict)  # the first ones, in order
    example: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"pattern": self.label, "status": self.status, **self.seen.to_dict(),
                "lines": list(self.seen.lines), "hosts": sorted(self.hosts),
                "hostlist": compress(self.hosts), "details": sorted(self.details)}


def unlinked(line: str) -> str:
    """``line`` with Markdown auto-links (``[text](http://...)``) read as their text."""
    return _LINK.sub(r"\1", line) if "](http" in line else line


def returned(line: str) -> re.Match[str] | None:
    """The first ``<file>:<line> -> <code>`` after the line's first ``NCCL INFO`` (its
    ``where`` and ``code``): an NCCL call that returned an error code."""
    info = _INFO.search(line)
    return _RETURN.search(line, info.end()) if info else None


def raised(line: str) -> int | None:
    """The ``ncclResult_t`` of an NCCL error raised to the framework, the first the line
    names: ``NCCL error ..., <why>`` or the error's name (``ncclSystemError``)."""
    error = _ERROR.search(line)
    why = _WHY.search(line, error.end()) if error else None
    named = _ERROR_NAME.search(line)
    if why and (named is None or error.start() < named.start()):
        return next(c for c, (_, text) in RESULTS.items() if text == why["why"])
    if named:
        return next(c for c, (name, _) in RESULTS.items() if name == named["name"])
    return None


def origin(line: str, source: str | None = None) -> tuple[str | None, str | None]:
    """``(host, rank key)`` of an NCCL line: its ``host:pid:tid [dev]`` prefix, else the
    launcher source :mod:`normalize` kept; the rank key is ``host:pid [dev]``."""
    if m := PREFIX.match(line) or PREFIX.search(line):  # most often at the start
        return m.group("host"), f"{m.group('host')}:{m.group('pid')} [{m.group('dev')}]"
    return source, None


def _wc(code: str) -> str:
    n = int(code)
    return WC_STATUS[n] if n < len(WC_STATUS) else "unknown status"


def _result(code: int) -> str:
    name, text = RESULTS[code]
    return f"{name}: {text}"


# (pattern on the WARN message, status, label from the match, detail from the match). Each is
# searched in time linear in the message: a run that may start anywhere (a device name, blanks)
# starts where the run does ((?<!\S), \b), and a value read to the end of the line is taken
# greedily up to its last non-blank (.*\S), never lazily before \s*$ (in a long run of blanks,
# each character would read the rest of the run again).
_Rule = tuple[re.Pattern[str], str, Callable[[re.Match[str]], str],
              Callable[[re.Match[str]], str | None]]
_RULES: tuple[_Rule, ...] = (
    (re.compile(r"Got completion from peer (?P<peer>\S+?)(?:<\d+>)?,? with (?:error |status=)"
                r"(?P<code>\d+)(?:.*?vendor err (?P<vendor>\d+))?(?:.*?\((?P<dir>Send|Recv)\))?"),
     FAIL, lambda m: f"IB completion error {m['code']} ({_wc(m['code'])})",
     lambda m: " ".join(p for p in (m["vendor"] and f"vendor err {m['vendor']}", m["dir"]) if p)
     or None),
    (re.compile(r"(?:(?<!\S)(?P<dev>\S+:\d+)\s+)?(?:Got )?async (?:fatal )?event"
                r"(?: on QP \([^)]*\))?\s*:\s*(?P<event>.*\S)\s*$"),
     FAIL, lambda m: f"IB async event: {m['event']}", lambda m: m["dev"]),
    (re.compile(r"communicator encountered a fatal error(?: \((?P<where>[^)]*)\))?"),
     FAIL, lambda m: "communicator fatal error", lambda m: m["where"]),
    (re.compile(r"Call to (?P<call>\w+) failed(?:\s*(?:with error|:)\s*(?P<why>.+))?"),
     FAIL, lambda m: f"{m['call']} failed", lambda m: m["why"]),
    (re.compile(r"Connect to (?P<peer>\S+) failed\s*:\s*(?P<why>.*\S)\s*$"),
     FAIL, lambda m: f"connect to peer failed: {m['why']}", lambda m: m["peer"]),
    (re.compile(r"collective mismatch error(?P<why>.*?)(?:(?<!\s)\s+addr\b|$)"),
     FAIL, lambda m: "collective mismatch: the ranks called different collectives or sizes",
     lambda m: m["why"].strip() or None),
    (re.compile(r"Failed to open (?P<lib>\S+)"),
     WARN, lambda m: f"cannot load {m['lib']}" + (": no IB verbs, NCCL falls back to sockets"
                                                  if "ibverbs" in m["lib"] else ""),
     lambda m: None),
    (re.compile(r"Cuda failure '?(?P<why>[^']+)'?"),
     FAIL, lambda m: f"CUDA failure: {m['why'].strip()}", lambda m: None),
    (re.compile(r"\b(?P<call>nccl\w+) failed: (?P<why>.*\S)\s*$"),
     FAIL, lambda m: f"{m['call']} failed: {m['why']}", lambda m: None),
)
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")


def _classify(message: str) -> tuple[str, str, str | None]:
    for pattern, status, label, detail in _RULES:
        if m := pattern.search(message):
            return label(m), status, detail(m)
    text = re.sub(r"^[\w./-]+\.\w+:\d+\s+", "", message)  # file:line of older builds
    return f"NCCL WARN {_NUMBERS.sub('N', text)[:120]}", WARN, None


class ProblemReader:
    """NCCL failures, grouped by kind as lines are fed (:meth:`feed`)."""

    def __init__(self) -> None:
        self.groups: dict[str, Problem] = {}

    def feed(self, n: int, raw: str, source: str | None) -> None:
        """Read line ``n`` (``source``: where :mod:`normalize` says it came from)."""
        if "NCCL" not in raw and "nccl" not in raw:
            return
        line = unlinked(raw)
        if " WARN" in line and (m := _WARN.search(line)):
            message = _NET_IB.sub("", m["msg"])
            if not _TOPOLOGY.search(message):
                label, status, detail = _classify(message)
                self._add(label, status, n, line, source, detail)
        elif " -> " in line and (m := returned(line)) and int(m["code"]) in RESULTS:
            self._add(f"NCCL calls returned {_result(int(m['code']))}", FAIL, n, line, source,
                      m["where"].rsplit("/", 1)[-1], "return")
        elif "rror" in line and (code := raised(line)):
            self._add(f"NCCL error raised to the framework: {_result(code)}", FAIL, n, line,
                      source, None, "raised")

    def _add(self, label: str, status: str, n: int, line: str, source: str | None,
             detail: str | None, kind: str = "warn") -> None:
        host, _ = origin(line, source)
        group = self.groups.get(label)
        if group is None:
            group = self.groups[label] = Problem(label, status, kind,
                                                 example=line.strip()[:300])
        group.seen.add(n)
        if host:
            group.hosts.add(host)
        if detail and len(group.details) < MAX_DETAILS:
            group.details[detail] = None

    def problems(self) -> list[Problem]:
        return list(self.groups.values())

    def merge(self, other: ProblemReader, line_offset: int) -> None:
        """Fold ``other``, the reading of the lines after these (numbered from 1 there,
        ``line_offset`` on here): per kind, what feeding this reader those lines too would
        hold (the first line's text and status kept, the first details seen that fit)."""
        for label, theirs in other.groups.items():
            mine = self.groups.get(label)
            if mine is None:
                self.groups[label] = replace(theirs, seen=shifted_occurrences(
                    theirs.seen, line_offset), hosts=set(theirs.hosts),
                    details=dict(theirs.details))
                continue
            occurrences_merged(mine.seen, theirs.seen, line_offset)
            mine.hosts |= theirs.hosts
            for detail in theirs.details:
                if len(mine.details) >= MAX_DETAILS:
                    break
                mine.details[detail] = None


def parse_problems(text: str) -> list[Problem]:
    """Every failure line of ``text`` (a :class:`~normalize.CleanText` or plain), grouped."""
    sources = getattr(text, "sources", ())
    reader = ProblemReader()
    for n, line in numbered(text):
        reader.feed(n, line, sources[n - 1] if n <= len(sources) else None)
    return reader.problems()


def judge_problems(source: str, problems: list[Problem]) -> list[Finding]:
    """One finding per kind of failure: its count, hosts and lines (fail before warn)."""
    out = []
    for p in sorted(problems, key=lambda p: (p.status != FAIL, p.kind == "return", p.seen.first)):
        out.append(finding(CHECK, p.status, _message(p), [p.seen.cite(source)],
                           pattern=p.label, **p.seen.to_dict(), lines=list(p.seen.lines),
                           hosts=sorted(p.hosts), hostlist=compress(p.hosts),
                           details=sorted(p.details), example=p.example))
    return out


def hosts_text(hosts: set[str], width: int = 80) -> str:
    """The hosts as a hostlist (``node[01-64]``); the first few and a count when that is
    longer than ``width``."""
    folded = compress(hosts)
    if len(folded) <= width:
        return folded
    first = sorted(hosts, key=natural)[:4]
    return f"{', '.join(first)}, ... ({len(hosts)} hosts)"


def _message(p: Problem) -> str:
    where = f" on {hosts_text(p.hosts)}" if p.hosts else ""
    details = sorted(p.details)
    detail = f" ({', '.join(details[:3])}{', ...' if len(details) > 3 else ''})" \
        if details else ""
    if p.kind == "return":
        return f"{p.label}: traced at {len(details)} call site(s) on {p.seen.count} line(s)" \
               f"{detail}{where}"
    if p.kind == "raised":
        return f"{p.label}{where}"
    return f"{p.seen.count} x {p.label}{detail}{where}"
