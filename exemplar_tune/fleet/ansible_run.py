"""Run Ansible (modules ad hoc, or playbooks) through ansible-runner and collect per-host results.

One small wrapper, as ansible-navigator does: it prepares a private data directory per run
(the collection linked in, no environment files written), passes an explicit Python
interpreter for local hosts, collects every host's task results from the event stream, and
enforces its own deadline (ansible-runner's ``timeout`` leaves module processes running).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner
import psutil

from exemplar_tune.errors import UserError
from exemplar_tune.fleet import reaper
from exemplar_tune.fleet.collection import link_collection
from exemplar_tune.fleet.hostlist import ansible_limit
from exemplar_tune.fleet.inventory import inventory_hosts
from exemplar_tune.progress import HostProgress

LOG = logging.getLogger(__name__)
RUN_DIR_PREFIX = "exemplar-run-"  # + the controller's pid: stale ones are found and removed
# every private temporary directory of a controller: <prefix><pid>-<random>
SCRATCH_PREFIXES = (RUN_DIR_PREFIX, "exemplar-bench-", "exemplar-slurm-", "exemplar-sysroot-")
HOST_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


@dataclass
class HostResult:
    """What happened on one host: the worst status seen and each task's result."""

    host: str
    status: str = "ok"
    changed: bool = False
    tasks: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""

    def add(self, status: str, task: str, res: dict[str, Any]) -> None:
        """Record one task result; ``failed``/``unreachable`` stick."""
        self.tasks.append({"task": task, "status": status, "result": res})
        self.changed = self.changed or bool(res.get("changed"))
        if status in ("failed", "unreachable") and self.status != "unreachable":
            self.status = status
            lines = str(res.get("msg", "")).strip().splitlines()
            if res.get("argument_errors"):  # role argument specs: the useful part is here
                lines = ["; ".join(str(e) for e in res["argument_errors"])]
            self.message = lines[0] if lines else status


@dataclass
class RunOutcome:
    """Overall runner status and the per-host results."""

    status: str
    rc: int
    hosts: dict[str, HostResult]
    seconds: float


def local_inventory(hosts: list[str] | None = None, hostvars: dict | None = None) -> dict:
    """An inventory of local-connection hosts run by this Python (no interpreter discovery)."""
    names = hosts or ["localhost"]
    base = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return {"all": {"hosts": {name: {**base, **(hostvars or {}).get(name, {})} for name in names}}}


def runner_inventory(inventory: str | dict) -> str | dict:
    """``inventory`` as ansible-runner takes it: a comma-separated host list (``-i a,b,``,
    which Ansible reads with its host_list plugin and ansible-runner would take for the text
    of an INI file, one host named ``a,b,``) as a mapping of those hosts; anything else as
    it is."""
    if isinstance(inventory, str) and "," in inventory and not os.path.exists(inventory):
        names = dict.fromkeys(name.strip() for name in inventory.split(",") if name.strip())
        return {"all": {"hosts": {name: {} for name in names}}}
    return inventory


def local_name(inventory: str | dict, limit: str | None) -> str | None:
    """``limit``, with this machine's name (short or fully qualified) read as ``localhost``
    where the inventory is this host alone: the name a local run's reports and Prometheus
    series carry is a name ``--limit`` accepts on the same host."""
    if limit and inventory == local_inventory() and limit in machine_names():
        return "localhost"
    return limit


def machine_names() -> set[str]:
    """This machine's host name as set (what ``host_label`` writes) and its short form."""
    name = socket.gethostname()
    return {name, name.split(".")[0]}


