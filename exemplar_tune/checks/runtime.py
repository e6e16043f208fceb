"""runtime-layer checks: the NCCL topology file, on the host and inside the job container.

NCCL never fails on a bad ``NCCL_TOPO_FILE``: an unreadable file is only an INFO line
(``Could not open XML topology file``) and NCCL auto-detects instead;
enroot clears the environment and mounts only what ``mounts.d`` lists (§6.1). The file is
judged by its content wherever the setting comes from: the host environment or nccl.conf
(``nccl_topo_file``), enroot's environ.d (``enroot_topo_file``), or inside the container
(the probe).
"""

from __future__ import annotations

from typing import Any

from exemplar_tune.checks.base import (
    FAIL,
    PASS,
    SKIP,
    WARN,
    Facts,
    Outcome,
    Profile,
    check,
    not_applicable,
    source,
    unknown,
    why_unknown,
)
from exemplar_tune.probe import compare_container

TOPO_KEY = "NCCL_TOPO_FILE"
GRAPH_KEY = "NCCL_GRAPH_FILE"
SILENT = 'NCCL only logs "Could not open XML topology file" at INFO and auto-detects'


def _expectations(profile: Profile) -> dict[str, Any]:
    return profile.get("runtime") or {}


def _unread(facts: Facts, key: str) -> str:
    return why_unknown(facts, "runtime", key)


def _enroot_topo(runtime: dict[str, Any]) -> dict[str, Any] | None:
    """The ``environ.d`` line that sets NCCL_TOPO_FILE for every enroot container, if any."""
    entries = ((runtime.get("enroot") or {}).get("environ_d")) or []
    return next((e for e in entries if e.get("key") == TOPO_KEY), None)


@check("runtime.topo-file",
       hand="the variable, the file and its content together",
       severity="high",
       title="NCCL_TOPO_FILE names the profile's topology file, present and matching this host",
       risk="NCCL silently auto-detects a wrong topology: 13-53 % slower collectives, no error",
       fix="install the topology file and set NCCL_TOPO_FILE to it (runtime.topo_file)",
       knob="runtime.topo_file")
def check_topo_file(facts: Facts, profile: Profile) -> Outcome:
    """The effective NCCL_TOPO_FILE (environment, nccl.conf, or enroot for container jobs)."""
    expected_section = _expectations(profile)
    if "nccl_topo_file" not in expected_section:
        return not_applicable("profile sets no runtime.nccl_topo_file")
    expected = expected_section["nccl_topo_file"]
    runtime = facts.get("runtime") or {}
    topo = runtime.get("nccl_topo_file")
    if topo is None:
        return unknown(f"runtime facts lack nccl_topo_file ({_unread(facts, 'nccl_topo_file')})")
    evidence = source(facts, "runtime", "nccl_topo_file")
    if expected is None:
        return _needs_none(topo, evidence)
    if not topo.get("value"):
        return _unset_on_host(runtime, expected, evidence, facts)
    problems = _file_problems(topo, expected)
    observed = {"value": topo["value"], "source": topo.get("source")}
    if problems:
        return Outcome(FAIL, observed, expected, "; ".join(problems), evidence)
    return Outcome(PASS, observed, expected, f"{topo['value']} (from {topo.get('source')}) "
                   f"is a valid topology naming only this host's GPUs and NICs", evidence)


def _file_problems(topo: dict[str, Any], expected: str | None) -> list[str]:
    """What is wrong with the file NCCL_TOPO_FILE names (host facts ``nccl_topo_file``)."""
    value = topo["value"]
    problems = []
    if expected and value != expected:
        problems.append(f"NCCL_TOPO_FILE={value} (from {topo.get('source')}), "
                        f"profile wants {expected}")
    parse = topo.get("parse") or {}
    if not topo.get("exists"):
        problems.append(f"{value} does not exist; {SILENT}")
    elif not topo.get("readable"):
        problems.append(f"{value} is not a readable file; {SILENT}")
    elif not parse.get("valid"):
        problems.append(f"{value} is not a valid NCCL topology: {parse.get('error')}")
    if virtual := parse.get("virtual_nets"):
        problems.append(f"{value} names virtual interfaces as network devices "
                        f"({', '.join(virtual)}: bridges, veth pairs, overlays or tunnels), "
                        "which NCCL may carry inter-node traffic over: dump it again with "
                        "NCCL_SOCKET_IFNAME or NCCL_IB_HCA set to the host's NICs")
    for kind in ("gpus", "nics"):
        missing = topo.get(f"{kind}_missing_on_host") or []
        if missing:
            problems.append(f"{value} names {kind.upper()[:-1]}s this host lacks: "
                            f"{', '.join(missing)}")
    return problems


