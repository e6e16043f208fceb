"""Captured text as the program wrote it: launcher and log prefixes, terminal noise removed.

Logs reach ``diagnose`` and ``tune``'s benchmark parsers through launchers and log collectors
that decorate every line: ``srun --label`` (``12: ``), OpenMPI / ``mpirun --tag-output``
(``[1,12]<stdout>:``), torchrun (``[default3]:``, ``[rank3]:``), pdsh/clush (``host: ``),
Ray and SkyPilot (``(worker pid=.., ip=..)``), Kubernetes/CRI, journald and ISO timestamps,
``dmesg`` times, pm2 (``0|app  | ``), e-mail and Markdown quotes (``> ``), often several
stacked. Terminals add
ANSI colour and cursor codes, carriage returns (tqdm redraws a line with ``\\r``) and CRLF.
Output pasted into a Markdown list or a documentation tab is indented as a whole: the
indentation every written line shares is removed too.

:func:`normalize` removes all of that line by line — one output line per input line, so line
numbers in evidence still point into the file — and keeps what the prefixes said: the rank
and host each line came from (two hosts' "GPU 0" are two GPUs). Prefixes that could be
content (``12: `` or ``word: ``) are removed only when most lines carry them: of the whole text,
or of a file's first lines when it is read as a stream (:class:`LineCleaner`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
                   r"|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()][A-Za-z0-9]|[=>])")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_NOISE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # control characters, CR and ESC among them

# (kind, pattern, rank group, host group); tried at the line start until none matches. A host
# name is at most 253 characters (DNS): a longer word is no host.
_PREFIXES: tuple[tuple[str, re.Pattern[str], str | None, str | None], ...] = (
    ("quote", re.compile(r"^(?:> ?)+"), None, None),
    ("pm2", re.compile(r"^\d+\|[\w.-]+\s*\| "), None, None),
    ("timestamp", re.compile(r"^\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?"
                             r"(?:Z|[+-]\d\d:?\d\d)?\]?(?: (?:stdout|stderr) [FP])?"
                             r"(?:: |[ \t])?"),
     None, None),
    ("timestamp", re.compile(r"^\[\d\d:\d\d:\d\d(?:[.,]\d+)?\] ?"), None, None),
    ("syslog", re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d (?P<host>[\w.-]{1,253}) "
                          r"[\w./-]+(?:\[\d+\])?: "), None, "host"),
    ("dmesg time", re.compile(r"^\[\s*\d+\.\d+\]\s?"), None, None),
    ("OpenMPI tag", re.compile(r"^\s*\[\d+,(?P<rank>\d+)\]<std(?:out|err)>:\s?"), "rank", None),
    ("torchrun", re.compile(r"^\[(?:default|rank)(?P<local>\d+)\]:\s?"), "local", None),
    ("ray", re.compile(r"^\((?:[\w-]+, )?(?:rank=(?P<rank>\d+), )?[\w-]*\s?pid=\d+"
                       r"(?:, ip=(?P<host>[\d.]+))?\)\s?"), "rank", "host"),
    ("srun --label", re.compile(r"^\s*(?P<rank>\d+): "), "rank", None),
    # a name with a digit: the look-ahead finds it without backtracking over long names
    ("host label", re.compile(r"^(?=[A-Za-z][\w.-]*?\d)(?P<host>[A-Za-z][\w.-]{0,252}+): "),
     None, "host"),
)


def _numbered(i: int, pattern: str) -> str:
    """``pattern`` as the group ``p<i>``, its own named groups suffixed ``_<i>``."""
    inner = re.sub(r"[(][?]P<(\w+)>", lambda m: f"(?P<{m.group(1)}_{i}>", pattern)
    return f"(?P<p{i}>{inner})"


# every prefix in one pattern: one match finds a line's first prefix, or rules one out,
# instead of one match per kind
_ANY_PREFIX = re.compile("|".join(_numbered(i, p.pattern)
                                  for i, (_, p, _, _) in enumerate(_PREFIXES)))
MOSTLY = frozenset({"srun --label", "host label"})  # removed only when most lines have them


class CleanText(str):
    """Text after :func:`normalize`; a ``str`` with what was removed.

    ``sources[i]`` names where line ``i + 1`` came from (``"node01 rank 3"``, ``"rank 3"``
    (global, from srun or OpenMPI), ``"local rank 3"`` (torchrun), or ``None``); ``stripped``
    counts the lines per prefix kind removed; ``noise`` counts the lines that had ANSI codes,
    carriage returns or other control characters; ``raw`` is the text as given (its line
    ``i + 1`` is line ``i + 1`` here), for readers that need what was removed (a timestamp, the
    progress-bar states a carriage return overwrote).
    """

    raw: str
    sources: tuple[str | None, ...]
    stripped: dict[str, int]
    noise: dict[str, int]
    files: tuple[tuple[str, int], ...] = ()  # a job's files: see :class:`~.stream.LineStream`

    def described(self) -> dict[str, object]:
        """What a report says about the input: prefixes and noise removed, sources seen."""
        return described(self.stripped, self.noise, self.sources)


def described(stripped: Mapping[str, int], noise: Mapping[str, int],
              sources: Iterable[str | None]) -> dict[str, object]:
    """Prefixes and noise removed, and how many sources were seen (the first 16 named)."""
    seen = sorted({s for s in sources if s}, key=natural)
    out: dict[str, object] = {}
    if stripped:
        out["prefixes_removed"] = dict(stripped)
    if noise:
        out["noise_removed"] = dict(noise)
    if seen:
        out["sources"] = len(seen)
        out["source_names"] = seen[:16]
    return out


class LineCleaner:
    """Cleans the lines of one file, one at a time, after deciding on a first ``window`` of
    them (the whole text for :func:`normalize`) which ``MOSTLY`` prefixes most lines carry and
    what indentation every written line shares. ``stripped`` and ``noise`` count what
    :meth:`clean` removed so far."""

    def __init__(self, window: list[str]) -> None:
        self.stripped: Counter[str] = Counter()
        self.noise: Counter[str] = Counter()
        lines = [_terminal(line, Counter()) for line in window]
        trial = [_strip(line, frozenset()) for line in lines]
        counts = Counter(kind for _, kinds, _ in trial for kind in kinds)
        written = sum(1 for line in lines if line.strip())
        self.skip = frozenset(kind for kind in MOSTLY if counts[kind] * 2 < written)
        done = trial if not self.skip else [_strip(line, self.skip) for line in lines]
        self.indent = _shared_indent([text for text, _, _ in done])

    def clean(self, line: str) -> tuple[str, str | None]:
        """``line`` without terminal noise, prefixes and the shared indentation; its source."""
        text, kinds, source = _strip(_terminal(line, self.noise), self.skip)
        if kinds:
            self.stripped.update(set(kinds) if len(kinds) > 1 else kinds)
        if self.indent:
            if not text.strip():
                text = ""
            elif text.startswith(self.indent):
                text = text[len(self.indent):]
                self.noise["indentation"] += 1
        return text, source


def normalize(text: str) -> CleanText:
    """``text`` without line prefixes and terminal noise, one line per input line."""
    if isinstance(text, CleanText):
        return text
    raw = text.split("\n")
    cleaner = LineCleaner(raw)
    done = [cleaner.clean(line) for line in raw]
    clean = CleanText("\n".join(line for line, _ in done))
    clean.raw = text
    clean.sources = tuple(source for _, source in done)
    clean.stripped = dict(cleaner.stripped)
    clean.noise = dict(cleaner.noise)
    return clean


def place(files: tuple[tuple[str, int], ...], line: int) -> tuple[str, int]:
    """Which of a job's ``files`` (name, first line) line ``line`` came from, and its number
    there."""
    name, first = next((f for f in reversed(files) if f[1] <= line), files[0])
    return name, line - first + 1


def strip_ansi(text: str) -> str:
    """``text`` without ANSI colour, cursor and title sequences."""
    return _ANSI.sub("", text)


def clean_line(line: str) -> tuple[str, str | None]:
    """One line without terminal noise and prefixes (all kinds), and its source."""
    text, _, source = _strip(_terminal(line, Counter()), frozenset())
    return text, source


def _terminal(line: str, noise: Counter[str]) -> str:
    if not _NOISE.search(line):  # most lines: one search rules out every kind of noise
        return line
    if line.endswith("\r"):
        line = line[:-1]
        noise["crlf"] += 1
    if "\x1b" in line:
        line = _ANSI.sub("", line)
        noise["ansi"] += 1
    if "\r" in line:  # a terminal shows what was written after the last carriage return
        line = next((part for part in reversed(line.split("\r")) if part.strip()), "")
        noise["carriage return"] += 1
    if _CONTROL.search(line):
        line = _CONTROL.sub("", line)
        noise["control"] += 1
    return line


def _shared_indent(lines: list[str]) -> str:
    """The leading whitespace every written line of ``lines`` shares ("" when none)."""
    written = [line for line in lines if line.strip()]
    if not written or not written[0][:1].isspace():
        return ""
    first = written[0]
    width = len(first) - len(first.lstrip())
    for line in written[1:]:
        while width and line[:width] != first[:width]:
            width -= 1
        if not width:
            return ""
    return first[:width]


def _strip(line: str, skip: frozenset[str]) -> tuple[str, list[str], str | None]:
    kinds: list[str] = []
    rank = host = local = None
    for _ in range(8):  # prefixes stack; a bound keeps a pathological line cheap
        found = _prefix(line, skip)
        if found is None:
            break
        match, suffix, (kind, _, rank_group, host_group) = found
        if rank_group == "local":
            local = match.group("local" + suffix)  # the innermost: nearest the process
        elif rank_group:
            rank = rank or match.group(rank_group + suffix)
        host = host or (match.group(host_group + suffix) if host_group else None)
        line, kinds = line[match.end():], [*kinds, kind]
    if not kinds:
        return line, kinds, None
    source = " ".join(p for p in (host, rank and f"rank {rank}", local and f"local rank {local}")
                      if p)
    return line, kinds, source or None


def _prefix(line: str, skip: frozenset[str]) -> tuple[re.Match[str], str, tuple] | None:
    """The first prefix kind (of :data:`_PREFIXES`, not in ``skip``) at the start of ``line``:
    its match, the suffix of its group names in that match, and its entry."""
    found = _ANY_PREFIX.match(line)
    if found is None:
        return None
    index = int(found.lastgroup[1:])
    if _PREFIXES[index][0] not in skip and found.end():
        return found, f"_{index}", _PREFIXES[index]
    for entry in _PREFIXES:  # the first kind found is skipped: try the others in turn
        match = None if entry[0] in skip else entry[1].match(line)
        if match and match.end():
            return match, "", entry
    return None


def natural(name: str) -> list[object]:
    """A sort key that orders the numbers in a name by value (``rank2`` before ``rank10``)."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]

