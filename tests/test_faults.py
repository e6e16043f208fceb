"""The controller under faults, on the simulated cluster with real Ansible and real processes.

SIGKILL of the controller (only the controller: its children must end on their own) at each
phase of a measured run, at seeded random times, SIGTERM and SIGINT (once, then twice), a
bug inside the loop; then ``rollback`` or ``resume``. Each case checks that no process of the
dead run is left (the process table), the host is byte-identical (content, mode, owner) to
before or to the kept layer, and the ledger says what happened.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import yaml

from exemplar_tune.sim.cluster import create_cluster
from exemplar_tune.sim.model import load_scenario
from tests.helpers import cli_env
from tests.test_cli import cli

pytestmark = pytest.mark.system

PROFILE = {"name": "swept", "fabric": {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4"}}}
LEFT_ALONE = ("var/lib/exemplar-tune", ".exemplar", "proc", "sys")  # journals, sim state


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A one-host simulated cluster whose only problem is one QP per connection."""
    monkeypatch.setenv("EXEMPLAR_TUNE_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "profile.yaml").write_text(yaml.safe_dump(PROFILE))
    scenario = load_scenario("healthy")
    scenario.update(hosts=1, faults=["nccl_qps_1"])
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    create_cluster(tmp_path / "cluster", str(tmp_path / "scenario.yaml"))
    return tmp_path / "cluster" / "hosts" / "node01"


def host_bytes(root: Path) -> dict[str, tuple]:
    """Every path (journals and simulated runtime state aside) with its type, mode, owner,
    group and content or link target."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames
                       if os.path.normpath(os.path.join(rel_dir, d)) not in LEFT_ALONE]
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            if any(kept.startswith(rel + "/") for kept in LEFT_ALONE):
                continue  # a parent of the journals: created by the first change
            info = path.lstat()
            body = os.readlink(path) if path.is_symlink() else (
                path.read_bytes() if path.is_file() else None)
            state[rel] = (info.st_mode, info.st_uid, info.st_gid, body)
    return state


def bench(tmp_path: Path, slow_run: int | None = None, output: str = "value: 1.0",
          seconds: float = 0) -> Path:
    """A benchmark that counts its runs in a file, takes ``seconds`` and prints ``output``;
    run ``slow_run`` waits 60 s (long enough to be killed in)."""
    counter = tmp_path / "runs"
    code = ("import pathlib, sys, time; p = pathlib.Path(sys.argv[1]);"
            " n = int(p.read_text()) + 1 if p.exists() else 1; p.write_text(str(n));"
            f" time.sleep(60 if n == {slow_run or 0} else {seconds}); print({output!r})")
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump({"shapes": [{
        "name": "dense", "command": [sys.executable, "-c", code, str(counter)],
        "parser": "regex", "pattern": "value: ([0-9.]+)", "higher_is_better": False}]}))
    return path


def start(tmp_path: Path, host: Path, *extra: str) -> subprocess.Popen[str]:
    """``apply --layer fabric --bench`` on ``host`` in the background."""
    argv = [sys.executable, "-m", "exemplar_tune.cli", "apply", "--layer", "fabric",
            "--sysroot", str(host), "--profile", str(tmp_path / "profile.yaml"),
            "--bench", str(tmp_path / "bench.yaml"), "--max-runs", "4", *extra]
    return subprocess.Popen(argv, env=dict(cli_env(), EXEMPLAR_TUNE_STATE_DIR=str(
        tmp_path / "state")), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Watch:
    """The controller's descendants, remembered as they appear (pid and start time)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc, self.seen = proc, {}

    def poll(self) -> list[str]:
        """Remember the live descendants; their command lines."""
        lines = []
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return lines
        for child in children:
            try:
                self.seen[child.pid] = child.create_time()
                lines.append(" ".join(child.cmdline()))
            except psutil.NoSuchProcess:
                continue
        return lines

    def until(self, ready, timeout: float = 120) -> None:
        """Poll until ``ready(command lines)`` is true."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready(self.poll()):
                return
            assert self.proc.poll() is None, "the controller ended before the fault"
            time.sleep(0.02)
        raise AssertionError("the phase never came")

    def left(self, timeout: float = 10) -> list[str]:
        """Descendants of the dead controller still alive after ``timeout`` seconds (the
        supervisor gives them 5 s after SIGTERM)."""
        deadline = time.monotonic() + timeout
        while True:
            alive = []
            for pid, created in self.seen.items():
                try:
                    proc = psutil.Process(pid)
                    if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                        alive.append(" ".join(proc.cmdline()))
                except psutil.NoSuchProcess:
                    continue
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)


def running(name: str, check: bool | None = None):
    """A phase: some descendant runs playbook ``name`` (in check mode or not)."""
    def ready(lines: list[str]) -> bool:
        return any(f"{name}.yml" in line and "ansible-playbook" in line
                   and (check is None or ("--check" in line) == check) for line in lines)
    return ready


def kill(watch: Watch) -> None:
    """SIGKILL the controller alone, then check that everything it started ends."""
    watch.poll()
    watch.proc.kill()
    watch.proc.communicate(timeout=30)
    assert watch.left() == [], "processes of the killed controller are still running"


def show(experiment: str = "latest") -> dict:
    return json.loads(cli("show", experiment, "--format", "json").stdout)


def journal_written(host: Path):
    def ready(_lines: list[str]) -> bool:
        folder = host / "var/lib/exemplar-tune/journal"
        return folder.is_dir() and any(p.stat().st_size for p in folder.iterdir())
    return ready


def bench_started(tmp_path: Path, run: int):
    def ready(_lines: list[str]) -> bool:
        counter = tmp_path / "runs"
        return counter.exists() and counter.read_text() == str(run)
    return ready


PHASES = {
    "planning": lambda tmp_path, host: running("apply", check=True),
    "applying": lambda tmp_path, host: running("apply", check=False),
    "after the first journal entry": lambda tmp_path, host: journal_written(host),
    "benchmarking": lambda tmp_path, host: bench_started(tmp_path, 2),
    "restoring": lambda tmp_path, host: running("restore"),
}


def killed_at(tmp_path: Path, host: Path, phase: str) -> tuple[Watch, dict[str, tuple]]:
    """A measured run whose controller was SIGKILLed at ``phase``, and the host before it."""
    bench(tmp_path, slow_run=2 if phase == "benchmarking" else None)
    pristine = host_bytes(host)
    watch = Watch(start(tmp_path, host))
    watch.until(PHASES[phase](tmp_path, host))
    kill(watch)
    return watch, pristine


@pytest.mark.parametrize("phase", PHASES)
def test_sigkill_at_each_phase_then_rollback_restores_every_byte(tmp_path, host, phase):
    watch, pristine = killed_at(tmp_path, host, phase)
    assert show()["experiment"]["status"] == "running"  # its controller is dead
    out = cli("rollback", "--run", "latest")
    assert out.returncode == 0, out.stdout + out.stderr
    assert host_bytes(host) == pristine
    leftover = f"exemplar-run-{watch.proc.pid}-*"  # the dead run's private directories
    assert not list(Path(tempfile.gettempdir()).glob(leftover))
    assert show()["experiment"]["status"] == "rolled_back"
    assert "did not finish" not in cli("history").stderr


@pytest.mark.parametrize("phase", ["applying", "benchmarking"])
def test_sigkill_then_resume_finishes_the_experiment(tmp_path, host, phase):
    _, pristine = killed_at(tmp_path, host, phase)
    out = cli("resume")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = show()
    assert doc["experiment"]["status"] == "finished"
    assert doc["decisions"][-1]["action"] == "restore"  # a constant benchmark: no gain
    assert host_bytes(host) == pristine


def test_sigkill_while_a_module_runs_on_the_host_ends_it(tmp_path, host):
    """The module process of a killed controller's run (a slow host: its Python starts after
    30 s) ends with the controller instead of changing the host after it died."""
    bench(tmp_path)
    slow = tmp_path / "slow-python"
    slow.write_text(f"#!/bin/sh\nsleep 30\nexec {sys.executable} \"$@\"\n")
    slow.chmod(0o755)
    inventory = tmp_path / "cluster" / "inventory.yml"
    data = yaml.safe_load(inventory.read_text())
    data["all"]["vars"]["ansible_python_interpreter"] = str(slow)
    inventory.write_text(yaml.safe_dump(data))
    pristine = host_bytes(host)
    argv = [sys.executable, "-m", "exemplar_tune.cli", "apply", "--layer", "fabric", "-i",
            str(inventory), "--profile", str(tmp_path / "profile.yaml")]
    watch = Watch(subprocess.Popen(argv, env=dict(cli_env(), EXEMPLAR_TUNE_STATE_DIR=str(
        tmp_path / "state")), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    watch.until(lambda lines: any(line.startswith("sleep 30") or "sleep 30" in line
                                  for line in lines))
    kill(watch)
    time.sleep(30)  # when the module would have run
    assert host_bytes(host) == pristine
    assert not (host / "var/lib/exemplar-tune/journal").exists()


def other_controller(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with a state directory of its own: another user, ``sudo -E``, another
    machine's controller."""
    return subprocess.run([sys.executable, "-m", "exemplar_tune.cli", *args], text=True,
                          capture_output=True, timeout=300, env=dict(
                              cli_env(), EXEMPLAR_TUNE_STATE_DIR=str(tmp_path / "other")))


