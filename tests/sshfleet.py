"""Real SSH hosts on this machine: network namespaces, each with its own address and sshd.

``start_fleet(n, workdir)`` creates ``n`` hosts named ``xtf1`` .. ``xtfN``. Each is a network
namespace of that name with

* its own address ``10.237.46.<10+i>/24`` on ``eth0``, the peer of veth ``xtfv<i>`` in the
  bridge ``xtfbr0`` (``10.237.46.1``, the controller's side);
* its own hostname (a UTS namespace) and ``/etc/netns/<name>/{hosts,resolv.conf}``, so that
  name lookups inside answer at once instead of stalling on the machine's nameserver;
* its own ``sshd`` (root, key authentication only, logging to ``workdir/xtf-log/<name>.log``).

No namespace gets a default route, so nothing a host sends can leave the machine even where
``net.ipv4.ip_forward`` is 1 (no firewall rule is needed or added). The namespaces share the
filesystem and process table with the controller: a host's sysroot is any local directory
and this Python (``sys.executable``) is the remote interpreter.

One fleet exists per machine at a time (``LOCK``, held until ``teardown``); whoever takes the
lock first removes what a killed earlier fleet left (namespaces, links, ``/etc/netns``
entries and processes of the ``xtf`` prefix). ``Fleet.teardown`` removes everything again and
raises :class:`FleetError` naming anything that is still there. :func:`unavailable_reason`
says why this machine cannot host a fleet at all (callers skip on it; every other failure
is an error).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil

PREFIX = "xtf"
BRIDGE = f"{PREFIX}br0"
SUBNET = ipaddress.ip_network("10.237.46.0/24")
CONTROLLER = "10.237.46.1"
LOCK = Path("/run/lock/xtf-fleet.lock")
SSHD = "/usr/sbin/sshd"
CONFIG_NAME = "xtf-sshd_config"  # also how leftover listeners are recognised
BYTECODE_CACHE_ENV = "EXEMPLAR_TUNE_BYTECODE_CACHE"
CONTROL_DIR = "xtf-cp"  # ControlPersist sockets (ssh mux processes name them)
MAX_HOSTS = 200
SET_HOSTNAME = ("import os, socket, sys; socket.sethostname(sys.argv[1]); "
                "os.execv(sys.argv[2], sys.argv[2:])")


class FleetError(RuntimeError):
    """The fleet could not be set up or torn down completely."""


class FleetUnavailable(FleetError):
    """This machine cannot host a fleet (not root, no namespaces, no sshd)."""


@dataclass
class Host:
    """One SSH host: its namespace (also its inventory name), address and sshd."""

    name: str
    address: str
    veth: str
    control_path: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS``; raise FleetError with its stderr when ``check`` and it fails."""
    out = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=30)
    if check and out.returncode != 0:
        raise FleetError(f"ip {' '.join(args)}: {out.stderr.strip()}")
    return out


def unavailable_reason() -> str | None:
    """Why no fleet can be started here (``None`` when it can): root, iproute2, sshd, netns."""
    if os.geteuid() != 0:
        return "not root: creating network namespaces needs root"
    missing = [tool for tool in ("ip", "ssh", "ssh-keygen") if shutil.which(tool) is None]
    if not os.access(SSHD, os.X_OK):
        missing.append(SSHD)
    if missing:
        return (f"missing {', '.join(missing)} (apt-get install iproute2 openssh-client "
                f"openssh-server; .ci/packages.txt lists them)")
    probe = f"{PREFIX}probe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: ip netns add: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


# -- leftovers ---------------------------------------------------------------------------------


def _namespaces() -> list[str]:
    names = [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line]
    return [name for name in names if name.startswith(PREFIX)]


def _links() -> list[str]:
    out = _ip("-o", "link", "show").stdout.splitlines()
    names = [line.split(":")[1].strip().split("@")[0] for line in out if ":" in line]
    return [name for name in names if name.startswith(PREFIX)]


def _etc_netns() -> list[Path]:
    root = Path("/etc/netns")
    return sorted(root.glob(f"{PREFIX}*")) if root.is_dir() else []


