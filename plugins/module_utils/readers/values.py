"""Value parsers shared by the readers: one sysfs/procfs value file's text to a typed value.

Each takes the file's text and the path it came from (for the error) and raises
``ParseError`` naming that path when the text is not such a value; readers never repeat them.
"""

from __future__ import annotations

import re

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError

_SELECTED = re.compile(r"\[([^\]\s]+)\]")


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