def test_a_controller_with_another_state_directory_waits_for_the_host(tmp_path, host):
    """Before, the lock held within one state directory: a second controller changed the
    host in the middle of the first one's measurement."""
    bench(tmp_path, slow_run=2)
    watch = Watch(start(tmp_path, host))
    watch.until(bench_started(tmp_path, 2))
    changes = host_bytes(host)
    holder = f"claimed by another exemplar-tune (pid {watch.proc.pid} on {os.uname().nodename}"
    target = ("--layer", "fabric", "--sysroot", str(host), "--profile",
              str(tmp_path / "profile.yaml"))
    plain = other_controller(tmp_path, "apply", *target)
    assert plain.returncode == 1 and f"node01: FAILED: /var/lib/exemplar-tune/claim.json: " \
        f"{holder}" in plain.stdout, plain.stdout + plain.stderr
    measured = other_controller(tmp_path, "apply", *target, "--bench",
                                str(tmp_path / "bench.yaml"))
    last = measured.stderr.splitlines()[-1]  # after the progress lines
    assert measured.returncode == 2 and last.startswith(
        f"exemplar-tune: error: node01: /var/lib/exemplar-tune/claim.json: {holder}"), last
    unlocked = other_controller(tmp_path, "unlock", "--sysroot", str(host))
    assert unlocked.returncode == 1 and "still runs here; stop it first" in unlocked.stdout
    assert host_bytes(host) == changes  # none of them changed a byte
    kill(watch)
    # the dead controller's claim is stale: the next controller on this machine takes it over
    after = other_controller(tmp_path, "rollback", "--run", "latest", "--ledger",
                             str(tmp_path / "state" / "ledger.sqlite3"))
    assert after.returncode == 0, after.stdout + after.stderr
    assert not (host / "var/lib/exemplar-tune/claim.json").exists()


