"""The kernel command line's parameters (``/proc/cmdline``), split into shell words."""

from __future__ import annotations

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.readers.cmdline import parse_cmdline


@pytest.mark.parametrize(("text", "params"), [
    ("BOOT_IMAGE=/vmlinuz ro quiet\n", {"BOOT_IMAGE": "/vmlinuz", "ro": None, "quiet": None}),
    ("a=1\t\tb  c=\r\n", {"a": "1", "b": None, "c": ""}),
    ("idle=poll idle=halt", {"idle": "halt"}),  # the last one counts
    ("ro -- single init=/bin/sh", {"ro": None}),  # after "--": init's arguments
    ('dyndbg="file x.c +p" ro', {"dyndbg": "file x.c +p", "ro": None}),
    ("a=\\x b", {"a": "x", "b": None}),  # shell words: a backslash quotes
    ("a\x0bb c", {"a\x0bb": None, "c": None}),  # shell words: split at space, tab, newline
    ('bad="unclosed ro', {'bad': '"unclosed', "ro": None}),  # broken quoting: split on spaces
    ("", {}),
])
def test_parameters(text, params):
    assert parse_cmdline(text) == params
