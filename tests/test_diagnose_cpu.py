"""turbostat, numastat and perf: the classes of input behind the corpus, each varied from a
real capture in tests/fixtures/realworld so that the rule, not one file, is what passes."""

from __future__ import annotations

import pytest

from exemplar_tune.diagnose import DiagnoseError, diagnose_text, numastat
from tests.corpus import REALWORLD


def capture(family: str, name: str) -> str:
    return (REALWORLD / family / name).read_text()


def c_state(report):
    return report.findings[-1]


# --- turbostat -----------------------------------------------------------------------------

INTERVAL = capture("turbostat", "linux-turbostat8-interval-quiet-hide.txt")


@pytest.mark.parametrize(("column", "want"), [
    ("CPU%c7", "pass"), ("CPU%c8", "pass"), ("CPU%c10", "pass"), ("CPU%c3", "fail"),
])
def test_turbostat_residency_in_any_state_from_c6_down_counts(column, want):
    """The man page's C7 column renamed: every hardware state from C6 down counts, a
    shallower one (C3) does not, and then idle cores never reach C6."""
    text = INTERVAL.replace("CPU%c3\tCPU%c6\tCPU%c7", f"CPU%c2\tCPU%c6\t{column}")
    finding = c_state(diagnose_text(text, "t"))
    assert finding.status == want
    if want == "pass":
        assert finding.values["residency_pct"][column] == pytest.approx(99.98, abs=0.01)


def test_turbostat_a_busy_hyperthread_holds_its_core_out_of_the_judgement():
    """cpu4 is busy, so core 0 (cpu0 + cpu4) is not an idle core; with cpu4 idle it is one."""
    busy = c_state(diagnose_text(INTERVAL, "t"))
    quiet = INTERVAL.replace("\t0\t4\t3897\t99.99\t", "\t0\t4\t3\t0.09\t")
    idle = c_state(diagnose_text(quiet.replace("\t0\t4\t3898\t99.99\t", "\t0\t4\t3\t0.09\t"), "t"))
    assert (busy.values["idle_rows"], idle.values["idle_rows"]) == (6, 8)
    assert idle.values["deep_pct"] < busy.values["deep_pct"]  # core 0 sat in C1 meanwhile


def test_turbostat_headers_printed_once_summary_rows_open_intervals():
    lines = INTERVAL.splitlines()
    text = "\n".join(lines[:11] + lines[12:])  # the second header line removed
    report = diagnose_text(text, "t")
    assert [i["system"]["Busy%"] for i in report.summary["intervals"]] == [12.52, 12.59]


def test_turbostat_old_busy_header_and_sysfs_columns_are_headers():
    old = capture("turbostat", "aaronlu-turbostat8-fork-example-pctbusy.txt")
    assert diagnose_text(old, "o").summary["busy_cpus"] == 1
    sysfs = capture("turbostat", "linux-turbostat8-show-sysfs-quiet.txt")
    report = diagnose_text(sysfs, "s")
    assert [f.status for f in report.findings] == ["info", "info"]
    assert "no Busy% column" in report.findings[0].message


# --- numastat ------------------------------------------------------------------------------

CXL = capture("numastat", "lkml-cxl-hmu-numastat-default-cpuless-node2-77pages.txt")
NUMASTAT_ONLY = CXL[CXL.index("root@ubuntu-jammy-arm64:~/tools# numastat"):]


@pytest.mark.parametrize(("local", "other", "want"), [
    ("0", "77", "pass"),  # no local allocations: looks memory-only, not judged
    ("100", "77", "pass"),  # 177 pages, under the volume floor, not judged
    ("100000", "77000", "fail"),  # enough volume: 43.5 % remote is judged
])
def test_numastat_remote_share_needs_a_cpu_and_volume(local, other, want):
    text = NUMASTAT_ONLY.replace("139591               0", "139591          " + local.rjust(6))
    text = text.replace("1579              77", "1579          " + other.rjust(6))
    finding = diagnose_text(text, "n").findings[0]
    assert finding.status == want
    assert ("node2" in finding.values["not_judged"]) == (want == "pass")


def test_numastat_volume_floor_is_shared_with_processes():
    floor_pages = numastat.MIN_VOLUME_MB * 2**20 / numastat.PAGE_BYTES
    assert numastat.MIN_VOLUME_MB == 64.0 and floor_pages == 16384


def test_numastat_table_folded_at_the_screen_width_is_one_table():
    text = capture("numastat", "lkml-mm-cpuless-node-stats-numastat-before-after.txt")
    after = text[text.index("                            node0"):].splitlines()
    left = [" ".join(after[0].split()[:2])] + [" ".join(line.split()[:3]) for line in after[1:]]
    right = ["node2"] + [f"{line.split()[0]} {line.split()[3]}" for line in after[1:]]
    report = diagnose_text("\n".join([*left, "", *right]), "f")
    assert len(report.summary["tables"]) == 1
    assert report.summary["tables"][0]["nodes"] == ["node0", "node1", "node2"]
    assert report.findings[0].status == "warn"


def test_numastat_memory_imbalance_warns():
    text = capture("numastat", "numactl-115-numastat-cm-token-lines.txt")
    assert diagnose_text(text, "m").findings[0].status == "info"
    full = text.replace("MemFree             953", "MemFree              30")
    finding = diagnose_text(full, "m").findings[0]
    assert finding.status == "warn" and "node0 nearly full" in finding.message


def test_numastat_compact_total_row_is_a_sum_not_a_process():
    text = capture("numastat", "lkml-kvm-page-hinting-numastat-c-qemu-3pids-total.txt")
    report = diagnose_text(text, "c")
    assert [p["pid"] for p in report.summary["processes"]] == ["24463", "24479", "70718"]
    assert all(f.values["pid"] for f in report.findings)


def test_numastat_without_counters_or_rows_is_refused():
    with pytest.raises(DiagnoseError, match="^x: numastat output without counters, process"):
        diagnose_text("Per-node process memory usage (in MBs)\nnothing here\n", "x")


# --- perf ----------------------------------------------------------------------------------

BRANCH = capture("perf", "lkml-amd-lbr-branch-stack-report-stdio.txt")


def test_perf_one_row_under_a_header_is_a_table():
    lines = BRANCH.splitlines()
    report = diagnose_text("\n".join(lines[:12]), "b")
    assert report.summary["tables"][0]["rows"] == 1


def test_perf_two_rows_without_a_header_are_not_perf():
    rows = capture("perf", "liquorix-56-perf-top-stdio-empty-and-full-blocks.txt").splitlines()
    with pytest.raises(DiagnoseError, match="not a recognised format"):
        diagnose_text("\n".join(rows[-2:]), "r")


def test_perf_branch_target_in_the_smmu_counts():
    """Rows 2, 3, 10 and 11 branch to native_read_msr; made SMMU targets they count."""
    text = BRANCH.replace("[k] native_read_msr          -", "[k] arm_smmu_cmdq_issue_cmdlist  -")
    finding = diagnose_text(text, "b").findings[0]
    assert finding.status == "fail" and finding.values["smmu_pct"] == 25.0
    assert finding.values["symbols"] == {"arm_smmu_cmdq_issue_cmdlist": 25.0}
