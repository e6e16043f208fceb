"""How the runtime layer's knobs plan: the NCCL topology file, the NCCL configuration that
names it, and carrying both into every enroot/pyxis container (declared in
``knobs/runtime.py``). Carrying them into containers does not apply (``NotApplicable``) to a
host without enroot."""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.runtime import SITE_TOPO_FILE
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import (
    KnobInputError,
    Target,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import Change, FileChange
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.envfile import plan_env_file
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import (
    FILE_NAME,
    clean_path,
    file_mode,
    matching,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.enroot import ENROOT_BINARY
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotApplicable,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.topo_xml import parse_topo_xml
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


def topo_path(target: Target) -> str | None:
    """The file NCCL_TOPO_FILE must name (``None``: the platform needs none)."""
    value = target.want.get("nccl_topo_file", SITE_TOPO_FILE)
    return None if value in (None, "") else clean_path(value, "runtime.nccl_topo_file")


def _in_containers(target: Target) -> bool:
    enroot = target.facts.get("enroot") or {}
    return bool(enroot.get("installed")) and bool(target.want.get("require_in_container", True))


def checked_topology(content: str, path: str, refusal: str = "refusing to install") -> None:
    """Refuse a topology that is not a valid NCCL ``<system>`` (nothing is written)."""
    try:
        parsed = parse_topo_xml(content, f"topology for {path}")
    except HostStateError as exc:
        raise KnobInputError(path, f"{refusal}: {exc.reason}") from None
    if not parsed["valid"]:
        raise KnobInputError(path, f"{refusal}: {parsed['error']}")


def plan_topo_file(root: Sysroot, target: Target) -> list[Change]:
    """Install the topology file (validated) and name it in the system NCCL configuration
    (left alone where enroot carries it into every container)."""
    path = topo_path(target)
    if path is None:
        return []
    content = target.settings["runtime_topo_content"]
    mode = file_mode(target.settings["runtime_topo_mode"], "runtime_topo_mode")
    changes: list[Change] = []
    if content:
        checked_topology(content, path)
        changes.append(FileChange(path, content.encode(), mode, own=True))
    elif not root.exists(path):
        raise KnobInputError(path, "absent on this host and no topology was given: set "
                             "runtime_topo_source (or the profile's runtime.topo_source)")
    else:
        # the host's own file must be a topology too, wherever the setting comes from
        checked_topology(root.read_text(path, strip=False), path,
                         "the host's file is not a valid topology (give runtime_topo_source)")
    if target.settings["runtime_topo_in_nccl_conf"] and not _in_containers(target):
        conf = clean_path(target.settings["runtime_nccl_conf_path"], "runtime_nccl_conf_path")
        changes += plan_env_file(root, conf, {"NCCL_TOPO_FILE": path}, "nccl")
    return changes


def stale_lines(root: Sysroot, target: Target) -> list[dict[str, Any]]:
    """NCCL_TOPO_FILE lines naming another file, NCCL_GRAPH_FILE lines naming no regular file."""
    path = topo_path(target)
    return [line for line in target.facts.get("nccl_conf_topo_keys") or []
            if (line["key"] == "NCCL_TOPO_FILE" and line["value"] != path)
            or (line["key"] == "NCCL_GRAPH_FILE" and not _regular(root, line["value"]))]


def _regular(root: Sysroot, path: str) -> bool:
    return root.exists(path) and not root.is_dir(path)


def plan_nccl_conf(root: Sysroot, target: Target) -> list[Change]:
    """Remove the stale NCCL_TOPO_FILE / NCCL_GRAPH_FILE lines from the NCCL configuration."""
    changes: list[Change] = []
    stale = stale_lines(root, target)
    for conf in dict.fromkeys(line["file"] for line in stale):
        keys = dict.fromkeys(line["key"] for line in stale if line["file"] == conf)
        changes += plan_env_file(root, conf, dict.fromkeys(keys), "nccl")
    return changes


def plan_enroot_topo(root: Sysroot, target: Target) -> list[Change]:
    """enroot ``environ.d`` and ``mounts.d`` entries that carry NCCL_TOPO_FILE and its file
    into every container (pyxis jobs included)."""
    path = topo_path(target)
    if path is None or not target.want.get("require_in_container", True):
        return []
    enroot = target.facts.get("enroot")
    sysconf = clean_path((enroot or {}).get("sysconf_path") or "/etc/enroot",
                         "enroot sysconf path")
    if isinstance(enroot, dict) and not enroot.get("installed"):
        raise NotApplicable(root.display(f"{sysconf}/enroot.conf"), f"not present, nor "
                            f"{ENROOT_BINARY}: enroot is not installed, no enroot container to "
                            "carry NCCL_TOPO_FILE into")
    if not _in_containers(target):
        return []  # enroot's state unknown (its facts could not be read)
    environ = matching(target.settings["runtime_enroot_environ_name"], FILE_NAME,
                       "runtime_enroot_environ_name")
    mount = matching(target.settings["runtime_enroot_mount_name"], FILE_NAME,
                     "runtime_enroot_mount_name")
    return [FileChange(f"{sysconf}/environ.d/{environ}", f"NCCL_TOPO_FILE={path}\n".encode(),
                       own=True),
            FileChange(f"{sysconf}/mounts.d/{mount}",
                       f"{path} {path} none x-create=file,bind,ro,nosuid,nodev,noexec,"
                       "private\n".encode(), own=True)]
