"""enroot system configuration and the pyxis SPANK plugin line: what containers receive.

enroot (``NVIDIA/enroot@8ea147d3:doc/configuration.md``, ``conf/*``):
``$ENROOT_SYSCONF_PATH`` (default ``/etc/enroot``) holds ``enroot.conf``,
``environ.d/*.env`` (``/etc/environment`` syntax, ``KEY=VALUE``; ``${VAR}`` references are
substituted by enroot from the host environment, kept verbatim here) and ``mounts.d/*.fstab``
(fstab syntax: ``source target fstype options [dump [passno]]``, fields may be omitted,
target relative to the container root). The container does **not** inherit the host
environment, so ``NCCL_TOPO_FILE`` and the file itself reach it only through these files
(or per-job options).

pyxis (``NVIDIA/pyxis@10751994:config.c``): a Slurm ``plugstack.conf``
(or ``plugstack.conf.d/*.conf``) line ``required|optional <path>/spank_pyxis.so [key=value ...]``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

DEFAULT_SYSCONF = "/etc/enroot"
ENROOT_BINARY = "/usr/bin/enroot"
PLUGSTACK = "/etc/slurm/plugstack.conf"
PLUGSTACK_DIR = "/etc/slurm/plugstack.conf.d"
PYXIS_SO = "spank_pyxis.so"
TOPO_KEY = "NCCL_TOPO_FILE"


def _content_lines(text: str) -> list[tuple[int, str]]:
    """``(number, stripped line)`` of the lines that are neither blank nor ``#`` comments."""
    lines = ((n, line.strip()) for n, line in enumerate(text.splitlines(), start=1))
    return [(n, line) for n, line in lines if line and not line.startswith("#")]


def parse_environ(text: str) -> list[dict[str, Any]]:
    """``environ.d`` entries ``[{"line", "key", "value"}]``; ``${VAR}`` kept verbatim.

    Lines without ``=`` are not assignments and are skipped; an ``export`` prefix is dropped.
    """
    entries = []
    for number, line in _content_lines(text):
        key, sep, value = line.partition("=")
        key = key.removeprefix("export ").strip()
        if sep and key:
            entries.append({"line": number, "key": key, "value": value})
    return entries


def parse_fstab(text: str) -> list[dict[str, Any]]:
    """``mounts.d`` entries ``[{"line", "source", "target", "fstype", "options"}]``.

    Omitted fields are ``None``; ``options`` is the comma-separated list (``[]`` if omitted).
    """
    entries = []
    for number, line in _content_lines(text):
        fields = line.split() + [None] * 4
        source, target, fstype, options = fields[:4]
        entries.append({"line": number, "source": source, "target": target,
                        "fstype": fstype, "options": options.split(",") if options else []})
    return entries


def parse_plugstack(text: str) -> list[dict[str, Any]]:
    """``plugstack.conf`` lines that load pyxis: ``[{"line", "kind", "plugin", "options"}]``.

    Text after ``#`` is a comment (so a commented-out pyxis line does not count); ``options``
    maps ``key=value`` arguments (a bare argument maps to ``None``).
    """
    found = []
    for number, raw in enumerate(text.splitlines(), start=1):
        words = raw.partition("#")[0].split()
        if len(words) < 2 or posixpath.basename(words[1]) != PYXIS_SO:
            continue
        options = dict(_option(word) for word in words[2:])
        found.append({"line": number, "kind": words[0], "plugin": words[1], "options": options})
    return found


def _option(word: str) -> tuple[str, str | None]:
    key, sep, value = word.partition("=")
    return key, value if sep else None


def sysconf_path(root: Sysroot) -> str:
    """``$ENROOT_SYSCONF_PATH`` of the reading environment, else ``/etc/enroot``."""
    return root.environ().get("ENROOT_SYSCONF_PATH") or DEFAULT_SYSCONF


def _read_dir(
    root: Sysroot, directory: str, suffix: str, parser: Callable[[str], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Entries of every ``*<suffix>`` file of ``directory`` (sorted, as enroot globs them)."""
    entries = []
    for name in root.listdir(directory):
        path = f"{directory}/{name}"
        if name.endswith(suffix) and not root.is_dir(path):
            text = root.read_text(path, strip=False)
            entries.extend({"file": path, **entry} for entry in parser(text))
    return entries


def covers(source: str | None, path: str) -> bool:
    """True when a bind of host ``source`` brings host file ``path`` into the container."""
    if not source or not source.startswith("/") or not path.startswith("/"):
        return False
    src, want = posixpath.normpath(source), posixpath.normpath(path)
    return want == src or (src != "/" and want.startswith(src + "/"))


def read_enroot(root: Sysroot, topo_paths: list[str]) -> dict[str, Any]:
    """enroot's system configuration and whether it carries the NCCL topology into containers.

    ``carries_topo_env``: an ``environ.d`` line sets ``NCCL_TOPO_FILE``; ``carries_topo_mount``:
    a ``mounts.d`` line binds one of ``topo_paths`` (or a directory holding it) from the host, or
    onto that path or the ``environ.d`` NCCL_TOPO_FILE value in the container.
    ``NotSupported`` when a listed file cannot be read.
    """
    base = sysconf_path(root).rstrip("/")
    conf = root.exists(f"{base}/enroot.conf")
    environ = _read_dir(root, f"{base}/environ.d", ".env", parse_environ)
    mounts = _read_dir(root, f"{base}/mounts.d", ".fstab", parse_fstab)
    env_topo = [e["value"] for e in environ if e["key"] == TOPO_KEY and "$" not in e["value"]]
    paths = topo_paths + env_topo
    return {
        "installed": conf or root.exists(ENROOT_BINARY),
        "sysconf_path": base,
        "conf_present": conf,
        "environ_d": environ,
        "mounts_d": mounts,
        "carries_topo_env": any(e["key"] == TOPO_KEY for e in environ),
        "carries_topo_mount": any(covers(m["source"], p) or covers(m["target"], p)
                                  for m in mounts for p in paths),
    }


def read_pyxis(root: Sysroot) -> dict[str, Any]:
    """pyxis lines in ``plugstack.conf`` and ``plugstack.conf.d/*.conf``; ``present`` if any."""
    files = [PLUGSTACK] + [f"{PLUGSTACK_DIR}/{name}" for name in root.listdir(PLUGSTACK_DIR)
                           if name.endswith(".conf")]
    lines = []
    for path in files:
        if root.exists(path) and not root.is_dir(path):
            text = root.read_text(path, strip=False)
            lines.extend({"file": path, **entry} for entry in parse_plugstack(text))
    return {"present": bool(lines), "plugstack_lines": lines}
