"""diagnose on Nsight Systems data: stats tables (text, csv, |), the SQLite export, --compare."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest

from exemplar_tune.diagnose import DiagnoseError, compare_reports, detect
from exemplar_tune.diagnose.nsys import parse_header, parse_tables
from exemplar_tune.diagnose.nsys_judge import (
    FAIL_IDLE_PCT,
    WARN_IDLE_PCT,
    collective,
    human_ns,
)
from tests.conftest import FIXTURES, SAMPLES
from tests.corpus import read_paths
from tests.fixtures.compose import nsys_sqlite as composer
from tests.helpers import cli_env

REAL = FIXTURES / "realworld" / "nsys"
KERN_V5 = REAL / "ayush-os-nsight-systems-deep-dive-README-v5-N50M-cuda_gpu_kern_sum.txt"
API_V5 = REAL / "ayush-os-nsight-systems-deep-dive-README-v5-N50M-cuda_api_sum.txt"
OSRT_V3 = REAL / "ayush-os-nsight-systems-deep-dive-README-v3-osrt_sum.txt"
TVM = REAL / "apache-tvm-16842-cuda_gpu_kern_sum-nccl-allreduce.txt"
CSV_BEFORE = SAMPLES / "nsys_stats_csv_allgather_before.csv"
CSV_AFTER = SAMPLES / "nsys_stats_csv_allgather_after.csv"


def read(path) -> dict:
    return read_paths([str(path)])[0].to_dict()


def finding(doc: dict, check_id: str) -> dict:
    return next(f for f in doc["findings"] if f["check_id"] == check_id)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "exemplar_tune.cli", *args],
                          capture_output=True, text=True, env=cli_env(), check=False,
                          timeout=300)


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict:
    """Each composed scenario written once: ``{name: (path, what was written)}``."""
    root = tmp_path_factory.mktemp("nsys")
    return {name: (root / f"{name}.sqlite", composer.compose(root / f"{name}.sqlite", name))
            for name in composer.SCENARIOS}


# --- the composed SQLite follows the documented schema ------------------------------------

def documented_columns() -> dict[str, list[str]]:
    """``{table: [columns]}`` from SQLITE_SCHEMA.md: its CREATE TABLE and column tables."""
    text = (REAL / "SQLITE_SCHEMA.md").read_text()
    tables: dict[str, list[str]] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        name = section.split()[0]
        if create := re.search(r"CREATE TABLE \w+ \((.*)\);", section):
            tables[name] = [c.split()[0] for c in create.group(1).split(", ")]
            continue
        cells = re.findall(r"^\| ([^|]+?) \| [A-Z]+ \|", section, flags=re.M)
        tables[name] = [c.strip() for cell in cells for c in cell.split(",")]
    return tables


def test_schema_file_lists_the_four_tables():
    documented = documented_columns()
    assert set(documented) == set(composer.SCHEMA)
    assert documented["StringIds"] == ["id", "value"]
    assert documented["CUPTI_ACTIVITY_KIND_KERNEL"][:5] == ["start", "end", "deviceId",
                                                           "contextId", "streamId"]


@pytest.mark.parametrize("table", sorted(composer.SCHEMA))
def test_composed_tables_have_the_documented_columns(exports, table):
    path, _ = exports["before"]
    with closing(sqlite3.connect(path)) as db:
        have = [row[1] for row in db.execute(f'PRAGMA table_info("{table}")')]
    assert have == documented_columns()[table]


# --- SQLite: NCCL share, steps, launch rate, idle gaps -------------------------------------

def test_sqlite_nccl_share_and_mean_per_collective(exports):
    path, truth = exports["before"]
    doc = read(path)
    assert doc["kind"] == "nsys" and doc["summary"]["format"] == "sqlite"
    nccl = doc["summary"]["nccl"]
    nccl_ns = sum(total for _, total in truth["nccl"].values())
    assert nccl["share_pct"] == pytest.approx(100 * nccl_ns / truth["kernel_ns"], abs=0.01)
    by_name = {c["collective"]: c for c in nccl["collectives"]}
    count, total = truth["nccl"]["ncclDevKernel_AllGather_RING_LL"]
    assert by_name["AllGather"]["instances"] == count
    assert by_name["AllGather"]["mean_ns"] == pytest.approx(total / count)
    assert by_name["AllGather"]["share_pct"] == pytest.approx(100 * total / truth["kernel_ns"],
                                                              abs=0.01)
    assert set(by_name) == {"AllGather", "ReduceScatter"}
    assert finding(doc, "fabric.nccl-kernel-time")["status"] == "info"


def test_sqlite_steps_from_the_outer_nvtx_range(exports):
    path, truth = exports["before"]
    steps = read(path)["summary"]["steps"]
    assert steps["name"] == "train_step"  # not the shorter nested forward_step
    assert steps["count"] == truth["steps"] * len(truth["devices"])
    assert steps["kernels_per_step"] == truth["kernels_per_step"]
    assert steps["kernels_per_step_min"] == steps["kernels_per_step_max"]
    assert steps["by"] == "the launching CUDA call"


def test_sqlite_idle_gaps_match_the_timeline(exports):
    path, truth = exports["before"]
    doc = read(path)
    gaps = doc["summary"]["gaps"]
    idle = sum(d["idle_ns"] for d in truth["devices"].values())
    span = sum(d["span_ns"] for d in truth["devices"].values())
    assert gaps["idle_ns"] == idle and gaps["span_ns"] == span
    pct = 100 * idle / span
    assert gaps["idle_pct"] == pytest.approx(pct, abs=0.01)
    want = "fail" if pct >= FAIL_IDLE_PCT else "warn" if pct >= WARN_IDLE_PCT else "pass"
    assert want == "warn"  # the scenario is meant to be a stall case
    assert finding(doc, "workload.gpu-idle-gaps")["status"] == want
    assert gaps["longest"][0]["ns"] >= composer.SCENARIOS["before"].stall_ns


def test_sqlite_without_stalls_has_no_idle_gaps(exports):
    path, truth = exports["after"]
    doc = read(path)
    assert all(d["idle_ns"] == 0 for d in truth["devices"].values())
    assert doc["summary"]["gaps"]["count"] == 0
    assert finding(doc, "workload.gpu-idle-gaps")["status"] == "pass"


def test_sqlite_many_tiny_kernels_warn(exports):
    moe, truth = exports["moe"]
    doc = read(moe)
    launch = finding(doc, "workload.kernel-launch-rate")
    assert launch["status"] == "warn" and "many tiny kernels" in launch["message"]
    assert launch["values"]["kernels_per_step"] == truth["kernels_per_step"]
    assert launch["values"]["median_ns"] == 4_000
    before = read(exports["before"][0])
    assert finding(before, "workload.kernel-launch-rate")["status"] == "pass"


# --- compare -----------------------------------------------------------------------------

def test_compare_sqlite_before_after_ratio(exports):
    reports = read_paths([str(exports["before"][0]), str(exports["after"][0])])
    cmp = compare_reports(reports)
    ag = next(c for c in cmp["collectives"] if c["collective"] == "AllGather")
    assert (ag["mean_ns_a"], ag["mean_ns_b"]) == (3_750_000, 2_620_000)
    assert ag["ratio"] == pytest.approx(2.62 / 3.75, abs=1e-4)
    assert cmp["warnings"] == []


def test_compare_csv_stats_cli(exports):
    out = cli("diagnose", str(CSV_BEFORE), str(CSV_AFTER), "--compare", "--format", "json")
    assert out.returncode == 0, out.stderr
    ag = next(c for c in json.loads(out.stdout)["comparison"]["collectives"]
              if c["collective"] == "AllGather")
    assert ag["ratio"] == pytest.approx(262 / 375, abs=1e-3)
    table = cli("diagnose", str(CSV_BEFORE), str(CSV_AFTER), "--compare")
    assert "== AllGather: mean kernel 375 ms -> 262 ms (ratio 0.6987)" in table.stdout


def test_compare_stats_text_with_sqlite_warns_on_collectives_in_one(exports):
    reports = read_paths([str(TVM), str(exports["before"][0])])
    cmp = compare_reports(reports)
    assert cmp["collectives"] == []
    assert any("nothing compared" in w for w in cmp["warnings"])
    assert any(w.startswith("AllReduce only in") for w in cmp["warnings"])


def test_compare_of_different_kinds_is_one_line_exit_2():
    nccl_tests = SAMPLES / "nccl_tests_all_gather_perf_gcp_a4xmax_gb300.txt"
    out = cli("diagnose", str(nccl_tests), str(CSV_BEFORE), "--compare")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == ("exemplar-tune: error: --compare takes exactly two nccl-tests files "
                          "or two nsys reports (got: nccl-tests, nsys)\n")


# --- stats tables: layouts, banners, csv ---------------------------------------------------

def test_csv_fixture_reads_every_report_and_names_the_one_it_skips():
    doc = read(CSV_BEFORE)
    summary = doc["summary"]
    assert summary["format"] == "csv"
    assert [t["report"] for t in summary["tables"]] == [
        "nvtx_sum", "cuda_api_sum", "cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum"]
    assert len(summary["skipped"]) == 1 and "cuda_gpu_mem_size_sum" in summary["skipped"][0]
    kern = summary["tables"][2]["top"][0]
    assert kern["name"] == "ncclDevKernel_AllGather_RING_LL(ncclDevComm *, unsigned long, " \
                           "ncclWork *)"  # the quoted name with commas is one cell
    assert summary["steps"]["name"] == "train_step" and summary["steps"]["count"] == 32
    assert summary["steps"]["kernels_per_step"] == summary["kernels"]["instances"] / 32
    assert summary["nccl"]["collectives"][0]["mean_ns"] == pytest.approx(375e6, rel=1e-3)


def test_csv_fixture_header_is_the_documented_one():
    """The composed CSV's kernel header: the Analysis Guide's columns, in order, with units."""
    lines = CSV_BEFORE.read_text().splitlines()
    at = lines.index(" ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):")
    assert lines[at + 2] == ("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),"
                             "Max (ns),StdDev (ns),Name")


def test_several_text_reports_in_one_file_with_star_banners(tmp_path):
    """Real tables after ``** <title> (<report>):`` banners, as nsys stats prints them."""
    def body(path):
        return "\n".join(path.read_text().splitlines()[2:])  # drop the [n/8] banner
    both = tmp_path / "stats.txt"
    both.write_text(f"\n ** CUDA API Summary (cuda_api_sum):\n\n{body(API_V5)}\n\n"
                    f" ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n\n{body(KERN_V5)}\n")
    doc = read(both)
    assert [(t["report"], t["named"], t["rows"]) for t in doc["summary"]["tables"]] == [
        ("cuda_api_sum", "cuda_api_sum", 6), ("cuda_gpu_kern_sum", "cuda_gpu_kern_sum", 1)]
    assert doc["summary"]["kernels"]["launch_ns"] == pytest.approx(3_892_831 / 1010, abs=0.1)


def test_collapsed_whitespace_and_pipe_table_read_the_same(tmp_path):
    want = read(KERN_V5)["summary"]["tables"][0]["top"]
    lines = KERN_V5.read_text().splitlines()
    collapsed = tmp_path / "collapsed.txt"
    collapsed.write_text("\n".join(" ".join(line.split()) for line in lines) + "\n")
    assert read(collapsed)["summary"]["tables"][0]["top"] == want
    piped = tmp_path / "table.txt"
    header = re.split(r"\s{2,}", lines[2].strip())
    row = re.split(r"\s{2,}", lines[4].strip())
    piped.write_text("\n".join(["+---+", "| " + " | ".join(header) + " |", "+---+",
                                "| " + " | ".join(row) + " |", "+---+", ""]))
    doc = read(piped)
    assert doc["summary"]["format"] == "table"
    assert doc["summary"]["tables"][0]["top"] == want


def test_timeunit_scales_to_ns():
    header = parse_header(" Time (%)  Total Time (ms)  Instances  Avg (ms)  Med (ms)  Name")
    assert header is not None and header.scale == 1e6
    tables, _ = parse_tables(" Time (%)  Total Time (ms)  Instances  Avg (ms)  Med (ms)  Name\n"
                             "     100.0          12.5          5       2.5      2.4   k\n")
    assert tables[0].rows[0]["total_ns"] == 12_500_000
    assert tables[0].rows[0]["med_ns"] == 2_400_000


@pytest.mark.parametrize(("name", "want"), [
    ("ncclDevKernel_AllGather_RING_LL", "AllGather"),
    ("ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevComm *, unsigned long, ncclWork *)",
     "AllReduce"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float", "AllReduce"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "ReduceScatter"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "Broadcast"),
    ("ncclDevKernel_SendRecv", "SendRecv"),
    ("ncclAllReduceRingLLKernel_sum_f16", "AllReduce"),
    ("void tensorrt_llm::twoShotAllReduceKernel<__half, (int)8>(AllReduceParams)", None),
    ("vectorAdd(const float *, const float *, float *, int)", None),
])
def test_collective_from_kernel_name(name, want):
    assert collective(name) == want


def test_human_ns():
    assert [human_ns(x) for x in (375e6, 45504, 800, 2.5e9)] == [
        "375 ms", "45.5 us", "800 ns", "2.5 s"]


def test_detected_as_nsys_by_content():
    for path in (TVM, OSRT_V3, CSV_BEFORE):
        analyzer = detect(path.read_text())
        assert analyzer is not None and analyzer.kind == "nsys"


# --- bad input: one line, never a traceback -----------------------------------------------

def test_truncated_text_table_reads_what_is_there_and_names_the_cut_row(tmp_path):
    text = OSRT_V3.read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text(text[:text.rindex("bind") + 4] + "\n" + text.splitlines()[-1][:40] + "\n")
    doc = read(cut)
    assert doc["summary"]["tables"][0]["rows"] == 26  # listen cut mid-row
    assert doc["summary"]["skipped"] == ["line 31: osrt_sum row cut short"]


def test_csv_with_an_unknown_header_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "grid.csv"
    bad.write_text("Time (%),Total Time (ns),Instances,GridXYZ,Name\n"
                   '100.0,5000,5,"   1    1    1",k\n')
    with pytest.raises(DiagnoseError) as err:
        read_paths([str(bad)])
    message = str(err.value)
    assert "\n" not in message and "columns not read: GridXYZ" in message
    out = cli("diagnose", str(bad))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_unknown_table_beside_a_good_one_is_named_in_the_reading(tmp_path):
    mixed = tmp_path / "mixed.csv"
    mixed.write_text("Time (%),Total Time (ns),Instances,GridXYZ,Name\n"
                     "100.0,5000,5,1,k\n\n" + KERN_V5.read_text())
    doc = read(mixed)
    assert [t["report"] for t in doc["summary"]["tables"]] == ["cuda_gpu_kern_sum"]
    assert doc["summary"]["skipped"] == ["line 1: a table with columns not read: GridXYZ"]


def test_nsys_skipped_report_is_named(tmp_path):
    path = tmp_path / "skipped.txt"
    path.write_text("[3/8] Executing 'nvtx_sum' stats report\nSKIPPED: r.sqlite does not "
                    "contain NV Tools Extension (NVTX) data.\n" + OSRT_V3.read_text())
    doc = read(path)
    assert doc["summary"]["skipped"][0] == ("line 2: nsys skipped nvtx_sum: r.sqlite does not "
                                            "contain NV Tools Extension (NVTX) data.")


@pytest.mark.parametrize("keep", [100, 4096, 0.5, 0.9])
def test_truncated_sqlite_is_one_line(exports, tmp_path, keep):
    path, _ = exports["moe"]
    data = path.read_bytes()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(data[:keep if isinstance(keep, int) else int(len(data) * keep)])
    with pytest.raises(DiagnoseError) as err:
        read_paths([str(cut)])
    assert str(err.value).startswith(f"{cut}: ") and "\n" not in str(err.value)


def test_sqlite_that_is_no_nsys_export(tmp_path):
    other = tmp_path / "other.sqlite"
    with closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE t (a INTEGER)")
        db.commit()
    with pytest.raises(DiagnoseError, match="without CUPTI_ACTIVITY_KIND_KERNEL, StringIds: "
                                            "not an Nsight Systems export"):
        read_paths([str(other)])
    with closing(sqlite3.connect(other)) as db:
        db.execute(composer.SCHEMA["StringIds"])
        db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, deviceId INTEGER)")
        db.commit()
    with pytest.raises(DiagnoseError, match="without column.s. end, shortName$"):
        read_paths([str(other)])


def test_sqlite_with_no_kernels(tmp_path):
    empty = tmp_path / "empty.sqlite"
    with closing(sqlite3.connect(empty)) as db:
        for ddl in composer.SCHEMA.values():
            db.execute(ddl)
        db.commit()
    with pytest.raises(DiagnoseError, match="has no rows: no kernel ran"):
        read_paths([str(empty)])
    out = cli("diagnose", str(empty))
    assert out.returncode == 2 and out.stderr.count("\n") == 1


def test_sqlite_is_opened_read_only(exports):
    path, _ = exports["after"]
    before = path.stat().st_mtime_ns, path.read_bytes()
    read(path)
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before
    assert not path.with_suffix(".sqlite-journal").exists()


def test_a_pipe_is_read_as_text_not_sniffed_away(tmp_path):
    """The SQLite sniff reads only regular files: a pipe's first bytes stay for the reader."""
    out = subprocess.run(["bash", "-c", f'{sys.executable} -m exemplar_tune.cli diagnose '
                          f'<(cat "{KERN_V5}") --format json'], capture_output=True, text=True,
                         env=cli_env(), check=False, timeout=300)
    assert out.returncode == 0, out.stderr
    table = json.loads(out.stdout)["reports"][0]["summary"]["tables"][0]
    assert table["named"] == "cuda_gpu_kern_sum" and table["line"] == 3  # the banner read
