"""Look inside the job container: what NCCL there sees of the topology file and its settings.

The host facts say what the host has; enroot clears the environment and mounts only what
``mounts.d`` lists, so a job can lose ``NCCL_TOPO_FILE`` or the file
itself, and NCCL then only logs ``Could not open XML topology file`` at INFO and auto-detects
(§5.2). :func:`probe_container` starts the user's launcher (``srun --container-image=...``,
``enroot start ...``) with our own constant POSIX-sh :data:`SCRIPT` as its command, as an
argv list, and parses what the script prints; :func:`compare_container` judges the result
against the host facts. The preflight stores the probe under ``facts["runtime"]["container"]``.

Output format of :data:`SCRIPT`: one record per line, each starting with ``@xt `` (other
lines, such as launcher chatter, are ignored), ``@xt begin 1`` first and ``@xt end`` last::

    @xt env NCCL_IB_HCA=mlx5_0        every exported NCCL_* variable (one line per variable)
    @xt conf /etc/nccl.conf exists    or "absent"; for $NCCL_CONF_FILE or $HOME/.nccl.conf too
    @xt confline /etc/nccl.conf NCCL_X=1    every line of that file (NCCL's own syntax)
    @xt topo_path /etc/nccl/topo.xml  effective NCCL_TOPO_FILE (empty when unset)
    @xt topo_source environment       or the configuration file that set it
    @xt topo_kind file                file | dir | other | none
    @xt topo_readable 1               0 or 1
    @xt topo_head <system version="1">      the first lines of the file (at most 16)
    @xt python Python 3.10.12         or "-" when python3 is absent
    @xt slurm SLURM_JOB_ID=12         the job's SLURM_JOB_ID, SLURM_STEP_ID, SLURMD_NODENAME,
                                      SLURM_JOB_NODELIST, SLURM_STEP_GPUS, SLURM_JOB_GPUS,
                                      CUDA_VISIBLE_DEVICES (each when set)
    @xt cpus_allowed 0-3,8-11         Cpus_allowed_list of /proc/self/status: the job's cpuset
    @xt cgroup 0::/system.slice/...   every line of /proc/self/cgroup

Run through ``srun -N1 -w NODE [--container-image=IMG]`` the probe is inside the allocation:
its cpuset and cgroup are the job step's, which the placement checks compare with the NUMA
nodes of the job's GPUs (``SLURM_STEP_GPUS``/``SLURM_JOB_GPUS`` are GPU minor numbers).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess  # argv lists only, never a shell string built from input
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.nccl_conf import (
    effective_settings,
    parse_nccl_conf,
)

MARK = "@xt "
SYSTEM_CONF = "/etc/nccl.conf"
HEAD_CHARS = 4096
_NAME = re.compile(r"^NCCL_[A-Za-z0-9_]*$")
_JOB_CGROUP = re.compile(r"/job_(\d+)(?:/|$)")
_SLURM_VARS = ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURMD_NODENAME", "SLURM_JOB_NODELIST",
               "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")
_SYSTEM_V1 = re.compile(r"<system\b[^>]*\bversion\s*=\s*([\"'])1\1")

# Builtins only (plus python3 when present): minimal images may lack cat, sed, head, env.
SCRIPT = r"""
set -f
CR=$(printf '\r')
p() { printf '@xt %s\n' "$*"; }
p begin 1
for line in $(export -p | while IFS= read -r l; do
        l=${l#export }; l=${l#declare -x }
        case $l in NCCL_*) printf '%s\n' "${l%%=*}" ;; esac
    done); do
    case $line in *[!A-Za-z0-9_]*) continue ;; esac
    eval "[ -n \"\${$line+x}\" ]" || continue
    eval "v=\${$line}"
    p "env $line=$v"
done
T=${NCCL_TOPO_FILE-}; S=
[ -n "${NCCL_TOPO_FILE+x}" ] && S=environment
U=${NCCL_CONF_FILE:-${HOME:-/root}/.nccl.conf}
for f in "$U" /etc/nccl.conf; do
    if [ -f "$f" ] && [ -r "$f" ]; then
        p "conf $f exists"
        while IFS= read -r l || [ -n "$l" ]; do
            l=${l%"$CR"}
            p "confline $f $l"
            case $l in NCCL_TOPO_FILE=*) [ -z "$S" ] && T=${l#NCCL_TOPO_FILE=} && S=$f ;; esac
        done < "$f"
    else
        p "conf $f absent"
    fi
done
p "topo_path $T"
p "topo_source $S"
if [ -z "$T" ]; then k=none
elif [ -f "$T" ]; then k=file
elif [ -d "$T" ]; then k=dir
elif [ -e "$T" ]; then k=other
else k=none; fi
p "topo_kind $k"
if [ "$k" = file ] && [ -r "$T" ]; then
    p "topo_readable 1"
    n=0
    while [ "$n" -lt 16 ] && { IFS= read -r l || [ -n "$l" ]; }; do
        p "topo_head ${l%"$CR"}"; n=$((n + 1))
    done < "$T"
else
    p "topo_readable 0"
fi
if command -v python3 >/dev/null 2>&1; then
    v=$(python3 --version 2>&1) || v=-
    p "python ${v:--}"
else
    p "python -"
fi
for sv in SLURM_JOB_ID SLURM_STEP_ID SLURMD_NODENAME SLURM_JOB_NODELIST SLURM_STEP_GPUS \
          SLURM_JOB_GPUS CUDA_VISIBLE_DEVICES; do
    eval "[ -n \"\${$sv+x}\" ]" || continue
    eval "sw=\${$sv}"
    p "slurm $sv=$sw"
done
if [ -r /proc/self/status ]; then
    while IFS= read -r l || [ -n "$l" ]; do
        case $l in Cpus_allowed_list:*) p "cpus_allowed ${l#Cpus_allowed_list:}" ;; esac
    done < /proc/self/status
