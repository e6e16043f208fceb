r"""Editing ``KEY=VALUE`` files while keeping every other byte as it was.

Three syntaxes:

* ``nccl`` -- NCCL's own rules for ``/etc/nccl.conf`` (``src/misc/param.cc``): ``KEY=VALUE``
  per line, ``#`` only at column 0, no whitespace trimming, the first definition wins.
* ``shell`` -- ``/etc/default/*`` and systemd ``EnvironmentFile=`` style: optional ``export``,
  values may be quoted, the last definition wins; values are written double-quoted with
  ``\``, ``"``, ``$`` and backquote escaped, so a shell that sources the file (and systemd,
  which honours the same escapes) reads the value literally: nothing in it is expanded or run.
* ``sysctl`` -- ``sysctl.d(5)``: ``key = value`` per line, blanks around ``=`` ignored, ``#``
  and ``;`` start comments, a leading ``-`` only silences errors, ``kernel/numa_balancing``
  names the same key as ``kernel.numa_balancing``, the last definition wins; values are
  written as ``key = value``.

Keys must be names and values one line (:func:`plan_env_file` refuses anything else), so no
value can add a line or change the file's syntax.

Setting a key rewrites only its effective line (or appends one); unsetting removes every line
that defines it. Comments, blank lines, other keys and line endings are kept byte for byte.
"""

from __future__ import annotations

import re
import shlex

from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import Change, FileChange
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import matching, one_line
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import NotSupported
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

SHELL_KEY = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")
KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
SYSCTL_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
KEYS = {"nccl": KEY, "shell": KEY, "sysctl": SYSCTL_KEY}
SHELL_SPECIAL = re.compile(r'([\\"$`])')
DOUBLE_QUOTED = re.compile(r'^"((?:[^"\\]|\\.)*)"\s*$')


def line_key(line: str, syntax: str) -> str | None:
    """The key a line defines, or ``None`` (comment, blank, no ``=``)."""
    body = line.rstrip("\r\n")
    if syntax == "sysctl":
        return sysctl_key(body)
    if syntax == "nccl":
        if body.startswith("#") or "=" not in body:
            return None
        return body.split("=", 1)[0]
    match = SHELL_KEY.match(body)
    return match.group(1) if match else None


def sysctl_key(body: str) -> str | None:
    """The key a ``sysctl.d`` line sets, in its dotted form; ``None`` for comments and blanks."""
    text = body.strip()
    if not text or text[0] in "#;" or "=" not in text:
        return None
    key = text.split("=", 1)[0].strip().removeprefix("-").strip().lstrip("/")
    if "/" in key.split(".", 1)[0]:  # the first separator is '/': '/' and '.' swap roles
        key = key.translate(str.maketrans("/.", "./"))
    return key or None


def render_line(key: str, value: str, syntax: str, newline: str) -> str:
    """One ``KEY=VALUE`` line in ``syntax``."""
    if syntax == "sysctl":
        return f"{key} = {value}{newline}"
    if syntax == "nccl":
        return f"{key}={value}{newline}"
    escaped = SHELL_SPECIAL.sub(r"\\\1", value)
    return f'{key}="{escaped}"{newline}'


def line_value(line: str, syntax: str) -> str:
    """The value a line assigns, as the file's reader sees it (shell: quotes removed)."""
    value = line.rstrip("\r\n").split("=", 1)[1]
    if syntax == "sysctl":
        return value.strip()
    quoted = DOUBLE_QUOTED.match(value) if syntax == "shell" else None
    if quoted:
        return re.sub(r'\\([\\"$`])', r"\1", quoted.group(1))
    if syntax == "shell":
        try:
            words = shlex.split(value)
        except ValueError:
            return value
        return " ".join(words)
    return value


def edit_text(text: str, settings: dict[str, str | None], syntax: str) -> str:
    """``text`` with each key set to its value (``None``: removed).

    A key whose effective line already assigns the value is left as written.
    """
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    for key, value in settings.items():
        where = [i for i, line in enumerate(lines) if line_key(line, syntax) == key]
        if value is None:
            lines = [line for i, line in enumerate(lines) if i not in where]
            continue
        new = render_line(key, value, syntax, newline)
        effective = (where[0] if syntax == "nccl" else where[-1]) if where else None
        if effective is not None and line_value(lines[effective], syntax) == value:
            continue
        if where:
            lines[effective] = new
        else:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += newline
            lines.append(new)
    return "".join(lines)


def plan_env_file(root: Sysroot, path: str, settings: dict[str, str | None],
                  syntax: str) -> list[Change]:
    """``path`` with ``settings`` set (``None``: removed), every other byte kept."""
    for key, value in settings.items():
        matching(key, KEYS[syntax], f"{path}: key")
        if value is not None:
            one_line(value, f"{path}: {key}")
    try:
        current = root.read_bytes(path)
    except NotSupported:
        current = None
    text = (current or b"").decode("utf-8", errors="surrogateescape")
    new = edit_text(text, settings, syntax)
    if current is None and not new:
        return []
    return [FileChange(path, new.encode("utf-8", errors="surrogateescape"),
                       root.file_mode(path) or 0o644)]
