"""``lsmod`` text: the kernel modules loaded, where ``/sys/module`` is not at hand.

Format (kmod ``tools/lsmod.c``): a header ``Module  Size  Used by``, then one row per module:
its name, its size in bytes, its use count and the modules using it (comma-separated, or
absent). A sos report keeps ``lsmod``'s output (its kernel plugin) but not ``/sys/module``.
"""

from __future__ import annotations

import re

SOURCE = "lsmod.txt"
ROW = re.compile(r"^([A-Za-z_]\w*)\s+(\d+)\s+(\d+|-)(?:\s+(\S+))?\s*$")


def loaded_modules(text: str) -> set[str]:
    """The names of the modules an lsmod output lists."""
    return {row.group(1) for line in text.splitlines() if (row := ROW.match(line.strip()))}