def test_unlock_removes_the_claim_a_gone_machine_left(tmp_path, host):
    claim = host / "var/lib/exemplar-tune/claim.json"
    claim.parent.mkdir(parents=True)
    claim.write_text(json.dumps({"token": "x", "machine": "gone", "controller": "ctl9",
                                 "pid": 7, "created": 1.0, "command": "sweep",
                                 "started": "2026-12-05T07:00:00Z"}))
    target = ("--layer", "fabric", "--sysroot", str(host), "--profile",
              str(tmp_path / "profile.yaml"))
    assert cli("apply", *target).returncode == 1  # another machine's claim: kept
    shown = cli("unlock", "--sysroot", str(host), "--check")
    assert shown.stdout == "node01: would remove the claim of pid 7 on ctl9, 'sweep', since " \
        "2026-12-05T07:00:00Z\n" and claim.exists()
    assert cli("unlock", "--sysroot", str(host)).stdout.startswith("node01: removed the claim")
    assert not claim.exists()
    assert cli("apply", *target).returncode == 0


NOTHING_RECORDED = ("no ledger at ", "no experiment recorded yet in ")


@pytest.mark.parametrize("seed", [pytest.param(None, id="before-the-ledger"), 1, 2, 3])
def test_sigkill_at_a_random_time(tmp_path, host, seed):
    """Killed at a seeded random time (``before-the-ledger``: at once, while Python still
    starts): rollback restores every byte, or, where the kill came before the experiment was
    recorded (on a loaded machine a late start), finds nothing to roll back and the host is
    unchanged. Before, that case failed the test."""
    bench(tmp_path, seconds=1.5)  # the run lasts well beyond the latest kill time
    pristine = host_bytes(host)
    delay = 0.05 if seed is None else random.Random(seed).uniform(1.0, 12.0)
    watch = Watch(start(tmp_path, host))
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline and watch.proc.poll() is None:
        watch.poll()
        time.sleep(0.02)
    assert watch.proc.poll() is None, f"the run ended before {delay:.1f} s"
    kill(watch)
    out = cli("rollback", "--run", "latest")
    if out.returncode == 2 and out.stderr.startswith("exemplar-tune: error: ") and any(
            why in out.stderr for why in NOTHING_RECORDED):
        assert len(out.stderr.splitlines()) == 1, out.stderr
        assert host_bytes(host) == pristine, (delay, "changed before the experiment was recorded")
        return
    assert out.returncode == 0, (delay, out.stdout + out.stderr)
    assert host_bytes(host) == pristine, delay
    assert show()["experiment"]["status"] == "rolled_back"