def _fleet_processes() -> list[psutil.Process]:
    """Live listeners and ssh mux processes of any fleet (recognised by their arguments)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        line = " ".join(proc.info["cmdline"] or [])
        if proc.info["status"] != psutil.STATUS_ZOMBIE and (
                CONFIG_NAME in line or f"/{CONTROL_DIR}/{PREFIX}" in line):
            found.append(proc)
    return found


def leftovers() -> list[str]:
    """Everything of the ``xtf`` prefix that exists now: namespaces, links, files, processes."""
    return ([f"netns {name}" for name in _namespaces()] + [f"link {name}" for name in _links()]
            + [f"file {path}" for path in _etc_netns()]
            + [f"process {p.pid} {' '.join(p.info['cmdline'] or [])}"
               for p in _fleet_processes()])


def _namespace_pids(namespace: str) -> list[int]:
    out = _ip("netns", "pids", namespace, check=False)
    return [int(pid) for pid in out.stdout.split()] if out.returncode == 0 else []


def kill_namespace_processes(namespace: str, grace: float = 5.0) -> None:
    """End every process in ``namespace``, innermost first, so each parent reaps its child.

    Session processes of sshd die before their monitor and the monitor before the listener;
    none is left for PID 1 to reap. SIGTERM for ``grace`` seconds, then SIGKILL; raises
    FleetError if processes are still there 10 s after that.
    """
    start = time.monotonic()
    while pids := _namespace_pids(namespace):
        if time.monotonic() - start > grace + 10:
            raise FleetError(f"processes {pids} in namespace {namespace} do not end")
        procs = _alive(pids)
        leaves = [p for p in procs if not any(c.pid in pids for c in _children(p))] or procs
        sig = signal.SIGTERM if time.monotonic() - start < grace else signal.SIGKILL
        for proc in leaves:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(sig)
        psutil.wait_procs(leaves, timeout=1.0)


def _alive(pids: list[int]) -> list[psutil.Process]:
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    return procs


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children()
    except psutil.NoSuchProcess:
        return []


def close_master(control_path: Path) -> None:
    """Ask the ssh ControlMaster behind ``control_path`` (if any) to exit."""
    if control_path.exists():
        subprocess.run(["ssh", "-o", f"ControlPath={control_path}", "-O", "exit", "xtf"],
                       capture_output=True, check=False, timeout=10)
        with contextlib.suppress(FileNotFoundError):
            control_path.unlink()


def stop_host(namespace: str, control_path: Path) -> None:
    """Make one host unreachable: its ControlMaster closed, its sshd and sessions ended.

    Usable from any process (a benchmark script, say); the fleet reaps its own listener later.
    """
    close_master(control_path)
    kill_namespace_processes(namespace)


def remove_leftovers() -> None:
    """Remove what an earlier fleet left behind (call only while holding ``LOCK``)."""
    for proc in _fleet_processes():
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    for name in _namespaces():
        kill_namespace_processes(name)
        _ip("netns", "del", name, check=False)
    for link in _links():
        _ip("link", "del", link, check=False)
    for path in _etc_netns():
        shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        Path("/etc/netns").rmdir()  # only when empty: other namespaces' entries stay


def _remove_until_gone(timeout: float = 10.0) -> list[str]:
    """Remove leftovers until none remain (the kernel frees namespaces and veths
    asynchronously, ssh mux processes take a moment to exit); what is left after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        remove_leftovers()
        remaining = leftovers()
        if not remaining or time.monotonic() > deadline:
            return remaining
        time.sleep(0.2)


# -- set-up --------------------------------------------------------------------------------------


def _take_lock(timeout: float = 600.0) -> IO[str]:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    handle = LOCK.open("a")
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() > deadline:
                handle.close()
                raise FleetError(f"another fleet holds {LOCK} for more than {timeout:.0f} s"
                                 ) from None
            time.sleep(0.5)


def _check_subnet_free() -> None:
    for line in _ip("-4", "route", "show", "table", "all").stdout.splitlines():
        dest = line.split()[0] if line.split() else "default"
        with contextlib.suppress(ValueError):
            if dest not in ("default", "local", "broadcast") and \
                    ipaddress.ip_network(dest, strict=False).overlaps(SUBNET):
                raise FleetError(f"{SUBNET} is already routed here ({line.strip()}); "
                                 "the fleet needs it for itself")


