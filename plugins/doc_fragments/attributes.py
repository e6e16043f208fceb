"""The ``attributes`` block of every exemplar.tune module: check mode, diff mode, platform."""

from __future__ import annotations


class ModuleDocFragment:
    """``exemplar.tune.attributes.reads`` for read-only modules, ``.changes`` for the others."""

    DOCUMENTATION = r"""
options: {}
"""

    READS = r"""
options: {}
attributes:
  check_mode:
    description: Reads only; runs the same in check mode.
    support: full
  diff_mode:
    description: Changes nothing, so there is nothing to diff.
    support: none
  platform:
    description: Linux hosts (or a sysroot tree of one, read anywhere).
    platforms: posix
"""

    CHANGES = r"""
options: {}
attributes:
  check_mode:
    description: Plans and diffs the same changes and writes nothing, journal included.
    support: full
  diff_mode:
    description: Returns the before and after of every path or setting it changes.
    support: full
  platform:
    description: Linux hosts (or a sysroot tree of one).
    platforms: posix
"""
