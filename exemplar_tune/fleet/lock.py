"""One controller at a time per host, on this machine: a registry of the hosts each live
controller changes. It refuses a conflict at once, before any host is reached; the host's own
claim (:mod:`exemplar_tune.fleet.host_claims`) is what keeps controllers with other state
directories or on other machines apart.

Every command that changes hosts (``apply``, ``restore``/``rollback``, ``tune``, ``resume``)
holds its hosts for as long as it runs, by identity
(:func:`exemplar_tune.fleet.inventory.host_identities`: the machine, not the inventory's text), so
the same hosts reached through another inventory path, another ``--limit`` or another
command are refused with the holder's pid, host, command and start time. ``slurm drain`` and
``resume`` hold one shared name for the Slurm node states: one of them at a time.

The registry is ``<state_dir>/locks/hosts.json``, read and rewritten under an ``flock`` on
``<state_dir>/locks/registry.lock`` that is held only for that moment. An entry whose
controller is dead (the pid is gone, or is another process now: its start time differs) is
a stale claim and is dropped by the next controller that looks, so a controller killed with
SIGKILL never blocks its hosts. Claims made on another machine (a state directory shared
between controllers) cannot be checked and are kept; the refusal says so and names the file.
``flock`` is per machine: on a state directory shared over
NFS it does not keep controllers on different machines apart (the host claims do).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.bounded_lock import (
    LockTimeout,
    lock_exclusive,
)

from exemplar_tune.errors import UserError
from exemplar_tune.fleet.host_claims import started_at
from exemplar_tune.inputs import read_input

SHOWN_HOSTS = 5  # overlapping hosts named in a refusal


def registry_path(state_dir: Path | str) -> Path:
    """The file that lists the live claims."""
    return Path(state_dir) / "locks" / "hosts.json"


@contextmanager
def hold_hosts(state_dir: Path | str, identities: Iterable[str], command: str) -> Iterator[None]:
    """Claim ``identities`` for the ``with`` block, for ``command`` (shown to others).

    Raises ``UserError`` naming the holder if a live claim (of another process, or an earlier
    claim of this one) shares a host. Never waits.
    """
    mine = {"token": secrets.token_hex(8), "pid": os.getpid(), "host": socket.gethostname(),
            "created": started_at(os.getpid()), "command": command,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "hosts": sorted(set(identities))}
    with _registry(state_dir) as claims:
        for claim in claims:
            shared = sorted(set(claim["hosts"]) & set(mine["hosts"]))
            if shared:
                raise _busy(claim, shared, registry_path(state_dir))
        claims.append(mine)
    try:
        yield
    finally:
        with _registry(state_dir) as claims:
            claims[:] = [c for c in claims if c.get("token") != mine["token"]]


def live_claims(state_dir: Path | str) -> list[dict[str, Any]]:
    """The claims of live controllers (stale ones are dropped on the way)."""
    with _registry(state_dir) as claims:
        return [dict(c) for c in claims]


@contextmanager
def _registry(state_dir: Path | str) -> Iterator[list[dict[str, Any]]]:
    """The live claims, under the registry lock; what the block leaves there is written."""
    path = registry_path(state_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_name("registry.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o644)
    except OSError as exc:
        raise UserError(f"state directory {state_dir}: {exc.strerror}; a command that changes "
                        "hosts records there which hosts it holds (EXEMPLAR_TUNE_STATE_DIR "
                        "names another)") from None
    try:
        try:
            lock_exclusive(fd, f"lock registry {path.with_name('registry.lock')}")
        except LockTimeout as exc:
            raise UserError(str(exc)) from None
        claims = [c for c in _read(path) if _alive(c)]
        yield claims
        tmp = path.with_name(f".hosts.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(claims, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    finally:
        os.close(fd)  # drops the flock


def _read(path: Path) -> list[dict[str, Any]]:
    """The claims in the registry (none when it does not exist yet); ``UserError`` when it
    cannot be read: claims of live controllers must never be dropped silently."""
    if not path.exists():
        return []
    try:
        data = json.loads(read_input(path, "lock registry") or "[]")
    except ValueError as exc:
        raise UserError(f"lock registry {path} is unreadable ({exc}); once no exemplar-tune "
                        "runs on this machine, remove it") from None
    if not isinstance(data, list) or not all(
            isinstance(c, dict) and isinstance(c.get("hosts"), list) for c in data):
        raise UserError(f"lock registry {path} is not a list of claims; once no exemplar-tune "
                        "runs on this machine, remove it")
    return data


def _alive(claim: dict[str, Any]) -> bool:
    """Whether the claim's controller still runs (claims of other machines: assumed so)."""
    if claim.get("host") != socket.gethostname():
        return True
    pid = claim.get("pid")
    return isinstance(pid, int) and started_at(pid) == claim.get("created")


def _busy(claim: dict[str, Any], shared: list[str], registry: Path) -> UserError:
    hosts = ", ".join(shared[:SHOWN_HOSTS]) + (f" and {len(shared) - SHOWN_HOSTS} more"
                                               if len(shared) > SHOWN_HOSTS else "")
    elsewhere = claim.get("host") != socket.gethostname()
    return UserError(f"another exemplar-tune (pid {claim.get('pid')} on {claim.get('host')}, "
                     f"'{claim.get('command')}', since {claim.get('started')}) is changing "
                     f"{hosts}; wait for it or stop it, then try again"
                     + (f" (a claim from another machine: if that controller is gone, remove "
                        f"its entry from {registry})" if elsewhere else ""))