def _needs_none(topo: dict[str, Any], evidence: tuple[str, ...]) -> Outcome:
    """Profile ``nccl_topo_file: null``: auto-detection is right; a set file must still be sane."""
    if not topo.get("value"):
        return Outcome(PASS, None, None, "NCCL_TOPO_FILE unset; this platform needs none",
                       evidence)
    problems = _file_problems(topo, None)
    status = FAIL if topo.get("exists") and problems else (WARN if problems else PASS)
    detail = "; ".join(problems) or f"{topo['value']} is valid (the profile needs none)"
    return Outcome(status, topo["value"], None, detail, evidence)


def _unset_on_host(runtime: dict[str, Any], expected: str, evidence: tuple[str, ...],
                   facts: Facts) -> Outcome:
    """Unset for host processes: acceptable only when enroot gives it to every container job."""
    entry = _enroot_topo(runtime)
    if not (_has_container_runtime(runtime) and entry and entry.get("value") == expected):
        return Outcome(FAIL, None, expected,
                       f"NCCL_TOPO_FILE is unset (environment and NCCL config files); "
                       f"NCCL auto-detects the topology instead of reading {expected}"
                       + _absent_note(runtime, expected), evidence)
    exists = (runtime.get("default_topo_files") or {}).get(expected)
    evidence = evidence + source(facts, "runtime", "enroot")
    observed = {"value": expected, "source": entry.get("file")}
    carried = runtime.get("enroot_topo_file") or {}
    host_path = carried.get("host_path")  # the host file behind it (a mounts.d bind's source)
    if exists is False and host_path in (None, expected):
        return Outcome(FAIL, observed, expected,
                       f"enroot sets NCCL_TOPO_FILE={expected} but the host has no such file",
                       evidence)
    lead = f"unset for host processes; enroot gives container jobs {expected} " \
           f"({entry.get('file')})"
    if not host_path:  # facts of an older gatherer
        known = "present" if exists else "presence unknown"
        return Outcome(PASS, observed, expected, f"{lead}; file {known}, content not parsed",
                       evidence)
    evidence = evidence + source(facts, "runtime", "enroot_topo_file")
    problems = _file_problems({**carried, "value": host_path}, None)
    if problems:
        return Outcome(FAIL, observed, expected, f"{lead}, but " + "; ".join(problems), evidence)
    return Outcome(PASS, observed, expected, f"{lead}; {host_path} is a valid topology naming "
                   "only this host's GPUs and NICs", evidence)


def _absent_note(runtime: dict[str, Any], path: str) -> str:
    exists = (runtime.get("default_topo_files") or {}).get(path)
    return f" (and {path} is absent)" if exists is False else ""


def _has_container_runtime(runtime: dict[str, Any]) -> bool:
    return bool((runtime.get("enroot") or {}).get("installed")
                or (runtime.get("pyxis") or {}).get("present"))


@check("runtime.topo-in-container",
       hand="the host's file against enroot's and pyxis's configuration",
       severity="high",
       title="NCCL_TOPO_FILE and the topology file reach the job container",
       risk="the host has the topology, containers do not: NCCL silently auto-detects a "
            "wrong topology in every containerised job",
       fix="carry both into containers: enroot environ.d NCCL_TOPO_FILE line and mounts.d "
           "bind of the file (runtime.enroot_topo), or --container-env/--container-mounts",
       knob="runtime.enroot_topo")
def check_topo_in_container(facts: Facts, profile: Profile) -> Outcome:
    """The probe result when there is one, else the enroot environ.d/mounts.d facts."""
    expectations = _expectations(profile)
    if not expectations.get("require_in_container"):
        return not_applicable("profile sets no runtime.require_in_container")
    runtime = facts.get("runtime") or {}
    host_value = (runtime.get("nccl_topo_file") or {}).get("value")
    expected = expectations.get("nccl_topo_file") or host_value
    if not expected and runtime.get("nccl_topo_file") is None:
        return unknown("no topology file named by the profile, and the host's NCCL_TOPO_FILE "
                       f"unknown ({_unread(facts, 'nccl_topo_file')})")
    if not expected:
        return not_applicable("neither the profile nor the host names a topology file to carry")
    probe = runtime.get("container")
    if probe is not None:
        return _from_probe(runtime, probe, expected)
    if not _has_container_runtime(runtime):
        unread = "; ".join(f"{key}: {_unread(facts, key)}" for key in ("enroot", "pyxis")
                           if runtime.get(key) is None)
        if unread:
            return unknown(f"enroot and pyxis not read ({unread}): give --launcher to check "
                           "inside the job container")
        return not_applicable("no enroot or pyxis on this host: give --launcher to check "
                              "inside the job container")
    return _from_enroot(facts, runtime, expected, host_value)


def _from_probe(runtime: dict[str, Any], probe: dict[str, Any], expected: str) -> Outcome:
    result = compare_container(runtime, probe, expected)
    evidence = (f"probe: {probe.get('launcher')}",)
    if result["ok"] is None:
        return Outcome(SKIP, None, expected, f"container probe failed: {result['error']}",
                       evidence, unknown=True)
    observed = result["container"]
    if result["problems"]:
        return Outcome(FAIL, observed, expected, "; ".join(result["problems"]), evidence)
    return Outcome(PASS, observed, expected,
                   f"inside the container NCCL_TOPO_FILE={expected} is a readable topology",
                   evidence)


