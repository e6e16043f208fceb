"""The profile's Xid policy (``gpu.xid_policy``) and the status it gives each Xid incident.

An incident (:mod:`xid_incidents`) has a recovery action: the driver's (Xid 154) or the bucket of
NVIDIA's Xid catalog. The policy turns it into a status, in this order:

1. incidents logged before the last boot do not count unless ``include_earlier_boots``;
2. an Xid in ``ignore_xids`` / ``fail_xids`` / ``warn_xids`` gets that status (a list wins over
   the action; an Xid may be in one list only);
3. otherwise ``action_status[action]``: by default reset, drain, reboot and hardware actions fail;
   "ignore" buckets, the driver's "None" and unknown Xids warn; an application restart
   (RESTART_APP: Xid 13, 31, 43, 45 ...) is a ``note``: the job faulted, not the GPU, so the
   incident is named but the node passes;
4. a GPU with ``repeat_count`` or more noted or warning incidents of one Xid within
   ``repeat_window_s`` (in one boot) goes one step up for them: a note warns (a job that keeps
   faulting one GPU may be the GPU: run the diagnostics), a warning fails.

Public practice behind the defaults: the catalog buckets themselves; the EKS node monitoring
agent fails a node on a list of "well-known" Xids (46, 48, 54, 62, 63, 64, 74, 79, 95, 109, ...)
that users may change, and only warns on the others (``aws/eks-node-monitoring-agent``
``monitors/nvidia/dcgm/dcgm_policies.go``, ``WellKnownXidCodes``); leptonai/gpud suggests a
reboot and escalates to hardware inspection after 2 reboots in its lookback window
(``components/accelerator/nvidia/xid/threshold.go``: ``DefaultRebootThreshold = 2``, per-Xid
overrides such as 94: 1000), hence a count in a window rather than "any line fails"; the AWS GPU
cluster health-check suite (aws-samples/awsome-distributed-training,
``4.validation_and_observability/2.gpu-cluster-healthcheck``) maps 79 to REBOOT and
48/109/119/120 to RESET, and parses the Xid 154 text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers import xid_catalog as cat
from ansible_collections.exemplar.tune.plugins.module_utils.readers.xid_incidents import (
    BUS_LOSS,
    DEFAULT_WINDOW_S,
)

FAIL, WARN, NOTE, IGNORE = "fail", "warn", "note", "ignore"
STATUSES = (FAIL, WARN, NOTE, IGNORE)  # worst first
# a repeated incident goes one step up
ESCALATED = {NOTE: WARN, WARN: FAIL}
DEFAULT_ACTION_STATUS = {
    cat.NONE: WARN, cat.IGNORE: WARN, cat.RESTART_APP: NOTE, cat.INVESTIGATE: WARN,
    cat.RESET_GPU: FAIL, cat.DRAIN_P2P: FAIL, cat.DRAIN_AND_RESET: FAIL,
    cat.RECOVER_IMEX_DOMAIN: FAIL, cat.REBOOT: FAIL, cat.HARDWARE: FAIL,
}
_LISTS = (("ignore_xids", IGNORE), ("fail_xids", FAIL), ("warn_xids", WARN))


@dataclass(frozen=True)
class XidPolicy:
    """``gpu.xid_policy`` with every default filled in."""

    incident_window_s: float = DEFAULT_WINDOW_S
    include_earlier_boots: bool = False
    action_status: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ACTION_STATUS))
    xid_status: dict[int, str] = field(default_factory=dict)
    repeat_count: int = 3
    repeat_window_s: float = 86400.0


@dataclass(frozen=True)
class Judged:
    """One counted incident and its status; ``why``: "action", "xid list" or "repeated"."""

    incident: dict[str, Any]
    status: str
    why: str


def policy_error(section: dict[str, Any]) -> str | None:
    """What is wrong with a schema-valid ``gpu.xid_policy`` beyond the schema (one line)."""
    seen: dict[int, str] = {}
    for key, _ in _LISTS:
        for number in section.get(key) or []:
            if number in seen:
                return f"Xid {number} is in both {seen[number]} and {key}"
            seen[number] = key
    return None


def policy_from_profile(profile: dict[str, Any]) -> XidPolicy:
    """The profile's Xid policy over the defaults (the profile was validated)."""
    section = (profile.get("gpu") or {}).get("xid_policy") or {}
    xid_status = {n: status for key, status in _LISTS for n in section.get(key) or []}
    plain = {k: section[k] for k in ("incident_window_s", "include_earlier_boots",
                                     "repeat_count", "repeat_window_s") if k in section}
    return XidPolicy(action_status={**DEFAULT_ACTION_STATUS, **section.get("action_status", {})},
                     xid_status=xid_status, **plain)


def _number(incident: dict[str, Any]) -> int:
    return BUS_LOSS if incident["xid"] is None else incident["xid"]


def _first_status(incident: dict[str, Any], policy: XidPolicy) -> Judged:
    listed = policy.xid_status.get(_number(incident))
    if listed:
        return Judged(incident, listed, "xid list")
    return Judged(incident, policy.action_status.get(incident["action"], WARN), "action")


def _repeated(judged: list[Judged], policy: XidPolicy) -> set[int]:
    """Indexes of noted or warning incidents that belong to a run of ``repeat_count`` in the
    window."""
    runs: dict[tuple[str, int, int], list[int]] = {}
    for index, item in enumerate(judged):
        if item.status in ESCALATED:
            i = item.incident
            runs.setdefault((i["gpu"], _number(i), i["boot"]), []).append(index)
    hit: set[int] = set()
    for members in runs.values():
        times = [judged[m].incident["first_t"] for m in members]
        for start in range(len(members)):
            end = start + policy.repeat_count - 1
            if end < len(members) and (None in (times[start], times[end]) or
                                       times[end] - times[start] <= policy.repeat_window_s):
                hit.update(members[start:end + 1])
    return hit


def judge(incidents: list[dict[str, Any]], policy: XidPolicy) -> tuple[list[Judged], int]:
    """``(counted incidents with their status, incidents not counted: earlier boots)``."""
    counted = [i for i in incidents if policy.include_earlier_boots or i["boot"] == 0]
    judged = [_first_status(i, policy) for i in counted]
    for index in _repeated(judged, policy):
        judged[index] = Judged(judged[index].incident, ESCALATED[judged[index].status],
                               "repeated")
    return judged, len(incidents) - len(counted)
