"""The host's own claim: which controller may change this host now.

One JSON file, ``/var/lib/exemplar-tune/claim.json`` (inside the sysroot when one is used),
read and rewritten under an ``flock`` on its directory, so two controllers racing
for the same host (from any machine, any state directory) are put in order on the host
itself. A claim names its controller: a random token, the controller's machine (its
``/etc/machine-id``), pid and the pid's start time, the command and when it began.

* A change module given a claim (option ``claim``, from the host variable ``exemplar_claim``
  that exemplar-tune sets) takes it before it changes anything: the same token refreshes it,
  no claim or a token listed in ``replace`` (one the controller found stale: its process is
  gone) is replaced, any other claim fails the host with :class:`HostClaimed`. With
  ``release`` the module gives the claim back when it ends, whatever happened.
* A change module given no claim (a role or playbook run by hand) changes nothing on a host
  that another controller has claimed.
* Check mode neither reads nor writes the claim: audits never wait for anyone.

The module cannot tell whether a controller on another machine still runs; the controller
that reads a :class:`HostClaimed` does (``exemplar_tune.fleet.host_claims``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Collection, Iterator
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.bounded_lock import lock_exclusive
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

CLAIM = "var/lib/exemplar-tune/claim.json"
CLAIM_OPTION = {"type": "dict", "options": {  # the doc fragment exemplar.tune.claim
    "token": {"type": "str", "required": True, "no_log": False},
    "holder": {"type": "dict"},
    "release": {"type": "bool", "default": False},
    "replace": {"type": "list", "elements": "str", "no_log": False},
}}
HOLDER_KEYS = ("machine", "controller", "pid", "created", "command", "started")


class HostClaimed(HostStateError):
    """Another controller holds this host: ``holder`` says which (the claim's fields)."""

    def __init__(self, display: str, holder: dict[str, Any]) -> None:
        super().__init__(display, f"claimed by another exemplar-tune (pid {holder.get('pid')} "
                         f"on {holder.get('controller')}, '{holder.get('command')}', since "
                         f"{holder.get('started')}); nothing was changed. If that controller "
                         "is gone: exemplar-tune unlock with the same hosts")
        self.holder = holder


@contextlib.contextmanager
def claimed(root: Sysroot, claim: dict[str, Any] | None, check_mode: bool) -> Iterator[None]:
    """Hold this host for the ``with`` block as ``claim`` says (see the module docstring);
    :class:`HostClaimed` before the block when another controller holds it."""
    if check_mode:
        yield
        return
    take(root, claim)
    try:
        yield
    finally:
        if claim is not None and claim.get("release"):
            release(root, [claim["token"]])


def take(root: Sysroot, claim: dict[str, Any] | None) -> None:
    """Take ``claim`` (None: only make sure no one holds the host); :class:`HostClaimed`
    when another controller holds it, ``HostStateError`` when the claim cannot be written."""
    if claim is None:  # only a look: nothing is written
        current = read_claim(root)
        if current:
            raise HostClaimed(root.display(CLAIM), current)
        return
    with _locked(root):
        current = read_claim(root)
        if current and current.get("token") not in (claim["token"],
                                                    *(claim.get("replace") or [])):
            raise HostClaimed(root.display(CLAIM), current)
        _write(root, {"token": claim["token"],
                      **{k: (claim.get("holder") or {}).get(k) for k in HOLDER_KEYS}})


def release(root: Sysroot, tokens: Collection[str] | None) -> dict[str, Any] | None:
    """Remove the claim if its token is one of ``tokens`` (any claim when ``tokens`` is
    None); the claim removed, or None."""
    with _locked(root):
        current = read_claim(root)
        if current and (tokens is None or current.get("token") in tokens):
            root.remove(CLAIM)
            return current
    return None


def read_claim(root: Sysroot) -> dict[str, Any] | None:
    """The claim on this host, or None. A regular file that is not a claim is none (it holds
    no controller that could be waited for) and is replaced by the next claim; a link, FIFO,
    device or directory there is a ``HostStateError`` (never read, written or removed)."""
    kind = root.kind(CLAIM)
    if kind is None:
        return None
    if kind != "file":
        raise HostStateError(root.display(CLAIM), f"is a {kind}, not a claim: exemplar-tune "
                             "reads, writes and removes only regular files there; nothing was "
                             "changed (remove it to let exemplar-tune claim this host)")
    text = root.read_optional(CLAIM)
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("token"), str) else None


def _write(root: Sysroot, claim: dict[str, Any]) -> None:
    root.write_bytes(CLAIM, (json.dumps(claim, sort_keys=True) + "\n").encode(), mode=0o600)


@contextlib.contextmanager
def _locked(root: Sysroot) -> Iterator[None]:
    """The claim's directory locked, for one read-and-write of the claim; ``HostStateError``
    when the host cannot keep a claim (a read-only ``/var/lib``)."""
    directory = os.path.dirname(root.path(CLAIM))
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise _unclaimable(root, exc) from None
    try:
        lock_exclusive(fd, root.display(os.path.dirname(CLAIM)))
        yield
    except OSError as exc:
        raise _unclaimable(root, exc) from None
    finally:
        os.close(fd)


def _unclaimable(root: Sysroot, exc: OSError) -> HostStateError:
    return HostStateError(root.display(CLAIM), f"cannot claim the host: {exc.strerror}")
