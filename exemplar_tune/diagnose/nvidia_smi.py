"""``nvidia-smi -q`` text and ``nvidia-smi -q -x`` XML: the gpu layer's checks on one report.

The file is read by the same readers as ``facts`` (``nvidia_smi`` for the XML,
``nvidia_smi_text`` for the text people paste into tickets), put into the gpu layer's fact
shape and judged by the gpu checks themselves (:mod:`exemplar_tune.checks.gpu`): persistence
mode, uncorrectable ECC errors, pending or failed row remaps, pending page retirement, PCIe
link, clock-event reasons, temperature. A check that cannot judge the file (a section the
capture lacks, a profile key it does not set) gives no finding; a file no check can judge is
refused in one line (naming the first field that could not be read, if any).

Expectations: ``expectations["profile"]`` (a loaded profile) when given; otherwise the gpu
settings every shipped profile agrees on (:func:`default_profile`: persistence mode on, the
temperature limit), since a file does not say which cluster type it came from. A file that
lists fewer GPUs than ``Attached GPUs`` (a cut capture, or ``nvidia-smi -i``) is a
``gpu.count`` warning: the GPUs it leaves out are not judged.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import gpu as layer_gpu
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers import nvidia_smi_text
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import HostStateError

from exemplar_tune.checks.base import SKIP
from exemplar_tune.checks.run import run_checks
from exemplar_tune.diagnose.base import (
    WARN,
    Analyzer,
    DiagnoseError,
    Finding,
    Report,
    finding,
)
from exemplar_tune.profile import auto_candidates

KIND = "nvidia-smi"
LAYER = "gpu"
_XML_ROOT = re.compile(r"<nvidia_smi_log[\s>]")


def sniff(text: str) -> bool:
    head = text.lstrip()[:4096]
    if head.startswith("<"):
        return bool(_XML_ROOT.search(head))
    return nvidia_smi_text.looks_like_text_report(text)


def default_profile() -> dict[str, Any]:
    """``{"gpu": {...}}``: the gpu settings whose value is the same in every shipped profile of
    a GPU product (``generic`` knows no product)."""
    first, *rest = [profile.get(LAYER) or {} for profile in auto_candidates()
                    if (profile.get("match") or {}).get("gpu")]
    return {LAYER: {key: value for key, value in first.items()
                    if all(other.get(key) == value for other in rest)}}


def gpu_facts(report: dict[str, Any], source: str) -> dict[str, Any]:
    """The gpu layer's facts for one report, as ``facts`` gives them (no kernel log: Xids
    unknown)."""
    sheet = FactSheet()
    layer_gpu.put_report(sheet, report, source)
    sheet.put("xids", None, source)
    return sheet.result()


def _finding(result: Any, source: str) -> Finding:
    return finding(result.id, result.status, result.detail, result.evidence or [source],
                   observed=result.observed, expected=result.expected)


def _cut(facts: dict[str, Any], source: str) -> list[Finding]:
    attached, listed = facts.get("attached_gpus"), facts.get("count")
    if attached is None or listed is None or attached <= listed:
        return []
    return [finding(f"{LAYER}.count", WARN,
                    f"{listed} of the {attached} attached GPUs listed (a cut capture, or "
                    f"nvidia-smi -i): the other {attached - listed} are not judged", [source],
                    attached_gpus=attached, listed=listed)]


def _nothing_judged(facts: dict[str, Any], source: str) -> str:
    """The one-line refusal for a report none of the gpu checks can judge."""
    errors = [e for e in facts["errors"] if e["fact"].startswith("gpus.")]
    unreadable = (f"; {len(errors)} field(s) unreadable, first {errors[0]['path']}: "
                  f"{errors[0]['error']}" if errors else "")
    return (f"{source}: nvidia-smi report without any field the gpu checks judge (persistence "
            f"mode, ECC, row remapping, page retirement, PCIe link, clock events, "
            f"temperature){unreadable}")


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    try:
        report = nvidia_smi_text.parse_report(text, source)
    except HostStateError as exc:
        raise DiagnoseError(str(exc)) from None
    if not report["gpus"]:
        raise DiagnoseError(f"{source}: nvidia-smi report lists no GPU")
    facts = gpu_facts(report, source)
    profile = expectations.get("profile") or default_profile()
    results = run_checks({LAYER: facts}, profile, layers=[LAYER])
    # a file to read means nvidia-smi answered: gpu.nvidia-smi has nothing to say of it
    judged = [_finding(r, source) for r in results
              if r.status != SKIP and r.id != f"{LAYER}.nvidia-smi"]
    if not judged:
        raise DiagnoseError(_nothing_judged(facts, source))
    findings = _cut(facts, source) + judged
    summary = {"format": "xml" if text.lstrip().startswith("<") else "text",
               "profile": profile.get(LAYER) or {}, LAYER: facts}
    return Report(source, KIND, summary, findings)


ANALYZER = Analyzer(KIND, sniff, analyze, label="nvidia-smi -q / -q -x")
