"""One verdict, every channel: eight host states, each read through the seven channels an
operator acts on (terminal text, JSON, Prometheus, node-problem-detector, the Slurm prolog,
``offenders`` and the printed hints), all agreeing on the host's class and first action.

:data:`STATES` is the one table every channel's test reads. Each state is a real host tree
(a copy of the ``healthy-h100`` fixture, changed the way the state says: a real Xid 79 line,
a pending row remap in nvidia-smi's XML, the kernel's numa_balancing switch), a Grace VM tree
with a boot-time change applied through the CLI and waiting for its reboot, an empty tree, or
an inventory host that cannot be reached, and a real KVM guest without GPUs. Every channel
runs the real CLI.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest
import yaml

from exemplar_tune.json_schemas import schema
from tests.helpers import cli_env, copy_sysroot
from tests.realhosts import unpack
from tests.test_cli import cli

pytestmark = pytest.mark.system  # a CLI run per state and channel (about a minute)

# A real line: leptonai/gpud README's Xid 79 sample (tests/fixtures/realworld/kernel-log/
# leptonai-gpud-sxid-readme-xid79-fallen-off-bus-sxid20034.log), its bus id changed to the
# tree's GPU 0 (0000:a4:00.0) and its time to this boot's.
XID79 = ("[ 6781.548779] NVRM: Xid (PCI:0000:a4:00): 79, pid='<unknown>', name=<unknown>, "
         "GPU has fallen off the bus.\n")


@dataclass(frozen=True)
class State:
    """A host state and what every channel must say of it."""

    name: str
    klass: str  # the host's verdict class
    action: str  # the kind of its first action
    layers: tuple[str, ...] = ()  # preflight --layer (none: every layer)
    profile: str = "h100-x86"
    pending: bool = False


STATES = (
    State("healthy", "ok", "none"),
    State("untuned", "tuning", "apply"),
    State("xid79", "health", "reboot"),
    State("remap-pending", "health", "reset_gpu"),
    State("vm-no-gpu", "not_applicable", "none", layers=("gpu",), profile="generic"),
    State("empty", "unknown", "investigate"),
    State("pending-reboot", "tuning", "reboot", layers=("vm",), profile="gb200-grace",
          pending=True),
    State("unreachable", "unknown", "investigate"),
)
IDS = [s.name for s in STATES]
NPD_EXIT = {"health": 1, "unknown": 2}  # every other class is OK to node-problem-detector
PROLOG_EXIT = {"health": 1, "unknown": 2}  # drained; every other class lets the job start


def _remap_pending(root: Path) -> None:
    xml = root / ".exemplar/commands/nvidia-smi-q-x.xml"
    text = xml.read_text()
    xml.write_text(text.replace("<remapped_row_pending>No</remapped_row_pending>",
                                "<remapped_row_pending>Yes</remapped_row_pending>", 1))


def _xid79(root: Path) -> None:
    dmesg = root / ".exemplar/commands/dmesg.txt"
    dmesg.write_text(dmesg.read_text() + XID79)


def _untuned(root: Path) -> None:
    """C6 turned off by the OS on every CPU (a tuning preference of the profile, a knob)."""
    for disable in root.glob("sys/devices/system/cpu/cpu[0-9]*/cpuidle/state3/disable"):
        disable.write_text("1\n")


def _pending_reboot(root: Path) -> None:
    """The Grace guest booted with CMDQV turned off, then ``apply --layer vm`` (which
    edits the bootloader's defaults: the change waits for the next boot)."""
    for rel in ("etc/default/grub", "proc/cmdline"):
        path = root / rel
        path.write_text(path.read_text().replace(
            "init_on_alloc=0", "init_on_alloc=0 arm_smmu_v3.disable_cmdqv=1"))
    out = cli("apply", "--layer", "vm", "--sysroot", str(root), "--profile", "gb200-grace",
              "--quiet")
    assert out.returncode == 0 and "REBOOT REQUIRED" in out.stdout, out.stdout + out.stderr


BUILD = {"healthy": ("healthy-h100", None), "untuned": ("healthy-h100", _untuned),
         "xid79": ("healthy-h100", _xid79), "remap-pending": ("healthy-h100", _remap_pending),
         "pending-reboot": ("gb200-grace-vm", _pending_reboot)}
# a real KVM guest without GPUs, as exemplar-tune snapshot captured it (tests/realhosts.py)
REAL = {"vm-no-gpu": "snapshot-kvm-haltpoll"}


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Per state the options that select its host (``--sysroot DIR`` or ``-i INVENTORY``)."""
    base = tmp_path_factory.mktemp("states")
    found = {}
    for state in STATES:
        if state.name == "unreachable":
            inventory = base / "unreachable.yml"
            inventory.write_text(yaml.safe_dump({"all": {"hosts": {"gone": {
                "ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ssh",
                "ansible_ssh_common_args": "-o ConnectTimeout=3"}}}}))
            found[state.name] = ["-i", str(inventory)]
            continue
        root = base / state.name
        if state.name == "empty":
            root.mkdir()
        elif state.name in REAL:
            unpack(REAL[state.name], base / "real").rename(root)
        else:
            tree, change = BUILD[state.name]
            copy_sysroot(tree, base / "copies")
            (base / "copies" / tree).rename(root)
            if change:
                change(root)
        found[state.name] = ["--sysroot", str(root)]
    return found


def _preflight(hosts: dict, state: State, *args: str) -> subprocess.CompletedProcess[str]:
    layers = [a for layer in state.layers for a in ("--layer", layer)]
    return cli("preflight", *hosts[state.name], "--profile", state.profile, *layers,
               "--quiet", *args)


def _verdict(hosts: dict, state: State) -> dict:
    out = _preflight(hosts, state, "--format", "json")
    doc = json.loads(out.stdout)
    (verdict,) = doc["verdicts"].values()
    return verdict


@pytest.mark.parametrize("state", STATES, ids=IDS)
def test_json(hosts: dict, state: State) -> None:
    out = _preflight(hosts, state, "--format", "json")
    doc = json.loads(out.stdout)
    jsonschema.validate(doc, schema("preflight"))
    (verdict,) = doc["verdicts"].values()
    assert (verdict["class"], verdict["actions"][0]["kind"]) == (state.klass, state.action), \
        verdict
    assert verdict["pending_reboot"] is state.pending
    assert out.returncode == (0 if state.klass in ("ok", "not_applicable") else 1)


@pytest.mark.parametrize("state", STATES, ids=IDS)
def test_text(hosts: dict, state: State) -> None:
    out = _preflight(hosts, state, "--format", "table")
    head = out.stdout.splitlines()[0]
    assert re.search(rf"1 host\(s\): 1 {state.klass};", head), head
    for word in ("fail", "warn", "pass", "n/a", "unknown"):
        assert re.search(rf"\d+ {re.escape(word)}\b", head.split("checks:")[1]), head
    section = re.search(r"^### \S+: \S+ \(([a-z_]+)(, pending reboot)?\)", out.stdout, re.M)
    assert section and section.group(1) == state.klass, out.stdout
    assert bool(section.group(2)) is state.pending
    first = re.search(r"^  next: ([a-z_]+)", out.stdout, re.M)
    assert first and first.group(1) == state.action, out.stdout


@pytest.mark.parametrize("state", STATES, ids=IDS)
def test_prometheus(hosts: dict, state: State) -> None:
    text = _preflight(hosts, state, "--format", "prometheus").stdout
    (line,) = [x for x in text.splitlines() if x.startswith("exemplar_tune_host_verdict{")]
    assert f'class="{state.klass}"' in line and f'action="{state.action}"' in line, line
    assert f'pending_reboot="{str(state.pending).lower()}"' in line
    for check in (x for x in text.splitlines() if x.startswith("exemplar_tune_check_status{")):
        assert re.search(r'class="(health|tuning)"', check), check


@pytest.mark.parametrize("state", STATES, ids=IDS)
def test_node_problem_detector(hosts: dict, state: State) -> None:
    out = _preflight(hosts, state, "--format", "npd")
    assert out.returncode == NPD_EXIT.get(state.klass, 0), out.stdout + out.stderr
    line = out.stdout.rstrip("\n")
    assert "\n" not in line and line.startswith(f"{state.klass}: "), line
    assert state.action == "none" or line.endswith(f"next: {state.action}"), line


@pytest.mark.parametrize("state", STATES, ids=IDS)
def test_slurm_prolog(hosts: dict, state: State, tmp_path: Path) -> None:
    """The prolog reads its own node: the unreachable state is a node tree it cannot read."""
    where = hosts[state.name] if state.name != "unreachable" else [
        "--sysroot", str(tmp_path / "not-there")]
    layers = [a for layer in state.layers for a in ("--layer", layer)]
    env = {**cli_env(), "SLURMD_NODENAME": "", "SLURM_JOB_ID": "7"}
    out = subprocess.run([*_exemplar(), "preflight", "--slurm-prolog", *where, "--profile",
                          state.profile, *layers], capture_output=True, text=True, env=env,
                         check=False, timeout=300)
    assert out.returncode == PROLOG_EXIT.get(state.klass, 0), out.stdout + out.stderr
    drained = re.search(r"Reason=exemplar:([a-z_-]+)", out.stdout)
    if state.klass in PROLOG_EXIT:
        assert drained and drained.group(1) == state.klass, out.stdout
    else:
        assert not drained, out.stdout


def _exemplar() -> list[str]:
    return [str(Path(sys.executable).with_name("exemplar-tune"))]


@pytest.mark.parametrize("state", STATES, ids=IDS)
def test_offenders(hosts: dict, state: State, tmp_path: Path) -> None:
    """Three recorded preflights: only a broken node is a repeat offender."""
    ledger = tmp_path / "ledger.db"
    for _ in range(3):
        _preflight(hosts, state, "--record", "--ledger", str(ledger), "--format", "json")
    out = cli("offenders", "--ledger", str(ledger), "--format", "json")
    found = json.loads(out.stdout)["offenders"]
    assert bool(found) is (state.klass == "health"), found
    assert all(group["class"] == "health" for group in found)
    assert out.returncode == (1 if found else 0)


@pytest.mark.parametrize("state", [s for s in STATES if s.action in ("apply", "investigate")],
                         ids=lambda s: s.name)
def test_the_printed_hint_runs_as_printed(hosts: dict, state: State) -> None:
    """The first action's command runs as printed; an apply then leaves the host ok."""
    verdict = _verdict(hosts, state)
    command = verdict["actions"][0]["command"]
    argv = shlex.split(command)
    assert argv[0] == "exemplar-tune"
    out = subprocess.run([*_exemplar(), *argv[1:], "--quiet"], capture_output=True, text=True,
                         env=cli_env(), check=False, timeout=300)
    assert "usage:" not in out.stderr and "no host matched" not in out.stderr, out.stderr
    if state.action == "apply":
        assert out.returncode == 0, out.stdout + out.stderr
        assert _verdict(hosts, state)["class"] == "ok"
