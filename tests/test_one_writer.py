"""One writer, one reader: what exemplar-tune writes, replaces or removes on a host never goes
through a link or onto a FIFO, socket, device or directory, a configurable destination only
ever replaces a file exemplar-tune made, nothing waits on a non-regular file, and a held lock
is waited for a bounded time, naming its holder.

Each case once wrote through a link, replaced a device node or /etc/passwd, or hung. They run
through the real CLI (and the layer engine for inventory settings) on fixture sysroot copies.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
    FileChange,
    apply_changes,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.engine import (
    LayerFailed,
    run_layer,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.journal import Journal
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import UnsafePath
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.helpers import cli_env, copy_sysroot

CLAIM = "var/lib/exemplar-tune/claim.json"
ROW = {"collective": "allgather", "min_bytes": 0, "max_bytes": 65536, "algorithm": "ring",
       "protocol": "ll128", "channels": -1, "nodes": 2, "ranks": -1}
SECRET = "root:$6$not-a-real-hash:19000:0:99999:7:::\n"
WAIT = 60  # seconds: any of these that takes longer has hung
SYSTEM = pytest.mark.system  # runs the real CLI and Ansible


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return copy_sysroot("h100-x86", tmp_path)


def run(tmp_path: Path, *args: str, lock_wait: str = "2") -> subprocess.CompletedProcess:
    """The CLI with its own state directory and a short lock wait."""
    env = dict(cli_env(), EXEMPLAR_TUNE_STATE_DIR=str(tmp_path / "state"),
               EXEMPLAR_TUNE_LOCK_WAIT=lock_wait)
    return subprocess.run([sys.executable, "-m", "exemplar_tune.cli", *args],
                          capture_output=True, text=True, env=env, check=False, timeout=WAIT)


def apply_fabric(tmp_path: Path, host: Path) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump({"name": "t", "fabric": {
        "nccl": {"NCCL_IB_QPS_PER_CONNECTION": "4"}}}))
    return run(tmp_path, "apply", "--layer", "fabric", "--sysroot", str(host), "--profile",
               str(profile))


def one_line_failure(out: subprocess.CompletedProcess, words: str) -> None:
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "Traceback" not in text, text
    assert any(words in line for line in text.splitlines()), text


def special(path: Path, kind: str) -> None:
    """Make a ``kind`` special file at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        with contextlib.chdir(path.parent):  # a socket's path is at most 107 bytes
            server.bind(path.name)
        server.close()
    else:  # a character device: the kernel's /dev/null
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))


# -- the claim ---------------------------------------------------------------------------------


@SYSTEM
@pytest.mark.parametrize("link", ["../../../etc/nccl.conf", "/etc/shadow"])
def test_a_claim_that_is_a_link_is_refused_and_its_target_left_alone(tmp_path, host, link):
    target = host / "etc" / Path(link).name
    target.write_text(SECRET)
    (host / CLAIM).parent.mkdir(parents=True)
    (host / CLAIM).symlink_to(link)
    applied = apply_fabric(tmp_path, host)
    one_line_failure(applied, "claim.json: is a symbolic link")
    unlocked = run(tmp_path, "unlock", "--sysroot", str(host))
    one_line_failure(unlocked, "claim.json: is a symbolic link")
    assert target.read_text() == SECRET and os.readlink(host / CLAIM) == link


@SYSTEM
@pytest.mark.parametrize("kind", ["FIFO", "directory", "socket"])
def test_a_claim_that_is_no_regular_file_fails_in_one_line_at_once(tmp_path, host, kind):
    special(host / CLAIM, kind)
    started = time.monotonic()
    one_line_failure(apply_fabric(tmp_path, host), f"claim.json: is a {kind}, not a claim")
    one_line_failure(run(tmp_path, "unlock", "--sysroot", str(host)), f"is a {kind}")
    assert time.monotonic() - started < WAIT
    assert (host / "etc/nccl.conf").read_text() == \
        (Path(__file__).parent / "fixtures/sysroots/h100-x86/etc/nccl.conf").read_text()


