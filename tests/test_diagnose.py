"""diagnose: every real sample parses with the values in the file; variants; bad input."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exemplar_tune.checks import CHECKS
from exemplar_tune.diagnose import (
    ANALYZERS,
    KINDS_TEXT,
    DiagnoseError,
    Report,
    compare_nccl_tests,
    detect,
    diagnose_paths,
    diagnose_text,
    nccl_tests,
    numastat,
    perf,
    steptime,
    turbostat,
)
from exemplar_tune.diagnose.base import SIGNAL_CHECKS, finding
from tests.conftest import SAMPLES
from tests.helpers import cli_env
from tests.test_cli import cli

GB300 = "nccl_tests_all_gather_perf_gcp_a4xmax_gb300.txt"
A3MEGA = "nccl_tests_all_reduce_perf_2x8xH100_gcp_a3mega.txt"
RTX5090 = "nccl_tests_reduce_scatter_perf_format_rtx5090.txt"
MEGATRON = "steptime_megatron_composed.txt"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def diagnose(name: str, expectations: dict | None = None) -> Report:
    return diagnose_text(sample(name), name, expectations)


def by_check(report: Report, check_id: str) -> list:
    return [f for f in report.findings if f.check_id == check_id]


# --- detection -----------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "want"), [
    ("turbostat_intel_srf0_stats-collect.txt", "turbostat"),
    ("turbostat_amd_genoa0_stats-collect.txt", "turbostat"),
    ("turbostat_header_excerpts.txt", "turbostat"),
    ("numastat_default_2socket_bdw.txt", "numastat"),
    ("numastat_p_per_process.txt", "numastat"),
    ("perf_report_stdio_samples.txt", "perf"),
    ("perf_top_arm_smmu_cmdq_issue_cmdlist.txt", "perf"),
    (GB300, "nccl-tests"),
    (A3MEGA, "nccl-tests"),
    (RTX5090, "nccl-tests"),
    ("nccl_debug_info_topo_lines.txt", "nccl-log"),
    (MEGATRON, "step-time"),
    ("nsys_stats_csv_allgather_before.csv", "nsys"),
    ("dmesg_nvrm_xid_samples.txt", "kernel log"),
    ("nccl_topo_azure_ndv5_h100.xml", "nccl topology"),
    ("sysfs_cpuidle_cpufreq_spr1_intel-pepc.txt", None),
])
def test_detect_by_content(name, want):
    have = detect(sample(name))
    assert (have.kind if have else None) == want


# --- turbostat -----------------------------------------------------------------------------

def test_turbostat_srf_tab_separated_hw_c6():
    r = diagnose("turbostat_intel_srf0_stats-collect.txt")
    assert (r.summary["rows"], r.summary["summary_rows"], r.summary["cpus"]) == (225, 1, 224)
    assert r.summary["nominal_mhz"] == 2000.0 and r.summary["max_mhz"] == 2700.0
    c6 = [f for f in by_check(r, "cpu.deep-cstates-disabled") if "idle_cpu_c6_pct" in f.values]
    assert c6[0].status == "pass" and c6[0].values["idle_cpu_c6_pct"] == 99.48
    assert "[CPU%c6]" in c6[0].evidence[0]
    assert any(f.status == "info" and "no busy cores" in f.message for f in r.findings)
    assert r.status == "pass"


def test_turbostat_amd_missing_columns():
    r = diagnose("turbostat_amd_genoa0_stats-collect.txt")
    assert r.summary["cpus"] == 128 and "CPU%c6" not in r.summary["columns"]
    info = [f for f in r.findings if "software_pct" in f.values][0]
    assert info.status == "info" and info.values["software_pct"]["C2%"] == 98.95


def test_turbostat_space_separated_constrained_pm_qos_and_busy_core():
    r = diagnose("turbostat_header_excerpts.txt")
    pm = [f for f in r.findings if "cpu_dma_latency_us" in f.values][0]
    assert (pm.status, pm.values["cpu_dma_latency_us"]) == ("warn", 8000)
    assert pm.evidence == ("turbostat_header_excerpts.txt:21",)
    freq = [f for f in r.findings if "busy_mhz" in f.values][0]
    assert freq.values["busy_cpus"] == ["479"] and freq.values["busy_mhz"] == 3200.0
    assert freq.values["nominal_mhz"] == 2100.0 and freq.status == "warn"  # 3200 < 0.9 x 3900


@pytest.mark.parametrize(("bzy", "turbo", "want"), [
    ("2000", None, "fail"), ("2000", 3000, "fail"), ("2500", 3000, "warn"),
    ("2900", 3000, "pass"), ("2600", None, "pass"),
])
def test_turbostat_busy_core_frequency(bzy, turbo, want):
    text = ("Package\tCore\tCPU\tAvg_MHz\tBusy%\tBzy_MHz\tTSC_MHz\tCPU%c6\n"
            "-\t-\t-\t900\t45.00\t" + bzy + "\t2000\t10.00\n"
            "0\t0\t0\t1990\t99.50\t" + bzy + "\t2000\t0.00\n"
            "0\t1\t1\t20\t1.00\t" + bzy + "\t2000\t0.20\n")
    r = diagnose_text(text, "t", {"turbo_mhz": turbo} if turbo else None)
    freq = [f for f in r.findings if "busy_mhz" in f.values][0]
    assert freq.status == want
    c6 = [f for f in r.findings if "idle_cpu_c6_pct" in f.values][0]
    assert c6.status == "fail" and c6.values["idle_cpu_c6_pct"] == 0.2


def test_turbostat_banner_without_table_and_header_only():
    r = diagnose_text("turbostat version 2024.12.03\n/dev/cpu_dma_latency: 0 usec "
                      "(constrained)\n", "b")
    assert [f.status for f in r.findings] == ["warn"]
    with pytest.raises(DiagnoseError, match="^h: turbostat output without a table"):
        diagnose_text("turbostat version 2024.12.03\nPackage Core CPU Busy% Bzy_MHz\n", "h")


# --- numastat ------------------------------------------------------------------------------

def test_numastat_default_remote_ratio():
    r = diagnose("numastat_default_2socket_bdw.txt")
    f = by_check(r, "cpu.job-cpus-gpu-local")[0]
    assert f.values["remote_ratio"] == {"node0": round(7664 / (67791294 + 7664), 4),
                                        "node1": round(5610521 / (51731637 + 5610521), 4)}
    assert f.values["worst_node"] == "node1" and f.status == "warn"  # 9.8 %
    assert f.evidence == ("numastat_default_2socket_bdw.txt:9-10",)
    assert r.summary["counters"]["numa_hit"] == {"node0": 67798958, "node1": 57342158}


def test_numastat_per_process_blocks():
    r = diagnose("numastat_p_per_process.txt")
    assert [(p["pid"], p["name"]) for p in r.summary["processes"]] == [
        ("6295", "ddr_dotproduct"), ("15963", "hbm_dotproduct")]
    second = r.findings[1].values
    assert second["node_mb"] == {"node0": 0.57, "node1": 17.29} and second["main_node"] == "node1"
    assert second["off_node_share"] == round(1 - 17.29 / 17.86, 4)
    assert {f.status for f in r.findings} == {"info"}  # tiny processes are not judged


@pytest.mark.parametrize(("row", "want"), [
    ("701 (hot_cold)     501      0    601  1101", "fail"),
    ("702 (trainer)     9500      0    500 10000", "pass"),
    ("703 (trainer)     8500      0   1500 10000", "warn"),
])
def test_numastat_compact(row, want):
    # the compact sample quoted (commented) in numastat_p_per_process.txt, rows varied
    text = ("Per-node process memory usage (in MBs)\nPID             Node 0 Node 1 Node 2 Total\n"
            "--------------  ------ ------ ------ -----\n" + row + "\n")
    assert diagnose_text(text, "c").findings[0].status == want


# --- perf ----------------------------------------------------------------------------------

def test_perf_top_smmu_share():
    r = diagnose("perf_top_arm_smmu_cmdq_issue_cmdlist.txt")
    first, second = by_check(r, "vm.cmdqv")
    assert first.values["symbols"] == {"arm_smmu_cmdq_issue_cmdlist": 27.43,
                                       "arm_smmu_atc_inv_domain": 0.97}
    assert first.values["smmu_pct"] == 28.4 and first.status == "fail"
    assert first.values["event"] == "cycles"
    assert first.evidence == ("perf_top_arm_smmu_cmdq_issue_cmdlist.txt:7,19",)
    assert second.values["smmu_pct"] == 81.61 and second.values["event"] == "cycles:ppp"
    assert r.status == "fail"


def test_perf_report_stdio_no_smmu():
    r = diagnose("perf_report_stdio_samples.txt")
    assert [t["event"] for t in r.summary["tables"]] == ["probe:schedule", "cycles"]
    assert [t["rows"] for t in r.summary["tables"]] == [17, 12]
    assert r.summary["tables"][1]["top"][0] == {"symbol": "memcpy", "pct": 7.59}
    assert all(f.status == "pass" and f.values["smmu_pct"] == 0 for f in r.findings)


@pytest.mark.parametrize(("pct", "want"), [("0.50", "pass"), ("2.00", "warn"), ("5.10", "fail")])
def test_perf_thresholds_children_and_symbols(pct, want):
    text = ("# Children      Self  Command  Shared Object      Symbol\n"
            f"    90.00%     {pct}%  python   [kernel.kallsyms]  [k] __arm_smmu_tlb_inv_range\n"
            "    40.00%     1.00%  python   [kernel.kallsyms]  [k] do_syscall_64\n"
            "    30.00%     0.00%  python   [kernel.kallsyms]  [k] arm_smmu_tlb_inv_context\n")
    f = diagnose_text(text, "p").findings[0]
    assert f.status == want and f.values["smmu_pct"] == float(pct)  # Self column, not Children


@pytest.mark.parametrize(("raw", "want"), [
    ("arm_smmu_atc_inv_domain.constprop.42", "arm_smmu_atc_inv_domain"),
    ("percpu_counter_ad>", "percpu_counter_ad"), ("memcpy", "memcpy"),
])
def test_perf_symbol_cleanup(raw, want):
    assert perf.symbol(raw) == want


# --- step time -----------------------------------------------------------------------------

def test_megatron_fixture_periodic_stalls():
    r = diagnose(MEGATRON)
    s = r.summary
    assert (s["format"], s["unit"], s["warmup"], s["steps"]) == ("megatron", "ms", 15, 285)
    assert s["spike_steps"] == list(range(25, 301, 25))
    assert s["periodicity"]["period_steps"] == 25 and s["periodicity"]["periodic"]
    stalls = by_check(r, "cpu.housekeeping-overlap")[0]
    assert stalls.status == "fail" and 60 < stalls.values["stall_ms"] < 80
    assert by_check(r, "workload.step-time-stability")[0].status == "pass"


def _steps(seed: int, n: int, base: float, stall_every: int = 0, stall: float = 0.0,
           slow_share: float = 0.0, slow: float = 0.0) -> list[float]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ms = rng.gauss(base, base * 0.004)
        if stall_every and i % stall_every == stall_every - 1:
            ms += rng.uniform(stall * 0.8, stall * 1.2)
        if rng.random() < slow_share:
            ms += slow
        out.append(ms)
    return out


@pytest.mark.parametrize(("fmt", "stalls", "shape"), [
    ("plain_ms", "pass", "pass"),
    ("nemo", "pass", "pass"),
])
def test_step_time_clean_runs(fmt, stalls, shape):
    values = _steps(1, 400, 950.0)
    text = {"plain_ms": "\n".join(f"{v:.2f}" for v in values),
            "nemo": "\n".join(f"Epoch 0: {i}/400 [00:10<00:00] train_step_timing in s: "
                              f"{v / 1000:.4f}, reduced_train_loss=2.1" for i, v in
                              enumerate(values))}[fmt]
    r = diagnose_text(text, fmt)
    assert r.kind == "step-time" and r.summary["warmup"] == 20
    assert abs(r.summary["median_ms"] - 950.0) < 2
    assert [f.status for f in r.findings] == [stalls, shape]


def test_step_time_periodic_housekeeping_stalls_seconds():
    values = _steps(2, 600, 420.0, stall_every=40, stall=75.0)
    r = diagnose_text("\n".join(f"step_time={v / 1000:.4f}" for v in values), "s")
    assert r.summary["unit"] == "s"
    assert r.summary["periodicity"]["period_steps"] == 40
    assert r.findings[0].status == "fail" and r.findings[0].check_id == "cpu.housekeeping-overlap"


def test_step_time_rare_aperiodic_stall_is_warn():
    values = _steps(3, 500, 1500.0)
    values[200] += 70.0
    r = diagnose_text("\n".join(f"{v:.1f}" for v in values), "r")
    assert r.findings[0].status == "warn" and r.summary["tail_fraction"] == round(1 / 475, 4)


def test_step_time_bimodal():
    values = _steps(4, 400, 1000.0, slow_share=0.3, slow=180.0)
    r = diagnose_text("\n".join(f"{v:.1f}" for v in values), "b")
    shape = by_check(r, "workload.step-time-stability")[0]
    assert shape.status == "warn" and shape.values["bimodal"]
    assert 0.2 < shape.values["clusters"]["high_fraction"] < 0.4
    assert by_check(r, "cpu.housekeeping-overlap")[0].status == "warn"  # widespread


@pytest.mark.parametrize(("values", "want"), [
    ([1.0, 2.0, 3.0, 4.0], {50: 2.5, 100: 4.0, 0: 1.0}),
    ([5.0], {50: 5.0, 99: 5.0}),
])
def test_percentile(values, want):
    for q, v in want.items():
        assert steptime.percentile(values, q) == pytest.approx(v)


@pytest.mark.parametrize(("spikes", "period", "periodic"), [
    ([10, 20, 30, 41, 50], 10, True), ([1, 2, 3, 4], 1, False), ([5, 90], None, False),
])
def test_periodicity(spikes, period, periodic):
    have = steptime.periodicity(spikes)
    assert (have["period_steps"], have["periodic"]) == (period, periodic)


def test_step_time_warmup_expectation_and_too_short():
    text = "\n".join(["5000"] * 3 + ["1000"] * 20)
    r = diagnose_text(text, "w", {"warmup_steps": 3})
    assert r.summary["warmup"] == 3 and r.summary["mean_ms"] == 1000.0
    with pytest.raises(DiagnoseError, match="^w: step-time log with 2 steps"):
        diagnose_text(text, "w", {"warmup_steps": 21})


# --- nccl-tests ----------------------------------------------------------------------------

def _sizes(report: Report) -> dict[int, dict]:
    return {row["size"]: row for row in report.summary["tests"][0]["sizes"]}


@pytest.mark.parametrize(("name", "collective", "n", "size", "busbw", "busbw_ip", "avg"), [
    (GB300, "all_gather", 23, 17179869184, 357.13, 373.54, 146.047),
    (A3MEGA, "all_reduce", 31, 536870912, 263.69, 262.97, 70.742),
    (RTX5090, "reduce_scatter", 8, 134217728, 2.73, 2.72, 1.73537),
])
def test_nccl_tests_samples(name, collective, n, size, busbw, busbw_ip, avg):
    r = diagnose(name)
    test = r.summary["tests"][0]
    assert (test["collective"], len(test["sizes"]), test["avg_busbw"]) == (collective, n, avg)
    row = _sizes(r)[size]
    assert (row["busbw"], row["in_place"]["busbw"]) == (busbw, busbw_ip)
    assert row["out_of_place"]["wrong"] == 0
    assert by_check(r, "fabric.nccl-validation")[0].status == "pass"
    assert by_check(r, "fabric.nccl-settings")[0].status == "info"


def test_nccl_tests_gb300_largest_size_collapsed_whitespace():
    r = diagnose(GB300)
    last = r.summary["tests"][0]["sizes"][-1]
    assert last["size"] == 17179869184 and last["count"] == 536870912
    assert last["type"] == "float" and last["redop"] == "none" and last["root"] == "-1"
    assert last["out_of_place"] == {"time_us": 42091.7, "algbw": 408.15, "busbw": 357.13,
                                    "wrong": 0}
    assert r.findings[0].values["largest_busbw"] == 357.13


@pytest.mark.parametrize(("expect", "want", "below"), [
    ({536870912: 250.0}, "pass", []),
    ({536870912: 300.0, 8589934592: 330.0}, "fail", ["536870912"]),
    ({"busbw": {"536870912": 264.0}}, "fail", ["536870912"]),
    ({123: 1.0}, "fail", []),  # no expected size measured
])
def test_nccl_tests_expectations(expect, want, below):
    f = by_check(diagnose(A3MEGA, expect), "fabric.nccl-settings")[0]
    assert f.status == want and sorted(f.values["below"]) == below


def _edit_header(text: str, edit) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith("#") and "size" in line.split() and "busbw" in line.split():
            line = "# " + " ".join(edit(line.lstrip("#").split(), header=True))
        elif line.strip() and line.split()[0].isdigit():
            line = " ".join(edit(line.split(), header=False))
        out.append(line)
    return "\n".join(out) + "\n"


def test_nccl_tests_cputime_variant():
    text = _edit_header(sample(A3MEGA), lambda t, header: [
        "cputime" if header and c == "time" else c for c in t])
    row = _sizes(diagnose_text(text, "c"))[536870912]
    assert row["out_of_place"]["cputime_us"] == 3817.5 and row["busbw"] == 263.69


def test_nccl_tests_iteration_stats_variant():
    def add(tokens, header):
        extra = ["i_min", "i_max", "i_p99", "i_cv%"] if header else ["1.0", "2.0", "1.9", "3.5"]
        out = []
        for i, tok in enumerate(tokens):
            out.append(tok)
            if (header and tok == "#wrong") or (not header and i in (8, 12)):
                out += extra
        return out
    text = _edit_header(sample(GB300), add)
    row = _sizes(diagnose_text(text, "i"))[17179869184]
    assert row["busbw"] == 357.13 and row["in_place"]["busbw"] == 373.54
    assert row["out_of_place"]["i_cv%"] == 3.5 and row["in_place"]["i_p99"] == 1.9


def test_nccl_tests_wrong_results_fail():
    text = sample(RTX5090).replace("0.94       0  2230.70", "0.94       7  2230.70")
    f = by_check(diagnose_text(text, "w"), "fabric.nccl-validation")[0]
    assert f.status == "fail" and f.values["wrong_rows"] == 1


def test_nccl_tests_a_row_is_wrong_once_whichever_half():
    text = sample(RTX5090).replace("0.94       0  2230.70    1.88    0.94       0",
                                   "0.94       3  2230.70    1.88    0.94       5")
    f = by_check(diagnose_text(text, "w"), "fabric.nccl-validation")[0]
    assert f.status == "fail" and f.values["wrong_rows"] == 1


def test_nccl_tests_blank_redop_column_shifts_nothing():
    """Some builds print alltoall's redop blank: the row has one token fewer than the header."""
    text = sample(RTX5090).replace("float     sum      -1", "float              -1")
    assert text != sample(RTX5090)
    row = _sizes(diagnose_text(text, "a"))[134217728]
    assert (row["busbw"], row["in_place"]["busbw"], row["root"]) == (2.73, 2.72, "-1")
    assert "redop" not in row and row["out_of_place"]["wrong"] == 0


