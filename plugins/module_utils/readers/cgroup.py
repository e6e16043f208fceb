"""cgroup cpusets: which CPUs the housekeeping units, Slurm jobs and the root may use.

Files: ``Documentation/admin-guide/cgroup-v2.rst`` (``cpuset.cpus``, ``cpuset.cpus.effective``
under ``/sys/fs/cgroup/<path>/``) and ``Documentation/admin-guide/cgroup-v1/cpusets.rst``
(``/sys/fs/cgroup/cpuset/<path>/cpuset.cpus`` and ``cpuset.effective_cpus``, without the
``cpuset.`` prefix when mounted ``noprefix``). The version is decided from files:
``/sys/fs/cgroup/cgroup.controllers`` -> v2; ``/sys/fs/cgroup/unified`` next to v1 hierarchies
-> hybrid; v1 hierarchies only -> v1. Slurm job cgroups (Slurm ``cgroup_v2.html``):
``<slice>/slurmstepd.scope/job_<id>/step_<n>/`` (v2) and ``cpuset/slurm/uid_<uid>/job_<id>/``
(v1).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpulist import (
    format_cpulist,
    parse_cpulist,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import NotSupported
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

CGROUP = "sys/fs/cgroup"
HOUSEKEEPING_UNITS = ("system.slice", "user.slice", "init.scope")
SLURM_SCOPE = "slurmstepd.scope"
V1_FILES = (("cpuset.cpus", "cpuset.effective_cpus"), ("cpus", "effective_cpus"))
V2_FILES = ("cpuset.cpus", "cpuset.cpus.effective")


def detect_version(root: Sysroot) -> str:
    """``"v2"``, ``"hybrid"`` or ``"v1"``; ``NotSupported`` when no hierarchy is mounted."""
    if root.exists(f"{CGROUP}/cgroup.controllers"):
        return "v2"
    v1 = [name for name in root.listdir(CGROUP)
          if name != "unified" and root.exists(f"{CGROUP}/{name}/cgroup.procs")]
    if v1 and root.exists(f"{CGROUP}/unified/cgroup.controllers"):
        return "hybrid"
    if v1:
        return "v1"
    raise NotSupported(root.display(CGROUP), "no cgroup hierarchy mounted")


def cpuset_base(root: Sysroot, version: str) -> tuple[str, str]:
    """(directory of the cpuset hierarchy, ``"v1"`` or ``"v2"`` interface) for ``version``.

    On a hybrid host the cpuset controller is on the v1 ``cpuset`` hierarchy unless the
    ``unified`` hierarchy lists it in its ``cgroup.controllers``.
    """
    if version == "v2":
        return CGROUP, "v2"
    if version == "hybrid":
        controllers = (root.read_optional(f"{CGROUP}/unified/cgroup.controllers") or "").split()
        if "cpuset" in controllers:
            return f"{CGROUP}/unified", "v2"
    return f"{CGROUP}/cpuset", "v1"


def _read_cpus(root: Sysroot, rel: str) -> str | None:
    text = root.read_optional(rel)
    return None if text is None else format_cpulist(parse_cpulist(text, root.display(rel)))


def read_cpuset(root: Sysroot, base: str, interface: str, path: str = "") -> dict[str, Any] | None:
    """``{"path", "cpus", "effective"}`` of cgroup ``path``; ``None`` when it does not exist.

    ``cpus`` is the requested list (``""`` = inherit from the parent; ``None`` when the file
    is absent, as at the v2 root), ``effective`` what its tasks really get; both canonical.
    """
    rel = f"{base}/{path}".rstrip("/")
    if not root.is_dir(rel):
        return None
    pairs = (V2_FILES,) if interface == "v2" else V1_FILES
    names = next((p for p in pairs if root.exists(f"{rel}/{p[1]}")), pairs[0])
    return {
        "path": root.display(rel),
        "cpus": _read_cpus(root, f"{rel}/{names[0]}"),
        "effective": _read_cpus(root, f"{rel}/{names[1]}"),
    }


def read_cgroup(root: Sysroot) -> dict[str, Any]:
    """Version, where the cpuset hierarchy is, and the root cpuset."""
    version = detect_version(root)
    base, interface = cpuset_base(root, version)
    return {
        "version": version,
        "cpuset_hierarchy": root.display(base),
        "cpuset_interface": interface,
        "root": read_cpuset(root, base, interface),
    }


def slurm_job_dirs(root: Sysroot, base: str, interface: str) -> list[str]:
    """Paths (relative to ``base``) of Slurm job cgroups, in name order."""
    if interface == "v2":
        parents = [f"{top}/{SLURM_SCOPE}" for top in root.listdir(base)
                   if root.is_dir(f"{base}/{top}/{SLURM_SCOPE}")]
    else:
        parents = [f"slurm/{uid}" for uid in root.listdir(f"{base}/slurm")
                   if uid.startswith("uid_")]
    return [f"{parent}/{job}" for parent in parents
            for job in root.listdir(f"{base}/{parent}") if job.startswith("job_")]


def read_slurm_jobs(root: Sysroot) -> list[dict[str, Any]]:
    """Every Slurm job cgroup with its cpuset and its steps' cpusets; ``[]`` when none."""
    base, interface = cpuset_base(root, detect_version(root))
    jobs = []
    for path in slurm_job_dirs(root, base, interface):
        job = read_cpuset(root, base, interface, path) or {}
        steps = {name: read_cpuset(root, base, interface, f"{path}/{name}")
                 for name in root.listdir(f"{base}/{path}") if name.startswith("step_")}
        job_id = path.rsplit("/job_", 1)[1]
        jobs.append({"job_id": int(job_id) if job_id.isdigit() else job_id, **job,
                     "steps": steps})
    return jobs


def read_unit_cpuset(root: Sysroot, unit: str) -> dict[str, Any] | None:
    """Cpuset of a top-level systemd unit (``system.slice`` ...); ``None`` when absent."""
    base, interface = cpuset_base(root, detect_version(root))
    return read_cpuset(root, base, interface, unit)
