"""Xid events grouped into incidents, each with its recovery action.

One fault prints many lines: an SM exception writes a dozen Xid 13 lines within milliseconds, a
GSP that stops answering writes an Xid 119 per timed-out call for minutes, a channel teardown an
Xid 45 per channel, and a lost GPU an Xid 79 plus "GPU has fallen off the bus". Counting lines
counts the log's verbosity, not the faults. An **incident** is the events of one GPU (PCI
address) and one Xid, in one boot, each less than ``window_s`` after the previous one (a gap
longer than the window starts a new incident); "fallen off the bus" lines count as Xid 79.
Events without a timestamp join the open incident of their GPU and Xid.

An Xid 154 (the driver's "recovery action changed ... to ...") is not an incident of its own
when an incident of the same GPU had a line less than ``window_s`` before it: it sets that
incident's ``driver_action``, which wins over the catalog's bucket, and its ``driver_said``
(the action as the driver words it, so that reports name the Xid 154). A lone Xid 154 is an
incident whose action is the stated one.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers import xid_catalog

DEFAULT_WINDOW_S = 300.0
BUS_LOSS = 79
# Fields an event may lack (facts written by an older reader): their value then.
_EVENT_DEFAULTS = {"xid": None, "pid": None, "process": None, "text": "", "time": None,
                   "t": None, "boot": 0, "lines": 1, "driver_action": None, "uuid": None,
                   "serial": None, "driver_said": None}


def _key(event: dict[str, Any]) -> tuple[int, str, int | None]:
    number = BUS_LOSS if event["kind"] == "fallen_off_bus" else event["xid"]
    return event["boot"], event["bdf"], number


def _near(earlier: float | None, later: float | None, window_s: float) -> bool:
    return earlier is None or later is None or abs(later - earlier) <= window_s


def _new(event: dict[str, Any]) -> dict[str, Any]:
    return {"gpu": event["bdf"], "xid": None, "kind": "fallen_off_bus", "lines": 0,
            "first_seen": event["time"], "last_seen": event["time"], "first_t": event["t"],
            "last_t": event["t"], "boot": event["boot"], "pids": [], "processes": [],
            "uuid": None, "serial": None, "driver_action": None, "driver_said": None,
            "text": event["text"]}


def _add(incident: dict[str, Any], event: dict[str, Any]) -> None:
    incident["lines"] += event["lines"]
    if event["kind"] == "xid" and incident["kind"] != "xid":
        incident.update(kind="xid", xid=event["xid"], text=event["text"])
    if event["t"] is not None or incident["last_t"] is None:
        incident.update(last_seen=event["time"], last_t=event["t"])
    for field, value in (("pids", event["pid"]), ("processes", event["process"])):
        if value is not None and value not in incident[field]:
            incident[field].append(value)
    for field in ("uuid", "serial", "driver_action"):
        incident[field] = event[field] or incident[field]
    if event["xid"] == 154:
        incident["driver_said"] = xid_catalog.recovery_stated(event["text"])


def _resolve(incident: dict[str, Any]) -> dict[str, Any]:
    """The incident with its name, catalog bucket and the action that applies."""
    number = incident["xid"] if incident["kind"] == "xid" else BUS_LOSS
    bucket = xid_catalog.catalog_bucket(number)
    driver = incident["driver_action"]
    return {**incident, "name": xid_catalog.xid_name(number), "catalog_action": bucket,
            "action": driver or xid_catalog.bucket_action(bucket),
            "action_source": "driver" if driver else ("catalog" if bucket else "unknown")}


def _driver_targets(incidents: list[dict[str, Any]], event: dict[str, Any],
                    window_s: float) -> list[dict[str, Any]]:
    """The incidents an Xid 154 ``event`` speaks for (same GPU and boot, recent)."""
    return [i for i in incidents if i["gpu"] == event["bdf"] and i["boot"] == event["boot"]
            and i["xid"] != 154 and _near(i["last_t"], event["t"], window_s)]


def group_incidents(events: list[dict[str, Any]],
                    window_s: float = DEFAULT_WINDOW_S) -> list[dict[str, Any]]:
    """Incidents of ``events`` (from :func:`xid.parse_kernel_log`), ordered by first line.

    Each: ``{"gpu", "xid" (None: bus loss without an Xid line), "kind", "name", "lines",
    "first_seen", "last_seen" (stamps as logged), "first_t", "last_t" (seconds), "boot",
    "pids", "processes", "uuid", "serial", "text" (the first Xid line's details),
    "catalog_action" (bucket), "driver_action" (Xid 154), "driver_said" (its words), "action",
    "action_source"}``.
    """
    incidents: list[dict[str, Any]] = []
    open_: dict[tuple[int, str, int | None], dict[str, Any]] = {}
    for event in ({**_EVENT_DEFAULTS, **e} for e in events):
        if event["xid"] == 154 and event["driver_action"]:
            targets = _driver_targets(incidents, event, window_s)
            for incident in targets:
                incident["driver_action"] = event["driver_action"]
                incident["driver_said"] = xid_catalog.recovery_stated(event["text"])
            if targets:
                continue
        key = _key(event)
        incident = open_.get(key)
        if incident is None or not _near(incident["last_t"], event["t"], window_s):
            incident = open_[key] = _new(event)
            incidents.append(incident)
        _add(incident, event)
    return [_resolve(i) for i in incidents]
