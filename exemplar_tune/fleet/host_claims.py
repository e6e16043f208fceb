"""The controller's side of the claim each host keeps on itself (the collection's
``knobs/host_claim.py``): one controller at a time changes a host, whatever machine or state
directory it runs from.

A command that changes hosts makes one :class:`Claim` (a random token and its holder: this
machine's id and name, the pid and its start time, the command) and runs under it
(:func:`under`): every Ansible run that can change a host carries it as ``exemplar_claim``
(:func:`claim_vars`), so the layer and restore modules take it on the host before they change
anything. A command made of one change run (``apply``) has the claim given back by that run;
the others take it first with the ``claim`` playbook and give it back when they end.

A host that another controller holds fails with that holder (``claimed_by``). When the holder
ran on this machine and its process is gone, the claim is stale: :func:`stale_tokens` names
it, and the run is made again on those hosts with the stale token to replace. A holder on
another machine cannot be checked here; ``exemplar-tune unlock`` removes its claim once the
operator knows it is gone.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import secrets
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from exemplar_tune.terminal import escape

_CURRENT: contextvars.ContextVar[Claim | None] = contextvars.ContextVar("claim", default=None)


@dataclass
class Claim:
    """One controller's claim: its token, who it is, and whether each change run gives the
    claim back (``single_run``); ``replace`` collects the stale claims found on the way."""

    command: str
    single_run: bool = False
    token: str = field(default_factory=lambda: secrets.token_hex(12))
    replace: set[str] = field(default_factory=set)

    @functools.cached_property
    def holder(self) -> dict[str, Any]:
        """What others are shown about this controller."""
        return {"machine": machine_id(), "controller": socket.gethostname(),
                "pid": os.getpid(), "created": started_at(os.getpid()),
                "command": self.command,
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def extravar(self, release: bool) -> dict[str, Any]:
        """The ``exemplar_claim`` host variable for one run."""
        return {"token": self.token, "holder": self.holder, "release": release,
                "replace": sorted(self.replace)}


@contextlib.contextmanager
def under(claim: Claim) -> Iterator[Claim]:
    """Make ``claim`` the one every change run of this block carries."""
    reset = _CURRENT.set(claim)
    try:
        yield claim
    finally:
        _CURRENT.reset(reset)


def claim_vars(check: bool) -> dict[str, Any]:
    """The extra variables that carry the current claim into a run (none in check mode or
    outside a claim: a playbook run then changes only hosts no controller holds)."""
    claim = _CURRENT.get()
    if claim is None or check:
        return {}
    return {"exemplar_claim": claim.extravar(release=claim.single_run)}


def stale_tokens(hosts: dict[str, dict[str, Any]]) -> dict[str, str]:
    """``{host: token}`` of the hosts of a run's results (``playbook_runs.knob_results``) that
    failed on a claim whose controller is gone; the tokens are added to the current claim's
    ``replace``, for the run made again on those hosts."""
    stale = {}
    for host, data in hosts.items():
        holder = data.get("claimed_by")
        if data["status"] == "failed" and holder and is_stale(holder) \
                and isinstance(holder.get("token"), str):
            stale[host] = holder["token"]
    claim = _CURRENT.get()
    if claim is not None:
        claim.replace.update(stale.values())
    return stale


def is_stale(holder: dict[str, Any]) -> bool:
    """Whether ``holder`` ran on this machine and its process is gone (a pid that is another
    process now has another start time)."""
    pid = holder.get("pid")
    return holder.get("machine") == machine_id() and not (
        isinstance(pid, int) and started_at(pid) == holder.get("created"))


def describe(holder: dict[str, Any]) -> str:
    """``pid 123 on ctl01, 'tune', since ...``: a holder in one line, for a terminal (a claim
    is the host's file: its fields are escaped, :func:`~exemplar_tune.terminal.escape`)."""
    return escape(f"pid {holder.get('pid')} on {holder.get('controller')}, "
                  f"'{holder.get('command')}', since {holder.get('started')}")


@functools.cache
def machine_id() -> str:
    """This machine: its systemd machine id, else its host name."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if text := Path(path).read_text(encoding="ascii").strip():
                return text
    return socket.gethostname()


def started_at(pid: int) -> float | None:
    """When process ``pid`` started, or None when it is gone (or a zombie)."""
    try:
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc.create_time()
    except psutil.Error:
        return None
