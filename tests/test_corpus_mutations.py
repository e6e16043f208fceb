"""Real captures, mutated: prefixes added, lines cut, columns blanked, bytes inserted, the file
truncated. ``diagnose`` must give the same reading when only prefixes were added, and for any
other mutation a reading or a one-line refusal — never a traceback.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from exemplar_tune.diagnose import DiagnoseError, diagnose_text
from tests.corpus import REALWORLD

TEXT_FAMILIES = ("nccl-tests", "nccl-log", "nccl-coll", "steptime", "turbostat", "numastat",
                 "perf", "nsys", "nvidia-smi-text", "nvidia-smi-xml", "kernel-log")
CAPTURES = sorted(p for family in TEXT_FAMILIES for p in (REALWORLD / family).iterdir()
                  if p.suffix not in (".md", ".yaml"))
# a kernel log never passes through a job launcher: its lines are not launcher-prefixed
LAUNCHED = [p for p in CAPTURES if p.parent.name != "kernel-log"]
SETTINGS = settings(max_examples=12, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# One process's output through a launcher, with prefixes that add no time: the reading must
# not change (a rank per line would be several processes). A collector's timestamps are
# information (step-time readers time steps by them), so a made-up constant one may change
# the reading; it must still give a reading or a one-line refusal.
PREFIXES = st.sampled_from([
    lambda _: "3: ", lambda _: "[1,3]<stdout>:", lambda _: "[default0]:",
    lambda _: "gpu-node01: ", lambda _: "> ",
])
TIMESTAMPS = st.sampled_from([
    lambda _: "2026-04-28T14:14:42.123Z ", lambda _: "[2026-04-28 14:14:42] ",
    lambda _: "Apr 28 14:14:42 gpu01 trainer[311]: ",
])


# what added prefixes themselves tell
SOURCE_KEYS = {"input", "ranks", "hosts", "hostlist", "sources"}


def reading(text: str, name: str) -> Any:
    """What a report says, without what added prefixes tell (the note on removed input, the
    ranks and hosts they name); or the refusal line."""
    try:
        doc = diagnose_text(text, name).to_dict()
    except DiagnoseError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(name)
        return ("refused", str(exc).split(": ", 1)[1])
    return _without_sources(doc)


def _without_sources(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_sources(v) for k, v in value.items() if k not in SOURCE_KEYS}
    if isinstance(value, list):
        return [_without_sources(v) for v in value]
    if isinstance(value, str):  # a message naming the source: "... on rank 3"
        value = re.sub(r"\b(?:gpu-node01|rank 3) (?=(?:rank \d+ )?local rank \d)", "", value)
        return re.sub(r" (?:on|from|of) (?:gpu-node01|rank 3|local rank 0)"
                      r"(?: (?:rank 3|local rank 0))*\b", "", value)
    return value


@pytest.mark.parametrize("path", LAUNCHED, ids=lambda p: f"{p.parent.name}/{p.name}")
@SETTINGS
@given(prefix=PREFIXES, stacked=st.booleans(), crlf=st.booleans(), colour=st.booleans())
def test_prefixes_and_terminal_noise_do_not_change_the_reading(path, prefix, stacked, crlf,
                                                               colour):
    text = path.read_text(errors="replace")
    mutated = decorated(text, prefix, stacked, crlf, colour)
    assert reading(mutated, path.name) == reading(text, path.name)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
@SETTINGS
@given(stamp=TIMESTAMPS, prefix=PREFIXES)
def test_timestamped_captures_are_read_or_refused_in_one_line(path, stamp, prefix):
    text = path.read_text(errors="replace")
    reading(decorated(text, lambda i: stamp(i) + prefix(i), False, False, False), path.name)


def decorated(text: str, prefix: Any, stacked: bool, crlf: bool, colour: bool) -> str:
    """Every written line of ``text`` with ``prefix(i)`` (under a "[default0]:" when
    ``stacked``), in colour and with CRLF endings if asked."""
    lines = text.split("\n")
    mutated = []
    for i, line in enumerate(lines):
        if line:
            line = ("[1,3]<stdout>:" if stacked else "") + prefix(i) + line
            line = f"\x1b[2m{line}\x1b[0m" if colour else line
        mutated.append(line + ("\r" if crlf and i < len(lines) - 1 else ""))
    return "\n".join(mutated)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
@SETTINGS
@given(data=st.data())
def test_damaged_captures_are_read_or_refused_in_one_line(path, data):
    text = path.read_text(errors="replace")
    lines = text.split("\n")
    kind = data.draw(st.sampled_from(["cut", "blank", "bytes", "truncate"]))
    if kind == "cut":
        start = data.draw(st.integers(0, len(lines) - 1))
        end = data.draw(st.integers(start, min(len(lines), start + 20)))
        lines[start:end] = []
    elif kind == "blank":
        row = data.draw(st.integers(0, len(lines) - 1))
        tokens = lines[row].split(" ")
        col = data.draw(st.integers(0, len(tokens) - 1))
        tokens[col] = " " * len(tokens[col])
        lines[row] = " ".join(tokens)
    text = "\n".join(lines)
    if kind == "bytes":
        at = data.draw(st.integers(0, len(text)))
        noise = data.draw(st.binary(min_size=1, max_size=64)).decode("latin-1")
        text = text[:at] + noise + text[at:]
    elif kind == "truncate":
        text = text[:data.draw(st.integers(0, len(text)))]
    reading(text, path.name)  # a report, or a one-line DiagnoseError; anything else fails
