"""SIGINT and SIGTERM for commands that change hosts: stop cleanly first, at once the second time.

Inside :func:`graceful_stop`, the first SIGINT or SIGTERM raises :class:`Interrupted` in the
main thread: the running Ansible or benchmark process is ended (see
:mod:`exemplar_tune.fleet.reaper`), the measured loop restores the layer it was measuring, records
why and stops. A second signal raises :class:`StoppedAtOnce`: nothing more is done, and the
experiment stays as it is for ``resume`` or ``rollback``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The first SIGINT/SIGTERM: finish cleanly (restore what is being measured), then stop.

    A ``BaseException``, so that no ``except Exception`` on the way swallows it.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.note = ""  # what was done about it (set by whoever cleaned up), for the message
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        """``128 + signal``, as a shell reports a command ended by it."""
        return 128 + self.signum


class StoppedAtOnce(Interrupted):
    """The second signal: stop now, leave everything as it is."""


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for the block (a short critical section such as a ledger
    transaction); they are delivered, and their handlers run, when it ends."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers run in the main thread only; nothing to hold back here
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextmanager
def graceful_stop() -> Iterator[None]:
    """Within the block, SIGINT/SIGTERM raise :class:`Interrupted`, then
    :class:`StoppedAtOnce`; the previous handlers come back afterwards."""
    seen: list[int] = []

    def handler(signum: int, _frame: Any) -> None:
        seen.append(signum)
        raise (Interrupted if len(seen) == 1 else StoppedAtOnce)(signum)

    with signals_deferred():
        previous = {sig: signal.signal(sig, handler) for sig in HANDLED}
    try:
        yield
    finally:
        with signals_deferred():
            for sig, old in previous.items():
                signal.signal(sig, old)