@pytest.mark.parametrize(("error", "want", "wrong"), [
    ("1e-06", "pass", 0),   # within nccl-tests' float tolerance (1e-5)
    ("2e-03", "fail", 8),   # above it, in every row
    ("N/A", "info", None),  # -c 0
])
def test_nccl_tests_old_error_column_against_the_type_tolerance(error, want, wrong):
    def old(tokens, header):
        if header:
            return ["error" if t == "#wrong" else t for t in tokens]
        return [error if i in (8, 12) else t for i, t in enumerate(tokens)]
    f = by_check(diagnose_text(_edit_header(sample(RTX5090), old), "e"),
                 "fabric.nccl-validation")[0]
    assert f.status == want and f.values.get("wrong_rows") == wrong


def test_nccl_tests_without_header_rows_read_by_shape_or_refused():
    headless = "\n".join(line for line in sample(RTX5090).splitlines()
                         if not nccl_tests.header_names(line))
    test = diagnose_text(headless, "h").summary["tests"][0]
    assert (test["header"], len(test["sizes"]), test["sizes"][-1]["busbw"]) == (False, 8, 2.73)
    no_root = headless.replace("sum      -1", "sum")  # 12 columns: not the default layout
    with pytest.raises(DiagnoseError, match="^n: nccl-tests output without its column header"):
        diagnose_text(no_root, "n")


