"""Profiles: the desired state and expectations of one cluster type, validated by a schema.

A profile is a YAML file; the shipped ones live in ``exemplar_tune/profiles/``
(``--profile h100-x86``), users pass their own path (``--profile ./site.yaml``). The schema
(``profiles/schema.json``) rejects unknown keys, so a typo never silently disables a check.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from exemplar_tune.errors import UserError
from exemplar_tune.inputs import read_input

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
# The shipped profile each architecture gets from --profile auto ("*": every other one).
PROFILE_BY_ARCH = {"aarch64": "gb200-grace", "*": "h100-x86"}


def profile_for_arches(arches: set[str | None]) -> str:
    """The shipped profile ``auto`` means for hosts of these architectures."""
    return PROFILE_BY_ARCH["aarch64"] if "aarch64" in arches else PROFILE_BY_ARCH["*"]


def profile_vars(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """The profile's label and the playbook variables that carry it to the hosts.

    ``auto`` sends every shipped candidate (``exemplar_profile_by_arch``): each host's layer
    module picks the one for its own architecture, so a mixed fleet gets the right targets.
    """
    if name_or_path == AUTO:
        by_arch = {arch: load_profile(name) for arch, name in PROFILE_BY_ARCH.items()}
        return AUTO, {"exemplar_profile_by_arch": by_arch}
    profile = load_profile(name_or_path)
    return profile["name"], {"exemplar_profile": profile}


def load_profile(name_or_path: str) -> dict[str, Any]:
    """The profile called ``name_or_path`` (shipped) or stored at that path, validated."""
    path = Path(name_or_path)
    if not path.suffix and (PROFILES_DIR / f"{name_or_path}.yaml").is_file():
        path = PROFILES_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        raise ProfileError(f"profile {name_or_path!r} not found; shipped profiles: "
                           f"{', '.join(shipped_profiles())}, or give a file path")
    try:
        data = yaml.safe_load(read_input(path, "profile"))
    except UserError as exc:
        raise ProfileError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile {path}: cannot read it: {_one_line(exc)}") from None
    validate_profile(data, str(path))
    return data


def validate_profile(data: Any, where: str) -> None:
    """Raise ``ProfileError`` naming the first bad key (``cpu.governor: ...``)."""
    validator = jsonschema.Draft202012Validator(profile_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        key = ".".join(str(p) for p in first.absolute_path) or "(top level)"
        raise ProfileError(f"profile {where}: {key}: {_one_line(first.message)}")


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split())