@SYSTEM
def test_a_held_claim_lock_is_waited_for_a_bounded_time_naming_its_holder(tmp_path, host):
    directory = host / CLAIM
    directory.parent.mkdir(parents=True)
    holder = subprocess.Popen(  # noqa: S603 - argv list
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
         "os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
         "time.sleep(120)", str(directory.parent)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        started = time.monotonic()
        applied = apply_fabric(tmp_path, host)
        waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    one_line_failure(applied, f"still locked after 2 s by pid {holder.pid} on "
                              f"{socket.gethostname()} ('{sys.executable} -c import fcntl")
    assert waited < WAIT and not (host / CLAIM).exists()


# -- files the layers write --------------------------------------------------------------------


def tuner(host: Path, path: str) -> None:
    root = Sysroot(str(host))
    run_layer(root, "fabric", {"fabric": {"nccl_tuner": [ROW]}},
              {"fabric_nccl_tuner_path": path}, Journal(root, "r1"), False, ["nccl_tuner"])


@pytest.mark.parametrize("kind", ["FIFO", "directory", "socket", "character device"])
def test_a_tuner_path_naming_a_special_file_is_refused_before_the_layer_changes(host, kind):
    special(host / "etc/node", kind)
    before = os.lstat(host / "etc/node")
    with pytest.raises(LayerFailed, match=f"/etc/node: is a {kind}, not a regular file: "
                                          ".*nothing was changed"):
        tuner(host, "/etc/node")
    after = os.lstat(host / "etc/node")
    assert (after.st_mode, after.st_ino, after.st_rdev) == \
        (before.st_mode, before.st_ino, before.st_rdev)
    assert not (host / "var/lib/exemplar-tune/journal").exists()


@pytest.mark.parametrize("existing", ["passwd", "a link"])
def test_a_tuner_path_naming_a_file_the_tool_did_not_make_is_refused(host, existing):
    (host / "etc/passwd").write_text(SECRET)
    if existing == "a link":
        (host / "etc/nccl_tuner.conf").symlink_to("/etc/passwd")
    path = "/etc/passwd" if existing == "passwd" else "/etc/nccl_tuner.conf"
    reason = "holds a file exemplar-tune did not create" if existing == "passwd" else \
        "is a symbolic link"
    with pytest.raises(LayerFailed, match=reason):
        tuner(host, path)
    assert (host / "etc/passwd").read_text() == SECRET


def test_the_tuner_table_the_tool_wrote_is_rewritten_by_the_next_run(host):
    tuner(host, "/etc/tuner/table.conf")  # absent: created, and the journal records it
    table = host / "etc/tuner/table.conf"
    table.write_text(table.read_text().replace("written by exemplar-tune", "edited"))
    tuner(host, "/etc/tuner/table.conf")  # not marked any more, but recorded: rewritten
    assert "written by exemplar-tune" in table.read_text()


@SYSTEM
def test_a_kernel_attribute_that_is_a_fifo_is_read_and_refused_without_waiting(tmp_path, host):
    governor = host / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
    governor.unlink()
    os.mkfifo(governor)
    facts = run(tmp_path, "facts", "--sysroot", str(host), "--layer", "cpu", "--format", "json")
    assert facts.returncode == 0, facts.stderr
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump({"name": "t", "cpu": {"governor": "performance"}}))
    applied = run(tmp_path, "apply", "--layer", "cpu", "--sysroot", str(host), "--profile",
                  str(profile))
    assert "Traceback" not in applied.stdout + applied.stderr
    assert stat.S_ISFIFO(os.lstat(governor).st_mode)


# -- the simulated cluster's bootloader helper -------------------------------------------------


def boot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exemplar_tune.sim.boot", *args],
                          capture_output=True, text=True, env=cli_env(), check=False,
                          timeout=WAIT)


def test_the_bootloader_helper_never_writes_through_a_link_out_of_the_tree(tmp_path, host):
    outside = tmp_path / "outside.cfg"
    outside.write_text("keep\n")
    (host / "boot/grub").mkdir(parents=True)
    (host / "boot/grub/grub.cfg").symlink_to(outside)  # absolute: inside the tree it is absent
    out = boot("--mkconfig", str(host))
    one_line_failure(out, "/boot/grub/grub.cfg: is a symbolic link")
    assert outside.read_text() == "keep\n"


def test_the_bootloader_helper_reads_the_defaults_inside_the_tree(tmp_path, host):
    outside = tmp_path / "grub"
    outside.write_text('GRUB_CMDLINE_LINUX="outside_the_tree=1"\n')
    (host / "etc/default/grub").unlink()
    (host / "etc/default/grub").symlink_to(outside)
    out = boot("--mkconfig", str(host))
    one_line_failure(out, "/etc/default/grub")
    assert not (host / "boot/grub/grub.cfg").exists() or \
        "outside_the_tree" not in (host / "boot/grub/grub.cfg").read_text()


@SYSTEM
def test_a_journal_directory_entry_that_is_a_link_is_never_written_through(tmp_path, host):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    state = host / "var/lib/exemplar-tune"
    state.mkdir(parents=True)
    (state / "journal").symlink_to(elsewhere)  # a directory link outside: resolved inside
    out = apply_fabric(tmp_path, host)
    assert out.returncode == 0, out.stdout + out.stderr
    assert list(elsewhere.iterdir()) == []
    assert list((host / str(elsewhere).lstrip("/")).iterdir())  # the journal, inside the tree


# -- the controller's ledger -------------------------------------------------------------------


@SYSTEM
def test_a_ledger_another_writer_holds_fails_in_one_line_naming_it(tmp_path, host):
    assert apply_fabric(tmp_path, host).returncode == 0
    ledger = tmp_path / "state/ledger.sqlite3"
    holder = subprocess.Popen(  # noqa: S603 - argv list
        [sys.executable, "-c", "import sqlite3, sys, time; db = sqlite3.connect(sys.argv[1], "
         "isolation_level=None); db.execute('BEGIN IMMEDIATE'); print('held', flush=True); "
         "time.sleep(120)", str(ledger)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        restored = run(tmp_path, "restore", "--run", "latest")
    finally:
        holder.kill()
        holder.wait()
    one_line_failure(restored, f"{ledger}: the ledger stayed locked for 2 s by pid {holder.pid} "
                               f"on {socket.gethostname()} ('{sys.executable} -c import sqlite3")


def test_an_own_file_is_refused_only_when_it_would_change(host):
    root, own = Sysroot(str(host)), host / "etc/generated.conf"
    own.write_bytes(b"same\n")  # neither marked nor recorded, but already as wanted
    result = apply_changes(root, [FileChange("etc/generated.conf", b"same\n", own=True)],
                           Journal(root, "r1"), "fabric", "k", check_mode=False)
    assert not result["changed"]
    with pytest.raises(UnsafePath, match="holds a file exemplar-tune did not create"):
        apply_changes(root, [FileChange("etc/generated.conf", b"other\n", own=True)],
                      Journal(root, "r2"), "fabric", "k", check_mode=False)
    assert own.read_bytes() == b"same\n"
