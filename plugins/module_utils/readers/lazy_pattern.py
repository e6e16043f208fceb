"""Regular expressions compiled at their first use.

Facts run on every host of a fleet at every run, and most hosts never meet the lines some
patterns are written for (an Xid, a journal-format log line): compiling those at import is
time spent for nothing. A :class:`LazyPattern` is used like the compiled pattern it stands for
(``PATTERN.match(text)``) and compiles on the first such call; later calls cost what the
compiled pattern's do.
"""

from __future__ import annotations

import re
from typing import Any


class LazyPattern:
    """``re.compile(pattern, flags)``, compiled when one of its methods is first asked for."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags

    def __getattr__(self, name: str) -> Any:
        # Reached only for a name not set yet: the compiled pattern's, kept from then on.
        value = getattr(re.compile(self.pattern, self.flags), name)
        setattr(self, name, value)
        return value
