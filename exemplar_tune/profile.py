"""Profiles: the desired state and expectations of one cluster type, validated by a schema.

A profile is a YAML file; the shipped ones live in ``exemplar_tune/profiles/``
(``--profile h100-x86``), users pass their own path (``--profile ./site.yaml``). The schema
(``profiles/schema.json``) rejects unknown keys, so a typo never silently disables a check.

A site profile may say ``extends: h100-x86`` (a shipped name, or a path relative to the file)
and hold only what differs. It is merged over its parent (:func:`merge`): mappings key by key,
lists and scalars replaced, and ``null`` deletes a key the parent has (a ``null`` for a key the
parent lacks stays: in ``fabric.nccl`` it means "remove this setting from the file"). Without
a ``name`` the profile is named after its file. The merged result is what is validated;
chains may be several deep, a cycle is refused.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from ansible_collections.exemplar.tune.plugins.module_utils.readers.identity import (
    choose_profile,
    describe,
    identity_from_facts,
)

from exemplar_tune.bounded_yaml import load_yaml
from exemplar_tune.errors import UserError
from exemplar_tune.inputs import one_line, read_input
from exemplar_tune.xid_policy import policy_error

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"


class ProfileError(UserError):
    """A profile that cannot be found, parsed or validated."""


@cache
def profile_schema() -> dict[str, Any]:
    """The JSON schema every profile must satisfy."""
    return json.loads((PROFILES_DIR / "schema.json").read_text())


def shipped_profiles() -> list[str]:
    """Names of the profiles that come with exemplar-tune."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


AUTO = "auto"
GIVEN = "given"  # why a host has the profile --profile named
MAX_EXTENDS = 16  # profiles in one extends chain
MAX_PROFILE = 1 << 20  # bytes of one profile file (the shipped ones are under 2 kB)


@cache
def auto_candidates() -> tuple[dict[str, Any], ...]:
    """The shipped profiles ``auto`` chooses from (each with its ``match``; one without is
    only ever named, as NVIDIA's nvidia-* translations), by name; loaded once per process,
    shared: read them, never change them."""
    return tuple(p for p in map(load_profile, shipped_profiles()) if "match" in p)