def measuring(tmp_path: Path, host: Path) -> tuple[Watch, dict[str, tuple]]:
    """A measured run held in its first candidate benchmark (the layer applied), and the
    host as it was before."""
    bench(tmp_path, slow_run=2)
    pristine = host_bytes(host)
    watch = Watch(start(tmp_path, host))
    watch.until(bench_started(tmp_path, 2))
    return watch, pristine


def test_sigterm_restores_the_layer_records_it_and_resume_continues(tmp_path, host):
    watch, pristine = measuring(tmp_path, host)
    assert "NCCL_IB_QPS_PER_CONNECTION=4" in (host / "etc/nccl.conf").read_text()
    watch.proc.send_signal(signal.SIGTERM)
    out, err = watch.proc.communicate(timeout=120)
    assert watch.proc.returncode == 128 + signal.SIGTERM
    experiment = show()["experiment"]["id"]
    assert err.strip().splitlines()[-1] == (
        "exemplar-tune: error: interrupted (SIGTERM): the fabric layer was restored; "
        f"'exemplar-tune rollback --run {experiment}' puts back what it changed")
    assert "Traceback" not in err
    assert watch.left() == []
    assert host_bytes(host) == pristine
    doc = show()
    assert doc["experiment"]["status"] == "interrupted"
    assert doc["layers"][0]["status"] == "pending"
    assert any("interrupted by SIGTERM; the layer was restored" in e["message"]
               for e in doc["events"])
    out = cli("resume")
    assert out.returncode == 0, out.stdout + out.stderr
    assert show()["experiment"]["status"] == "finished"


def test_a_second_sigint_stops_at_once_and_leaves_it_resumable(tmp_path, host):
    watch, pristine = measuring(tmp_path, host)
    watch.proc.send_signal(signal.SIGINT)
    watch.until(running("restore"))
    watch.proc.send_signal(signal.SIGINT)
    out, err = watch.proc.communicate(timeout=60)
    assert watch.proc.returncode == 128 + signal.SIGINT
    assert "stopped at once (SIGINT)" in err and "Traceback" not in err
    assert watch.left() == []
    assert show()["experiment"]["status"] == "running"  # as it was: resume or rollback
    out = cli("rollback", "--run", "latest")
    assert out.returncode == 0, out.stdout + out.stderr
    assert host_bytes(host) == pristine


