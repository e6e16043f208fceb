"""runtime-layer facts: which NCCL topology file jobs get, on the host and in containers.

Combines ``nccl_conf`` (NCCL_TOPO_FILE from the environment or the NCCL configuration files),
``topo_xml`` (the file's content) and ``enroot`` (environ.d/mounts.d, pyxis plugstack lines).
The topology file's GPUs and NICs are compared with ``/sys/bus/pci/devices/<BDF>``. The file
is read wherever the setting comes from: the host's (``nccl_topo_file``) and the one enroot's
environ.d gives every container (``enroot_topo_file``: the host file behind it, through the
mounts.d bind that holds it, else the same path).
"""

from __future__ import annotations

import posixpath
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers.enroot import (
    PLUGSTACK,
    PLUGSTACK_DIR,
    TOPO_KEY,
    covers,
    read_enroot,
    read_pyxis,
    sysconf_path,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.nccl_conf import (
    ENVIRONMENT,
    conf_paths,
    read_nccl_config,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.topo_xml import read_topo_file
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

SITE_TOPO_FILE = "/etc/nccl/topo.xml"
NCCL_DEFAULT_TOPO_FILE = "/var/run/nvidia-topologyd/virtualTopology.xml"
DEFAULT_TOPO_FILES = (SITE_TOPO_FILE, NCCL_DEFAULT_TOPO_FILE)
PCI_DEVICES = "/sys/bus/pci/devices"
TOPO_KEYS = ("NCCL_TOPO_FILE", "NCCL_GRAPH_FILE")


def missing_on_host(root: Sysroot, bdfs: list[str] | None) -> list[str] | None:
    """The BDFs that have no ``/sys/bus/pci/devices/<BDF>`` on this host."""
    if bdfs is None:
        return None
    return [bdf for bdf in bdfs if not root.exists(f"{PCI_DEVICES}/{bdf}")]


def _readable(root: Sysroot, path: str) -> bool:
    try:
        root.read_bytes(path, limit=1)
    except HostStateError:
        return False
    return True


def topo_file_fact(root: Sysroot, setting: dict[str, str] | None) -> dict[str, Any]:
    """``nccl_topo_file``: the effective NCCL_TOPO_FILE, whether it is there and what it holds.

    An empty value names no file (NCCL fails to open it). A relative path is looked up from
    ``/`` (the job's working directory is not known here).
    """
    value = setting["value"] if setting else None
    exists = bool(value) and root.exists(value)
    readable = exists and not root.is_dir(value) and _readable(root, value)
    parse = read_topo_file(root, value) if readable else None
    return {
        "value": value,
        "source": setting["source"] if setting else None,
        "exists": exists,
        "readable": readable,
        "parse": parse,
        "gpus_missing_on_host": missing_on_host(root, parse["gpus"]) if parse else None,
        "nics_missing_on_host": missing_on_host(root, parse["nics"]) if parse else None,
    }


def host_path_of(mounts: list[dict[str, Any]], path: str) -> str:
    """The host file behind container ``path``: the first mounts.d bind whose target holds it
    (a bind with no target mounts its source at the same path), else ``path`` itself."""
    for mount in mounts:
        source, target = mount.get("source"), mount.get("target") or mount.get("source")
        if source and source.startswith("/") and covers(target, path):
            rest = posixpath.relpath(posixpath.normpath(path), posixpath.normpath(target))
            return posixpath.normpath(posixpath.join(source, rest)) if rest != "." else source
    return path


def enroot_topo_fact(root: Sysroot, enroot: dict[str, Any] | None) -> dict[str, Any] | None:
    """``enroot_topo_file``: the NCCL_TOPO_FILE an enroot environ.d line gives containers and
    the host file behind it, read like the host's own (:func:`topo_file_fact`; ``host_path``).
    ``None`` when no environ.d line sets it; a value with ``${VAR}`` or a relative path is
    kept with ``host_path: None`` (not resolvable here)."""
    entry = next((e for e in (enroot or {}).get("environ_d") or [] if e["key"] == TOPO_KEY),
                 None)
    if entry is None:
        return None
    value = entry["value"]
    if "$" in value or not value.startswith("/"):
        return {**topo_file_fact(root, None), "value": value, "source": entry["file"],
                "host_path": None}
    host = host_path_of((enroot or {}).get("mounts_d") or [], value)
    fact = topo_file_fact(root, {"value": host, "source": entry["file"]})
    return {**fact, "value": value, "host_path": host}


def conf_topo_keys(files: dict[str, list[dict[str, Any]] | None]) -> list[dict[str, Any]]:
    """NCCL_TOPO_FILE / NCCL_GRAPH_FILE lines in the NCCL configuration files (stale ones too)."""
    return [
        {"key": entry["key"], "value": entry["value"], "file": path, "line": entry["line"]}
        for path, entries in files.items() for entry in entries or []
        if entry["key"].strip() in TOPO_KEYS
    ]


def _nccl_facts(root: Sysroot, sheet: FactSheet) -> str | None:
    """Put the NCCL-side facts; return the host topology path enroot should carry, if any."""
    conf_sources = [ENVIRONMENT, *conf_paths(root.environ())]
    errors: list[HostStateError] = []
    conf = read_nccl_config(root, errors)
    for exc in errors:
        sheet.error("nccl_topo_file", exc)
    setting = conf["effective"].get("NCCL_TOPO_FILE")
    topo = sheet.put("nccl_topo_file", topo_file_fact(root, setting),
                     [*conf_sources, *([setting["value"]] if setting else []), PCI_DEVICES])
    sheet.put("default_topo_files", {path: root.exists(path) for path in DEFAULT_TOPO_FILES},
              list(DEFAULT_TOPO_FILES))
    sheet.put("nccl_conf_topo_keys", conf_topo_keys(conf["files"]), conf_sources[1:])
    value = topo["value"]
    return value if value and value.startswith("/") else None


def gather(root: Sysroot) -> dict[str, Any]:
    """Facts of the runtime layer (see module docstring)."""
    sheet = FactSheet()
    host_topo = _nccl_facts(root, sheet)
    topo_paths = list(dict.fromkeys([p for p in (host_topo, SITE_TOPO_FILE) if p]))
    base = sysconf_path(root).rstrip("/")
    enroot = sheet.attempt("enroot", f"{base}/enroot.conf, {base}/environ.d, {base}/mounts.d",
                           read_enroot, root, topo_paths)
    carried = sheet.put("enroot_topo_file", enroot_topo_fact(root, enroot),
                        [f"{base}/environ.d", f"{base}/mounts.d"])
    if carried and carried["host_path"]:
        sheet.sources["enroot_topo_file"] += f", {carried['host_path']}, {PCI_DEVICES}"
    sheet.attempt("pyxis", f"{PLUGSTACK}, {PLUGSTACK_DIR}", read_pyxis, root)
    return sheet.result()
