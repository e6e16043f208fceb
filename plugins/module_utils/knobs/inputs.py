"""Checks a planner runs on every profile value before it renders anything from it.

A value that passes cannot change the syntax of the file it is written into: names match a
strict pattern, values are one line of printable text, paths are absolute and clean. The
profile schema enforces the same patterns (``profiles/schema.json``), so the controller
refuses a bad profile before anything runs; these checks hold for users' own playbooks too.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import KnobInputError

# control characters and the other line breaks (Python's splitlines, JSON readers): as regex
# text, shared with the profile schema's patterns
BREAKS = "\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029"
CONTROL = re.compile(f"[{BREAKS}]")
EXPANDED = re.compile(r"[$`\\]")  # what enroot, systemd or a shell would expand in a path
ONE_LINE_PATTERN = f"^[^{BREAKS}]{{0,1023}}$"  # one_line, as a schema pattern
# clean_path, as a schema pattern: absolute, no '//' or '.'/'..' part, no space, break,
# expanded character or trailing '/'
PATH_PATTERN = (f"^/(?!.*//)(?!(.*/)?\\.\\.?(/|$))[^\\s{BREAKS}$`\\\\]*"
                f"[^/\\s{BREAKS}$`\\\\]$")
IDLE_STATE = re.compile(r"^[A-Za-z0-9_.+-]{1,32}$")
NCCL_KEY = re.compile(r"^NCCL_[A-Z0-9_]{1,64}$")
SYSTEMD_UNIT = re.compile(r"^[A-Za-z0-9:_.@-]{1,200}\.(slice|scope|service)$")
WORD = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")
FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")


def matching(value: Any, pattern: re.Pattern[str], what: str) -> str:
    """``value`` as text when ``pattern`` matches all of it (``$`` alone would let a final
    newline through); ``KnobInputError`` otherwise."""
    text = str(value)
    if not pattern.fullmatch(text):
        raise KnobInputError(what, f"{text!r} is not allowed (must match {pattern.pattern})")
    return text


def one_line(value: Any, what: str, limit: int = 1023) -> str:
    """``value`` as one line of printable text (no newline, line separator or control
    character)."""
    text = str(value)
    if CONTROL.search(text):
        raise KnobInputError(what, f"{text!r} holds a newline or control character")
    if len(text) > limit:
        raise KnobInputError(what, f"longer than {limit} characters")
    return text


def clean_path(value: Any, what: str) -> str:
    """``value`` as an absolute, normalised path of printable characters without spaces or
    characters that a reader of the file would expand (``$``, backquote, backslash: enroot's
    ``environ.d`` expands ``${VAR}``)."""
    text = one_line(value, what, 4095)
    if not text.startswith("/") or posixpath.normpath(text) != text or text == "/" \
            or any(c.isspace() for c in text) or text.startswith("//") or EXPANDED.search(text):
        raise KnobInputError(what, f"{text!r} is not an absolute, normalised path "
                             "(no '..', '//', trailing '/', spaces, '$', '`' or '\\')")
    return text


def file_mode(value: Any, name: str) -> int:
    """A file mode given as Ansible's ``mode`` is: an octal string (``"0644"``) or the number
    itself (YAML reads an unquoted ``0644`` as 420); ``KnobInputError`` otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0o7777:
        return value
    if isinstance(value, str) and re.fullmatch(r"0?[0-7]{3,4}", value):
        return int(value, 8)
    raise KnobInputError(name, f"{value!r} is not a file mode (an octal string: '0644')")