def test_every_changing_command_is_refused_while_a_run_holds_the_host(tmp_path, host):
    watch, _ = measuring(tmp_path, host)
    proc = watch.proc
    experiment = show()["experiment"]["id"]
    inventory = tmp_path / "cluster" / "inventory.yml"
    profile = str(tmp_path / "profile.yaml")
    attempts = {
        "absolute sysroot": cli("apply", "--layer", "fabric", "--sysroot", str(host),
                                "--profile", profile),
        "relative sysroot": cli("apply", "--layer", "cpu", "--sysroot", host.name,
                                "--profile", profile, cwd=host.parent),
        "inventory and limit": cli("apply", "--layer", "fabric", "-i", str(inventory),
                                   "--limit", "node01", "--profile", profile),
        "inventory, relative": cli("apply", "--layer", "fabric", "-i", "inventory.yml",
                                   "--profile", profile, cwd=inventory.parent),
        "tune": cli("tune", "-i", str(inventory), "--profile", profile, "--bench",
                    str(tmp_path / "bench.yaml")),
        "restore of the running experiment": cli("restore", "--run", experiment),
    }
    for what, out in attempts.items():
        assert out.returncode == 2, (what, out.stdout, out.stderr)
        assert f"pid {proc.pid} " in out.stderr, (what, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, (what, out.stderr)
    assert "NCCL_IB_QPS_PER_CONNECTION=4" in (host / "etc/nccl.conf").read_text()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    out = cli("apply", "--layer", "fabric", "--sysroot", str(host), "--profile", profile)
    assert out.returncode == 0, out.stderr  # free again


def test_a_bug_inside_the_loop_restores_the_layer(tmp_path, host, monkeypatch, capsys):
    """Any exception while measuring: the layer is restored, the experiment failed, one line
    names the error and the file with its traceback."""
    from exemplar_tune import cli as entry
    from exemplar_tune.orchestration import tune

    bench(tmp_path)
    pristine = host_bytes(host)
    applied = []

    def broken(value, higher_is_better):
        applied.append("NCCL_IB_QPS_PER_CONNECTION=4" in (host / "etc/nccl.conf").read_text())
        if len(applied) == 2:  # the first candidate run: the layer is applied
            raise RuntimeError("injected bug")
        return value

    monkeypatch.setattr(tune, "_time_like", broken)
    code = entry.main(["apply", "--layer", "fabric", "--sysroot", str(host), "--profile",
                       str(tmp_path / "profile.yaml"), "--bench", str(tmp_path / "bench.yaml")])
    assert applied == [False, True]
    assert code == 1
    assert host_bytes(host) == pristine
    doc = show()
    assert doc["experiment"]["status"] == "failed"
    reason = next(e["message"] for e in doc["events"] if "internal error" in e["message"])
    assert "RuntimeError: injected bug (traceback in " in reason
    trace = Path(reason.split("traceback in ")[1].split(")")[0])
    assert "raise RuntimeError" in trace.read_text()
    assert "fabric   FAILED   internal error: RuntimeError: injected bug" in \
        capsys.readouterr().out


@pytest.mark.parametrize("output, why", [
    ("[" * 100_000, "too deeply nested"),
    ("value: " + "9" * 5000, "output unparsable"),
])
def test_a_benchmark_output_that_breaks_a_parser_restores_the_layer(tmp_path, host, output,
                                                                     why):
    bench_path = bench(tmp_path, output=output)
    spec = yaml.safe_load(bench_path.read_text())
    if output.startswith("["):
        spec["shapes"][0].update(parser="json", path="0")
        spec["shapes"][0].pop("pattern")
    bench_path.write_text(yaml.safe_dump(spec))
    pristine = host_bytes(host)
    out = cli("apply", "--layer", "fabric", "--sysroot", str(host), "--profile",
              str(tmp_path / "profile.yaml"), "--bench", str(bench_path))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAILED   no measurement: benchmark dense: " in out.stdout and why in out.stdout
    assert "Traceback" not in out.stderr
    assert host_bytes(host) == pristine
    assert show()["experiment"]["status"] == "failed"


def test_sigkill_while_waiting_for_a_reboot_then_rollback(tmp_path, monkeypatch):
    """The vm layer changes the kernel command line and needs a reboot: kill the controller
    while the hosts reboot; rollback puts the boot configuration back byte for byte."""
    monkeypatch.setenv("EXEMPLAR_TUNE_STATE_DIR", str(tmp_path / "state"))
    create_cluster(tmp_path / "c", "gb300-exemplar-gap", hosts=1)
    host = tmp_path / "c" / "hosts" / "node01"
    pristine = host_bytes(host)
    argv = [sys.executable, "-m", "exemplar_tune.cli", "tune", "-i",
            str(tmp_path / "c" / "inventory.yml"), "--profile", str(tmp_path / "c/profile.yaml"),
            "--bench", str(tmp_path / "c/bench.yaml"), "--layer", "vm", "--allow-reboot"]
    watch = Watch(subprocess.Popen(argv, env=dict(cli_env(), EXEMPLAR_TUNE_STATE_DIR=str(
        tmp_path / "state")), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    watch.until(running("reboot"), timeout=300)
    kill(watch)
    out = cli("rollback", "--run", "latest")
    assert out.returncode == 0, out.stdout + out.stderr
    assert host_bytes(host) == pristine
    assert show()["experiment"]["status"] == "rolled_back"
