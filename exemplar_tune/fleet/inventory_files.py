"""The files Ansible reads for an inventory, checked for YAML alias bombs before it reads them.

Ansible spells out every alias of an inventory's variables for each host (its variable
manager copies them), in this controller and in every run: ten lines of anchors aliasing
anchors take gigabytes. :func:`check_inventory_files` bounds them first
(:mod:`exemplar_tune.bounded_yaml`) in the files Ansible would read for ``-i SOURCE``: the
file, or every file of the directory (hidden ones and Ansible's ignored extensions left out,
as Ansible leaves them out), and the ``group_vars`` and ``host_vars`` beside it. A file that
is not YAML (an INI inventory, a script) is Ansible's to read and passes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from exemplar_tune.bounded_yaml import check_aliases
from exemplar_tune.inputs import read_input_bytes

VARS_DIRS = ("group_vars", "host_vars")
# Ansible's INVENTORY_IGNORE_EXTS (files it never reads as inventory)
IGNORED_SUFFIXES = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst",
                    ".orig", ".cfg", ".retry")


def check_inventory_files(source: str) -> None:
    """``UserError`` (one line, naming the file) when a file Ansible reads for the inventory
    ``source`` expands its YAML aliases past the bound, or is larger than the bound on any
    input; a host list (``node1,node2``) has no files."""
    if "," in source and not os.path.exists(source):
        return
    for path in inventory_files(Path(source)):
        info = path.stat()
        _check_file(str(path), info.st_mtime_ns, info.st_size)


def inventory_files(source: Path) -> Iterator[Path]:
    """The regular files Ansible reads for ``source`` (see the module)."""
    if source.is_dir():
        yield from _walk(source)
        return
    if source.is_file():
        yield source
    for name in VARS_DIRS:
        yield from _walk(source.parent / name)


def _walk(directory: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if not name.startswith(".") and not name.endswith(IGNORED_SUFFIXES) and \
                    _regular(path):
                yield path


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


@lru_cache(maxsize=4096)
def _check_file(path: str, mtime_ns: int, size: int) -> None:
    """One file, checked once per version (a command checks its inventory more than once)."""
    del mtime_ns, size  # the cache key
    text = read_input_bytes(path, "inventory file").decode("utf-8", errors="replace")
    check_aliases(text, f"inventory {path}")
