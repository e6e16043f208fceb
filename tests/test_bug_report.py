"""``nvidia-bug-report.log``: the report read section by section into one report.

The real reports in tests/fixtures/realworld/bug-report/ (public excerpts by others) hold no
section a diagnose format reads: every section is listed, none judged. The reading of the
sections that matter is shown on a report put together at test time from real parts (the
2024 report's banner, then real captures as its ``nvidia-smi --query`` and kernel log
sections): the findings are those of the parts, each citing its section.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from exemplar_tune.diagnose import DiagnoseError, diagnose_paths, diagnose_text
from exemplar_tune.diagnose.bug_report import SEPARATOR, sections
from tests.corpus import REALWORLD

REPORTS = REALWORLD / "bug-report"
HEAD = REPORTS / "xi8zhu-deep_learning_framework_csi-nvidia-bug-report-a100-pcie-head-sections.txt"
SMI = REALWORLD / "nvidia-smi-text" / "stas00-ml-engineering-debug-a100-xid63-q-excerpt.txt"
KERNEL = (REALWORLD / "kernel-log"
          / "kargarisaac-small-lm-training-journalctl-xid79-xid154-node-reboot.log")


def composed() -> str:
    """The 2024 report's banner and sections, then real captures as two more sections."""
    return "\n".join([HEAD.read_text().rstrip("\n"), SEPARATOR, "",
                      "/usr/bin/nvidia-smi --query", "", SMI.read_text().rstrip("\n"),
                      SEPARATOR, "", "*** /var/log/kern.log",
                      "*** ls: -rw-r----- 1 syslog adm 1 2026-01-01 /var/log/kern.log", "",
                      KERNEL.read_text().rstrip("\n"), SEPARATOR, ""])


@pytest.mark.parametrize("path", sorted(REPORTS.glob("*.txt")), ids=lambda p: p.name)
def test_a_real_report_lists_its_sections_and_judges_none(path: Path) -> None:
    report = diagnose_text(path.read_text(), path.name).to_dict()
    assert report["kind"] == "nvidia-bug-report" and report["findings"] == []
    assert report["summary"]["sections_read"] == 0
    titles = [s["title"] for s in report["summary"]["sections"]]
    assert titles and all(t.strip() for t in titles)


def test_the_2024_report_names_its_script_version_and_its_sections():
    summary = diagnose_text(HEAD.read_text(), HEAD.name).to_dict()["summary"]
    assert summary["script_version"] == "34614034"
    assert [s["title"] for s in summary["sections"]][:2] == [
        "/sys/bus/pci/devices/0000:31:00.0/power/control",
        "/sys/bus/pci/devices/0000:31:00.0/power/runtime_status"]
    assert "/var/log/nvidia-installer.log does not exist" in [
        s["title"] for s in summary["sections"]]


def test_the_sections_a_format_reads_give_their_findings_citing_the_section(tmp_path):
    path = tmp_path / "nvidia-bug-report.log.gz"
    path.write_bytes(gzip.compress(composed().encode()))  # as nvidia-bug-report.sh writes it
    (report,), errors = diagnose_paths([str(path)])
    assert errors == []
    doc = report.to_dict()
    read = {s["title"]: s["read_as"] for s in doc["summary"]["sections"]}
    assert read["/usr/bin/nvidia-smi --query"] == "nvidia-smi"
    assert read["/var/log/kern.log"] == "kernel log"
    xids = [f for f in doc["findings"] if f["check_id"] == "gpu.xids"]
    assert xids and xids[0]["status"] == "fail" and "79" in xids[0]["message"]
    assert any("[/var/log/kern.log, from line" in e for e in xids[0]["evidence"])
    smi = [f for f in doc["findings"] if f["evidence"] and "[/usr/bin/nvidia-smi --query" in
           f["evidence"][0]]
    assert smi, doc["findings"]


def test_sections_are_split_on_the_separator_with_their_titles():
    text = "\n".join(["banner", SEPARATOR, "", "*** /etc/issue", "*** ls: -rw", "Ubuntu",
                      SEPARATOR, "", "/usr/bin/lspci -vvv", "", "00:00.0 Host bridge"])
    parts = sections(text)
    assert [(p.title, p.text.strip()) for p in parts] == [
        ("header", "banner"), ("/etc/issue", "Ubuntu"),
        ("/usr/bin/lspci -vvv", "00:00.0 Host bridge")]


def test_a_banner_without_sections_is_one_line():
    with pytest.raises(DiagnoseError, match="without sections"):
        diagnose_text("Start of NVIDIA bug report log file.  Please include this file\n", "r")
