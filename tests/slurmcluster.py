"""A real Slurm cluster on this machine for tests: one slurmctld and N slurmd "nodes".

Debian's ``slurmctld``/``slurmd``/``slurm-client`` (22.05) are started directly, without
systemd, munge or slurmdbd: ``auth/none``, ``proctrack/linuxproc``, ``task/none`` (no cgroups),
every node ``NodeAddr=127.0.0.1`` with its own port, everything (configuration, state, spool,
logs) under one private directory. Clients need ``SLURM_CONF``: :attr:`SlurmCluster.env`.

:meth:`SlurmCluster.stop` ends only what this cluster started, by pid: jobs are cancelled while
slurmctld is alive, the recorded daemons get SIGTERM then SIGKILL, and any ``slurmstepd``, job
task or client whose environment names this cluster's ``SLURM_CONF`` (slurmd sets it for every
step and task; ``slurmstepd`` outlives slurmd by design) is killed with its session. Then it
checks that nothing of the cluster is left (:meth:`SlurmCluster.leftovers`).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

DAEMONS = ("slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "scontrol", "sinfo", "squeue", "scancel")
PACKAGES = "slurmctld slurmd slurm-client"  # Debian's, for the daemons and the clients
PORTS = 200  # slurmctld on BASE, slurmd on BASE+11.., srun on BASE+100..199
CONF_TEMPLATE = """\
ClusterName=exemplar
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
SlurmctldPort={base}
SlurmdPort={slurmd_port}
SrunPortRange={srun_low}-{srun_high}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/run/slurmctld.pid
SlurmdPidFile={dir}/run/slurmd-%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
InactiveLimit=0
KillWait=2
MinJobAge=300
Waittime=0
SchedulerParameters=sched_interval=2,batch_sched_delay=0,sched_min_interval=0
MailProg=/bin/true
{extra}
NodeName=node[1-{nodes}] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[{node_low}-{node_high}] \
CPUs=2 RealMemory=1000 {gres}State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=short Nodes=ALL MaxTime=1 State=UP
"""


class ClusterError(RuntimeError):
    """The cluster could not be started, or left processes behind."""


def missing_programs(names: tuple[str, ...] = (*DAEMONS, *CLIENTS)) -> list[str]:
    """Those of the Slurm programs ``names`` (default: all) this machine lacks."""
    return [name for name in names if not shutil.which(name)]


def require_slurm(*names: str) -> None:
    """Fail the calling test (never skip it) when a Slurm program it needs is missing
    (``names``; none given: every daemon and client), naming the Debian packages to install."""
    missing = missing_programs(names or (*DAEMONS, *CLIENTS))
    if missing:
        pytest.fail(f"Slurm not installed ({', '.join(missing)} missing): apt-get install "
                    f"{PACKAGES} (.ci/packages.txt)", pytrace=False)


class SlurmCluster:
    """One private cluster: ``node1``..``nodeN`` (2 CPUs each) in partitions ``debug``
    (default, no time limit) and ``short`` (MaxTime 1 minute).

    ``conf_dir`` holds ``slurm.conf`` (default ``<directory>/etc``); ``extra`` lines are added
    to it (a key repeated there wins). ``fake_gpus``: each node gets that many GPUs through
    GRES, backed by character devices (``/dev/null`` clones, made with ``mknod``) under
    ``<directory>/dev``, so Slurm sets ``SLURM_STEP_GPUS``/``CUDA_VISIBLE_DEVICES`` for real.
    Use as a context manager, or call :meth:`start` and, always, :meth:`stop`.
    """

    def __init__(self, directory: Path, nodes: int = 4, extra: str = "",
                 conf_dir: Path | None = None, fake_gpus: int = 0) -> None:
        self.dir, self.nodes, self.extra = Path(directory), nodes, extra
        self.fake_gpus = fake_gpus
        self.conf = (conf_dir or self.dir / "etc") / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.node_names = [f"node{i}" for i in range(1, nodes + 1)]
        self.base = _free_port_window()
        self._daemons: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> SlurmCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- configuration ------------------------------------------------------------------------

    def write_conf(self, extra: str | None = None) -> None:
        """(Re)write ``slurm.conf`` with ``extra`` lines (default: the constructor's)."""
        if extra is not None:
            self.extra = extra
        for sub in ("state", "log", "run", *(f"spool/{n}" for n in self.node_names)):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.conf.parent.mkdir(parents=True, exist_ok=True)
        gres = f"Gres=gpu:{self.fake_gpus} " if self.fake_gpus else ""
        extra = ("GresTypes=gpu\n" if self.fake_gpus else "") + self.extra
        self.conf.write_text(CONF_TEMPLATE.format(
            base=self.base, slurmd_port=self.base + 1, srun_low=self.base + 100,
            srun_high=self.base + PORTS - 1, dir=self.dir, extra=extra, nodes=self.nodes,
            node_low=self.base + 11, node_high=self.base + 10 + self.nodes, gres=gres))
        if self.fake_gpus:
            self._write_gres()

    def _write_gres(self) -> None:
        """gres.conf next to slurm.conf, and the device files it names."""
        dev = self.dir / "dev"
        dev.mkdir(exist_ok=True)
        for index in range(self.fake_gpus):
            path = dev / f"nvidia{index}"
            if not path.exists():
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        (self.conf.parent / "gres.conf").write_text(
            f"NodeName=node[1-{self.nodes}] Name=gpu File={dev}/nvidia[0-{self.fake_gpus - 1}]\n")

    def reconfigure(self, extra: str) -> None:
        """Rewrite ``slurm.conf`` with ``extra`` lines and make the daemons read it again."""
        self.write_conf(extra)
        self.scontrol("reconfigure")

    # -- life cycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> None:
        """Write the configuration, start the daemons, wait until every node is idle."""
        self.write_conf()
        log = self.dir / "log"
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], log / "slurmctld.out")
        for node in self.node_names:
            self._spawn(["slurmd", "-D", "-N", node, "-f", str(self.conf)],
                        log / f"slurmd-{node}.out")
        if not self.wait_for(lambda: len(self.idle_nodes()) == self.nodes, timeout):
            raise ClusterError(f"cluster not ready after {timeout:g} s: "
                               + self.run(["sinfo", "-N", "-l"], check=False).stdout)

    def _spawn(self, argv: list[str], log: Path) -> None:
        with log.open("ab") as out:
            self._daemons.append(subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True))

    def stop(self) -> None:
        """End everything this cluster started; :class:`ClusterError` if anything is left."""
        if self._ctld_alive():
            self._cancel_all_jobs()
        for proc in self._daemons:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        for proc in self._daemons:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._daemons.clear()
        self._kill_leftovers()
        left = self.wait_for(lambda: not self.leftovers(), 5)
        if not left:
            raise ClusterError(f"processes left behind: {self.leftovers()}")

    def _ctld_alive(self) -> bool:
        return bool(self._daemons) and self._daemons[0].poll() is None

    def _cancel_all_jobs(self) -> None:
        jobs = self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=10).stdout.split()
        if jobs:
            self.run(["scancel", *jobs], check=False, timeout=10)
        self.wait_for(lambda: not self.run(["squeue", "-h", "-o", "%i"], check=False,
                                           timeout=5).stdout.strip(), 20)

    def leftovers(self) -> list[tuple[int, str]]:
        """``(pid, name)`` of every live process (not a zombie) that belongs to this cluster:
        a recorded daemon, or a process whose environment names this ``SLURM_CONF``."""
        marker = f"SLURM_CONF={self.conf}".encode()
        mine = {os.getpid(), os.getppid()}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in mine:
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                name = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if marker in environ and state != "Z":
                found.append((int(entry.name), name))
        return found

    def _kill_leftovers(self) -> None:
        """SIGKILL each leftover (a slurmstepd with its whole session), by pid."""
        for pid, name in self.leftovers():
            targets = {pid}
            if name.startswith("slurmstepd"):
                with contextlib.suppress(OSError):
                    targets |= _session_members(os.getsid(pid))
            for target in targets:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(target, signal.SIGKILL)

    # -- clients ------------------------------------------------------------------------------

    def run(self, argv: list[str], *, check: bool = True, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client (argv) against this cluster; ``check``: fail on non-zero."""
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env={**self.env, **(env or {})}, check=False)
        if check and done.returncode != 0:
            raise ClusterError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done

    def scontrol(self, *args: str) -> str:
        """``scontrol ARGS`` (stdout); fails on non-zero."""
        return self.run(["scontrol", *args]).stdout

    def idle_nodes(self) -> list[str]:
        """Nodes in state exactly ``idle`` (not ``idle*``, drained or down)."""
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False, timeout=10).stdout
        pairs = {tuple(line.split()) for line in out.splitlines()}  # one line per partition
        return sorted(n for n, state in pairs if state == "idle")

    def node_state(self, name: str) -> tuple[str, str]:
        """``(state, reason)`` of node ``name`` as sinfo prints them (``drained``, ``idle``)."""
        out = self.run(["sinfo", "-h", "-N", "-n", name, "-o", "%T|%E"]).stdout
        state, _, reason = out.splitlines()[0].partition("|")
        return state, reason

    def resume_all(self) -> None:
        """Put every drained or down node back to service and wait until all are idle."""
        for name in self.node_names:
            state = self.node_state(name)[0]
            if state.startswith(("drain", "down")):
                self.scontrol("update", f"NodeName={name}", "State=RESUME")
        if not self.wait_for(lambda: len(self.idle_nodes()) == self.nodes, 30):
            raise ClusterError("nodes did not return to idle")

    @staticmethod
    def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.2
                 ) -> bool:
        """Poll ``predicate`` until it is true (True) or ``timeout`` s have passed (False)."""
        deadline = time.monotonic() + timeout
        while True:
            if predicate():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval)


def node_sysroots(dest: Path) -> Path:
    """Host trees for the fake nodes, to read with ``--sysroot DEST/%n``: ``node1`` and
    ``node3`` are copies of the ``healthy-h100`` fixture (every check passes), ``node2`` the
    same with C6 disabled on CPU 2 (``cpu.deep-cstates-disabled`` fails: a tuning preference),
    ``node4`` a copy of ``h100-x86`` (``gpu.remapped-rows``, a health check, fails first of
    those that make a node unfit)."""
    sysroots = Path(__file__).resolve().parent / "fixtures" / "sysroots"
    for node, fixture in (("node1", "healthy-h100"), ("node2", "healthy-h100"),
                          ("node3", "healthy-h100"), ("node4", "h100-x86")):
        shutil.copytree(sysroots / fixture, dest / node, symlinks=True)
    (dest / "node2/sys/devices/system/cpu/cpu2/cpuidle/state3/disable").write_text("1\n")
    return dest


XID_79 = ("[ 9001.000100] NVRM: Xid (PCI:0000:a4:00): 79, pid=4242, name=python, GPU has fallen "
          "off the bus.\n[ 9001.000200] NVRM: GPU 0000:a4:00.0: GPU has fallen off the bus.\n")


def break_gpu(tree: Path) -> Path:
    """Put an Xid 79 (GPU 00000000:A4:00.0 fell off the bus) into ``tree``'s kernel log:
    ``gpu.xids``, a health check, fails (REBOOT)."""
    with (tree / ".exemplar/commands/dmesg.txt").open("a") as log:
        log.write(XID_79)
    return tree


def heal(tree: Path) -> Path:
    """Make ``tree`` a fresh copy of the ``healthy-h100`` fixture (every check passes)."""
    shutil.rmtree(tree, ignore_errors=True)
    sysroots = Path(__file__).resolve().parent / "fixtures" / "sysroots"
    shutil.copytree(sysroots / "healthy-h100", tree, symlinks=True)
    return tree


def _session_members(sid: int) -> set[int]:
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(entry.name)) == sid:
                    members.add(int(entry.name))
    return members


def _free_port_window() -> int:
    """A base port whose whole window of :data:`PORTS` ports is free on this machine."""
    for _ in range(50):
        base = random.randrange(20000, 60000 - PORTS, PORTS)  # noqa: S311 - not security
        if all(_port_free(base + i) for i in range(PORTS)):
            return base
    raise ClusterError("no free window of ports for a test cluster")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("0.0.0.0", port))  # noqa: S104 - the daemons listen on every address
        except OSError:
            return False
    return True
