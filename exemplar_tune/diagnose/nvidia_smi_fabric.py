"""A pasted ``Fabric`` section of ``nvidia-smi -q`` (``nvidia-smi -q | grep -A12 Fabric``,
``grep -C3 CliqueId``): the fabric verdict it still holds.

Operators paste the section alone, without the report's banner or GPU lines. It is read by the
same text reader as a whole report (the section put under one GPU entry named ``pasted
fragment``) and judged by the preflight check ``gpu.fabric-state`` itself: a registration that
did not complete (``Status: Insufficient Resources``) or ``Health / Summary: Unhealthy`` is a
fabric fault whatever else the fragment lacks. What the fragment does not show (other GPUs,
the health lines grep cut off) is not judged, and the finding says so.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.readers import nvidia_smi_text
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError

from exemplar_tune.checks.base import SKIP
from exemplar_tune.checks.run import run_checks
from exemplar_tune.diagnose.base import Analyzer, DiagnoseError, Report, finding
from exemplar_tune.diagnose.nvidia_smi import gpu_facts

KIND = "nvidia-smi -q fabric section"
CHECK = "gpu.fabric-state"
GPU_LINE = "GPU 00000000:00:00.0"  # the stand-in GPU entry the section is put under
_FABRIC = re.compile(r"^([ \t]*)Fabric[ \t]*$", re.MULTILINE)
_FIELD = re.compile(r"^[ \t]+(State|Status|CliqueId|ClusterUUID|Summary)[ \t]+:", re.MULTILINE)


def sniff(text: str) -> bool:
    """A ``Fabric`` line followed by its indented ``State``/``Status`` fields, in a text
    without the whole report's banner or GPU lines."""
    head = text[:65536]
    found = _FABRIC.search(head)
    return bool(found) and len(set(_FIELD.findall(head, found.end()))) >= 2 \
        and not nvidia_smi_text.looks_like_text_report(head)


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    del expectations
    report = _as_report(text, source)
    facts = gpu_facts(report, source)
    results = [r for r in run_checks({"gpu": facts}, {}, ["gpu"]) if r.id == CHECK]
    if not results or results[0].status == SKIP:
        raise DiagnoseError(f"{source}: a Fabric section without a State, Status or Health "
                            "the gpu.fabric-state check can judge")
    (result,) = results
    fabric = (report["gpus"][0].get("fabric") or {}) if report["gpus"] else {}
    return Report(source, KIND, {"fabric": fabric}, [finding(
        CHECK, result.status, result.detail.replace(GPU_LINE[4:], "the pasted GPU")
        + " (a pasted Fabric section of one GPU: the other GPUs and any field it leaves out are "
        "not judged)",
        [source], fabric=fabric)])


def _as_report(text: str, source: str) -> dict[str, Any]:
    """The section as a one-GPU text report, read by the report reader."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if _FABRIC.match(line))
    indent = len(lines[start]) - len(lines[start].lstrip())
    body = [line[indent:] if line[:indent].strip() == "" else line.strip()
            for line in lines[start:] if line.strip() and line.strip() != "--"]
    wrapped = "\n".join([GPU_LINE, *("    " + line for line in body)]) + "\n"
    try:
        return nvidia_smi_text.parse_report(wrapped, source)
    except HostStateError as exc:
        raise DiagnoseError(str(exc)) from None


ANALYZER = Analyzer(KIND, sniff, analyze)
