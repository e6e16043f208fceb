"""``nvidia-bug-report.log`` (and ``.log.gz``): the support bundle NVIDIA asks every operator
for, read section by section into one report.

``nvidia-bug-report.sh`` writes one section per file or command, each after a line of 44
underscores: ``*** /path`` (a file, with an ``*** ls:`` line) or the command line itself
(``/usr/bin/nvidia-smi --query``), then its output. Each section whose content a diagnose
format recognises (``nvidia-smi -q``, the kernel log, the Fabric Manager log, ``ibstat`` ...)
is read by that format; its findings are this report's, each citing the section. The
summary lists every section, what read it, and the report's script version and date.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from exemplar_tune.diagnose.base import Analyzer, DiagnoseError, Finding, Report

KIND = "nvidia-bug-report"
LABEL = "nvidia-bug-report.log"
SEPARATOR = "_" * 44
_START = "Start of NVIDIA bug report log file"
_VERSION = re.compile(r"nvidia-bug-report\.sh Version: (\S+)")
_DATE = re.compile(r"^Date: (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Section:
    """One section: its title (the file or command), its first line number and its text."""

    title: str
    line: int
    text: str


def sniff(text: str) -> bool:
    """The report's banner, or two sections headed by ``*** /path``."""
    head = text[:65536]
    return _START in head or head.count(f"{SEPARATOR}\n\n*** /") >= 2


def sections(text: str) -> list[Section]:
    """The report's sections, in order; the first is the banner (titled by its first line, or
    ``header`` when no separator comes before it)."""
    found: list[Section] = []
    lines = text.split("\n")
    start, title = 0, "header"
    for number, line in enumerate(lines):
        if line.rstrip() == SEPARATOR:
            found.append(Section(title, start + 1, "\n".join(lines[start:number])))
            title, start = _heading(lines, number + 1)
    found.append(Section(title, start + 1, "\n".join(lines[start:])))
    return [s for s in found if s.text.strip() or s.title not in ("header", "(untitled)")]


def _heading(lines: list[str], after: int) -> tuple[str, int]:
    """The section's title (its first non-blank line, without ``*** ``: a path or a command)
    and the index of its first line of content (after the title and the ``*** ls:`` lines)."""
    index = after
    while index < len(lines) and not lines[index].strip():
        index += 1
    if index == len(lines):
        return "(untitled)", index
    title = lines[index].strip().removeprefix("*** ")[:200]
    index += 1
    while index < len(lines) and lines[index].startswith("*** "):
        index += 1
    return title, index


def analyze(text: str, source: str, expectations: dict[str, Any]) -> Report:
    from exemplar_tune.diagnose import detect  # the registry holds this format too

    parts = sections(text)
    if len(parts) < 2:
        raise DiagnoseError(f"{source}: an nvidia-bug-report.log without sections (looked for "
                            f"lines of {len(SEPARATOR)} underscores)")
    findings: list[Finding] = []
    read: list[dict[str, Any]] = []
    for part in parts[1:]:
        analyzer = detect(part.text)
        entry = {"title": part.title, "line": part.line, "read_as": None}
        if analyzer is not None and analyzer.kind != KIND:
            try:
                report = analyzer.analyze(part.text, f"{source} [{part.title}, from line "
                                          f"{part.line}]", expectations)
            except DiagnoseError as exc:
                entry["error"] = str(exc)
            else:
                entry["read_as"] = report.kind
                findings += report.findings
        read.append(entry)
    header = parts[0].text
    version, date = _VERSION.search(header), _DATE.search(header)
    summary = {"script_version": version.group(1) if version else None,
               "date": date.group(1).strip() if date else None,
               "sections": read, "sections_read": sum(e["read_as"] is not None for e in read)}
    return Report(source, KIND, summary, findings)


ANALYZER = Analyzer(KIND, sniff, analyze, label=LABEL)