fi
if [ -r /proc/self/cgroup ]; then
    while IFS= read -r l || [ -n "$l" ]; do p "cgroup $l"; done < /proc/self/cgroup
fi
p end
"""


def probe_container(launcher: str, timeout: float = 120) -> dict[str, Any]:
    """Run :data:`SCRIPT` through ``launcher`` and parse it; never raises.

    ``launcher`` is split with :func:`shlex.split` and ``["/bin/sh", "-c", SCRIPT]`` is
    appended. A launcher that cannot be parsed, is not found, exits non-zero, times out or
    prints no complete probe output gives ``ok: False`` and a one-line ``error``.
    """
    try:
        argv = shlex.split(launcher)
    except ValueError as exc:
        return _failed(launcher, f"cannot parse the launcher: {exc}")
    if not argv:
        return _failed(launcher, "empty launcher")
    code, out, err = _run([*argv, "/bin/sh", "-c", SCRIPT], timeout)
    if isinstance(code, str):
        return _failed(launcher, code)
    if code != 0:
        return _failed(launcher, f"launcher exited {code}{_last_line(err or out)}")
    result = parse_probe_output(out)
    if not result.pop("complete"):
        return _failed(launcher, "no complete probe output (is /bin/sh in the container?)"
                       + _last_line(err))
    return {"launcher": launcher, "ok": True, "error": None, **result}


def _run(argv: list[str], timeout: float) -> tuple[int | str, str, str]:
    """``(exit code, stdout, stderr)``, or ``(one-line error, "", "")`` when it did not run."""
    try:
        proc = subprocess.Popen(  # argv list; the only command text is our SCRIPT
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
    except FileNotFoundError:
        return f"launcher not found: {argv[0]}", "", ""
    except OSError as exc:
        return f"cannot start the launcher {argv[0]}: {exc.strerror or exc}", "", ""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return f"launcher timed out after {timeout:g} s", "", ""
    return proc.returncode, _text(out), _text(err)


def _kill_group(proc: subprocess.Popen) -> None:
    """End the launcher's own process group (it was started in a new session) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f": {lines[-1][:200]}" if lines else ""


def _failed(launcher: str, error: str) -> dict[str, Any]:
    return {"launcher": launcher, "ok": False, "error": " ".join(error.split()), "env": {},
            "topo_file": None, "nccl_conf": {}, "python": None}


def parse_probe_output(text: str) -> dict[str, Any]:
    """``{complete, env, topo_file, nccl_conf, python}`` from the lines :data:`SCRIPT` prints.

    Lines without the ``@xt`` mark are ignored; ``complete`` says both begin and end were seen.
    ``nccl_conf`` maps each configuration path (NCCL precedence order) to its entries in
    ``nccl_conf.parse_nccl_conf`` form, or ``None`` when absent, as the host facts do.
    """
    records = [line[len(MARK):] for line in text.splitlines() if line.startswith(MARK)]
    env: dict[str, str] = {}
    conf: dict[str, list[str] | None] = {}
    topo: dict[str, Any] = {"path": None, "source": None, "kind": "none", "head": []}
    seen, python = set(), None
    job: dict[str, Any] = {"slurm": {}, "cpus_allowed": None, "cgroup": []}
    for record in records:
        kind, _, rest = record.partition(" ")
        seen.add(kind)
        if kind == "env":
            name, sep, value = rest.partition("=")
            if sep and _NAME.match(name):
                env[name] = value
        elif kind in ("conf", "confline"):
            _conf_record(conf, kind, rest)
        elif kind in ("topo_path", "topo_source", "topo_kind", "topo_readable"):
            topo[kind.removeprefix("topo_")] = rest
        elif kind == "topo_head":
            topo["head"].append(rest)
        elif kind == "python":
            python = None if rest in ("", "-") else rest
        elif kind in ("slurm", "cpus_allowed", "cgroup"):
            _job_record(job, kind, rest)
    nccl_conf = {path: None if lines is None else parse_nccl_conf("\n".join(lines))
                 for path, lines in conf.items()}
    return {"complete": {"begin", "end"} <= seen, "env": env,
            "topo_file": _topo_summary(topo), "nccl_conf": nccl_conf, "python": python,
            "job": _job_summary(job)}


