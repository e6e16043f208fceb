"""Errors raised by the host-state readers.

Every error records the path (or command) it is about, so a caller can cite it as evidence
and print it as one line. Readers raise these; fact gatherers turn them into ``None`` values
plus an entry in the layer's ``errors`` list, so one bad file never hides the other facts.
"""

from __future__ import annotations


class HostStateError(Exception):
    """Base class: something about the host state could not be read or understood."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class NotSupported(HostStateError):
    """A file or command that this fact needs does not exist on this host."""

    def __init__(self, path: str, reason: str = "not present") -> None:
        super().__init__(path, reason)


class NotApplicable(HostStateError):
    """A setting this host does not have or cannot take (no bootloader configuration, the idle
    states of a guest): the knob is skipped with this reason, the rest of its layer goes on."""


class ParseError(HostStateError):
    """A file or command output exists but its content is not in the expected format."""

    def __init__(self, path: str, text: str, reason: str = "unexpected content") -> None:
        shown = text if len(text) <= 60 else text[:57] + "..."
        super().__init__(path, f"{reason}: {shown!r}")
        self.text = text


class UnsafePath(HostStateError):
    """A path (or a symlink inside a sysroot) would leave the sysroot."""


class CommandFailed(HostStateError):
    """A command ran but exited non-zero.

    The reason is one line: ``exit status N: <first line of stderr>`` (of stdout when stderr is
    empty; just ``exit status N`` when the command printed nothing).
    """

    def __init__(self, command: str, rc: int, output: str = "") -> None:
        lines = output.strip().splitlines()
        detail = f": {lines[0].strip()}" if lines else ""
        super().__init__(command, f"exit status {rc}{detail}")
        self.rc = rc