class AnsibleRun:
    """One configured way of running Ansible against an inventory."""

    def __init__(self, inventory: str | dict, *, limit: str | None = None, forks: int = 10,
                 timeout: float | None = None, check: bool = False, diff: bool = False) -> None:
        # ansible-runner works in a private directory: a relative inventory path would be
        # taken for a host name there
        if isinstance(inventory, str) and os.path.exists(inventory):
            inventory = os.path.abspath(inventory)
        self.inventory = inventory
        try:
            self.limit = ansible_limit(local_name(inventory, limit))
        except ValueError as exc:
            raise UserError(f"--limit: {exc}") from None
        self.forks, self.timeout = forks, timeout
        self.check, self.diff = check, diff

    def limited(self, limit: str) -> AnsibleRun:
        """The same run settings, restricted to ``limit``."""
        return AnsibleRun(self.inventory, limit=limit, forks=self.forks, timeout=self.timeout,
                          check=self.check, diff=self.diff)

    def module(self, name: str, args: dict[str, Any], pattern: str = "all") -> RunOutcome:
        """Run one module ad hoc on ``pattern``."""
        return self._run(module=name, module_args=_module_args(args), host_pattern=pattern)

    def playbook(self, playbook: Path, extravars: dict[str, Any] | None = None) -> RunOutcome:
        """Run a playbook file."""
        return self._run(playbook=str(playbook), extravars=extravars or {})

    def _run(self, **kwargs: Any) -> RunOutcome:
        _remove_stale_run_dirs()
        pdd = Path(tempfile.mkdtemp(prefix=f"{RUN_DIR_PREFIX}{os.getpid()}-"))
        hosts: dict[str, HostResult] = {}
        start = time.monotonic()
        progress = HostProgress(_label(kwargs), self._host_count)
        try:
            runner = ansible_runner.run(
                private_data_dir=str(pdd), inventory=runner_inventory(self.inventory),
                limit=_limit_file(self.limit, pdd),
                forks=self.forks, quiet=True, suppress_env_files=True, cmdline=self._cmdline(),
                envvars=_envvars(pdd), event_handler=lambda e: _collect(e, hosts, progress),
                cancel_callback=self._deadline(start), settings={"pexpect_timeout": 1},
                **kwargs,
            )
            status, rc = runner.status, runner.rc
        except BaseException:  # interrupted (a signal) or failed: Ansible must not go on alone
            for child in psutil.Process().children():
                reaper.end_tree(child)
            raise
        finally:
            progress.close()
            shutil.rmtree(pdd, ignore_errors=True)
        LOG.debug("ansible-runner %s rc=%s in %.1f s", status, rc, time.monotonic() - start)
        return RunOutcome(status, rc, hosts, time.monotonic() - start)

    def _host_count(self) -> int | None:
        try:
            return len(inventory_hosts(self))
        except Exception:  # noqa: BLE001 - the count only sizes a progress bar
            return None

    def _cmdline(self) -> str | None:
        flags = (["--check"] if self.check else []) + (["--diff"] if self.diff else [])
        return " ".join(flags) or None

    def _deadline(self, start: float):
        def cancel() -> bool:
            if self.timeout is None or time.monotonic() - start < self.timeout:
                return False
            _kill_grandchildren()
            return True

        return cancel


@functools.cache  # once per controller process, not before every Ansible run
def _remove_stale_run_dirs() -> None:
    """Remove the private temporary directories of controllers that were killed."""
    for prefix in SCRATCH_PREFIXES:
        for path in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
            pid = path.name[len(prefix):].partition("-")[0]
            if pid.isdigit() and not psutil.pid_exists(int(pid)):
                shutil.rmtree(path, ignore_errors=True)


def _limit_file(limit: str | None, directory: Path) -> str | None:
    """``limit`` as Ansible's ``@FILE`` form (one pattern per line, in ``directory``): an
    expanded host list can be longer than a command line may be. A user's own ``@FILE``
    items stay as they are (Ansible does not read ``@`` inside a limit file)."""
    if not limit:
        return limit
    from ansible.inventory.manager import split_host_pattern

    patterns = split_host_pattern(limit)
    files = [p for p in patterns if p.startswith("@")]
    path = directory / "limit"
    path.write_text("".join(f"{p}\n" for p in patterns if not p.startswith("@")))
    return ",".join([f"@{path}", *files])


def _module_args(args: dict[str, Any]) -> str | None:
    return json.dumps(args) if args else None


def _envvars(pdd: Path) -> dict[str, str]:
    collections = link_collection(pdd / "collections")
    path = os.pathsep.join([_supervised_programs(pdd / "bin"), os.path.dirname(sys.executable),
                            os.environ.get("PATH", "")])
    return {
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "PATH": path,
        "ANSIBLE_LOCAL_TEMP": str(pdd / "tmp"),
        # module payloads of local-connection hosts: removed with the run's directory, also
        # when a killed run could not remove them itself
        "TMPDIR": _directory(pdd / "tmp"),
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
    }


def _directory(path: Path) -> str:
    path.mkdir(exist_ok=True)
    return str(path)


def _supervised_programs(directory: Path) -> str:
    """A directory whose ``ansible`` and ``ansible-playbook`` run the real ones under
    :mod:`exemplar_tune.fleet.reaper`: ansible-runner starts them by name, and they and their
    workers and module processes must end when this controller does."""
    directory.mkdir()
    search = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    for name in ("ansible", "ansible-playbook"):
        real = shutil.which(name, path=search)
        if real:
            shim = directory / name
            shim.write_text(reaper.shim(real))
            shim.chmod(0o700)
    return str(directory)


def _label(kwargs: dict[str, Any]) -> str:
    """What a run is called in progress lines: the playbook's or the module's name."""
    if "playbook" in kwargs:
        return Path(kwargs["playbook"]).stem
    return str(kwargs.get("module", "ansible")).rsplit(".", 1)[-1]


def _collect(event: dict[str, Any], hosts: dict[str, HostResult],
             progress: HostProgress) -> bool:
    progress.event(event)
    status = HOST_EVENTS.get(event.get("event", ""))
    if status is None:
        return False
    data = event.get("event_data", {})
    host = data.get("host", "?")
    res = data.get("res") or {}
    if status == "ok" and res.get("changed"):
        status = "changed"
    hosts.setdefault(host, HostResult(host)).add(status, data.get("task", ""), res)
    return False


def _kill_grandchildren() -> None:
    """Kill module processes that ansible workers ``setsid()`` away from runner's kill."""
    me = psutil.Process()
    direct = {child.pid for child in me.children()}
    for proc in me.children(recursive=True):
        if proc.pid not in direct:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
