"""NCCL configuration files (``$HOME/.nccl.conf`` or ``$NCCL_CONF_FILE``, ``/etc/nccl.conf``).

Format and precedence as NCCL implements them (``NVIDIA/nccl@5067397c:src/misc/param.cc``
``setEnvFile``/``initEnv``, ``docs/userguide/source/env.rst``):

* one ``KEY=VALUE`` per line; a trailing ``\\n`` or ``\\r\\n`` is stripped;
* a line whose first character is ``#`` is a comment (only at column 0);
* **no whitespace trimming**: ``NCCL_DEBUG = INFO`` defines ``"NCCL_DEBUG "`` = ``" INFO"``;
* a line without ``=`` is ignored; key and value are truncated at 1023 characters;
* values are applied with ``setenv(key, value, 0)`` (never overwrite), so the first definition
  wins: real environment > ``$NCCL_CONF_FILE`` (when set and non-empty, NCCL >= 2.23) or else
  ``$HOME/.nccl.conf`` > ``/etc/nccl.conf``; inside one file the first line of a key wins.

The environment is the reading process's (``Sysroot.environ()``): on a live host the
ansible/exemplar process, in a bundle ``.exemplar/commands/environment.txt``.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

SYSTEM_CONF = "/etc/nccl.conf"
USER_CONF_NAME = ".nccl.conf"
DEFAULT_HOME = "/root"
MAX_LEN = 1023
ENVIRONMENT = "environment"


def parse_nccl_conf(text: str) -> list[dict[str, Any]]:
    """Entries of one nccl.conf, in file order: ``[{"line": 1, "key": k, "value": v}, ...]``.

    Keys and values are kept byte for byte (no trimming) as NCCL keeps them. Empty keys are
    dropped (``setenv("")`` fails). Never raises: NCCL accepts any text.
    """
    entries: list[dict[str, Any]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if line.endswith("\r"):
            line = line[:-1]
        key, sep, value = line.partition("=")
        if not sep or key.startswith("#") or not key:
            continue
        entries.append({"line": number, "key": key[:MAX_LEN], "value": value[:MAX_LEN]})
    return entries


def user_conf_path(env: dict[str, str]) -> str:
    """The file NCCL reads before ``/etc/nccl.conf``: ``$NCCL_CONF_FILE`` or ``$HOME/.nccl.conf``.

    ``HOME`` defaults to ``/root`` (the facts are gathered as root) when the environment lacks it.
    """
    conf_file = env.get("NCCL_CONF_FILE", "")
    if conf_file:
        return conf_file
    home = env.get("HOME") or DEFAULT_HOME
    return home.rstrip("/") + "/" + USER_CONF_NAME


def conf_paths(env: dict[str, str]) -> list[str]:
    """Configuration files in NCCL's precedence order (highest first)."""
    return [user_conf_path(env), SYSTEM_CONF]


def effective_settings(
    env: dict[str, str], files: dict[str, list[dict[str, Any]] | None]
) -> dict[str, dict[str, str]]:
    """``{key: {"value", "source"}}`` as NCCL would see them (first definition wins).

    ``env`` contributes its ``NCCL_*`` variables (source ``"environment"``); ``files`` maps
    each path, in precedence order, to its entries (``None`` when the file is absent).
    """
    settings = {
        key: {"value": value, "source": ENVIRONMENT}
        for key, value in sorted(env.items()) if key.startswith("NCCL_")
    }
    for path, entries in files.items():
        for entry in entries or []:
            settings.setdefault(entry["key"], {"value": entry["value"], "source": path})
    return settings


def suspicious_keys(files: dict[str, list[dict[str, Any]] | None]) -> list[dict[str, Any]]:
    """Entries whose key has leading/trailing whitespace: NCCL defines a different variable."""
    found = []
    for path, entries in files.items():
        for entry in entries or []:
            if entry["key"] != entry["key"].strip():
                found.append({"path": path, "line": entry["line"], "key": entry["key"],
                              "meant": entry["key"].strip()})
    return found


def read_conf_file(root: Sysroot, path: str) -> list[dict[str, Any]] | None:
    """Entries of one configuration file, or ``None`` when it is absent (NCCL skips it)."""
    if not root.exists(path) or root.is_dir(path):
        return None
    return parse_nccl_conf(root.read_text(path, strip=False))


def read_nccl_config(root: Sysroot, errors: list[HostStateError] | None = None) -> dict[str, Any]:
    """NCCL's view of its settings: ``effective``, raw ``files`` and ``suspicious_keys``.

    ``files`` maps each configuration path (precedence order) to its entries, or ``None``
    when absent. A file that exists but cannot be read is also ``None``, and its error is
    appended to ``errors`` (the other file and the environment still count).
    """
    env = root.environ()
    files: dict[str, list[dict[str, Any]] | None] = {}
    for path in conf_paths(env):
        try:
            files[path] = read_conf_file(root, path)
        except HostStateError as exc:
            files[path] = None
            if errors is not None:
                errors.append(exc)
    return {
        "effective": effective_settings(env, files),
        "files": files,
        "suspicious_keys": suspicious_keys(files),
    }
