"""Repeat offenders: hosts that fail the same check again and again.

A node that fails once may have been unlucky; one that keeps failing the same health check
should be pulled for repair. ``preflight --record`` keeps each host's failing checks in the
ledger; a host is a repeat offender for a check when it failed that check in at least
``failures`` of its last ``runs`` recorded preflights within the last ``days`` days. Only
health checks count by default (a tuning preference not met is no reason to pull a node:
``classes`` adds ``tuning``); a check's class is that of the registered check. The
thresholds are the profile's ``offenders`` settings (:data:`DEFAULTS` otherwise), and the
command line's win.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from exemplar_tune.checks.base import HEALTH, check_class
from exemplar_tune.errors import UserError
from exemplar_tune.fleet.hostlist import compress
from exemplar_tune.ledger import Ledger

DEFAULTS = {"failures": 3, "runs": 5, "days": 7}


def thresholds(profile: Mapping[str, Any] | None, **given: float | None) -> dict[str, float]:
    """The rule's thresholds: ``given`` (the command line's, ``None`` when not given) over
    the profile's ``offenders`` over :data:`DEFAULTS`; ``UserError`` when they cannot hold."""
    found = {**DEFAULTS, **((profile or {}).get("offenders") or {}),
             **{k: v for k, v in given.items() if v is not None}}
    if not (1 <= found["failures"] <= found["runs"]) or found["days"] <= 0:
        raise UserError(f"offenders: {found['failures']:g} failures of {found['runs']:g} runs "
                        f"in {found['days']:g} days cannot hold: 1 <= failures <= runs, days > 0")
    return found


def since(days: float, now: float | None = None) -> str:
    """The ledger's time ``days`` before ``now``."""
    start = (now or time.time()) - days * 86400
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start)) + ".000000Z"


def repeat_failures(ledger: Ledger, rule: Mapping[str, float], hosts: list[str] | None = None,
                    classes: tuple[str, ...] = (HEALTH,)) -> dict[str, dict[str, int]]:
    """``{host: {check: failures}}`` in each host's last ``runs`` preflights within ``days``
    (every check of ``classes`` that failed at least once)."""
    return _count(ledger.preflight_history(int(rule["runs"]), since(rule["days"]), hosts),
                  classes)


def offenders(ledger: Ledger, rule: Mapping[str, float],
              classes: tuple[str, ...] = (HEALTH,)) -> list[dict[str, Any]]:
    """The repeat offenders of checks of ``classes``, one group per check and failure count,
    hosts folded: ``[{check, class, failures, runs, hosts, hostlist, count}]``, most
    failures first."""
    history = ledger.preflight_history(int(rule["runs"]), since(rule["days"]))
    groups: dict[tuple[str, int], list[str]] = {}
    for host, checks in _count(history, classes).items():
        for check, failures in checks.items():
            if failures >= rule["failures"]:
                groups.setdefault((check, failures), []).append(host)
    ordered = sorted(groups.items(), key=lambda item: (-item[0][1], item[0][0]))
    return [{"check": check, "class": check_class(check), "failures": failures,
             "runs": int(rule["runs"]),
             "hosts": sorted(hosts), "hostlist": compress(hosts), "count": len(hosts)}
            for (check, failures), hosts in ordered]


def _count(history: Mapping[str, list[dict[str, Any]]],
           classes: tuple[str, ...]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for host, runs in history.items():
        for run in runs:
            for check in run["failing"]:
                if check_class(check) not in classes:
                    continue
                counts.setdefault(host, {}).setdefault(check, 0)
                counts[host][check] += 1
    return counts
