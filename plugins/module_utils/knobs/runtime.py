"""The runtime layer's knobs: the NCCL topology file, the NCCL configuration that names it,
and carrying both into every enroot/pyxis container."""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.changes import Change, FileChange
from ansible_collections.exemplar.tune.plugins.module_utils.envfile import plan_env_file
from ansible_collections.exemplar.tune.plugins.module_utils.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import (
    Knob,
    KnobInputError,
    Setting,
    Target,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.inputs import (
    FILE_NAME,
    clean_path,
    file_mode,
    matching,
)
from ansible_collections.exemplar.tune.plugins.module_utils.layer_runtime import SITE_TOPO_FILE
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot
from ansible_collections.exemplar.tune.plugins.module_utils.topo_xml import parse_topo_xml


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
        changes.append(FileChange(path, content.encode(), mode))
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
    if path is None or not _in_containers(target):
        return []
    sysconf = clean_path((target.facts.get("enroot") or {}).get("sysconf_path") or "/etc/enroot",
                         "enroot sysconf path")
    environ = matching(target.settings["runtime_enroot_environ_name"], FILE_NAME,
                       "runtime_enroot_environ_name")
    mount = matching(target.settings["runtime_enroot_mount_name"], FILE_NAME,
                     "runtime_enroot_mount_name")
    return [FileChange(f"{sysconf}/environ.d/{environ}", f"NCCL_TOPO_FILE={path}\n".encode()),
            FileChange(f"{sysconf}/mounts.d/{mount}",
                       f"{path} {path} none x-create=file,bind,ro,nosuid,nodev,noexec,"
                       "private\n".encode())]


TOPO_FILE = {"nccl_topo_file": {
    "type": ["string", "null"], "default": SITE_TOPO_FILE,
    "pattern": "^/(?!.*//)(?!(.*/)?\\.\\.?(/|$))[^\\s\\x00-\\x1f\\x7f]*[^/\\s\\x00-\\x1f\\x7f]$",
    "description": "path NCCL_TOPO_FILE must name, or null when the platform needs none"}}
IN_CONTAINER = {"require_in_container": {
    "type": "boolean", "default": True,
    "description": "the topology file and variable must reach the job container"}}
TOPO_OVERRIDES = {"runtime_nccl_topo_file": "nccl_topo_file",
                  "runtime_require_in_container": "require_in_container"}
ROLE_SUMMARY = ("Give every job, on the host and in its container, the right NCCL topology "
                "file")
ROLE_NOTES = ("Every change is journaled under the run id and put back by "
              "C(tasks_from=restore).",)
ROLE_OPTIONS = {
    "runtime_topo_source": {
        "type": "str", "default": "",
        "description": "Controller-side topology file installed at C(runtime_nccl_topo_file) "
                       "(read with the C(ansible.builtin.file) lookup; a relative path is "
                       "searched in the role and playbook directories). Defaults to the "
                       "profile's C(runtime.topo_source). Set it as a host variable when hosts "
                       "need different files. Empty - keep the file already on the host, or "
                       "fail when there is none."},
    "runtime_topo_template": {
        "type": "str", "default": "",
        "description": "Controller-side Jinja template rendered per host "
                       "(C(ansible.builtin.template) lookup, with the host's variables) and "
                       "installed instead of C(runtime_topo_source)."},
}

KNOBS: tuple[Knob, ...] = (
    Knob("runtime", "nccl_conf", "remove stale NCCL_TOPO_FILE / NCCL_GRAPH_FILE lines",
         plan_nccl_conf, TOPO_FILE, {"runtime_nccl_topo_file": "nccl_topo_file"},
         facts=("runtime.nccl_conf_topo_keys",),
         doc="C(nccl_conf) removes C(NCCL_TOPO_FILE) lines that name another file than the "
             "profile's, and C(NCCL_GRAPH_FILE) lines that name a missing file, from the NCCL "
             "configuration files (NVIDIA/nccl#1008), keeping every other line byte for byte."),
    Knob("runtime", "topo_file", "install the NCCL topology file and name it in nccl.conf",
         plan_topo_file, {**TOPO_FILE, **IN_CONTAINER}, TOPO_OVERRIDES,
         (Setting("runtime_topo_content", "", "Topology XML to install; normally rendered from "
                  "C(runtime_topo_template) or read from C(runtime_topo_source) on the "
                  "controller. When set, it wins over both. Empty - keep the host's file, "
                  "which must exist and be valid."),
          Setting("runtime_topo_mode", "0644", "Permission bits of the installed topology "
                  "file."),
          Setting("runtime_topo_in_nccl_conf", True,
                  "Also set C(NCCL_TOPO_FILE) to C(runtime_nccl_topo_file) in "
                  "C(runtime_nccl_conf_path), so jobs that run on the host read the file too. "
                  "Skipped where enroot is installed and C(runtime_require_in_container) is on "
                  "- the enroot entries carry it instead."),
          Setting("runtime_nccl_conf_path", "/etc/nccl.conf",
                  "The system-wide NCCL configuration file.")),
         facts=("runtime.enroot",),
         doc="C(topo_file) installs the topology file the profile names "
             "(C(runtime.nccl_topo_file)) from a controller-side source, after checking that "
             "NCCL would accept it (a C(<system version=\"1\">) topology, parsed safely), and "
             "points C(NCCL_TOPO_FILE) at it in C(/etc/nccl.conf). With no source, a file "
             "already on the host is left as it is; a host without one fails."),
    Knob("runtime", "enroot_topo", "carry NCCL_TOPO_FILE and the file into every enroot "
         "container", plan_enroot_topo, {**TOPO_FILE, **IN_CONTAINER}, TOPO_OVERRIDES,
         (Setting("runtime_enroot_environ_name", "50-nccl.env",
                  "File name in enroot's C(environ.d) holding C(NCCL_TOPO_FILE=<file>)."),
          Setting("runtime_enroot_mount_name", "50-nccl-topo.fstab",
                  "File name in enroot's C(mounts.d) holding the read-only bind of the file.")),
         facts=("runtime.enroot",),
         doc="C(enroot_topo) writes C(environ.d/50-nccl.env) and C(mounts.d/50-nccl-topo.fstab) "
             "when enroot is installed, so every enroot and pyxis container gets the variable "
             "and the file; where pyxis is loaded it also prints the per-job "
             "C(--container-mounts)/C(--container-env) alternative."),
)