def _from_enroot(facts: Facts, runtime: dict[str, Any], expected: str,
                 host_value: str | None) -> Outcome:
    enroot = runtime.get("enroot") or {}
    entry = _enroot_topo(runtime)
    evidence = source(facts, "runtime", "enroot")
    observed = {"environ_d": entry, "carries_topo_env": bool(enroot.get("carries_topo_env")),
                "carries_topo_mount": bool(enroot.get("carries_topo_mount"))}
    missing = []
    if not entry:
        missing.append("no enroot environ.d line sets NCCL_TOPO_FILE")
    elif "$" not in entry.get("value", "") and entry.get("value") != expected:
        missing.append(f"enroot environ.d sets NCCL_TOPO_FILE={entry.get('value')} "
                       f"({entry.get('file')}), expected {expected}")
    if not enroot.get("carries_topo_mount"):
        missing.append(f"no enroot mounts.d line binds {expected}")
    if missing:
        lead = "host has it, containers will not" if host_value else \
            "neither the host nor containers get it"
        return Outcome(FAIL, observed, expected, f"{lead}: {'; '.join(missing)}", evidence)
    carried = runtime.get("enroot_topo_file") or {}
    parse = carried.get("parse")
    if parse and not parse.get("valid"):
        return Outcome(FAIL, observed, expected,
                       f"enroot carries NCCL_TOPO_FILE ({entry.get('file')}), but "
                       f"{carried.get('host_path')} is not a valid NCCL topology: "
                       f"{parse.get('error')}", evidence + source(facts, "runtime",
                                                                  "enroot_topo_file"))
    return Outcome(PASS, observed, expected,
                   f"enroot carries NCCL_TOPO_FILE ({entry.get('file')}) and binds {expected}; "
                   "give --launcher to confirm inside the job container", evidence)


@check("runtime.stale-nccl-conf",
       hand="NCCL configuration lines naming files that do not exist",
       severity="medium",
       title="No stale NCCL_TOPO_FILE / NCCL_GRAPH_FILE in the NCCL config files",
       risk="a stale topology or graph file in nccl.conf silently applies to every job "
            "(NVIDIA/nccl#1008)",
       fix="remove the line or point it at the profile's file (runtime.nccl_conf)",
       knob="runtime.nccl_conf")
def check_stale_nccl_conf(facts: Facts, profile: Profile) -> Outcome:
    """Each NCCL_TOPO_FILE/NCCL_GRAPH_FILE line: dangling, or not the profile's file."""
    runtime = facts.get("runtime") or {}
    entries = runtime.get("nccl_conf_topo_keys")
    if entries is None:
        return unknown("runtime facts lack nccl_conf_topo_keys "
                       f"({_unread(facts, 'nccl_conf_topo_keys')})")
    evidence = source(facts, "runtime", "nccl_conf_topo_keys")
    expectations = _expectations(profile)
    problems, notes = [], []
    for entry in entries:
        if entry["key"] != entry["key"].strip():
            continue  # not the variable NCCL reads: fabric.nccl-suspicious-keys reports it
        where = f"{entry['file']}:{entry['line']} {entry['key']}={entry['value']}"
        exists = _exists(runtime, entry)
        if exists is False:
            problems.append(f"{where}: no such file")
        elif exists is None:
            notes.append(f"{where}: file presence not gathered")
        if entry["key"] == TOPO_KEY and "nccl_topo_file" in expectations:
            wanted = expectations["nccl_topo_file"]
            if entry["value"] != wanted:
                problems.append(f"{where}: profile wants "
                                f"{wanted if wanted else 'no topology file'}")
    observed = [f"{e['file']}:{e['line']} {e['key']}={e['value']}" for e in entries]
    if problems:
        return Outcome(WARN, observed, expectations.get("nccl_topo_file"),
                       "; ".join(problems + notes), evidence)
    detail = "; ".join(notes) or ("no NCCL_TOPO_FILE/NCCL_GRAPH_FILE in the NCCL config files"
                                  if not entries else "every topology line names a present file")
    return Outcome(PASS, observed, expectations.get("nccl_topo_file"), detail, evidence)


def _exists(runtime: dict[str, Any], entry: dict[str, Any]) -> bool | None:
    """Whether the file a config line names exists on the host (``None``: not gathered)."""
    if "exists" in entry:
        return bool(entry["exists"])
    value = entry["value"]
    topo = runtime.get("nccl_topo_file") or {}
    if entry["key"] == TOPO_KEY and topo.get("value") == value:
        return bool(topo.get("exists"))
    return (runtime.get("default_topo_files") or {}).get(value)

