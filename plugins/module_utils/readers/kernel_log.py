"""Kernel-log lines: their timestamp, and which boot they belong to.

A kernel log reaches us in several shapes, each with its own line prefix:

* ``dmesg``: ``[ 1843.308145] msg`` (seconds since boot);
* ``dmesg -T``: ``[Sun Feb 23 16:24:18 2025] msg`` (wall clock);
* ``dmesg --decode --time-format iso``: ``kern  :warn  : 2025-01-21T04:41:44,283302+00:00 msg``;
* ``journalctl -k`` / syslog: ``May 02 21:43:54 host kernel: msg`` (wall clock without a year;
  ``-o short-iso`` writes ``2025-05-02T21:43:54+0000 host kernel: msg``), sometimes followed by
  the raw ``[  966.503025]`` stamp, which is then preferred;
* a log pasted into markdown keeps its ``> `` quote prefix; continuation lines of a multi-line
  message have no prefix at all (only indentation).

Boots: ``dmesg`` restarts its clock at ``[    0.000000]`` (a raw stamp that goes back by more than
a second, or back to zero, starts a new boot); ``journalctl`` separates boots with
``-- Boot <id> --`` (``-- Reboot --`` in older versions). Wall clocks are never used to find a
boot (they jump with NTP).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import NamedTuple

from ansible_collections.exemplar.tune.plugins.module_utils.readers.lazy_pattern import LazyPattern

BOOT = "boot"  # seconds since boot
WALL = "wall"  # seconds since the epoch (a year-less syslog stamp is read as the year 2000)

# Compiled at first use: a live host's log is dmesg's own, which ``_raw_stamp`` reads with
# string tests, so most runs need none of these.
_QUOTE = LazyPattern(r"^(?:>\s?)+")
_MARKER = LazyPattern(r"^-- (?:Boot [0-9a-f]+|Reboot) --$")
_DECODE = LazyPattern(r"^[a-z]+\s*:\s*[a-z]+\s*:\s*")
_CTIME = LazyPattern(
    r"^\[(?P<t>[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4})\]\s?")
_HOST = r"(?:\S+ kernel:\s?)?"  # journalctl / syslog: "<host> kernel: "
_ISO = LazyPattern(
    r"^(?P<t>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s" + _HOST)
_SYSLOG = LazyPattern(r"^(?P<t>[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?) " + _HOST)
_RESET_SLACK_S = 1.0
_EPOCH = datetime(1970, 1, 1)


class LogLine(NamedTuple):
    """One line: ``body`` without the prefix, the stamp as written (``time``) and in seconds
    (``t``, on ``clock``), and the 0-based ``boot`` it belongs to in log order."""

    raw: str
    body: str
    time: str | None
    t: float | None
    clock: str | None
    boot: int


def _utc_seconds(stamp: datetime) -> float:
    """Whole seconds since the epoch of a stamp without a zone, read as UTC."""
    since = stamp - _EPOCH
    return float(since.days * 86400 + since.seconds)


def _ctime(text: str) -> float:
    return _utc_seconds(datetime.strptime(text, "%a %b %d %H:%M:%S %Y"))


def _iso(text: str) -> float:
    text = text.replace(",", ".").replace("Z", "+00:00")
    text = re.sub(r"([+-]\d\d)(\d\d)$", r"\1:\2", text)
    stamp = datetime.fromisoformat(text)
    if stamp.tzinfo is None:
        return _utc_seconds(stamp) + stamp.microsecond / 1e6
    return stamp.timestamp()


def _syslog(text: str) -> float:
    whole, _, frac = text.partition(".")
    stamp = datetime.strptime("2000 " + " ".join(whole.split()), "%Y %b %d %H:%M:%S")
    return _utc_seconds(stamp) + (float("0." + frac) if frac else 0.0)


_WALL_CLOCKS = ((_CTIME, _ctime), (_ISO, _iso), (_SYSLOG, _syslog))


def split_prefix(line: str) -> tuple[str, str | None, float | None, str | None]:
    """``(body, time as written, seconds, clock)`` of one line; ``(line, None, None, None)``
    when it has no stamp (a continuation line, a bare message)."""
    return _split(_unquote(line.strip()))


def _unquote(line: str) -> str:
    """``line`` (stripped) without its markdown quote prefix."""
    return _QUOTE.sub("", line) if line.startswith(">") else line


def _raw_stamp(rest: str) -> tuple[str, str | None, float | None, str | None] | None:
    r""":func:`_split` of a line that starts with dmesg's ``[ 1843.308145]`` stamp (what
    ``^\[\s*(\d+\.\d+)\]\s?`` matches, by string tests); ``None`` for any other line."""
    close = rest.find("]") if rest[:1] == "[" else -1
    if close < 0:
        return None
    stamp = rest[1:close].lstrip()
    whole, dot, fraction = stamp.partition(".")
    if not (dot and whole.isdecimal() and fraction.isdecimal()):
        return None
    body = rest[close + 1:]
    return body[1:] if body[:1].isspace() else body, stamp, float(stamp), BOOT


def _split(rest: str) -> tuple[str, str | None, float | None, str | None]:
    # The string tests in front of the regular expressions skip the ones that cannot match
    # (every log line passes here: a kernel log has thousands).
    if "a" <= rest[:1] <= "z":
        rest = _DECODE.sub("", rest, count=1)
    split = _raw_stamp(rest)
    if split:
        return split
    for pattern, parse in _WALL_CLOCKS:
        match = pattern.match(rest)
        if not match:
            continue
        body = rest[match.end():]
        inner = _raw_stamp(body)  # syslog lines may carry the raw stamp too: preferred
        if inner:
            return inner
        try:
            return body, match.group("t"), parse(match.group("t")), WALL
        except ValueError:
            return body, match.group("t"), None, None
    return rest, None, None, None


def read_lines(text: str) -> Iterator[LogLine]:
    """The lines of ``text`` with their stamp and boot (0 = the first boot in the log)."""
    boot, seen, last_raw = 0, False, None
    for raw in text.splitlines():
        stripped = line = raw.strip()
        if line[:1] != "[":  # a stamped line (dmesg's own: most) has no quote and is no marker
            line = _unquote(line)
            if line.startswith("-- ") and _MARKER.match(line):
                boot, seen, last_raw = (boot + 1, False, None) if seen else (boot, seen, last_raw)
                continue
        body, time, t, clock = _split(line)
        if clock == BOOT and t is not None:
            if last_raw is not None and (t < last_raw - _RESET_SLACK_S or (t == 0 < last_raw)):
                boot += 1
            last_raw = t
        seen = seen or bool(stripped)
        yield LogLine(raw, body, time, t, clock, boot)
