"""Progress on stderr for work that takes more than a moment.

On a terminal an Ansible run shows a live bar per task (``rich``): hosts done of the total,
the task, elapsed time and an estimate. Elsewhere (logs, CI, Slurm) each step is one plain
line when it starts and one when it ends, with a line every :data:`HEARTBEAT_S` seconds in
between, so a long step never looks hung. ``--quiet`` (:func:`set_quiet`) silences all of it;
stdout, the result, is never touched. Every line and task name is shown escaped
(:func:`exemplar_tune.terminal.escape`): a host's or a file's text never moves the cursor.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column

from exemplar_tune.terminal import escape, raw

HEARTBEAT_S = 30.0
_state = {"quiet": False, "ansible": True}


def set_quiet(quiet: bool) -> None:
    """Silence (or not) every progress line and bar of this process."""
    _state["quiet"] = quiet


def show_ansible_steps(shown: bool) -> None:
    """Show (or not) the per-task progress of Ansible runs; :func:`say` lines stay (the
    demo shows the loop's own steps, not the playbook tasks behind each)."""
    _state["ansible"] = shown


def say(text: str, stream: TextIO | None = None) -> None:
    """One progress line on stderr (``text`` escaped: one line whatever it holds), unless
    quiet."""
    if not _state["quiet"]:
        print(escape(text), file=stream or sys.stderr, flush=True)


class HostProgress:
    """Progress of one Ansible run, fed its events (:meth:`event`); close with :meth:`close`.

    ``total`` is called once, at the first task of a live bar, for the number of hosts the
    run targets (``None`` when it cannot say: the bar then counts without an end); plain
    lines count the hosts that answered and never pay for resolving the inventory.
    """

    def __init__(self, label: str, total: Callable[[], int | None],
                 stream: TextIO | None = None) -> None:
        self.label, self._total_of, self.stream = label, total, stream or sys.stderr
        self.quiet = _state["quiet"] or not _state["ansible"]
        self.live = not self.quiet and self.stream.isatty()
        self.total: int | None = None
        self.task_name: str | None = None
        self.done: set[str] = set()
        self.problems = 0
        self.started = self.beat = time.monotonic()
        self.bar: Progress | None = None
        self.bar_task: Any = None

    def event(self, event: dict[str, Any]) -> None:
        """Take one ansible-runner event: a task starts, or a host finished the task."""
        if self.quiet:
            return
        kind, data = event.get("event", ""), event.get("event_data") or {}
        if kind == "playbook_on_task_start" or (kind == "runner_on_start" and not self.task_name):
            if data.get("task") != self.task_name:
                self._start_task(data.get("task") or self.label)
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable",
                      "runner_on_skipped") and data.get("host"):
            self._host_done(data["host"], kind in ("runner_on_failed", "runner_on_unreachable"))

    def close(self) -> None:
        """End the current step's line or bar."""
        if self.task_name is not None:
            self._end_task()
        self.task_name = None

    def _start_task(self, name: str) -> None:
        if self.task_name is not None:
            self._end_task()
        if self.live and self.total is None:  # resolving the inventory costs Ansible's imports
            self.total = self._total_of()
        self.task_name, self.done, self.problems = name, set(), 0
        self.step_started = self.beat = time.monotonic()
        if self.live:
            name_column = Column(max_width=40, no_wrap=True, overflow="ellipsis")
            self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False,
                                                            table_column=name_column),
                                BarColumn(bar_width=20),
                                MofNCompleteColumn(), TextColumn("hosts"), TimeElapsedColumn(),
                                TimeRemainingColumn(), console=Console(file=raw(self.stream)),
                                transient=False)
            self.bar.start()
            self.bar_task = self.bar.add_task(escape(f"{self.label}: {name}"), total=self.total)
        else:
            say(f"{self.label}: {name} ...", self.stream)

    def _host_done(self, host: str, problem: bool) -> None:
        if self.task_name is None or host in self.done:
            return
        self.done.add(host)
        self.problems += problem
        if self.bar is not None:
            self.bar.update(self.bar_task, completed=len(self.done))
        elif time.monotonic() - self.beat >= HEARTBEAT_S:
            self.beat = time.monotonic()
            say(f"{self.label}: {self.task_name}: {len(self.done)} host(s) so far, "
                f"{self.beat - self.step_started:.0f} s", self.stream)

    def _end_task(self) -> None:
        seconds = time.monotonic() - self.step_started
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
            return
        answered = len(self.done) - self.problems
        problems = f", {self.problems} failed or unreachable" if self.problems else ""
        say(f"{self.label}: {self.task_name}: {answered} host(s) answered{problems} "
            f"in {seconds:.1f} s", self.stream)
