"""``ibstatus`` text: each RDMA port's state, rate and link layer, judged as compute rails
(:mod:`.ib_rails`); MAD tools that failed beside it (:mod:`.ib_mad`).

Format (infiniband-diags ``ibstatus``, a script over ``/sys/class/infiniband``): per port an
``Infiniband device 'mlx5_0' port 1 status:`` line, then indented ``default gid:``,
``base lid:``, ``sm lid:``, ``state:`` (``4: ACTIVE``), ``phys state:`` (``5: LinkUp``),
``rate:`` (``200 Gb/sec (4X HDR)``) and ``link_layer:`` (InfiniBand or Ethernet): the sysfs
files' text, read with the sysfs reader's parsers. It names no adapter model.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.infiniband import (
    parse_rate,
    parse_state,
)

from exemplar_tune.diagnose.base import Analyzer, DiagnoseError, Report, numbered
from exemplar_tune.diagnose.ib_capture import command, read_surround
from exemplar_tune.diagnose.ib_mad import mad_findings
from exemplar_tune.diagnose.ib_rails import Port, fabric_of, judge_ports

KIND = "ibstatus"
_HEAD = re.compile(r"^Infiniband device '([^'\n]{1,200})' port (\d{1,4}) status:$")
_HEAD_ANY = re.compile(r"^[ \t]*Infiniband device '[^'\n]{1,200}' port \d{1,4} status:", re.M)
_FIELD = re.compile(r"^([a-z][a-z_ ]{0,20}):\s*(.{0,500})$")


def sniff(text: str) -> bool:
    """An ``Infiniband device '<name>' port <n> status:`` line."""
    return bool(_HEAD_ANY.search(text))


def parse(text: str) -> list[dict[str, Any]]:
    """Every port block: ``{device, port, line, last, fields}``."""
    blocks: list[dict[str, Any]] = []
    block: dict[str, Any] | None = None
    for n, raw in numbered(text):
        line = raw.strip()
        if m := _HEAD.match(line):
            block = {"device": m.group(1), "port": int(m.group(2)), "line": n, "last": n,
                     "fields": {}}
            blocks.append(block)
        elif block is not None and (m := _FIELD.match(line)):
            block["fields"][m.group(1)] = m.group(2).strip()
            block["last"] = n
        elif line and command(line) is not None:
            block = None
    return blocks


def _parsed(parser: Any, text: str | None) -> dict[str, Any] | None:
    try:
        return parser(text) if text else None
    except ParseError:
        return None


def port_of(block: dict[str, Any]) -> Port:
    """A :class:`~.ib_rails.Port` of one block (a field it cannot read is ``None``)."""
    fields = block["fields"]
    state = _parsed(parse_state, fields.get("state"))
    phys = _parsed(parse_state, fields.get("phys state"))
    rate = _parsed(parse_rate, fields.get("rate"))
    return Port(block["device"], block["port"], state and state["name"],
                phys and phys["name"], rate and rate["gbps"], fields.get("link_layer"),
                (block["line"], block["last"]))


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    del expectations
    blocks = parse(text)
    if not blocks:
        raise DiagnoseError(f"{source}: ibstatus output without a port block "
                            "(\"Infiniband device '<name>' port N status:\" and its fields)")
    ports = [port_of(b) for b in blocks]
    around = read_surround(text)
    found = judge_ports(source, ports) + mad_findings(source, around.mad_failures, ports)
    summary = {"format": "ibstatus", "fabric": fabric_of(ports),
               "ports": [{**p.to_dict(), "rate": b["fields"].get("rate"),
                          "base_lid": b["fields"].get("base lid")}
                         for p, b in zip(ports, blocks, strict=True)],
               "mad_failures": around.mad_failures,
               "commands": [c.text for c in around.commands]}
    return Report(source, KIND, summary, found)


ANALYZER = Analyzer(KIND, sniff, analyze)
