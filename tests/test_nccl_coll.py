"""NCCL COLL lines: every real capture parses to its calls and sizes; prefixes; diagnose."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from exemplar_tune.diagnose import DiagnoseError, detect, diagnose_text
from exemplar_tune.diagnose.nccl_coll import (
    CollCall,
    distinct_calls,
    message_sizes,
    parse_coll_calls,
    parse_coll_log,
)
from tests.conftest import FIXTURES, SAMPLES
from tests.helpers import cli_env

REAL = FIXTURES / "realworld" / "nccl-coll"
LINE = ("node01:12345:12400 [{dev}] NCCL INFO {name}: opCount {op} sendbuff 0x7f01 recvbuff "
        "0x7f02 count {count} datatype {dt} op 0 root {root} comm {comm} [nranks={n}] "
        "stream 0x55aa")


def line(name="AllReduce", op="1a", count=262144, dt=7, root=0, comm="0x5501", n=16, dev=0):
    return LINE.format(name=name, op=op, count=count, dt=dt, root=root, comm=comm, n=n, dev=dev)


def real(name: str) -> str:
    return (REAL / name).read_text()


def sizes(text: str, **kw) -> dict[str, list[tuple[int, int, float]]]:
    return {c: [(s.size, s.calls, round(s.share, 4)) for s in v]
            for c, v in message_sizes(parse_coll_calls(text), **kw).items()}


# --- real captures: (file, lines parsed, distinct calls, sizes) ----------------------------

@pytest.mark.parametrize(("name", "lines", "calls", "want"), [
    # 139d/139e logged by 2 ranks each, 13a0 and 13a1 (int32 x 335) by one: 4 calls
    ("nvidia-nccl-1193-ray-allreduce-128ranks.log", 6, 4,
     {"all_reduce": [(7382228 * 4, 1, 0.492), (7066572 * 4, 1, 0.471)]}),
    # opCount 1a-1c on both GPUs of one process, 1d on one: 4 calls
    ("nvidia-nccl-203-tensorflow-allreduce-2gpu.log", 7, 4,
     {"all_reduce": [(386560 * 4, 1, 0.6116), (237184 * 4, 1, 0.3753)]}),
    # one rank: every Send/Recv line is its own call
    ("nvidia-nccl-584-send-recv.log", 7, 7,
     {"send": [(2420736 * 4, 6, 1.0)], "recv": [(2420736 * 4, 1, 1.0)]}),
    # all_gather / reduce_scatter count per rank: 2097152 x 2 ranks x 4 B = 16 MiB
    ("pytorch-torchtitan-1369-tp-allgather-reducescatter.log", 7, 5,
     {"all_gather": [(16 << 20, 2, 1.0)], "reduce_scatter": [(16 << 20, 1, 1.0)],
      "all_reduce": [(4, 2, 1.0)]}),
    # nranks=1 never advances opCount: 4 calls from one rank, all opCount 0
    ("nvidia-nccl-1238-nranks1-allreduce-quoted.log", 4, 4,
     {"all_reduce": [(128 << 20, 4, 1.0)]}),
    # int8 x 512 x 16 ranks, logged by 4 ranks: one call of 8 KiB
    ("nvidia-nccl-531-allgather-int8-16ranks.log", 4, 1, {"all_gather": [(8192, 1, 1.0)]}),
    # op 0: int64 x 53 (3 ranks) and float16 x 25503912 (rank of GPU 0); op 1 float16 (2 lines)
    ("nvidia-nccl-147-broadcast-interleaved.log", 6, 3,
     {"broadcast": [(25503912 * 2, 2, 1.0)]}),
    ("rocm-6074-rccl-2.27.7-allreduce-globalrank.log", 6, 3, {"all_reduce": [(4, 3, 1.0)]}),
])
def test_real_capture(name, lines, calls, want):
    text = real(name)
    parsed = parse_coll_calls(text)
    assert len(parsed) == lines
    assert len(distinct_calls(parsed)) == calls
    assert sizes(text) == want


def test_real_fixtures_are_small_and_listed_in_sources():
    sources = (REAL / "SOURCES.md").read_text()
    logs = sorted(REAL.glob("*.log"))
    assert len(logs) >= 6
    for path in logs:
        assert f"`{path.name}`" in sources
        assert len(path.read_text().splitlines()) <= 200


def test_real_fields_host_device_rank_and_interleaving():
    ray = parse_coll_calls(real("nvidia-nccl-1193-ray-allreduce-128ranks.log"))
    assert (ray[0].host, ray[0].pid, ray[0].device) == (
        "r24-02-22-23-29-0066-raycluster-lv52c-worker-l4-8-fqztx", 615, 2)
    assert ray[0].opcount == 0x139d and ray[5].datatype == "int32" and ray[5].bytes == 1340
    bcast = parse_coll_calls(real("nvidia-nccl-147-broadcast-interleaved.log"))
    assert (bcast[0].host, bcast[0].pid, bcast[0].device) == ("learnfair062", 32629, 7)
    assert bcast[4].host is None and bcast[4].comm == "0x7f584405a260"
    assert [c.datatype for c in bcast[:3]] == ["int64", "int64", "float16"]
    rccl = parse_coll_log(real("rocm-6074-rccl-2.27.7-allreduce-globalrank.log"))
    assert rccl.version == "2.27.7-HEAD:0d2c4fd"
    assert [c.rank for c in rccl.calls] == [0, 1, 1, 0, 0, 1]
    assert [c.line for c in rccl.calls] == [10, 14, 19, 24, 29, 34]


# --- line formats ----------------------------------------------------------------------------

@pytest.mark.parametrize(("prefix", "rank"), [
    ("", None),
    ("0: ", 0),
    (" 12: ", 12),
    ("[1,5]<stdout>:", 5),
    ("[1,5]<stderr>: ", 5),
    ("[default3]:", None),
    ("node07: ", None),
    ("2024-05-01T12:00:01.123456Z ", None),
    ("[2026-03-12 13:57:49] ", None),
    ("\x1b[32m3: \x1b[0m", 3),
])
def test_launcher_prefixes_ansi_and_cr(prefix, rank):
    text = f"{prefix}{line()}\r\n" + f"{prefix}\x1b[1m{line(op='1b')}\x1b[0m\r\n"
    calls = parse_coll_calls(text)
    assert [(c.host, c.pid, c.device, c.rank, c.opcount) for c in calls] == [
        ("node01", 12345, 0, rank, 0x1a), ("node01", 12345, 0, rank, 0x1b)]
    assert calls[0].bytes == 262144 * 4 and calls[0].nranks == 16


@pytest.mark.parametrize(("name", "dt", "collective", "nbytes"), [
    ("AllReduce", 9, "all_reduce", 1000 * 2),
    ("AllGather", 9, "all_gather", 1000 * 16 * 2),
    ("ReduceScatter", 7, "reduce_scatter", 1000 * 16 * 4),
    ("Broadcast", 0, "broadcast", 1000),
    ("Reduce", 8, "reduce", 8000),
    ("AlltoAll", 6, "alltoall", 1000 * 16 * 2),
    ("Gather", 4, "gather", 1000 * 16 * 8),
    ("Scatter", 5, "scatter", 1000 * 16 * 8),
    ("Send", 10, "send", 1000),
    ("Recv", 11, "recv", 1000),
])
def test_collective_names_datatypes_and_bytes(name, dt, collective, nbytes):
    (call,) = parse_coll_calls(line(name=name, dt=dt, count=1000))
    assert (call.collective, call.bytes) == (collective, nbytes)


def test_unknown_datatype_and_collective_are_skipped_and_counted():
    text = "\n".join([line(dt=12), line(dt=99), line(name="PutSignal"), line(op="2")])
    log = parse_coll_log(text)
    assert [c.opcount for c in log.calls] == [2]
    assert (log.unknown_datatype, log.unknown_collective) == (2, 1)


def test_other_lines_are_ignored_and_nranks_optional():
    text = ("node01:1:2 [0] NCCL INFO Channel 00/02 : 0 1\n"
            "AllReduce: opCount 3 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 "
            "comm 0x9 stream 0x3\n"
            "node01:1:2 [0] NCCL INFO AllGather: opCount 4 sendbuff 0x1 recvbuff 0x2 count 8 "
            "datatype 7 op 0 root 0 comm 0x9 stream 0x3\n")
    calls = parse_coll_calls(text)
    assert [(c.collective, c.nranks, c.bytes) for c in calls] == [
        ("all_reduce", None, 32), ("all_gather", None, None)]
    assert message_sizes(calls) == {"all_reduce": message_sizes(calls[:1])["all_reduce"]}


# --- counting and selection ------------------------------------------------------------------

def test_ranks_of_one_op_count_once_repeats_within_a_rank_count_each():
    text = "\n".join([line(comm="0xa", dev=0), line(comm="0xb", dev=1),  # same op, 2 ranks
                      line(comm="0xa", dev=0, op="1b"), line(comm="0xa", dev=0, op="1b"),
                      line(comm="0xb", dev=1, op="1b")])  # group: 2 calls on rank 0
    calls = parse_coll_calls(text)
    assert [c.line for c in distinct_calls(calls)] == [1, 3, 4]
    assert sizes(text) == {"all_reduce": [(262144 * 4, 3, 1.0)]}


def test_send_to_different_peers_are_different_calls():
    text = "\n".join([line(name="Send", root=1, comm="0xa"), line(name="Send", root=0,
                                                                      comm="0xb", dev=1)])
    assert len(distinct_calls(parse_coll_calls(text))) == 2


def _calls(spec: list[tuple[int, int]]) -> list[CollCall]:
    """``[(bytes, calls)]`` as all_reduce float32 calls, each on its own opCount."""
    out, op = [], 0
    for nbytes, n in spec:
        for _ in range(n):
            op += 1
            out.append(CollCall("all_reduce", nbytes // 4, "float32", 8, nbytes, op, 0, "0x1",
                                line=op))
    return out


def test_share_picks_the_fewest_sizes_by_bytes_carried():
    calls = _calls([(1 << 20, 10), (64 << 20, 3), (4, 1000), (128 << 20, 1)])
    total = 10 * (1 << 20) + 3 * (64 << 20) + 4000 + (128 << 20)
    got = message_sizes(calls)["all_reduce"]
    assert [(s.size, s.calls) for s in got] == [(64 << 20, 3), (128 << 20, 1)]
    assert got[0].share == pytest.approx(3 * (64 << 20) / total)
    got = message_sizes(calls, share=0.999)["all_reduce"]
    assert [s.size for s in got] == [64 << 20, 128 << 20, 1 << 20]
    got = message_sizes(calls, share=1.0)["all_reduce"]
    assert [s.size for s in got] == [64 << 20, 128 << 20, 1 << 20, 4]
    assert sum(s.share for s in got) == pytest.approx(1.0)


def test_limit_caps_the_list():
    calls = _calls([(1 << k, 1) for k in range(10, 20)])
    assert len(message_sizes(calls, share=1.0)["all_reduce"]) == 8
    assert [s.size for s in message_sizes(calls, share=1.0, limit=2)["all_reduce"]] == [
        1 << 19, 1 << 18]
    with pytest.raises(ValueError, match="share must be"):
        message_sizes(calls, share=0)
    with pytest.raises(ValueError, match="share must be"):
        message_sizes(calls, limit=0)


def test_zero_byte_calls_list_the_size_without_dividing_by_zero():
    assert sizes(line(count=0)) == {"all_reduce": [(0, 1, 0.0)]}


# --- diagnose --------------------------------------------------------------------------------

def _size_findings(report):
    return [f for f in report.findings if f.check_id == "workload.nccl-message-sizes"]


def test_diagnose_coll_only_log_shows_the_histogram():
    name = "pytorch-torchtitan-1369-tp-allgather-reducescatter.log"
    r = diagnose_text(real(name), name)
    assert r.kind == "nccl-log" and r.status == "pass"
    found = {f.values["collective"]: f for f in _size_findings(r)}
    assert found["all_gather"].message == "all_gather: 2 calls, 100 % of bytes at 16 MiB"
    assert found["all_gather"].values["sizes"] == [
        {"size": 16 << 20, "calls": 2, "share": 1.0}]
    assert found["all_gather"].evidence == (f"{name}:1,3",)
    assert found["all_reduce"].message == "all_reduce: 2 calls, 100 % of bytes at 4 B"
    assert r.summary["coll"] == {"lines": 7, "calls": 5, "unknown_datatype_lines": 0,
                                 "unknown_collective_lines": 0}


def test_diagnose_message_rounds_sizes_and_counts_thousands():
    text = "\n".join(line(op=f"{i:x}", count=393216) for i in range(1200))
    (f,) = _size_findings(diagnose_text(text, "k"))
    assert f.message == "all_reduce: 1.2 k calls, 100 % of bytes at 1.5 MiB"
    assert f.values["calls"] == 1200 and f.values["bytes"] == 1200 * 393216 * 4


def test_coll_log_without_nccl_info_prefix_is_recognised():
    text = "\n".join(line(op=str(i)).split("NCCL INFO ")[1] for i in range(3))
    assert detect(text).kind == "nccl-log"
    assert len(_size_findings(diagnose_text(text, "bare"))) == 1


def test_topology_findings_stay_beside_the_sizes():
    topo = (SAMPLES / "nccl_debug_info_topo_lines.txt").read_text()
    r = diagnose_text(topo + real("nvidia-nccl-531-allgather-int8-16ranks.log"), "mixed")
    topo_f = next(f for f in r.findings if f.check_id == "runtime.topo-in-container")
    assert topo_f.status == "fail" and topo_f.values["problems"] == ["parse_error"]
    assert r.summary["nccl_version"] == "2.18.3+cuda"
    assert [f.message for f in _size_findings(r)] == [
        "all_gather: 1 call, 100 % of bytes at 8 KiB"]


def test_log_without_coll_lines_has_no_size_findings():
    r = diagnose_text((SAMPLES / "nccl_debug_info_topo_lines.txt").read_text(), "topo")
    assert not _size_findings(r) and r.summary["coll"]["calls"] == 0


def test_empty_input_is_an_error_not_a_crash():
    assert parse_coll_calls("") == [] and message_sizes([]) == {}
    with pytest.raises(DiagnoseError, match="not a recognised format"):
        diagnose_text("", "empty")


def test_cli_json_carries_the_sizes(tmp_path):
    path = REAL / "nvidia-nccl-1193-ray-allreduce-128ranks.log"
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "diagnose", str(path),
                          "--format", "json"], capture_output=True, text=True, env=cli_env(),
                         check=False, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)["reports"][0]
    (f,) = [f for f in report["findings"] if f["check_id"] == "workload.nccl-message-sizes"]
    assert f["message"] == "all_reduce: 4 calls, 96 % of bytes at 28.2 MiB, 27.0 MiB"
    assert f["values"]["sizes"] == [{"size": 29528912, "calls": 1, "share": 0.492},
                                    {"size": 28266288, "calls": 1, "share": 0.471}]
    assert report["summary"]["coll"]["calls"] == 4
    empty = tmp_path / "empty.log"
    empty.write_text("")
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "diagnose", str(empty)],
                         capture_output=True, text=True, env=cli_env(), check=False, timeout=300)
    assert out.returncode == 2 and "not a recognised format" in out.stderr