def _write_keys(workdir: Path) -> None:
    for name in ("id_ed25519", "ssh_host_ed25519_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "xtf-fleet", "-f",
                        str(workdir / name)], check=True, capture_output=True, timeout=30)
    shutil.copyfile(workdir / "id_ed25519.pub", workdir / "authorized_keys")


def _write_sshd_config(workdir: Path) -> Path:
    """The hosts' sshd configuration; sessions get this process's module bytecode cache
    setting (the tests' private directory), if it has one."""
    path = workdir / CONFIG_NAME
    cache = os.environ.get(BYTECODE_CACHE_ENV)
    path.write_text("\n".join([
        *([f'SetEnv {BYTECODE_CACHE_ENV}="{cache}"'] if cache else []),
        f"HostKey {workdir / 'ssh_host_ed25519_key'}",
        f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
        "PermitRootLogin prohibit-password", "PubkeyAuthentication yes",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "StrictModes no", "UseDNS no", "PidFile none", "LogLevel INFO",
        "MaxStartups 100:30:200", "MaxSessions 50", "Subsystem sftp internal-sftp", "",
    ]))
    return path


def _add_host(index: int, workdir: Path) -> Host:
    name, veth = f"{PREFIX}{index}", f"{PREFIX}v{index}"
    address = str(SUBNET.network_address + 10 + index)
    _ip("netns", "add", name)
    etc = Path("/etc/netns") / name
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "hosts").write_text(f"127.0.0.1 localhost\n{address} {name}\n")
    (etc / "resolv.conf").write_text("nameserver 127.0.0.1\n")
    _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
    _ip("link", "set", veth, "master", BRIDGE, "up")
    _ip("-n", name, "addr", "add", f"{address}/{SUBNET.prefixlen}", "dev", "eth0")
    _ip("-n", name, "link", "set", "eth0", "up")
    _ip("-n", name, "link", "set", "lo", "up")
    return Host(name, address, veth, workdir / CONTROL_DIR / name,
                workdir / "xtf-log" / f"{name}.log")


def start_fleet(n: int, workdir: Path) -> Fleet:
    """``n`` running SSH hosts (keys, config and logs under ``workdir``); see the module doc.

    Raises FleetUnavailable where the machine cannot do it, FleetError on any other failure
    (after removing whatever was already set up).
    """
    if not 1 <= n <= MAX_HOSTS:
        raise ValueError(f"a fleet has 1 to {MAX_HOSTS} hosts, not {n}")
    reason = unavailable_reason()
    if reason:
        raise FleetUnavailable(reason)
    fleet = Fleet(Path(workdir).resolve(), _take_lock())
    try:
        fleet._build(n)
    except BaseException:
        fleet.teardown()
        raise
    return fleet