def test_nccl_tests_a_second_footer_starts_another_run_and_equal_runs_fold():
    """Rows after a footer are another run; runs of one test (same collective and sizes)
    are one entry: busbw the mean per size, with the least and greatest beside it."""
    text = sample(RTX5090)
    lines = text.splitlines()
    again = "\n".join(lines[13:]).replace(" 2.73 ", " 1.73 ")  # the second run: slower at 128M
    r = diagnose_text(text + again + "\n", "twice")
    [test] = r.summary["tests"]
    assert (test["runs"], len(test["sizes"]), test["run_lines"][0]) == (2, 8, 12)
    assert not test["interleaved_lines"]
    last = test["sizes"][-1]
    assert (last["busbw"], last["busbw_min"], last["busbw_max"]) == (2.23, 1.73, 2.73)
    assert r.summary["ranks"] == 2 and r.summary["hosts"] == 1
    single = diagnose_text(text, "once").summary["tests"][0]
    assert "runs" not in single and "busbw_min" not in single["sizes"][-1]


def test_nccl_tests_runs_at_several_scales_are_reported_apart():
    """Runs of one test at different rank counts (the ``# Rank`` lines, NCCL's ``nranks``,
    the launcher's ``-np``) are separate entries, never one mean; equal runs still fold."""
    body = "\n".join(sample(RTX5090).splitlines()[13:])  # the table, without its rank lines
    ranked = ("# Collective test starting: reduce_scatter_perf\n"
              f"#  Rank 15 Group  0 Pid 1 on b device  7 [0x01] H100\n{body}\n"
              f"#  Rank 63 Group  0 Pid 1 on b device  7 [0x01] H100\n"
              + body.replace(" 2.73 ", " 1.73 ") + "\n")
    tests = diagnose_text(ranked, "scales").summary["tests"]
    assert [(t["ranks"], t["name"], t["sizes"][-1]["busbw"], "runs" in t) for t in tests] == [
        (16, "reduce_scatter at 16 ranks", 2.73, False),
        (64, "reduce_scatter at 64 ranks", 1.73, False)]
    launched = diagnose_text("".join(
        f"$ mpirun -np {n} ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 1\n{body}\n"
        for n in (8, 8, 32)), "launched")
    assert [(t["ranks"], t.get("runs")) for t in launched.summary["tests"]] == [(8, 2), (32, None)]
    assert (launched.summary["ranks"], launched.summary["scales"]) == (None, [8, 32])
    assert [f.message.split(":")[0] for f in launched.findings
            if f.check_id == "fabric.nccl-validation"] == ["all_reduce at 8 ranks",
                                                          "all_reduce at 32 ranks"]


