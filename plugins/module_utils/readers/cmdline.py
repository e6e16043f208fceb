"""The kernel command line, ``/proc/cmdline``.

Format: ``Documentation/admin-guide/kernel-parameters.rst`` -- space-separated ``name`` or
``name=value`` words; double quotes may enclose a value with spaces; everything after a bare
``--`` goes to init and is not a kernel parameter.
"""

from __future__ import annotations

import shlex

from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

CMDLINE = "proc/cmdline"
_QUOTING = frozenset("'\"\\")
_SHLEX_SPACE = str.maketrans("\t\r\n", "   ")  # shlex's whitespace, as spaces


def parse_cmdline(text: str) -> dict[str, str | None]:
    """``"ro idle=poll quiet"`` -> ``{"ro": None, "idle": "poll", "quiet": None}``.

    A parameter given twice keeps its last value, as the kernel does for most parameters.
    Malformed quoting falls back to a plain split rather than failing.
    """
    if _QUOTING.isdisjoint(text):  # the usual line: shlex's split, without shlex's cost
        words = [word for word in text.translate(_SHLEX_SPACE).split(" ") if word]
    else:
        try:
            words = shlex.split(text)
        except ValueError:
            words = text.split()
    params: dict[str, str | None] = {}
    for word in words:
        if word == "--":
            break
        name, sep, value = word.partition("=")
        params[name] = value if sep else None
    return params


def read_cmdline(root: Sysroot) -> dict[str, str | None]:
    """Parameters of the running kernel (``/proc/cmdline``); ``NotSupported`` when absent."""
    return parse_cmdline(root.read_text(CMDLINE))


def pick(params: dict[str, str | None], names: tuple[str, ...]) -> dict[str, str | None]:
    """The subset of ``params`` whose names are in ``names`` (kept in ``names`` order)."""
    return {name: params[name] for name in names if name in params}