class Fleet:
    """A running fleet: its hosts, an inventory for them, sshd control and teardown."""

    def __init__(self, workdir: Path, lock: IO[str]) -> None:
        self.workdir, self._lock = workdir, lock
        self.hosts: list[Host] = []
        self.key = workdir / "id_ed25519"

    @property
    def names(self) -> list[str]:
        """The inventory names, in order (``xtf1`` ...)."""
        return [host.name for host in self.hosts]

    def host(self, name: str) -> Host:
        """The host called ``name``."""
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def _build(self, n: int) -> None:
        remove_leftovers()
        _check_subnet_free()
        for sub in (CONTROL_DIR, "xtf-log"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        _write_keys(self.workdir)
        _write_sshd_config(self.workdir)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{CONTROLLER}/{SUBNET.prefixlen}", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        self.hosts = []
        for index in range(1, n + 1):
            self.hosts.append(_add_host(index, self.workdir))
        for host in self.hosts:
            self.start_sshd(host.name)

    # -- inventory ---------------------------------------------------------------------------

    def inventory(self, sysroots: Mapping[str, Path | str],
                  hostvars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A YAML-ready inventory of every host reached over SSH (no environment needed).

        ``sysroots`` maps host names to their ``exemplar_sysroot`` (hosts left out get none);
        ``hostvars`` are added to every host. Host key checking is off, ControlPersist
        sockets live in the fleet's directory (one per host, so teardown can close them).
        """
        unknown = set(sysroots) - set(self.names)
        if unknown:
            raise KeyError(f"not in the fleet: {sorted(unknown)}")
        hosts = {}
        for host in self.hosts:
            entry: dict[str, Any] = {"ansible_host": host.address,
                                     "ansible_control_path": str(host.control_path)}
            if host.name in sysroots:
                entry["exemplar_sysroot"] = str(sysroots[host.name])
            hosts[host.name] = {**entry, **(hostvars or {})}
        return {"all": {"vars": self._ssh_vars(), "hosts": hosts}}

    def _ssh_vars(self) -> dict[str, Any]:
        return {
            "ansible_connection": "ssh", "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no "
                                       "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "
                                       "-o IdentitiesOnly=yes -o ConnectTimeout=10",
            "ansible_host_key_checking": False, "ansible_ssh_pipelining": True,
            "ansible_python_interpreter": sys.executable,
        }

    def ssh(self, name: str, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on host ``name`` through its sshd (a fresh connection, no master)."""
        host = self.host(name)
        return subprocess.run(
            ["ssh", "-i", str(self.key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10", "-o", "ControlMaster=no",
             "-o", "ControlPath=none", f"root@{host.address}", "--", *argv],
            capture_output=True, text=True, check=False, timeout=60)

    # -- sshd --------------------------------------------------------------------------------

    def start_sshd(self, name: str) -> None:
        """Start host ``name``'s sshd (no-op if it runs); return once a login works."""
        host = self.host(name)
        if host.process is not None and host.process.poll() is None:
            return
        argv = ["ip", "netns", "exec", host.name, "unshare", "--uts", "--", sys.executable,
                "-c", SET_HOSTNAME, host.name, SSHD, "-D", "-f", str(self.workdir / CONFIG_NAME),
                "-o", f"ListenAddress={host.address}", "-E", str(host.log)]
        host.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_for_login(host)

    def _wait_for_login(self, host: Host, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if host.process is not None and host.process.poll() is not None:
                break
            with contextlib.suppress(OSError), socket.create_connection((host.address, 22), 1):
                answer = self.ssh(host.name, "true")
                if answer.returncode == 0:
                    return
                raise FleetError(f"{host.name}: ssh login refused: {answer.stderr.strip()}; "
                                 f"sshd log: {self.sshd_log(host.name)[-500:]}")
            time.sleep(0.05)
        raise FleetError(f"{host.name}: sshd did not come up in {timeout:.0f} s; "
                         f"sshd log: {self.sshd_log(host.name)[-500:]}")

    def stop_sshd(self, name: str) -> None:
        """Make host ``name`` unreachable: sshd and its sessions ended, its master closed."""
        host = self.host(name)
        stop_host(host.name, host.control_path)
        self._reap(host)

    @staticmethod
    def _reap(host: Host) -> None:
        if host.process is not None:
            if host.process.poll() is None:
                host.process.kill()
            host.process.wait(timeout=10)
            host.process = None

    def close_masters(self) -> None:
        """Close every host's ControlPersist master: the next Ansible run connects afresh."""
        for host in self.hosts:
            close_master(host.control_path)

    def sshd_log(self, name: str) -> str:
        """What host ``name``'s sshd has logged so far."""
        log = self.host(name).log
        return log.read_text(errors="replace") if log.exists() else ""

    # -- teardown ----------------------------------------------------------------------------

    def teardown(self) -> None:
        """Remove every host, the bridge and the files; raise FleetError naming any leftover.

        Safe to call twice and after a partial set-up.
        """
        if self._lock.closed:
            return
        problems = []
        try:
            for host in self.hosts:
                try:
                    self.stop_sshd(host.name)
                except (FleetError, subprocess.SubprocessError, OSError) as exc:
                    problems.append(f"{host.name}: {exc}")  # the namespace removal kills it
            remaining = _remove_until_gone() + problems
        finally:
            self._lock.close()
        if remaining:
            raise FleetError(f"fleet teardown left: {'; '.join(remaining)}")

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()
