"""Small helpers shared by tests (no fixtures with hidden behaviour)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, SYSROOTS

FIXTURE_HOSTS = ("h100-x86", "healthy-h100", "gb200-grace-vm")


def copy_sysroot(name: str, dest: Path) -> Path:
    """A writable copy of fixture sysroot ``name`` (symlinks kept as symlinks)."""
    target = dest / name
    shutil.copytree(SYSROOTS / name, target, symlinks=True)
    return target


def captured_host(root: Path, outputs: dict[str, str | Path | None]) -> Path:
    """A sysroot at ``root`` holding only command outputs: each ``.exemplar/commands/<name>``
    is the text given, or a copy of the capture file given (``None``: left out)."""
    commands = root / ".exemplar" / "commands"
    commands.mkdir(parents=True)
    for name, output in outputs.items():
        if isinstance(output, Path):
            shutil.copyfile(output, commands / name)
        elif output is not None:
            (commands / name).write_text(output)
    return root


def tracked_tree(dest: Path) -> Path:
    """A copy at ``dest`` of the repository's tracked files only (no stale ``build/``, no
    untracked files): what a clean clone holds, to build a wheel from."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_symlink():
            target.symlink_to(os.readlink(REPO / name))
        elif (REPO / name).is_file():
            shutil.copy2(REPO / name, target)
    return dest


def run_ok(argv: list[str], env: dict[str, str], cwd: Path | None = None,
           timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``argv``; fail the test with the tail of its output unless it exits 0."""
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                         check=False)
    assert out.returncode == 0, f"{argv}: {out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return out


EXEMPLAR_STATE = "var/lib/exemplar-tune"  # the journals and the claim a change run keeps


def tree_hash(root: Path, without: str | None = None) -> str:
    """SHA-256 over every path, link target, file mode and content under ``root``; with
    ``without`` (a relative path), that directory, what is under it and the mere presence of
    its parents are left out (exemplar-tune's own state on a host: :data:`EXEMPLAR_STATE`)."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            if without and (rel == without or rel.startswith(without + "/")
                            or without.startswith(rel + "/")):
                continue
            digest.update(rel.encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode())
            elif path.is_file():
                digest.update(oct(path.stat().st_mode & 0o7777).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def tree_state(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its type, mode, owner, group, mtime and content or
    link target: what check mode must leave exactly as it was."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            info = path.lstat()
            body = os.readlink(path) if path.is_symlink() else (
                path.read_bytes() if path.is_file() else None)
            state[str(path.relative_to(root))] = (info.st_mode, info.st_uid, info.st_gid,
                                                  info.st_mtime_ns, body)
    return state


def cli_env() -> dict[str, str]:
    """Environment for running the exemplar-tune CLI of this venv as a subprocess."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = str(REPO)
    return env


def listed_statuses(results: list, listed: dict[str, str], profile: dict) -> dict[str, str]:
    """The statuses of the ``listed`` checks among ``results``; every other result must be a
    family knob's declared check, judged by the rule its siblings share
    (``tests/test_declared_checks.py``): not applicable while the profile sets no value. So a
    new declaration edits no hand-kept list of expected statuses."""
    from ansible_collections.exemplar.tune.plugins.module_utils.layers import registered_knobs

    knobs = {k.check_id: k for k in registered_knobs().values() if k.check}
    for r in results:
        if r.id in listed:
            continue
        assert r.id in knobs, f"{r.id}: a hand-written check missing from the list"
        knob = knobs[r.id]
        if knob.state.fact not in (profile.get(knob.layer) or {}):
            assert (r.status, r.klass) == ("skip", "not_applicable"), r.detail
    return {r.id: r.status for r in results if r.id in listed}
