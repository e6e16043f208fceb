"""Value parsers shared by the readers: one sysfs/procfs value file's text to a typed value.

Each takes the file's text and the path it came from (for the error) and raises
``ParseError`` naming that path when the text is not such a value; readers never repeat them.
"""

from __future__ import annotations

import re

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError

# a choice holds no "[": each "[" of a long run of them would read the rest of the run again
_SELECTED = re.compile(r"\[([^\[\]\s]+)\]")
MAX_DIGITS = 20  # 2**64 - 1, the largest counter the kernel or a tool prints, has 20


def parse_count(text: str, source: str = "count") -> int:
    """A count, index or counter as the kernel and tools print them: decimal digits, at most
    :data:`MAX_DIGITS` of them (never converted when longer: converting is quadratic in the
    digits); ``ParseError`` otherwise."""
    digits = text.strip()
    if not digits.isdigit() or not digits.isascii() or len(digits) > MAX_DIGITS:
        raise ParseError(source, text, f"not a count (at most {MAX_DIGITS} decimal digits)")
    return int(digits)


def parse_int(text: str, source: str = "value") -> int:
    """``"290\\n"`` -> ``290``; anything else is a ``ParseError``."""
    try:
        return int(text.strip())
    except ValueError:
        raise ParseError(source, text, "not an integer") from None


def parse_flag(text: str, source: str = "value") -> bool:
    """A 0/1 file (``disable``, ``boost``) or a Y/N module parameter -> bool."""
    value = text.strip()
    if value in ("1", "Y", "y"):
        return True
    if value in ("0", "N", "n"):
        return False
    raise ParseError(source, text, "not a 0/1 or Y/N flag")


def parse_text(text: str, source: str = "value") -> str:  # noqa: ARG001 - a parser's signature
    """A one-line text file, stripped."""
    return text.strip()


def selected_choice(text: str) -> str:
    """The choice in force of an attribute that lists its choices, the kernel's way
    (``always [madvise] never`` -> ``madvise``); any other text, stripped."""
    found = _SELECTED.search(text)
    return found.group(1) if found else text.strip()