def _job_record(job: dict[str, Any], kind: str, rest: str) -> None:
    """Record one ``slurm NAME=VALUE``, ``cpus_allowed LIST`` or ``cgroup LINE`` line."""
    if kind == "slurm":
        name, sep, value = rest.partition("=")
        if sep and name in _SLURM_VARS:
            job["slurm"][name] = value
    elif kind == "cpus_allowed":
        job["cpus_allowed"] = rest.strip() or None
    else:
        job["cgroup"].append(rest)


def _job_summary(job: dict[str, Any]) -> dict[str, Any]:
    """``{id, node, gpus, cpus_allowed, cgroup, slurm}`` of the job the probe ran in.

    ``id`` is ``SLURM_JOB_ID``, else the ``job_<id>`` of the cgroup path; ``gpus`` the GPU
    minor numbers of ``SLURM_STEP_GPUS`` (else ``SLURM_JOB_GPUS``), None when unknown.
    """
    slurm = job["slurm"]
    found = (_JOB_CGROUP.search(line) for line in job["cgroup"])
    from_cgroup = next((m.group(1) for m in found if m), None)
    gpus = slurm.get("SLURM_STEP_GPUS", slurm.get("SLURM_JOB_GPUS"))
    items = [g.strip() for g in gpus.split(",")] if gpus else None
    return {"id": slurm.get("SLURM_JOB_ID") or from_cgroup,
            "node": slurm.get("SLURMD_NODENAME"),
            "gpus": [int(g) for g in items if g.isdigit()] if items else None,
            "cpus_allowed": job["cpus_allowed"], "cgroup": job["cgroup"], "slurm": slurm}


def _conf_record(conf: dict[str, list[str] | None], kind: str, rest: str) -> None:
    """Record ``conf <path> exists|absent`` or ``confline <path> <line>`` (paths have no space)."""
    path, _, value = rest.partition(" ")
    if kind == "conf":
        conf[path] = [] if value == "exists" else None
    elif conf.get(path) is not None:
        conf[path].append(value)


def _topo_summary(topo: dict[str, Any]) -> dict[str, Any]:
    head = "\n".join(topo["head"])[:HEAD_CHARS]
    readable = topo.get("readable") == "1"
    return {
        "path": topo["path"] or None,
        "source": topo["source"] or None,
        "exists": topo["kind"] != "none",
        "readable": readable,
        "looks_valid": readable and bool(_SYSTEM_V1.search(head)),
        "head": head,
    }


def container_settings(probe: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The NCCL settings the container's NCCL sees (environment > user file > /etc/nccl.conf)."""
    return effective_settings(probe.get("env") or {}, probe.get("nccl_conf") or {})


def compare_container(host_runtime_facts: dict[str, Any], probe: dict[str, Any],
                      expected: str | None = None) -> dict[str, Any]:
    """Inside versus host: ``{ok, expected, host, container, problems}``.

    ``expected`` is the path the job's NCCL_TOPO_FILE must name (the profile's), defaulting to
    the host's effective NCCL_TOPO_FILE. ``ok`` is ``None`` when the probe did not run (nothing
    to judge), ``False`` when the variable or the file does not reach the container intact.
    """
    host_topo = (host_runtime_facts or {}).get("nccl_topo_file") or {}
    host = {"value": host_topo.get("value"), "readable": host_topo.get("readable")}
    expected = expected or host["value"]
    if not probe.get("ok"):
        return {"ok": None, "expected": expected, "host": host, "container": None,
                "problems": [], "error": probe.get("error") or "probe did not run"}
    inside = probe.get("topo_file") or {}
    container = {key: inside.get(key) for key in ("path", "source", "exists", "readable",
                                                  "looks_valid")}
    problems = _problems(expected, host, container)
    return {"ok": not problems, "expected": expected, "host": host, "container": container,
            "problems": problems, "error": None}


def _problems(expected: str | None, host: dict[str, Any], inside: dict[str, Any]) -> list[str]:
    path = inside["path"]
    if not expected and not path:
        return []
    if not path:
        where = f"the host has {host['value']}" if host["value"] else "the profile wants it"
        return [f"NCCL_TOPO_FILE is not set inside the container ({where})"]
    problems = []
    if expected and path != expected:
        problems.append(f"inside, NCCL_TOPO_FILE={path} (from {inside['source']}), "
                        f"expected {expected}")
    if not inside["exists"]:
        problems.append(f"{path} does not exist inside the container (not mounted)")
    elif not inside["readable"]:
        problems.append(f"{path} is not a readable file inside the container")
    elif not inside["looks_valid"]:
        problems.append(f'{path} inside does not start like an NCCL topology '
                        f'(<system version="1">)')
    return problems