def test_compare_nccl_tests():
    a = diagnose(A3MEGA)
    text = "\n".join(line.replace("  263.69", "  131.85") for line in sample(A3MEGA).splitlines())
    cmp = compare_nccl_tests(a, diagnose_text(text, "b"))
    (coll,) = cmp["collectives"]
    assert coll["collective"] == "all_reduce"
    half = [s for s in coll["sizes"] if s["size"] == 536870912][0]
    assert half["ratio"] == round(131.85 / 263.69, 4)
    assert coll["geomean_ratio"] < 1.0
    same = compare_nccl_tests(a, a)["collectives"][0]
    assert same["geomean_ratio"] == 1.0 and all(s["ratio"] in (1.0, None) for s in same["sizes"])


def test_compare_nccl_tests_different_collectives():
    cmp = compare_nccl_tests(diagnose(GB300), diagnose(A3MEGA))
    assert cmp["collectives"][0]["collective"] == "all_gather vs all_reduce"
    assert cmp["warnings"] == ["different collectives (all_gather vs all_reduce): their bus "
                               "bandwidths are not a like-for-like comparison"]
    assert compare_nccl_tests(diagnose(A3MEGA), diagnose(A3MEGA))["warnings"] == []


def test_nccl_tests_header_without_rows():
    with pytest.raises(DiagnoseError, match="^e: nccl-tests output without result rows$"):
        diagnose_text("#  size count type redop root time algbw busbw #wrong\n", "e")


