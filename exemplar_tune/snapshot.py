"""``exemplar-tune snapshot``: capture what the readers need from the live host.

The capture runs every layer's gatherer on ``/`` with a recording :class:`Sysroot`, so the
archive holds exactly the files, directories and symlinks the readers touched (nothing else:
no whole ``/etc``, no secrets), plus the outputs of the known commands under
``.exemplar/commands/`` and a ``.exemplar/manifest.json``. Reading the archive back with
``--sysroot`` gives the same facts as the live host gave.
"""

from __future__ import annotations

import io
import json
import os
import socket
import tarfile
import time
from pathlib import Path

from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import NotSupported
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import (
    COMMANDS,
    COMMANDS_DIR,
    ENVIRONMENT_FILE,
    Sysroot,
    filter_environment,
    run_command,
)

from exemplar_tune import __version__
from exemplar_tune.errors import UserError
from exemplar_tune.inputs import output_file

MANIFEST = ".exemplar/manifest.json"
# Only these symlink targets are kept among the per-process fd links the readers scan.
KEPT_FD_TARGETS = ("/dev/cpu_dma_latency",)


def take_snapshot(output: Path) -> dict:
    """Write the archive to ``output`` (``.tar.gz``) and return its manifest."""
    recorded: set[str] = set()
    gather_facts(Sysroot("/", record=recorded))
    with _open_output(output) as tar:
        entries = _add_paths(tar, sorted(recorded))
        commands = _add_commands(tar)
        _add_bytes(tar, ENVIRONMENT_FILE, _environment_text())
        manifest = {
            "tool": "exemplar-tune", "version": __version__,
            "hostname": socket.gethostname(), "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                          time.gmtime()),
            "entries": entries, "commands": commands,
        }
        _add_bytes(tar, MANIFEST, json.dumps(manifest, indent=2).encode())
    return manifest


def _open_output(output: Path) -> tarfile.TarFile:
    if output.suffixes[-2:] != [".tar", ".gz"] and output.suffix != ".tgz":
        raise UserError(f"snapshot output {output} must end in .tar.gz or .tgz")
    try:
        return tarfile.open(output_file(output, "snapshot output"), "w:gz")
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror or exc}") from None


def _add_paths(tar: tarfile.TarFile, paths: list[str]) -> int:
    """Add each recorded host path, its symlinked components first; return the count added."""
    added: set[str] = set()
    for path in paths:
        for kind, name, payload in _materialize(path):
            if name not in added:
                added.add(name)
                _add_entry(tar, kind, name, payload)
    return len(added)


def _materialize(path: str) -> list[tuple[str, str, bytes | str | None]]:
    """Entries that reproduce ``path``: ("link", name, target), then ("file"|"dir", name, ...)."""
    entries: list[tuple[str, str, bytes | str | None]] = []
    current = "/"
    parts = path.strip("/").split("/")
    for index, part in enumerate(parts):
        step = os.path.join(current, part)
        if os.path.islink(step):
            target = os.readlink(step)
            if "/fd/" in step and target not in KEPT_FD_TARGETS:
                return []
            entries.append(("link", step, target))
            if index == len(parts) - 1 and ("/fd/" in step or not os.path.exists(step)):
                return entries
            current = os.path.realpath(step)
        else:
            current = step
    entries.extend(_content(current))
    return entries


def _content(path: str) -> list[tuple[str, str, bytes | str | None]]:
    if os.path.isdir(path):
        return [("dir", path, None)]
    try:
        # a device the readers read (/dev/cpu_dma_latency) is captured as its bytes
        return [("file", path, Sysroot("/").read_bytes(path, device=path.startswith("/dev/")))]
    except NotSupported:
        return []


def _add_entry(tar: tarfile.TarFile, kind: str, name: str, payload: bytes | str | None) -> None:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.mtime = int(time.time())
    if kind == "link":
        info.type, info.linkname = tarfile.SYMTYPE, str(payload)
        tar.addfile(info)
    elif kind == "dir":
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    else:
        _add_bytes(tar, name, payload if isinstance(payload, bytes) else b"")


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _add_commands(tar: tarfile.TarFile) -> dict[str, dict]:
    """Run every known command; store the output of those that exist (and the exit status
    and stderr of those that failed), report all of them."""
    report: dict[str, dict] = {}
    for name, argv in COMMANDS.items():
        try:
            out = run_command(argv)
        except Exception as exc:  # noqa: BLE001 - reported per command in the manifest
            report[name] = {"argv": argv, "captured": False, "error": str(exc)}
            continue
        report[name] = {"argv": argv, "captured": True, "rc": out.rc,
                        "stderr": out.stderr.strip()[:200]}
        if out.rc == 0 or out.stdout:
            _add_bytes(tar, f"{COMMANDS_DIR}/{name}", out.stdout.encode())
        if out.rc != 0:  # a failure is data too (nvidia-smi with a GPU off the bus)
            _add_bytes(tar, f"{COMMANDS_DIR}/{name}.rc", f"{out.rc}\n".encode())
            _add_bytes(tar, f"{COMMANDS_DIR}/{name}.stderr", out.stderr.encode())
    return report


def _environment_text() -> bytes:
    env = filter_environment(os.environ)
    return "".join(f"{key}={value}\n" for key, value in sorted(env.items())).encode()
