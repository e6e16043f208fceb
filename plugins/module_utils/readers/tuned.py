"""TuneD: the active profile(s) (``/etc/tuned/active_profile``, ``/etc/tuned/profile_mode``) and
the ``[cpu]`` settings of the profile, resolved through ``include=`` chains.

Documentation: ``tuned-adm(8)``, ``tuned.conf(5)`` and ``redhat-performance/tuned``
(``tuned/profiles/loader.py``: included profiles are loaded first, the including profile's
options override theirs; several active profiles are merged left to right;
``tuned/plugins/plugin_cpu.py``: ``force_latency`` = µs, ``cstate.id:N``, ``cstate.name:X``,
their ``_no_zero`` forms, or ``none``, with ``|``-separated alternatives, first one that
resolves wins). Profiles are looked up in ``/etc/tuned/<p>``, then ``/usr/lib/tuned/<p>``, then
``/usr/lib/tuned/profiles/<p>``.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpuidle import Problems
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotSupported,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

ACTIVE_PROFILE = "etc/tuned/active_profile"
PROFILE_MODE = "etc/tuned/profile_mode"
PROFILE_DIRS = ("etc/tuned", "usr/lib/tuned", "usr/lib/tuned/profiles")
CPU_KEYS = ("governor", "energy_perf_bias", "energy_performance_preference", "boost",
            "min_perf_pct", "force_latency", "pm_qos_resume_latency_us")
MAX_INCLUDE_DEPTH = 16
PROFILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")

# section -> option -> (value, profile that set it)
Sections = dict[str, dict[str, tuple[str, str]]]


def parse_active_profile(text: str, source: str = "/etc/tuned/active_profile") -> list[str]:
    """``"accelerator-performance"`` -> ``["accelerator-performance"]``; several profiles are
    space-separated. A name that cannot be a profile directory is a ``ParseError``."""
    names = text.split()
    for name in names:
        if not PROFILE_NAME.fullmatch(name):
            raise ParseError(source, text, "not a profile name")
    return names


def parse_profile(text: str, source: str = "tuned.conf") -> dict[str, dict[str, str]]:
    """``tuned.conf`` (INI) -> ``{section: {option: value}}``, without interpolation."""
    import configparser  # only hosts with a tuned profile parse one

    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text, source=source)
    except configparser.Error as exc:
        raise ParseError(source, text, f"not a tuned.conf: {exc.__class__.__name__}") from None
    return {name: dict(parser.items(name)) for name in parser.sections()}


def parse_includes(value: str | None) -> list[str]:
    """``"a, b"`` / ``"a b"`` -> ``["a", "b"]``."""
    return [name for name in re.split(r"[\s,;]+", value or "") if name]


def find_profile(root: Sysroot, name: str) -> str | None:
    """Relative path of ``<name>/tuned.conf`` in the first profile directory that has it."""
    for base in PROFILE_DIRS:
        rel = f"{base}/{name}/tuned.conf"
        if root.exists(rel):
            return rel
    return None


def load_profile(root: Sysroot, name: str, files: list[str], stack: tuple[str, ...] = ()
                 ) -> Sections:
    """Sections of profile ``name`` with its includes merged in; records the files read."""
    if name in stack or len(stack) >= MAX_INCLUDE_DEPTH or not PROFILE_NAME.fullmatch(name):
        raise ParseError("include", " -> ".join((*stack, name)), "bad or circular include")
    rel = find_profile(root, name)
    if rel is None:
        raise NotSupported(root.display(f"{PROFILE_DIRS[1]}/{name}/tuned.conf"),
                           "profile not found")
    files.append(root.display(rel))
    own = parse_profile(root.read_text(rel, strip=False), root.display(rel))
    merged: Sections = {}
    for parent in parse_includes(own.get("main", {}).get("include")):
        merge(merged, load_profile(root, parent, files, (*stack, name)))
    merge(merged, {sec: {k: (v, name) for k, v in opts.items()} for sec, opts in own.items()})
    return merged


def merge(into: Sections, other: Sections) -> None:
    """Options of ``other`` override those of ``into``, section by section."""
    for section, options in other.items():
        into.setdefault(section, {}).update(options)


def resolve_force_latency(value: str | None, states: list[dict[str, Any]]) -> int | None:
    """tuned's ``force_latency`` -> µs, using one CPU's idle states (``index``, ``name``,
    ``latency_us``); ``None`` when unset, ``none`` or nothing resolves."""
    for alt in (value or "").split("|"):
        alt = alt.strip()
        if alt.lower() == "none":
            return None
        if re.fullmatch(r"-?\d{1,20}", alt):  # a latency in µs (a longer number is none)
            return int(alt)
        kind, _, arg = alt.partition(":")
        field = "index" if kind.startswith("cstate.id") else "name"
        if kind not in ("cstate.id", "cstate.id_no_zero", "cstate.name", "cstate.name_no_zero"):
            continue
        found = [s["latency_us"] for s in states if str(s[field]) == arg]
        if found and found[0] is not None and not (kind.endswith("_no_zero") and found[0] == 0):
            return found[0]
    return None


def read_tuned(root: Sysroot, problems: Problems = None,
               states: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Active profiles, mode, the merged ``[cpu]`` options and where ``force_latency`` came
    from. No ``/etc/tuned/active_profile`` (tuned not installed) gives no active profiles.
    ``states`` (CPU 0's idle states) lets ``cstate.*`` latencies resolve to µs."""
    text = root.read_optional(ACTIVE_PROFILE)
    names = [] if text is None else parse_active_profile(text, root.display(ACTIVE_PROFILE))
    files: list[str] = []
    merged: Sections = {}
    for name in names:
        try:
            merge(merged, load_profile(root, name, files))
        except HostStateError as exc:
            if problems is None:
                raise
            problems.append(exc)
    cpu = merged.get("cpu", {})
    latency, origin = cpu.get("force_latency", (None, None))
    return {
        "active_profiles": names,
        "profile_mode": root.read_optional(PROFILE_MODE),
        "files": files,
        "cpu": {key: cpu[key][0] if key in cpu else None for key in CPU_KEYS},
        "force_latency": latency,
        "force_latency_profile": origin,
        "force_latency_us": resolve_force_latency(latency, states or []),
    }


def active_sysctls(root: Sysroot) -> dict[str, str]:
    """The ``[sysctl]`` settings of the active TuneD profile(s), merged: TuneD writes them at
    every start of its daemon, so they hold across boots without a ``sysctl.d`` line. ``{}``
    without TuneD, or where a profile of the chain cannot be read."""
    text = root.read_optional(ACTIVE_PROFILE)
    merged: Sections = {}
    try:
        for name in [] if text is None else parse_active_profile(text):
            merge(merged, load_profile(root, name, []))
    except HostStateError:
        return {}
    return {key: value for key, (value, _) in merged.get("sysctl", {}).items()}