# --- NCCL debug log ------------------------------------------------------------------------

def test_nccl_log_sample():
    r = diagnose("nccl_debug_info_topo_lines.txt")
    assert r.summary["nccl_version"] == "2.18.3+cuda"
    assert r.summary["affinity"] == {"llama-3-8b-node-0-0 GPU 0": "0-23,48-71"}
    events = [(e["event"], e["line"]) for e in r.summary["topology_events"]]
    assert events == [("plugin_set", 8), ("set", 17), ("set", 38), ("loading", 39),
                      ("parse_error", 42)]
    topo = by_check(r, "runtime.topo-in-container")[0]
    assert topo.status == "fail" and topo.values["problems"] == ["parse_error"]
    assert by_check(r, "cpu.job-cpus-gpu-local")[0].status == "info"


def _log(*messages: str) -> str:
    return "".join(f"node1:123:456 [0] NCCL INFO {m}\n" for m in messages)


@pytest.mark.parametrize(("messages", "want", "needle"), [
    (["NCCL_TOPO_FILE set by environment to /etc/nccl/topo.xml",
      "Could not open XML topology file /etc/nccl/topo.xml : No such file or directory"],
     "fail", "could not open /etc/nccl/topo.xml (No such file or directory)"),
    (["NCCL_TOPO_FILE set by environment to /t.xml", "XML Topology has wrong version 2, 1 needed"],
     "fail", "wrong version 2"),
    (["NCCL_TOPO_FILE set by environment to /etc/nccl/topo.xml",
      "Loading topology file /etc/nccl/topo.xml"], "pass", "/etc/nccl/topo.xml"),
    (["Using network IB"], "info", "auto-detected"),
])
def test_nccl_log_topology(messages, want, needle):
    f = by_check(diagnose_text(_log(*messages), "n"), "runtime.topo-in-container")[0]
    assert f.status == want and needle in f.message