def auto_profile(facts: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The shipped profile for a host with these facts, and why: its hardware identity (the
    GPUs by PCI device ID, the architecture), as the layer module chooses on the host."""
    ident = identity_from_facts(facts)
    chosen = choose_profile(list(auto_candidates()), ident)
    if chosen is None:  # the shipped generic profile matches any host
        raise ProfileError("no shipped profile matches: the generic profile is missing")
    return chosen, f"auto: {describe(ident)}"


def host_profiles(requested: str, facts_by_host: dict[str, dict[str, Any]]
                  ) -> dict[str, tuple[dict[str, Any], str]]:
    """Each host's profile and why: ``requested`` for every host, or for ``auto`` each host's
    own (:func:`auto_profile`: a mixed fleet gets each kind its profile)."""
    if requested != AUTO:
        profile = load_profile(requested)
        return {host: (profile, GIVEN) for host in facts_by_host}
    return {host: auto_profile(facts) for host, facts in facts_by_host.items()}


def profile_for_hosts(requested: str, facts: Iterable[dict[str, Any]]) -> str:
    """One profile for hosts with these facts, for the commands that need one (tune, sweep):
    ``requested`` itself, or for ``auto`` the profile every host calls for;
    ``ProfileError`` when the hosts call for different ones."""
    if requested != AUTO:
        return requested
    chosen = {profile["name"]: why for profile, why in map(auto_profile, facts)}
    if len(chosen) > 1:
        raise ProfileError("--profile auto: these hosts call for different profiles ("
                           + "; ".join(f"{name} ({why})" for name, why in sorted(chosen.items()))
                           + "): give one with --profile, or run each kind with --limit")
    return next(iter(chosen), "generic")


def profile_vars(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """The profile's label and the playbook variables that carry it to the hosts.

    ``auto`` sends every shipped candidate (``exemplar_profile_candidates``): each host's layer
    module picks the one for its own hardware identity, so a mixed fleet gets the right
    targets.
    """
    if name_or_path == AUTO:
        return AUTO, {"exemplar_profile_candidates": list(auto_candidates())}
    profile = load_profile(name_or_path)
    return profile["name"], {"exemplar_profile": profile}


def load_profile(name_or_path: str) -> dict[str, Any]:
    """The profile called ``name_or_path`` (shipped) or stored at that path, its ``extends``
    chain merged, validated."""
    path = _resolve(name_or_path, Path.cwd())
    try:
        data = _load_chain(path, [])
        validate_profile(data, str(path))
    except RecursionError:
        raise ProfileError(f"profile {path}: nested too deeply (keep mappings and lists under "
                           "a few hundred levels)") from None
    return data


def _resolve(name_or_path: str, base: Path) -> Path:
    """A shipped profile's file, or ``name_or_path`` relative to ``base``."""
    path = Path(name_or_path)
    if not path.suffix and (PROFILES_DIR / f"{name_or_path}.yaml").is_file():
        return PROFILES_DIR / f"{name_or_path}.yaml"
    path = path if path.is_absolute() else base / path
    if not path.exists():
        raise ProfileError(f"profile {name_or_path!r} not found; shipped profiles: "
                           f"{', '.join(shipped_profiles())}, or give a file path")
    return path.resolve()


def _load_chain(path: Path, seen: list[Path]) -> dict[str, Any]:
    """The profile at ``path`` merged over the chain it ``extends`` (not yet validated): at
    most :data:`MAX_EXTENDS` profiles deep, each parent a shipped name or a YAML file (so
    ``extends: /etc/shadow`` never reads another kind of file)."""
    if path in seen:
        chain = " -> ".join(p.name for p in [*seen, path])
        raise ProfileError(f"profile {seen[0]}: extends itself ({chain})")
    if len(seen) >= MAX_EXTENDS:
        raise ProfileError(f"profile {seen[0]}: extends more than {MAX_EXTENDS} profiles deep")
    data = _read(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str) or not parent.strip():
        raise ProfileError(f"profile {path}: extends: a shipped profile name or a file path")
    resolved = _resolve(parent, path.parent)
    if resolved.parent != PROFILES_DIR and resolved.suffix not in (".yaml", ".yml"):
        raise ProfileError(f"profile {path}: extends: {parent} is neither a shipped profile "
                           "nor a .yaml/.yml file")
    merged = merge(_load_chain(resolved, [*seen, path]), data)
    if "name" not in data:
        merged["name"] = path.stem
    return merged


def _read(path: Path) -> dict[str, Any]:
    """The mapping of one profile file, its aliases bounded (:mod:`exemplar_tune.bounded_yaml`)
    before any value is built; ``ProfileError`` (one line) for anything else."""
    try:
        data = load_yaml(read_input(path, "profile", MAX_PROFILE), f"profile {path}")
    except UserError as exc:
        raise ProfileError(str(exc)) from None
    except yaml.YAMLError as exc:  # where and what, never the file's own text
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or "not YAML"
        raise ProfileError(f"profile {path}: not valid YAML: {problem}{where}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path}: (top level): a mapping of sections, e.g. "
                           "'extends: h100-x86' and the keys that differ")
    return data


def merge(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """``child`` over ``parent``: mappings merged key by key, anything else replaced, ``null``
    deleting a key ``parent`` has (kept where ``parent`` lacks the key); the settings a
    translated profile cannot express (``unexpressed``) are the parent's and the child's."""
    merged = copy.deepcopy(parent)
    for key, value in child.items():
        if value is None and key in merged:
            del merged[key]
        elif key == "unexpressed" and isinstance(value, list):
            merged[key] = [*merged.get(key, []), *copy.deepcopy(value)]
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def validate_profile(data: Any, where: str) -> None:
    """Raise ``ProfileError`` naming the first bad key (``cpu.governor: ...``); beyond the
    schema, an Xid listed twice in ``gpu.xid_policy``. The message shows at most the start
    and end of the value (:func:`exemplar_tune.inputs.one_line`)."""
    validator = jsonschema.Draft202012Validator(profile_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        key = ".".join(str(p) for p in first.absolute_path) or "(top level)"
        raise ProfileError(f"profile {where}: {one_line(key, 120)}: {one_line(first.message)}")
    wrong = policy_error((data.get("gpu") or {}).get("xid_policy") or {})
    if wrong:
        raise ProfileError(f"profile {where}: gpu.xid_policy: {wrong}")
