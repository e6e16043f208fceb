"""The fabric's response to NCCL's InfiniBand settings, as a scenario's ``fabric_response``.

One entry per NCCL setting::

    fabric_response:
      NCCL_IB_QPS_PER_CONNECTION:
        unset: 1                  # the value NCCL uses when the setting is not set
        factors:                  # value -> {band's lower size bound: collective time factor}
          1: {0: 1.05, 4M: 1.20, 32M: 1.428}
          4: {0: 1.0}
        cost: {collective_us: 2.0, compute: 0.0005}   # per unit the value exceeds `unset`

Rules:

* a value's factor at a message size is the one of the band with the largest lower bound at
  or below that size (bands written as bytes or ``64K``, ``1M``, ``1G``; sizes below every band
  get 1.0); the factors of all settings multiply;
* a value the host sets that ``factors`` does not list behaves as the ``unset`` value (factors
  and cost alike); an ``unset`` value that ``factors`` does not list has factor 1.0;
* ``cost`` (optional, default none) is charged per unit by which a numeric value exceeds
  ``unset`` (per QP beyond the first, for ``NCCL_IB_QPS_PER_CONNECTION``): ``collective_us``
  microseconds on every collective call, ``compute`` as a fraction of a training step's
  compute share (CPU time the proxy threads take from the training process).
"""

from __future__ import annotations

import re
from typing import Any

SIZE_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
_SIZE = re.compile(r"(\d+)\s*([KMG]?)B?", re.I)
SETTING_KEYS = ("unset", "factors", "cost")
COST_KEYS = ("collective_us", "compute")


def parse_size(text: str | int) -> int:
    """Bytes of ``1048576``, ``64K``, ``1M`` or ``16G`` (binary units); ``ValueError`` else."""
    match = _SIZE.fullmatch(str(text).strip())
    if not match:
        raise ValueError(f"{text!r} is not a size (bytes, or a number with K, M or G)")
    return int(match.group(1)) * SIZE_SUFFIX[match.group(2).upper()]


def human_size(size: int) -> str:
    """``64M`` for 64 MiB: the shortest binary-unit spelling that :func:`parse_size` reads."""
    for suffix in ("G", "M", "K"):
        if size and size % SIZE_SUFFIX[suffix] == 0:
            return f"{size // SIZE_SUFFIX[suffix]}{suffix}"
    return str(size)


def validate_response(response: Any, where: str = "fabric_response") -> None:
    """Raise a one-line ``ValueError`` naming the key when ``response`` breaks the rules."""
    if not isinstance(response, dict):
        raise ValueError(f"{where}: a mapping of NCCL settings, each with unset and factors")
    for setting, entry in response.items():
        at = f"{where}.{setting}"
        if not str(setting).startswith("NCCL_"):
            raise ValueError(f"{at}: not an NCCL setting (NCCL_...)")
        if not isinstance(entry, dict):
            raise ValueError(f"{at}: a mapping with unset, factors and optional cost")
        unknown = [k for k in entry if k not in SETTING_KEYS]
        if unknown:
            raise ValueError(f"{at}.{unknown[0]}: unknown key (known: {', '.join(SETTING_KEYS)})")
        for key in ("unset", "factors"):
            if key not in entry:
                raise ValueError(f"{at}: missing {key}")
        if entry["unset"] is None or isinstance(entry["unset"], dict | list):
            raise ValueError(f"{at}.unset: the value NCCL uses when {setting} is not set")
        _validate_factors(entry["factors"], f"{at}.factors")
        _validate_cost(entry.get("cost") or {}, f"{at}.cost")


def _validate_factors(factors: Any, at: str) -> None:
    if not isinstance(factors, dict):
        raise ValueError(f"{at}: a mapping of value -> {{band: factor}}")
    for value, bands in factors.items():
        if not isinstance(bands, dict) or not bands:
            raise ValueError(f"{at}.{value}: a mapping of band lower bound -> factor, e.g. "
                             "{0: 1.0, 64M: 1.2}")
        for band, factor in bands.items():
            try:
                parse_size(band)
            except ValueError as exc:
                raise ValueError(f"{at}.{value}.{band}: {exc}") from None
            if isinstance(factor, bool) or not isinstance(factor, int | float) or factor <= 0:
                raise ValueError(f"{at}.{value}.{band}: factor {factor!r} is not a positive "
                                 "number")


def _validate_cost(cost: Any, at: str) -> None:
    if not isinstance(cost, dict):
        raise ValueError(f"{at}: a mapping with collective_us and/or compute")
    for key, value in cost.items():
        if key not in COST_KEYS:
            raise ValueError(f"{at}.{key}: unknown key (known: {', '.join(COST_KEYS)})")
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"{at}.{key}: {value!r} is not a number >= 0")


def effective_values(response: dict[str, Any], nccl: dict[str, str | None]) -> dict[str, str]:
    """Per setting of ``response``, the value that counts for a host whose settings are ``nccl``:
    the host's when ``factors`` lists it, else ``unset``."""
    values = {}
    for setting, entry in response.items():
        listed = {_key(v) for v in entry["factors"]}
        value = nccl.get(setting)
        values[setting] = _key(value) if value is not None and _key(value) in listed \
            else _key(entry["unset"])
    return values


def time_factor(response: dict[str, Any], values: dict[str, str], size: int) -> float:
    """The factor on a collective's time at ``size`` bytes with settings ``values``."""
    factor = 1.0
    for setting, entry in response.items():
        bands = {_key(v): b for v, b in entry["factors"].items()}.get(values[setting])
        factor *= band_factor(bands or {}, size)
    return factor


def band_factor(bands: dict[Any, float], size: int) -> float:
    """The factor of the band with the largest lower bound at or below ``size`` (else 1.0)."""
    below = [(parse_size(b), f) for b, f in bands.items() if parse_size(b) <= size]
    return float(max(below)[1]) if below else 1.0


def extra_cost(response: dict[str, Any], values: dict[str, str]) -> tuple[float, float]:
    """``(microseconds per collective call, fraction of compute)`` the settings cost."""
    per_call, compute = 0.0, 0.0
    for setting, entry in response.items():
        units = _units_above(values[setting], entry["unset"])
        cost = entry.get("cost") or {}
        per_call += units * cost.get("collective_us", 0.0)
        compute += units * cost.get("compute", 0.0)
    return per_call, compute


def _units_above(value: str, unset: Any) -> float:
    try:
        return max(0.0, float(value) - float(unset))
    except ValueError:
        return 0.0


def _key(value: Any) -> str:
    return str(value).strip()
