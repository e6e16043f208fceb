"""What surrounds InfiniBand tool output when an operator pastes it: shell prompts naming the
command that ran, ``ibpanic`` lines of a device that vanished, MAD failures of ``perfquery``
and ``ibnetdiscover``, and a listing of ``/sys/class/infiniband``.

Shapes (infiniband-diags, rdma-core): a tool that cannot stat a device it listed ends with
``ibpanic: [PID] main: stat of IB device 'mlx5_8' failed: No such file or directory`` (ibstat
stops there: devices after it are not printed). MAD tools (``perfquery``, ``ibnetdiscover``,
``ibqueryerrors``) print ``ibwarn: [PID] mad_rpc_open_port: client_register for mgmt 1
failed`` and ``<tool>: iberror: failed: ...`` when no MAD port can be opened, as on Ethernet
(RoCE) ports, which have no subnet management. A prompt is ``$ cmd``, ``user@host:~$ cmd``,
``~$ cmd`` or ``[root@host dir]# cmd``; a bare ``# `` starts perfquery's headers and is none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from exemplar_tune.diagnose.base import numbered

_PROMPT = re.compile(r"^(?:\[[^\]\n]{1,200}\][#$]|[\w@.:~/-]{1,200}[#$]|\$) +(\S.{0,2000})$")
_PANIC = re.compile(r"ibpanic: \[\d+\] \w+: stat of IB device '([^'\n]{1,200})' failed: "
                    r"(.{1,500})$")
_MAD_FAIL = re.compile(r"(?:mad_rpc_open_port: .{0,300}failed|(\w{1,64}): iberror: failed: "
                       r"(.{0,500}))$")
_LS_IB = re.compile(r"^ls\b.*/sys/class/infiniband")


@dataclass
class Command:
    """One prompt line: the command and where it ran (its line), and what it piped into."""

    line: int
    text: str

    @property
    def tool(self) -> str:
        return self.text.split()[0].rsplit("/", 1)[-1]

    @property
    def filtered(self) -> bool:
        """Its output went through ``grep``/``head``/``awk``...: fields may be missing."""
        return "|" in self.text and not re.search(r"\|\s*column\b[^|]*$", self.text)


@dataclass
class Surround:
    """Everything around the tool output in one capture."""

    commands: list[Command] = field(default_factory=list)
    vanished: list[dict[str, object]] = field(default_factory=list)  # ibpanic stat failures
    mad_failures: list[dict[str, object]] = field(default_factory=list)
    listed: list[str] = field(default_factory=list)  # device names a `ls` printed
    listed_line: int = 0

    def command_at(self, n: int) -> Command | None:
        """The last command whose prompt is before line ``n``."""
        return next((c for c in reversed(self.commands) if c.line < n), None)


def command(line: str) -> str | None:
    """The command of a prompt line, or ``None``."""
    m = _PROMPT.match(line.strip())
    return m.group(1).strip() if m else None


def read_surround(text: str) -> Surround:
    """Prompts, vanished devices, MAD failures and a sysfs listing, with their lines."""
    out = Surround()
    listing = False
    for n, line in numbered(text):
        if (cmd := command(line)) is not None:
            out.commands.append(Command(n, cmd))
            listing = bool(_LS_IB.match(cmd))
            continue
        if m := _PANIC.search(line):
            out.vanished.append({"device": m.group(1), "error": m.group(2).strip(), "line": n,
                                 "command": _tool(out, n)})
        elif m := _MAD_FAIL.search(line):
            out.mad_failures.append({"tool": m.group(1) or _tool(out, n), "line": n,
                                     "error": (m.group(2) or m.group(0)).strip()})
        elif listing and line.strip():
            out.listed += [w.rstrip("/") for w in line.split() if re.fullmatch(r"[\w.-]+/?", w)]
            out.listed_line = n
    return out


def _tool(out: Surround, n: int) -> str | None:
    cmd = out.command_at(n)
    return cmd.tool if cmd else None