def test_nccl_log_two_hosts_gpu_0_are_two_gpus_by_their_launcher_labels():
    """Lines without NCCL's host prefix keep the host the launcher's label named."""
    text = ("nodea1: NCCL INFO Setting affinity for GPU 0 to 0-23\n"
            "nodeb2: NCCL INFO Setting affinity for GPU 0 to 24-47\n"
            "nodeb2: NCCL WARN NET/IB : Got async event : port error\n")
    r = diagnose_text(text, "l")
    assert r.summary["affinity"] == {"nodea1 GPU 0": "0-23", "nodeb2 GPU 0": "24-47"}
    assert r.summary["hosts"] == 2
    (f,) = by_check(r, "fabric.nccl-errors")
    assert f.status == "fail" and f.values["hosts"] == ["nodeb2"] and f.values["lines"] == [3]


def test_nccl_log_version_info_line_and_affinity_per_gpu():
    text = _log("NCCL version 2.21.5+cuda12.4", "Setting affinity for GPU 1 to 24-47",
                "Setting affinity for GPU 0 to 0-23")
    r = diagnose_text(text, "v")
    assert r.summary["nccl_version"] == "2.21.5+cuda12.4"
    assert r.summary["affinity"] == {"node1 GPU 1": "24-47", "node1 GPU 0": "0-23"}


