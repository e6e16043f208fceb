"""``nvidia-smi topo -m``: how far each GPU's traffic travels to its nearest NIC.

The matrix is read by the reader the facts use (``readers.gpu_topology``: ``NIC#`` columns
with their legend, the RDMA device names of older drivers, a paste whose GPU rows lost their
NIC columns) and judged by the preflight check ``fabric.gpu-nic-locality`` itself. A matrix
without NIC columns or rows cannot say where the NICs are: the finding says the placement is
unknown, never that the host has no NIC.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.gpu_topology import (
    parse_topology,
)

from exemplar_tune.checks.run import run_checks
from exemplar_tune.diagnose.base import INFO, Analyzer, DiagnoseError, Report, finding

KIND = "nvidia-smi topo -m"
LAYER = "fabric"
CHECK = "fabric.gpu-nic-locality"
_HEADER = re.compile(r"^[ \t]*GPU0[ \t][^\n]*CPU[ \t]Affinity", re.MULTILINE)
_SELF = re.compile(r"^GPU0[ \t]+X\b", re.MULTILINE)


def sniff(text: str) -> bool:
    """A header row that starts with ``GPU0`` and names ``CPU Affinity``, and GPU0's own row
    (``GPU0  X``)."""
    head = text[:65536]
    return bool(_HEADER.search(head)) and bool(_SELF.search(head))


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    del expectations
    try:
        topo = parse_topology(text, source)
    except HostStateError as exc:
        raise DiagnoseError(str(exc)) from None
    if not topo["gpus"]:
        raise DiagnoseError(f"{source}: nvidia-smi topo -m without GPU rows")
    summary = {"gpus": len(topo["gpus"]), "nics": topo["nics"], "topology": topo,
               "notes": topo["notes"]}
    if not any(row["nics"] for row in topo["gpus"].values()):
        return Report(source, KIND, summary, [finding(
            CHECK, INFO, f"no NIC column or row in this matrix: where the NICs of its "
            f"{len(topo['gpus'])} GPUs are is unknown (not that the host has none)", [source])])
    facts = {LAYER: {"gpu_nic_topology": topo, "errors": [],
                     "sources": {"gpu_nic_topology": source}}}
    (result,) = [r for r in run_checks(facts, {}, [LAYER]) if r.id == CHECK]
    notes = "".join(f"; {note}" for note in topo["notes"])
    return Report(source, KIND, summary, [finding(
        CHECK, result.status, result.detail + notes, result.evidence or [source],
        nearest=result.observed)])


ANALYZER = Analyzer(KIND, sniff, analyze)
