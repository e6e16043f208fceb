"""Kernel logs (``dmesg``, ``dmesg -T``, ``dmesg --time-format iso``, ``journalctl -k``,
syslog): the GPU Xid incidents in them, judged by the preflight check ``gpu.xids``, and the
peer-memory module's load failures (``nvidia_peermem: Unknown symbol ...``), which turn
GPUDirect RDMA off (``fabric.gpudirect-rdma``).

The log is read by the gpu layer's own reader (:mod:`xid`: the driver's ``NVRM: Xid`` and
"fallen off the bus" lines, one incident per burst) from the text as given, prefixes and all,
and judged with the same Xid policy as preflight: the profile's ``gpu.xid_policy`` when
``expectations["profile"]`` is given, else the defaults. Incidents the policy only notes (an
application's own fault, such as an Xid 13 burst) are an ``info`` finding: the node passes.
nvidia-smi is not needed, so a GPU that fell off the bus (nvidia-smi then fails) still has its
incident judged.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers.xid import parse_kernel_log

from exemplar_tune.checks.run import run_checks
from exemplar_tune.diagnose.base import INFO, PASS, Analyzer, Report, finding
from exemplar_tune.diagnose.peermem import kernel_failures

KIND = "kernel log"
LAYER = "gpu"
_KERNEL_LINE = re.compile(r"^(?:> ?)?(?:\[\s*\d+\.\d+\]|\[\w{3} \w{3} [ \d]\d |"
                          r"\w{3} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: |"
                          r"\d{4}-\d\d-\d\dT\S+ \S+ kernel: |kern\s*:)", re.MULTILINE)


def sniff(text: str) -> bool:
    """The driver's ``NVRM:`` lines, or a log whose lines carry kernel-log stamps."""
    if "NVRM:" in text:
        return True
    lines = [line for line in text.splitlines()[:50] if line.strip()]
    return len(lines) >= 3 and sum(bool(_KERNEL_LINE.match(line)) for line in lines) * 2 > \
        len(lines)


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    raw = getattr(text, "raw", text)  # the stamps the normalisation removed tell incidents apart
    log = parse_kernel_log(raw)
    events = log["events"]
    summary = {"events": len(events), "boots": log["boots"], "clock": log["clock"],
               "sxid_lines": log["sxid_lines"]}
    peer = [f for f in (kernel_failures(raw, source),) if f]
    if not events:
        return Report(source, KIND, summary, [finding(
            f"{LAYER}.xids", PASS, "no GPU Xid or bus loss in the kernel log", [source]), *peer])
    facts = {LAYER: {"xids": events, "present": None, "errors": [],
                     "sources": {"xids": source}}}
    profile = expectations.get("profile") or {}
    (result,) = [r for r in run_checks(facts, profile, [LAYER]) if r.id == f"{LAYER}.xids"]
    # a pass that names incidents (the application's own faults) is shown, not hidden
    status = INFO if result.status == PASS and result.observed else result.status
    return Report(source, KIND, summary, [finding(
        result.id, status, result.detail, result.evidence or [source],
        incidents=result.observed, fix=result.fix), *peer])


ANALYZER = Analyzer(KIND, sniff, analyze, label="kernel log (dmesg, journalctl -k, syslog)")