# --- bad input, paths, shape ---------------------------------------------------------------

@pytest.mark.parametrize(("name", "data"), [
    ("empty", b""),
    ("blank", b"\n  \n\t\n"),
    ("garbage", bytes(random.Random(5).randrange(256) for _ in range(4096))),
    ("nul", b"numa_hit 1 2\x00\x00"),
    ("unknown", b"hello world\nthis is not a capture\n"),
    ("few_numbers", b"1\n2\n3\n"),
])
def test_bad_input_is_one_line_error(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    assert diagnose_paths([str(path)]) == ([], [refusal(path, name)])
    out = cli("diagnose", str(path))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == f"exemplar-tune: error: {refusal(path, name)}\n"


def refusal(path, name):
    # every registered format is named, the stream formats too
    assert all((a.label or a.kind) in KINDS_TEXT for a in ANALYZERS)
    assert "nvidia-smi -q / -q -x" in KINDS_TEXT and KINDS_TEXT.endswith("nsys SQLite export")
    if name in ("garbage", "nul"):
        return f"{path}: binary content, not a text capture ({KINDS_TEXT})"
    return f"{path}: not a recognised format ({KINDS_TEXT})"


def test_unreadable_path(tmp_path):
    reports, errors = diagnose_paths([str(tmp_path / "missing"), str(tmp_path)])
    assert reports == [] and len(errors) == 2
    assert re.match(r"capture .*missing not found", errors[0])
    assert "is a directory, not a file" in errors[1]


def test_several_files_report_every_readable_one(tmp_path):
    """One unreadable file does not hide the others' reports; exit 2 only when none reads."""
    bad = tmp_path / "bad.txt"
    bad.write_text("hello\n")
    out = cli("diagnose", str(SAMPLES / A3MEGA), str(bad), str(SAMPLES / MEGATRON),
              "--format", "json")
    doc = json.loads(out.stdout)
    assert [r["kind"] for r in doc["reports"]] == ["nccl-tests", "step-time"]
    assert doc["skipped"] == [refusal(bad, "unknown")]
    assert out.returncode == 1 and f"skipped {bad}: not a recognised format" in out.stderr
    both = cli("diagnose", str(bad), str(tmp_path / "missing"))
    assert both.returncode == 2 and both.stderr.startswith(
        "exemplar-tune: error: none of the 2 files could be read: ")
    assert both.stderr.count("\n") == 1


def test_endless_input_is_refused_in_bounded_memory():
    """/dev/zero never ends: refused before it is read (a device, not a file); zeros on
    standard input are binary, refused on the first window; an endless log on standard input
    is read up to --max-input, then one line."""
    reports, [error] = diagnose_paths(["/dev/zero"])
    assert reports == [] and error.startswith("capture /dev/zero is a device, not a regular file")
    zeros = subprocess.run(f"head -c {(64 << 20) + 10} /dev/zero | {sys.executable} -m "
                           "exemplar_tune.cli diagnose -", shell=True, capture_output=True,
                           text=True, env=cli_env(), check=False, timeout=120)
    assert zeros.returncode == 2 and zeros.stderr.count("\n") == 1
    assert "-: binary content, not a text capture" in zeros.stderr
    line = "node01:1:1 [0] NCCL INFO Channel 00/02 : 0 1"
    endless = subprocess.run(f"yes '{line}' | {sys.executable} -m exemplar_tune.cli diagnose - "
                             "--max-input 8M", shell=True, capture_output=True, text=True,
                             env=cli_env(), check=False, timeout=120)
    assert endless.returncode == 2 and endless.stderr.count("\n") == 1
    assert "standard input: more than 8 MiB to read; --max-input raises the bound" in endless.stderr


def test_malformed_known_format_is_diagnose_error():
    with pytest.raises(DiagnoseError, match="^x: numastat output without"):
        diagnose_text("                node0  node1\nnuma_hit  1  2\n", "x")


def test_diagnose_paths_and_to_dict_shape():
    reports, errors = diagnose_paths([str(SAMPLES / A3MEGA), str(SAMPLES / MEGATRON)])
    assert errors == []
    assert [r.kind for r in reports] == ["nccl-tests", "step-time"]
    d = json.loads(json.dumps(reports[0].to_dict()))
    assert set(d) == {"source", "kind", "status", "summary", "findings"}
    assert d["source"].endswith(A3MEGA) and d["status"] == "pass"
    assert set(d["findings"][0]) == {"layer", "check_id", "status", "class", "actions",
                                     "message", "evidence", "values"}


def test_a_finding_carries_the_class_and_actions_of_its_check():
    broken = finding("gpu.xids", "fail", "Xid 79").to_dict()
    assert (broken["class"], broken["actions"]) == ("health", ["drain", "investigate"])
    tuning = finding("fabric.gpu-nic-locality", "warn", "far").to_dict()
    assert tuning["class"] == "tuning" and tuning["actions"] == ["investigate"]
    assert finding("fabric.gpu-nic-locality", "pass", "near").to_dict()["actions"] == []
    assert finding("fabric.nccl-errors", "fail", "WARN lines").to_dict()["class"] == "health"


@pytest.mark.parametrize("module", [turbostat, numastat, perf, steptime, nccl_tests])
def test_every_finding_names_a_layer_check(module):
    names = {turbostat: "turbostat_header_excerpts.txt", numastat: "numastat_p_per_process.txt",
             perf: "perf_top_arm_smmu_cmdq_issue_cmdlist.txt", steptime: MEGATRON,
             nccl_tests: GB300}
    r = diagnose(names[module])
    assert r.kind == module.KIND
    assert all(f.check_id.split(".")[0] == f.layer and f.evidence or f.status == "info"
               for f in r.findings)


def test_a_finding_names_a_registered_or_a_signal_check():
    assert finding("cpu.housekeeping-overlap", "warn", "m").layer == "cpu"
    for check_id in SIGNAL_CHECKS:
        assert finding(check_id, "pass", "m").check_id == check_id
    assert not {c.id for c in CHECKS} & set(SIGNAL_CHECKS)
    with pytest.raises(ValueError, match="not a preflight check nor a signal check"):
        finding("fabric.no-such-check", "warn", "m")


def test_compare_matches_sizes_across_rank_counts(tmp_path):
    """64 ranks print 128 MiB as 134217728 B, 72 ranks as 134217504 B: the same request.
    Before, two such runs had no size in common and nothing was compared."""
    from exemplar_tune.sim.bench import DEFAULT_SIZES, nccl_table, table_sizes

    scenario = {"gpus_per_host": 8, "workloads": {"ag": {"collective": "all_gather"}}}
    rows = {}
    for hosts, name in ((8, "a.txt"), (9, "b.txt")):
        rows[name] = table_sizes(*DEFAULT_SIZES, hosts * 8)
        times = {size: 10.0 + index for index, size in enumerate(rows[name])}
        (tmp_path / name).write_text("\n".join(nccl_table(scenario, "ag", times, hosts)) + "\n")
    out = cli("diagnose", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--compare",
              "--format", "json")
    assert out.returncode == 0, out.stderr
    (compared,) = json.loads(out.stdout)["comparison"]["collectives"]
    assert [s["size"] for s in compared["sizes"]] == rows["b.txt"]  # every row has its pair
    assert rows["a.txt"][7] == 128 << 20 and rows["b.txt"][7] == 134217504
    assert compared["geomean_ratio"] == pytest.approx(1.0, abs=0.01)


def test_compare_pairs_every_row_of_real_runs_at_20_and_40_ranks():
    """Real nccl-tests runs on 10 hosts with 2 and 4 GPUs each (xxrjun/nccl-tests-cluster, in
    the corpus): at 20 ranks 32 MiB of AllGather is the row 33554240 B, at 40 ranks 33553920
    B; every one of the 10 rows of every collective finds its pair."""
    corpus = Path(__file__).parent / "fixtures/realworld/nccl-tests"
    runs = [corpus / f"xxrjun-nccl-tests-cluster-h100-10nodes-{n}ranks-five-collectives.log"
            for n in (20, 40)]
    out = cli("diagnose", *map(str, runs), "--compare", "--format", "json")
    assert out.returncode == 0, out.stderr
    compared = {c["collective"]: c for c in json.loads(out.stdout)["comparison"]["collectives"]}
    assert set(compared) == {"all_reduce", "all_gather", "reduce_scatter", "alltoall",
                             "sendrecv"}
    assert all(len(c["sizes"]) == 10 for c in compared.values())
    assert compared["all_gather"]["geomean_ratio"] == pytest.approx(1.80, abs=0.01)  # 4 vs 2 GPUs
