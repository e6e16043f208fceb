"""Small helpers shared by tests (no fixtures with hidden behaviour)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from tests.conftest import REPO, SYSROOTS

FIXTURE_HOSTS = ("h100-x86", "healthy-h100", "gb200-grace-vm")


def copy_sysroot(name: str, dest: Path) -> Path:
    """A writable copy of fixture sysroot ``name`` (symlinks kept as symlinks)."""
    target = dest / name
    shutil.copytree(SYSROOTS / name, target, symlinks=True)
    return target


def tree_hash(root: Path) -> str:
    """SHA-256 over every path, link target, file mode and content under ``root``."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath, name)
            digest.update(str(path.relative_to(root)).encode())
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
