"""Read one Slurm node in-process (no Ansible) and run its checks: what the gates judge.

The node is this machine (live ``/``) or a captured tree, ``--sysroot`` where ``%n`` stands
for the node name. :func:`read_node` gives the preflight document, the node's results and
verdict, and ``verdict.unreadable`` of its facts. With a ``deadline`` (the health check's:
slurmd kills a HealthCheckProgram after 60 s) the reading runs under it: every live command
gets at most the time left, the commands that only tuning checks read are not run
(:data:`TUNING_ONLY_COMMANDS`), and a reading still going at the deadline makes the node
unknown (``deadline passed``) rather than the gate late.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.layers import (
    LAYER_NAMES,
    gather_facts,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import NotSupported
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import (
    COMMAND_TIMEOUT,
    COMMANDS,
    CommandOutput,
    Sysroot,
    run_command,
)

from exemplar_tune.errors import UserError
from exemplar_tune.facts import facts_from_sysroot
from exemplar_tune.preflight import preflight_hosts
from exemplar_tune.profile import host_profiles
from exemplar_tune.verdict import Target, host_verdict, unreadable

# Live commands whose output only tuning checks read (fabric.pcie-acs and fabric.nic-ats,
# fabric.gpu-nic-locality, cpu.housekeeping-overlap): a health check does not wait for them.
TUNING_ONLY_COMMANDS = ("lspci-vvv.txt", "nvidia-smi-topo-m.txt", "systemctl-show-slices.txt")


@dataclass(frozen=True)
class NodeCheck:
    """One node read and checked: its preflight document (None when the reading did not
    finish), its results and verdict (JSON), why its facts cannot be judged at all (``""``
    when they can) and how long it took."""

    node: str
    doc: dict[str, Any] | None
    results: list[dict[str, Any]]
    verdict: dict[str, Any]
    unreadable: str
    seconds: float


def sysroot_of(template: str | None, node: str) -> str | None:
    """The node's tree: ``template`` with ``%n`` replaced by the node name (None: live)."""
    return template.replace("%n", node) if template else None


def read_node(node: str, sysroot: str | None, profile: str, layers: list[str],
              deadline: float | None = None) -> NodeCheck:
    """Read ``node`` (``sysroot`` or, None, this machine) and check it against ``profile``
    in ``layers``; ``deadline`` (``time.monotonic()``) bounds the reading. A tree that cannot
    be opened is an unreadable node (verdict unknown); :class:`UserError` for an unusable
    profile or layer."""
    bad = [name for name in layers if name not in LAYER_NAMES]
    if bad:
        raise UserError(f"unknown layer {bad[0]!r}; choose from {', '.join(LAYER_NAMES)}")
    start = time.monotonic()
    target = Target(sysroot=sysroot, profile=profile)
    try:
        facts = _facts(sysroot, layers, None) if deadline is None else \
            _before(deadline, lambda: _facts(sysroot, layers, deadline))
    except Unreadable as exc:
        return _unknown(node, target, f"not a readable host: {exc}", start)
    if facts is None:
        why = f"deadline passed: facts still being read after {time.monotonic() - start:.1f} s"
        return _unknown(node, target, why, start)
    hosts = {node: facts}
    doc = preflight_hosts(hosts, host_profiles(profile, hosts), layers, False, target=target)
    return NodeCheck(node, doc, doc["hosts"][node]["results"], doc["verdicts"][node],
                     unreadable(facts), time.monotonic() - start)


class Unreadable(Exception):
    """The node's tree cannot be opened (missing, not a directory or snapshot archive)."""


def _unknown(node: str, target: Target, why: str, start: float) -> NodeCheck:
    """A node whose facts could not be had: verdict unknown, ``why`` its reason."""
    return NodeCheck(node, None, [], host_verdict([], target, node, why), why,
                     time.monotonic() - start)


def _facts(sysroot: str | None, layers: list[str], deadline: float | None
           ) -> dict[str, dict[str, Any]]:
    if sysroot:
        try:
            return facts_from_sysroot(sysroot, layers)
        except UserError as exc:  # open_sysroot: missing, unreadable, not an archive
            raise Unreadable(str(exc)) from None
    root = Sysroot("/") if deadline is None else BoundedSysroot(deadline)
    return gather_facts(root, layers)


def _before(deadline: float, work: Callable[[], Any]) -> Any:
    """``work()``'s value if it finishes by ``deadline``, else None (it is left running in a
    daemon thread: the process exits without it; with no time left it is not started). Its
    exception is raised here."""
    if deadline <= time.monotonic():
        return None
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=target, name="exemplar-read-node", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if "error" in box:
        raise box["error"]
    return box.get("value")


class BoundedSysroot(Sysroot):
    """This machine, its commands run under a deadline: each gets at most the time left
    (and at most ``COMMAND_TIMEOUT``), none starts with less than a second left, and
    :data:`TUNING_ONLY_COMMANDS` are not run. Each command runs at most once."""

    def __init__(self, deadline: float) -> None:
        super().__init__("/")
        self.deadline = deadline
        self._ran: dict[str, CommandOutput | NotSupported] = {}

    def command(self, name: str) -> CommandOutput:
        """As :meth:`Sysroot.command` on the live host, bounded as the class says."""
        if name not in self._ran:
            self._ran[name] = self._run(name)
        found = self._ran[name]
        if isinstance(found, NotSupported):
            raise NotSupported(found.path, found.reason)
        return found

    def _run(self, name: str) -> CommandOutput | NotSupported:
        argv = COMMANDS[name]
        left = self.deadline - time.monotonic()
        if name in TUNING_ONLY_COMMANDS:
            return NotSupported(" ".join(argv), "not run by the health check (tuning only)")
        if left < 1:
            return NotSupported(" ".join(argv), "not run: the health check's deadline passed")
        try:
            return run_command(argv, timeout=max(1, int(min(COMMAND_TIMEOUT, left))))
        except NotSupported as exc:
            return exc
