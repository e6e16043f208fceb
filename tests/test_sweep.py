"""``exemplar-tune sweep``: the plan (fast), then end to end on simulated fabrics (system).

The end-to-end tests run real ansible-runner on simulated hosts whose collective and training
times follow each scenario's ``fabric_response``; the right value per scenario is known from
the model (``tests/test_sim_fabric.py`` checks the model itself).
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exemplar_tune.errors import UserError
from exemplar_tune.orchestration.sweep_plan import (
    SweptKnob,
    arm_count,
    arm_label,
    coordinate_step,
    current_values,
    parse_knob,
    sizes_from_file,
    sizes_from_log,
    steps,
)
from exemplar_tune.sim.cluster import create_cluster
from tests.helpers import cli_env
from tests.test_cli import cli
from tests.test_faults import Watch, host_bytes, kill

QPS, SPLIT = "NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_SPLIT_DATA_ON_QPS"
COLL = Path(__file__).parent / "fixtures/realworld/nccl-coll"


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("EXEMPLAR_TUNE_STATE_DIR", str(tmp_path / "state"))


# -- the plan ---------------------------------------------------------------------------------


def test_a_knob_is_parsed_and_checked_by_the_fabric_knob() -> None:
    assert parse_knob(f"{QPS}=1, 2,4,2") == SweptKnob(QPS, ("1", "2", "4"))
    for text, message in ((f"{QPS}", "write NAME=VALUE"), (f"{QPS}=", "write NAME=VALUE"),
                          ("cpu.governor=performance", "not a fabric knob"),
                          (f"{QPS}=4 8", "one token"), (f"{QPS}=unset", "not a value"),
                          ("NCCL_ib=1", "the fabric knob refuses it"),
                          (f"{QPS}=a=b", "one token")):
        with pytest.raises(UserError, match=message):
            parse_knob(text)


def test_coordinate_steps_measure_each_knob_on_top_of_the_last_winner() -> None:
    knobs = [SweptKnob(QPS, ("1", "4")), SweptKnob(SPLIT, ("0", "1"))]
    first = steps(knobs, {QPS: "1", SPLIT: None}, grid=False)[0]
    assert first.incumbent == {QPS: "1", SPLIT: None}
    assert [arm_label(a) for a in first.candidates] == [f"{QPS}=4,{SPLIT}=unset"]
    second = coordinate_step(knobs, 1, {QPS: "4", SPLIT: None})
    assert [arm_label(a) for a in second.candidates] == [f"{QPS}=4,{SPLIT}=0",
                                                        f"{QPS}=4,{SPLIT}=1"]
    grid = steps(knobs, {QPS: "1", SPLIT: None}, grid=True)[0]
    assert len(grid.candidates) == 2 * 3 - 1  # {1, 4} x {unset, 0, 1} less the incumbent
    assert arm_count(knobs, [grid], grid=True) == 6
    assert arm_count(knobs, [first], grid=False) == 2 + 3  # 1 is the incumbent of step one


def test_hosts_that_differ_in_a_swept_setting_are_refused() -> None:
    facts = {"a": {"fabric": {"nccl_settings": {QPS: {"value": "4"}}}},
             "b": {"fabric": {"nccl_settings": {}}}}
    with pytest.raises(UserError, match=f"hosts differ in {QPS} \\(4 on a; unset on b\\)"):
        current_values(facts, [QPS])
    assert current_values({"a": facts["a"]}, [QPS, SPLIT]) == {QPS: "4", SPLIT: None}


def test_sizes_come_from_a_real_coll_log() -> None:
    """torchtitan's tensor-parallel log (pytorch/torchtitan#1369): all_gather and
    reduce_scatter sizes rounded to the nccl-tests rows of -f 2."""
    text = (COLL / "pytorch-torchtitan-1369-tp-allgather-reducescatter.log").read_text()
    sizes = sizes_from_log(text, "log")
    assert set(sizes) >= {"all_gather", "reduce_scatter"}
    assert all(s & (s - 1) == 0 for values in sizes.values() for s in values)
    with pytest.raises(UserError, match="no NCCL collective calls"):
        sizes_from_log("NCCL INFO Bootstrap : Using eth0\n", "log")


def test_sizes_come_from_a_compressed_log_of_any_size(tmp_path) -> None:
    """The same log repeated past the old 64 MiB input limit and gzip-compressed reads as a
    stream to the same sizes; a missing file is one line."""
    text = (COLL / "pytorch-torchtitan-1369-tp-allgather-reducescatter.log").read_text()
    packed = tmp_path / "coll.log.gz"
    repeats = (65 << 20) // len(text) + 1
    with gzip.open(packed, "wt", compresslevel=1) as out:
        for _ in range(repeats):
            out.write(text)
    assert sizes_from_file(packed) == sizes_from_log(text, "log")
    with pytest.raises(UserError, match="^--sizes-from .*missing.log not found$"):
        sizes_from_file(tmp_path / "missing.log")


# -- end to end -------------------------------------------------------------------------------


def cluster(tmp_path: Path, scenario: str, hosts: int = 2) -> Path:
    directory = tmp_path / "c"
    create_cluster(directory, scenario, hosts=hosts)
    log = cli("sim", "coll-log", str(directory), "--workload", "dense")
    (directory / "coll.log").write_text(log.stdout)
    return directory


def sweep(directory: Path, *args: str):
    return cli("sweep", "-i", str(directory / "inventory.yml"), "--profile",
               str(directory / "profile.yaml"), "--bench", str(directory / "nccl.yaml"), *args)


def conf_states(directory: Path) -> dict[str, dict]:
    return {h.name: host_bytes(h) for h in sorted((directory / "hosts").iterdir())}


def qps(directory: Path) -> set[str]:
    return {re.search(rf"^{QPS}=(\S*)", (h / "etc/nccl.conf").read_text(), re.M).group(1)
            for h in (directory / "hosts").iterdir()}


@pytest.mark.system
def test_cx8_picks_four_qps_and_writes_a_profile_for_its_fabric(tmp_path):
    directory = cluster(tmp_path, "gb300-exemplar-gap")
    before = {h: (directory / "hosts" / h / "etc/nccl.conf").stat() for h in ("node01",)}
    plan = sweep(directory, "--knob", f"{QPS}=2,4,8", "--sizes-from",
                 str(directory / "coll.log"), "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "at most 80 benchmark runs" in plan.stdout and "64 MiB (from the log)" in plan.stdout
    assert (directory / "hosts/node01/etc/nccl.conf").stat().st_mtime_ns == \
        before["node01"].st_mtime_ns
    out = sweep(directory, "--knob", f"{QPS}=2,4,8", "--sizes-from",
                str(directory / "coll.log"), "--format", "json", "--write-profile",
                str(tmp_path / "fabric.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["chosen"] == f"{QPS}=4" and doc["incumbent"] == f"{QPS}=1"
    assert qps(directory) == {"4"}
    assert re.search(rf"{QPS}: round \d+, arm \d/\d: {QPS}=", out.stderr)
    fragment = yaml.safe_load((tmp_path / "fabric.yaml").read_text())
    assert fragment["fabric"]["nccl"] == {QPS: "4"}
    assert fragment["fabric"]["measured_on"]["hca_types"] == ["MT4131"]
    assert fragment["extends"] == str(directory / "profile.yaml")
    shown = json.loads(cli("show", doc["experiment"], "--format", "json").stdout)
    arms = {s["arm"] for s in shown["samples"]}
    assert f"{QPS}=1" in arms and f"{QPS}=4" in arms
    report = cli("report", doc["experiment"], "--format", "html", "--output",
                 str(tmp_path / "r.html"))
    assert report.returncode == 0
    page = (tmp_path / "r.html").read_text()
    assert page.count("<svg") == 2 and "GB/s), higher is better" in page
    # the fabric in words, and the incumbent beside the candidates it was measured against
    assert "fabric: ConnectX-8 (MT4131), firmware " in page
    incumbent_runs = sum(1 for s in shown["samples"]
                         if s["arm"] == f"{QPS}=1" and s["shape"] == shown["samples"][0]["shape"])
    assert re.search(rf"<td>{QPS}=1 <span class=\"muted\">\(incumbent\)</span></td>"
                     rf"<td class=\"num\">{incumbent_runs}</td>\s*<td class=\"num\">reference",
                     page), page
    markdown = cli("report", doc["experiment"]).stdout
    assert f"| {QPS}=1 (incumbent) | {incumbent_runs} | reference |" in markdown
    assert re.search(r"^made \S+ on \S+ by exemplar-tune ", markdown, re.M)

    # the written profile extends the sweep's and keys the settings to this fabric: the
    # fabric's own hosts pass, a CX-7 host is told to sweep again
    (tmp_path / "site.yaml").write_text((tmp_path / "fabric.yaml").read_text())
    here = cli("preflight", "-i", str(directory / "inventory.yml"), "--profile",
               str(tmp_path / "site.yaml"), "--layer", "fabric", "--format", "json")
    checks = {c["id"]: c["status"] for h in json.loads(here.stdout)["hosts"].values()
              for c in h["results"]}
    assert checks["fabric.nccl-measured-here"] == "pass"
    other = create_cluster(tmp_path / "x86", "h100-fewer-qps", hosts=1)
    assert other
    there = cli("preflight", "-i", str(tmp_path / "x86/inventory.yml"), "--profile",
                str(tmp_path / "site.yaml"), "--layer", "fabric", "--format", "json")
    found = [c for h in json.loads(there.stdout)["hosts"].values() for c in h["results"]
             if c["id"] == "fabric.nccl-measured-here"]
    assert found[0]["status"] == "warn" and "MT4129" in found[0]["detail"]


@pytest.mark.system
def test_fewer_qps_win_at_the_workload_sizes(tmp_path):
    """h100-fewer-qps: the hosts run 4; at the training job's 64 MiB messages 2 is best.
    Three hosts of eight GPUs: 24 ranks, so nccl-tests prints 64 MiB as 67108800 B (before,
    the sweep stopped at its first run: 'size 64 MiB not in the all_gather table')."""
    directory = cluster(tmp_path, "h100-fewer-qps", hosts=3)
    out = sweep(directory, "--knob", f"{QPS}=1,2,8", "--sizes-from", str(directory / "coll.log"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{QPS}=4 -> {QPS}=2" in out.stdout
    assert qps(directory) == {"2"}


@pytest.mark.system
def test_no_winner_leaves_every_byte_as_it_was(tmp_path):
    """h100-qps-incumbent: 4 is already best; the hosts end byte-exact (owners, modes)."""
    directory = cluster(tmp_path, "h100-qps-incumbent")
    before = conf_states(directory)
    out = sweep(directory, "--knob", f"{QPS}=2,8", "--sizes-from", str(directory / "coll.log"),
                "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["chosen"] == doc["incumbent"] == f"{QPS}=4"
    assert doc["steps"][0]["outcome"] == "incumbent"
    assert conf_states(directory) == before


@pytest.mark.system
def test_validation_restores_a_winner_that_does_not_help_training(tmp_path):
    """Read at 16 GiB (the table's top row), 4 QPs beat the hosts' 2 on h100-fewer-qps; the
    training job's messages are 32-64 MiB, where 4 is slower: the keep rule restores it."""
    directory = cluster(tmp_path, "h100-fewer-qps")
    for conf in (directory / "hosts").glob("*/etc/nccl.conf"):
        conf.write_text(re.sub(rf"^{QPS}=.*$", f"{QPS}=2", conf.read_text(), flags=re.M))
    before = conf_states(directory)
    out = sweep(directory, "--knob", f"{QPS}=4", "--validate", str(directory / "bench.yaml"),
                "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["steps"][0]["chosen"] == f"{QPS}=4"
    assert doc["validation"]["action"] == "restore"
    assert doc["chosen"] == f"{QPS}=2"
    assert conf_states(directory) == before
    events = json.loads(cli("show", doc["experiment"], "--format", "json").stdout)["events"]
    assert any("the winner does not help training" in e["message"] for e in events)


@pytest.mark.system
def test_bad_input_is_one_line_and_changes_nothing(tmp_path):
    directory = cluster(tmp_path, "h100-qps-incumbent", hosts=1)
    before = conf_states(directory)
    empty = tmp_path / "empty.log"
    empty.write_text("NCCL INFO Bootstrap : Using eth0\n")
    for args, message in (
            (["--knob", "cpu.governor=performance"], "not a fabric knob"),
            (["--knob", f"{QPS}=4\n8"], "one token"),
            (["--knob", f"{QPS}=2", "--bench", str(directory / "bench.yaml")],
             "no nccl-tests shape"),
            (["--knob", f"{QPS}=2", "--sizes-from", str(empty)], "no NCCL collective calls"),
            (["--knob", f"{QPS}=2", "--max-rounds", "1"], "need 2 <= min-rounds"),
            (["--knob", f"{QPS}=4"], "nothing to sweep"),
            (["--knob", f"{QPS}=2", "--write-profile", str(tmp_path / "no/dir/p.yaml")],
             f"directory {tmp_path / 'no/dir'} does not exist"),
            (["--knob", f"{QPS}=2", "--dry-run", "--write-profile",
              str(tmp_path / "no/dir/p.yaml")], "does not exist"),
            (["--knob", f"{QPS}=2", "--canary", "1"], "--canary 1: the target has 1 host(s)"),
            (["--knob", f"{QPS}=2", "--canary", "99", "--dry-run"], "--canary 99: the target"),
            # before, 13,310 grid arms were accepted: days of rounds
            (["--grid", "--knob", f"{QPS}=2,3,4,5,6,7,8,9,10,11",
              "--knob", f"{SPLIT}=0,1,2,3,4,5,6,7,8,9",
              "--knob", "NCCL_IB_TC=1,2,3,4,5,6,7,8,9,10", "--dry-run"],
             "--knob: 1210 arms to measure, more than 100: fewer values, or coordinate-wise")):
        out = sweep(directory, *args, "--quiet")  # stderr: the error only
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], out.stderr
    assert conf_states(directory) == before


@pytest.mark.system
def test_a_killed_sweep_is_put_back_by_rollback_and_never_offered_to_resume(tmp_path):
    directory = cluster(tmp_path, "gb300-exemplar-gap", hosts=1)
    before = conf_states(directory)
    argv = [sys.executable, "-m", "exemplar_tune.cli", "sweep", "-i",
            str(directory / "inventory.yml"), "--profile", str(directory / "profile.yaml"),
            "--bench", str(directory / "nccl.yaml"), "--knob", f"{QPS}=2,4,8"]
    proc = subprocess.Popen(argv, env=dict(cli_env(), EXEMPLAR_TUNE_STATE_DIR=str(
        tmp_path / "state")), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watch = Watch(proc)
    watch.until(lambda _lines: qps(directory) != {"1"}, timeout=180)
    kill(watch)
    assert qps(directory) != {"1"}
    experiment = json.loads(cli("history", "--format", "json").stdout)[0]["id"]
    # every command points at what works: rollback, not resume (a sweep cannot be resumed)
    hint = cli("profile", "list").stderr
    assert f"'exemplar-tune rollback --run {experiment}' restores it" in hint
    assert "resume" not in hint
    resumed = cli("resume")
    assert resumed.returncode == 2 and "no interrupted experiment to resume" in resumed.stderr
    named = cli("resume", "--run", experiment)
    assert named.returncode == 2 and named.stderr.strip().endswith(
        f"(sweep) cannot be resumed, only rolled back: 'exemplar-tune rollback --run "
        f"{experiment}'")
    out = cli("rollback", "--run", experiment)
    assert out.returncode == 0, out.stdout + out.stderr
    assert conf_states(directory) == before


@pytest.mark.system
def test_two_knobs_are_swept_one_after_the_other(tmp_path):
    """QPS first (4 beats 1 on CX-8), then the split on top of it: at 64 MiB splitting data
    over the QPs changes nothing, so the incumbent (unset) stays and no line is written."""
    directory = cluster(tmp_path, "gb300-exemplar-gap", hosts=1)
    grid = sweep(directory, "--knob", f"{QPS}=4", "--knob", f"{SPLIT}=0,1", "--grid",
                 "--dry-run")
    assert "6 arms x 2-10 rounds" in grid.stdout  # {1, 4} x {unset, 0, 1}
    out = sweep(directory, "--knob", f"{QPS}=4", "--knob", f"{SPLIT}=1", "--sizes-from",
                str(directory / "coll.log"), "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert [s["step"] for s in doc["steps"]] == [QPS, SPLIT]
    assert doc["steps"][0]["chosen"] == f"{QPS}=4,{SPLIT}=unset"
    assert doc["chosen"] == f"{QPS}=4,{SPLIT}=unset"
    conf = (directory / "hosts/node01/etc/nccl.conf").read_text()
    assert f"{QPS}=4" in conf and SPLIT not in conf


@pytest.mark.system
def test_a_per_size_table_keeps_the_sizes_a_candidate_wins_and_training_confirms_it(tmp_path):
    """h100-per-size-protocol: ring/LL128 wins below 4 MiB, ring/Simple from 128 MiB up, and
    NCCL's own choice is as good in between. The table has those rows and no row for 32 MiB;
    the training benchmark keeps it; rollback of the validation puts every byte back."""
    directory = cluster(tmp_path, "h100-per-size-protocol")
    before = conf_states(directory)
    plan = sweep(directory, "--per-size", "--knob", "NCCL_ALGO=ring", "--knob",
                 "NCCL_PROTO=ll128,simple", "--sizes-from", str(directory / "coll.log"),
                 "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "per message size: 6 choices" in plan.stdout and "3 arms x 2-10 rounds" in plan.stdout
    out = sweep(directory, "--per-size", "--knob", "NCCL_ALGO=ring", "--knob",
                "NCCL_PROTO=ll128,simple", "--sizes-from", str(directory / "coll.log"),
                "--validate", str(directory / "bench.yaml"), "--write-tuner",
                str(tmp_path / "nccl_tuner.conf"), "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    won = {(s["collective"], s["size"]): s["chosen"] for s in doc["sizes"]}
    for coll in ("all_gather", "reduce_scatter"):
        assert won[(coll, 2**20)] == "NCCL_ALGO=ring,NCCL_PROTO=ll128"
        assert won[(coll, 32 * 2**20)] is None
        assert won[(coll, 2**30)] == "NCCL_ALGO=ring,NCCL_PROTO=simple"
    assert [(r["collective"], r["protocol"]) for r in doc["tuner_rows"]] == [
        ("allgather", "ll128"), ("allgather", "simple"),
        ("reducescatter", "ll128"), ("reducescatter", "simple")]
    written = (tmp_path / "nccl_tuner.conf").read_text()
    assert written == doc["tuner_conf"]
    assert re.search(r"^# sweep \S+: 1 GiB \+1\d\.\d% time saved \[\+1\d\.\d%, \+1\d\.\d%\] vs "
                     r"NCCL's choice, \d+ rounds$", written, re.M), written
    assert doc["validation"]["action"] == "keep", doc["validation"]
    report = cli("report", doc["experiment"]).stdout
    assert "## Tuner table (nccl_tuner.conf)" in report
    assert "\nallgather,741455,5931641,ring,ll128,-1,2,-1\n" in report
    assert re.search(r"## all_gather 32 MiB: incumbent NCCL_ALGO=unset,NCCL_PROTO=unset", report)
    for host in (directory / "hosts").iterdir():  # the hosts load the table now
        conf = (host / "etc/nccl.conf").read_text()
        assert "NCCL_TUNER_PLUGIN=libnccl-tuner-example.so\n" in conf
        assert "NCCL_TUNER_CONFIG_FILE=/etc/nccl_tuner.conf\n" in conf
        table = (host / "etc/nccl_tuner.conf").read_text()
        assert table.splitlines()[2:] == written.splitlines()[2:]  # the same rows and notes
    back = cli("rollback", "--run", doc["validation"]["experiment"])
    assert back.returncode == 0, back.stdout + back.stderr
    assert conf_states(directory) == before


@pytest.mark.system
def test_a_per_size_sweep_that_cannot_make_a_table_is_one_line_and_changes_nothing(tmp_path):
    directory = cluster(tmp_path, "h100-per-size-protocol", hosts=1)
    before = conf_states(directory)
    sized = ["--sizes-from", str(directory / "coll.log")]
    for conf in (directory / "hosts").glob("*/etc/nccl.conf"):
        conf.write_text(conf.read_text() + "NCCL_PROTO=Simple\n")
    for args, message in (
            (["--knob", "NCCL_PROTO=ll128", "--write-tuner", str(tmp_path / "t")],
             "--write-tuner: only with --per-size"),
            (["--per-size", "--knob", "NCCL_PROTO=ll128", *sized], "add --knob NCCL_ALGO="),
            (["--per-size", "--knob", "NCCL_ALGO=ring", "--knob", "NCCL_PROTO=ll64", *sized],
             "NCCL_PROTO=ll64: the tuner table knows ll, ll128, simple"),
            (["--per-size", "--knob", "NCCL_ALGO=ring", "--knob", "NCCL_PROTO=ll128"],
             "shape nccl-allgather names no message sizes"),
            (["--per-size", "--knob", "NCCL_ALGO=ring", "--knob", "NCCL_PROTO=ll128", *sized],
             "the hosts set NCCL_PROTO=Simple: remove it first"),
            (["--per-size", "--knob", "NCCL_ALGO=ring", "--knob", "NCCL_PROTO=ll128", *sized,
              "--write-tuner", str(tmp_path / "no/dir/t.conf")], "does not exist")):
        out = sweep(directory, *args, "--quiet")
        assert out.returncode == 2, out.stdout + out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], out.stderr
    for conf in (directory / "hosts").glob("*/etc/nccl.conf"):
        conf.write_text(conf.read_text().replace("NCCL_PROTO=Simple\n", ""))
    assert conf_states(directory) == before


@pytest.mark.system
@pytest.mark.parametrize("hosts", [3, 6, 9, 18])
@pytest.mark.parametrize(("scenario", "gpus"), [("gb300-exemplar-gap", 4),
                                                ("h100-fewer-qps", 8)])
def test_sweep_and_compare_at_any_rank_count(tmp_path, scenario, gpus, hosts):
    """3, 6, 9 and 18 hosts of 4 and 8 GPUs (12 to 144 ranks, powers of two or not): the
    sweep measures at the training job's sizes from the first run on, and diagnose --compare
    pairs every row of this cluster's table with a 2-host cluster's (a power of two)."""
    directory = cluster(tmp_path, scenario, hosts=hosts)
    out = sweep(directory, "--knob", f"{QPS}=2", "--sizes-from", str(directory / "coll.log"),
                "--min-rounds", "2", "--max-rounds", "2", "--forks", str(hosts),
                "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["steps"][0]["rounds"] == 2 and doc["steps"][0]["arms"], doc
    reference = tmp_path / "two"
    create_cluster(reference, scenario, hosts=2)
    tables = {}
    for name, where in (("this", directory), ("two", reference)):
        bench = cli("sim", "bench", str(where), "--workload", "nccl-allgather")
        assert bench.returncode == 0, bench.stderr
        tables[name] = tmp_path / f"{name}.txt"
        tables[name].write_text(bench.stdout)
    compared = cli("diagnose", str(tables["this"]), str(tables["two"]), "--compare",
                   "--format", "json")
    assert compared.returncode == 0, compared.stderr
    (coll,) = json.loads(compared.stdout)["comparison"]["collectives"]
    ranks = hosts * gpus
    rows = [int(line.split()[0]) for line in tables["this"].read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert len(coll["sizes"]) == len(rows) == 15  # 1 MiB .. 16 GiB: every row paired
    assert (rows[7] != 128 << 20) == bool(ranks & (ranks - 1))  # rounded unless a power of 2
