"""What differs from the fleet's majority: every host's facts compared with each other, no
profile needed (``exemplar-tune facts -i INV --differ``).

Each host's facts are flattened into ``layer.key.sub`` paths, a list of mappings by index
(``gpu.gpus.3.persistence_mode``; a list of plain values is one value). Differences of several
items of one list with the same values on the same hosts are one line, the index written ``*``
with the number of items (``cpu.cpufreq.policies.*.governor``, 8 items). For every path the
hosts are grouped by value; the value most hosts have is the majority, and each other value is
a difference, with its hosts folded into a hostlist (when the most common values tie, there is
no majority and the line says so). A path only some hosts report (a fact
another host could not read) counts as the value ``absent``.

Facts that identify one host or one moment are never compared: they differ on identical,
healthy hosts (:data:`NOT_COMPARED`: serial numbers, UUIDs, addresses, process ids, times,
temperatures, power draw and clocks, log lines and counts), and neither are the ``sources``
and ``errors`` every layer carries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from exemplar_tune.fleet.hostlist import compress

ABSENT = "absent"
_INDEX = re.compile(r"\.\d+(?=\.|$)")
# key names whose value is one host's or one moment's (matched against every path part)
NOT_COMPARED = re.compile(
    r"^(?:sources|errors|uuid|serial|.*_serial(?:_number)?|guid|.*_guid|mac|.*_mac|hostname|"
    r"node_guid|sys_image_guid|port_guid|pids?|processes|machine_id|boot_id|.*_t|time|"
    r".*_seen|.*_at|uptime.*|temperature.*|.*_temperature_c|.*_temp|power_draw.*|fan.*|"
    r"utilization.*|clocks_mhz|clocks_event_reasons_active|memory_used.*|.*_lines|lines|"
    r"text|reasons?|evidence|address(?:es)?|ip|ips|.*_ip|product_version|minor_number|"
    r"xids|xid_incidents|xid_log|counters?|.*_count_since_boot)$")


@dataclass(frozen=True)
class Difference:
    """One fact on which hosts disagree: the majority value and hosts, and every other value
    with its hosts (fewest hosts first)."""

    fact: str
    majority: Any
    majority_hosts: tuple[str, ...]
    others: tuple[tuple[Any, tuple[str, ...]], ...]
    items: int = 1  # list items that differ alike (the fact's ``*``)

    @property
    def tie(self) -> bool:
        """No majority: another value has as many hosts as the most common one."""
        return any(len(h) == len(self.majority_hosts) for _, h in self.others)

    def to_dict(self) -> dict[str, Any]:
        return {"fact": self.fact, "items": self.items, "tie": self.tie,
                "majority": {"value": self.majority, "hosts": compress(self.majority_hosts),
                             "count": len(self.majority_hosts)},
                "others": [{"value": v, "hosts": compress(h), "count": len(h)}
                           for v, h in self.others]}

    def line(self) -> str:
        """``cpu.governor: powersave on node17 (majority: performance on 16 hosts)``."""
        shown = "; ".join(f"{_text(v)} on {compress(h)}" for v, h in self.others)
        fact = self.fact + (f" ({self.items} items)" if self.items > 1 else "")
        if self.tie:
            return (f"{fact}: {_text(self.majority)} on {compress(self.majority_hosts)}; "
                    f"{shown} (no majority)")
        return (f"{fact}: {shown} (majority: {_text(self.majority)} on "
                f"{len(self.majority_hosts)} host{'s' if len(self.majority_hosts) != 1 else ''})")


def flatten(facts: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{path: value}`` of one host's facts, without the facts that are never compared."""
    out: dict[str, Any] = {}
    for key, value in facts.items():
        if NOT_COMPARED.match(str(key)):
            continue
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{path}."))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for index, item in enumerate(value):
                out.update(flatten(item, f"{path}.{index}."))
        else:
            out[path] = value
    return out


def differences(hosts: Mapping[str, Mapping[str, Any]]) -> list[Difference]:
    """Every fact on which the hosts disagree, the rarest values first (a value on one host of
    a hundred is the likeliest cause of that host being different)."""
    flat = {host: flatten(facts) for host, facts in hosts.items()}
    paths = dict.fromkeys(p for values in flat.values() for p in values)
    found = []
    for path in paths:
        groups: dict[str, list[str]] = {}
        for host, values in flat.items():
            key = json.dumps(values[path], sort_keys=True) if path in values else ABSENT
            groups.setdefault(key, []).append(host)
        if len(groups) < 2:
            continue
        ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        majority, *others = ranked
        found.append(Difference(path, _value(majority[0]), tuple(sorted(majority[1])),
                                tuple((_value(k), tuple(sorted(h)))
                                      for k, h in sorted(others, key=lambda kv: len(kv[1])))))
    return sorted(_alike_items(found), key=lambda d: (min(len(h) for _, h in d.others), d.fact))


def _alike_items(found: list[Difference]) -> list[Difference]:
    """Differences of several list items with the same values on the same hosts, as one."""
    groups: dict[tuple, list[Difference]] = {}
    for d in found:
        pattern = _INDEX.sub(".*", d.fact)
        key = (pattern, json.dumps(d.majority, sort_keys=True), d.majority_hosts,
               json.dumps(d.others, sort_keys=True))
        groups.setdefault(key, []).append(d)
    return [alike[0] if len(alike) == 1 else
            Difference(key[0], alike[0].majority, alike[0].majority_hosts, alike[0].others,
                       len(alike)) for key, alike in groups.items()]


def host_differences(host: str, found: Iterable[Difference]) -> list[str]:
    """Where ``host`` differs from the majority: ``fact=value (majority value)`` each."""
    return [f"{d.fact}={_text(v)} (majority {_text(d.majority)})"
            for d in found for v, hosts in d.others if host in hosts]


def _value(key: str) -> Any:
    return ABSENT if key == ABSENT else json.loads(key)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)
