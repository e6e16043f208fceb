"""The per-size tuner table: its file format, the fabric knob that writes it, the rows a
sweep's choices give, and the simulated fabric that reads it (fast; no Ansible).

The format is NCCL's example tuner plugin's (NVIDIA/nccl ``plugins/tuner/example``,
``README.md`` and ``plugin.c`` at 5067397c): the lines below are typed from that README's
description, not copied.
"""

from __future__ import annotations

import os

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import (
    KnobInputError,
    nccl_tuner,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import restore_entries
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.engine import (
    LayerFailed,
    run_layer,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.journal import Journal
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.errors import UserError
from exemplar_tune.orchestration import tuner_table
from exemplar_tune.orchestration.selection import ArmSelection
from exemplar_tune.orchestration.sweep_plan import SweptKnob, arm_label
from exemplar_tune.orchestration.tuner_table import SizeChoice, size_ranges, table_step
from exemplar_tune.sim.model import host_state, load_scenario, settings_at
from tests.helpers import EXEMPLAR_STATE, copy_sysroot, tree_hash

ROW = {"collective": "allgather", "min_bytes": 0, "max_bytes": 65536, "algorithm": "ring",
       "protocol": "ll128", "channels": -1, "nodes": 2, "ranks": -1}
RING_LL128 = {"NCCL_ALGO": "ring", "NCCL_PROTO": "ll128"}
RING_SIMPLE = {"NCCL_ALGO": "ring", "NCCL_PROTO": "simple"}
MIB = 2**20


# -- the file format ---------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "message"), [
    ({"collective": "alltoall"}, "collective: 'alltoall' is not one of"),
    ({"protocol": "LL128\nallreduce"}, "protocol: "),
    ({"algorithm": "ring,ll"}, "algorithm: 'ring,ll' is not one of"),
    ({"channels": 0}, "channels: 0 is not -1 or a positive count"),
    ({"nodes": True}, "nodes: True is not -1 or a positive count"),
    ({"min_bytes": -1}, "min_bytes: -1 is not a byte count"),
    ({"max_bytes": "64K"}, "max_bytes: '64K' is not a byte count"),
    ({"min_bytes": 70000}, "min_bytes is above max_bytes"),
    ({"note": "gain\nallreduce,0,1,tree,ll,1,-1,-1"}, "note: .* newline or control character"),
    ({"extra": 1}, "unknown field 'extra'"),
])
def test_a_row_that_could_change_the_file_is_refused(change, message):
    with pytest.raises(KnobInputError, match=message):
        nccl_tuner.check_rows([{**ROW, **change}], "rows")


def test_rows_render_and_read_back_as_the_plugin_reads_them():
    rows = [{**ROW, "note": "measured"}, {**ROW, "collective": "reducescatter",
                                         "min_bytes": 65537, "max_bytes": 2**32 - 1,
                                         "protocol": "simple", "channels": 8, "nodes": -1}]
    text = nccl_tuner.render(nccl_tuner.check_rows(rows, "rows"), "head")
    assert text.splitlines()[0] == "# head"
    assert "# measured\nallgather,0,65536,ring,ll128,-1,2,-1\n" in text
    assert text.endswith("reducescatter,65537,4294967295,ring,simple,8,-1,-1\n")
    assert [{k: r[k] for k in nccl_tuner.FIELDS} for r in nccl_tuner.parse(text)] == \
        [{k: r[k] for k in nccl_tuner.FIELDS} for r in rows]


def test_the_reader_skips_what_the_plugin_skips_and_takes_the_optional_fields():
    text = ("allgather,0,100,ring,simple\n"           # too few fields
            "allgather,x,100,ring,simple,-1,-1,-1\n"  # not a number
            "gather,0,100,ring,simple,-1,-1,-1\n"     # not a collective the plugin knows
            " allreduce, 0, 100, tree, ll, 2, 1, 8, 1, 0\n")  # numPipeOps and regBuff
    assert nccl_tuner.parse(text) == [{"collective": "allreduce", "min_bytes": 0,
                                       "max_bytes": 100, "algorithm": "tree", "protocol": "ll",
                                       "channels": 2, "nodes": 1, "ranks": 8}]


def test_the_first_matching_row_applies_with_inclusive_bounds_and_wildcards():
    rows = nccl_tuner.check_rows([ROW, {**ROW, "min_bytes": 0, "max_bytes": 2**30,
                                        "protocol": "simple", "nodes": -1}], "rows")
    assert nccl_tuner.match(rows, "all_gather", 65536, 2, 16)["protocol"] == "ll128"
    assert nccl_tuner.match(rows, "all_gather", 65537, 2, 16)["protocol"] == "simple"
    assert nccl_tuner.match(rows, "allgather", 100, 3, 24)["protocol"] == "simple"  # nodes -1
    assert nccl_tuner.match(rows, "reduce_scatter", 100, 2, 16) is None


# -- the knob that writes it -------------------------------------------------------------------


def test_the_knob_writes_the_table_restores_it_byte_exact_and_is_idempotent(tmp_path):
    root = copy_sysroot("h100-x86", tmp_path)
    # a table an earlier exemplar-tune wrote (its first line says so): replaced, then put back
    (root / "etc/nccl_tuner.conf").write_text("# NCCL tuner table written by exemplar-tune\n")
    os.chmod(root / "etc/nccl_tuner.conf", 0o640)
    sysroot, before = Sysroot(str(root)), tree_hash(root)
    profile = {"fabric": {"nccl_tuner": [ROW]}}
    only = ["nccl_tuner"]
    check = run_layer(sysroot, "fabric", profile, {}, None, True, only)
    assert check["changed"] and tree_hash(root) == before  # check mode writes nothing
    journal = Journal(sysroot, "r1")
    assert run_layer(sysroot, "fabric", profile, {}, journal, False, only)["changed"]
    table = root / "etc/nccl_tuner.conf"
    assert table.read_text().endswith("\nallgather,0,65536,ring,ll128,-1,2,-1\n")
    assert table.stat().st_mode & 0o777 == 0o640  # the file's mode kept
    assert not run_layer(sysroot, "fabric", profile, {}, journal, False, only)["changed"]
    restore_entries(sysroot, journal, journal.load()["entries"], check_mode=False)
    assert tree_hash(root, EXEMPLAR_STATE) == before  # bytes, modes: as before the run


def test_a_table_path_holding_a_file_the_tool_did_not_make_is_refused_before_any_change(
        tmp_path):
    root = copy_sysroot("h100-x86", tmp_path)
    (root / "etc/nccl_tuner.conf").write_text("# by hand\n")
    before = tree_hash(root)
    with pytest.raises(LayerFailed, match="holds a file exemplar-tune did not create"):
        run_layer(Sysroot(str(root)), "fabric", {"fabric": {"nccl_tuner": [ROW]}}, {},
                  Journal(Sysroot(str(root)), "r1"), False, ["nccl_tuner"])
    assert tree_hash(root) == before


def test_a_bad_row_in_a_profile_fails_the_knob_before_anything_is_written(tmp_path):
    root = copy_sysroot("h100-x86", tmp_path)
    before = tree_hash(root)
    profile = {"fabric": {"nccl_tuner": [{**ROW, "note": "x\ny"}]}}
    with pytest.raises(LayerFailed, match=r"fabric\.nccl_tuner: fabric\.nccl_tuner\[0\]\.note"):
        run_layer(Sysroot(str(root)), "fabric", profile, {}, Journal(Sysroot(str(root)), "r"),
                  False, ["nccl_tuner"])
    assert tree_hash(root) == before


# -- rows from a sweep's choices ---------------------------------------------------------------


def test_a_row_covers_its_size_up_to_the_geometric_midpoints():
    ranges = size_ranges([MIB, 32 * MIB, 2**30])
    assert ranges[MIB] == (741455, 5931641)  # 1M/sqrt2 .. sqrt(1M x 32M)
    assert ranges[32 * MIB] == (5931642, 189812531)
    assert ranges[2**30] == (189812532, 1518500249)


def test_neighbours_with_one_winner_share_a_row_and_nccl_keeps_the_rest():
    def choice(size, chosen, gain=0.1):
        estimates = tuple({"arm": arm_label(arm), "rel_change": gain, "ci_low": gain - 0.01,
                           "ci_high": gain + 0.01} for arm in (RING_LL128, RING_SIMPLE))
        return SizeChoice("all_gather", size, chosen, "", 4, estimates)
    choices = [choice(MIB, RING_LL128), choice(2 * MIB, RING_LL128), choice(4 * MIB, None),
               choice(8 * MIB, RING_SIMPLE),
               SizeChoice("reduce_scatter", MIB, RING_SIMPLE, "", 3)]
    rows = tuner_table.rows(choices, 2, "EXP")
    assert [(r["collective"], r["min_bytes"], r["max_bytes"], r["protocol"]) for r in rows] == [
        ("allgather", 741455, 2965820, "ll128"),        # 1M and 2M in one row
        ("allgather", 5931642, 11863283, "simple"),     # 4M left to NCCL: a gap
        ("reducescatter", 741455, 1482910, "simple")]
    assert rows[0]["note"].startswith("sweep EXP: 1 MiB +10.0% time saved [+9.0%, +11.0%]")
    assert "; 2 MiB +10.0%" in rows[0]["note"]
    assert all(r["nodes"] == 2 and r["ranks"] == -1 and r["channels"] == -1 for r in rows)
    record = choices[0].record("NCCL_ALGO=unset,NCCL_PROTO=unset")  # as show and report read it
    assert record["step"] == "all_gather 1 MiB" and record["outcome"] == "choose"
    assert record["chosen"] == "NCCL_ALGO=ring,NCCL_PROTO=ll128" and len(record["arms"]) == 2
    assert choices[2].record("inc")["chosen"] == "inc"
    pinned = SizeChoice("all_gather", MIB, {**RING_LL128, "NCCL_MAX_NCHANNELS": "16"}, "", 3)
    assert tuner_table.rows([pinned], 2, "EXP")[0]["channels"] == 16  # swept: written


def test_candidates_are_the_full_combinations_against_nccl_s_own_choice():
    step = table_step([SweptKnob("NCCL_ALGO", ("ring", "tree")),
                       SweptKnob("NCCL_PROTO", ("ll128", "simple"))])
    assert arm_label(step.incumbent) == "NCCL_ALGO=unset,NCCL_PROTO=unset"
    assert [arm_label(c) for c in step.candidates] == [
        "NCCL_ALGO=ring,NCCL_PROTO=ll128", "NCCL_ALGO=ring,NCCL_PROTO=simple",
        "NCCL_ALGO=tree,NCCL_PROTO=ll128", "NCCL_ALGO=tree,NCCL_PROTO=simple"]


@pytest.mark.parametrize(("names", "message"), [
    (["NCCL_PROTO"], "add --knob NCCL_ALGO="),
    (["NCCL_ALGO", "NCCL_PROTO", "NCCL_IB_QPS_PER_CONNECTION"],
     "NCCL_IB_QPS_PER_CONNECTION is not a tuner table column"),
])
def test_knobs_that_cannot_make_rows_are_refused(names, message):
    with pytest.raises(UserError, match=message):
        tuner_table.check_columns(names)
    tuner_table.check_columns(["NCCL_ALGO", "NCCL_PROTO", "NCCL_MAX_NCHANNELS"])


@pytest.mark.parametrize(("current", "message"), [
    ({"NCCL_ALGO": None, "NCCL_PROTO": "LL128"}, "the hosts set NCCL_PROTO=LL128: remove it"),
    ({"NCCL_TUNER_PLUGIN": "libnccl-tuner-example.so"},
     "the hosts set NCCL_TUNER_PLUGIN=libnccl-tuner-example.so: remove it first"),
])
def test_hosts_that_do_not_leave_the_choice_to_nccl_are_refused(current, message):
    with pytest.raises(UserError, match=message):
        tuner_table.check_unset(current)
    tuner_table.check_unset({"NCCL_ALGO": None, "NCCL_PROTO": None, "NCCL_TUNER_PLUGIN": None})


@pytest.mark.parametrize(("name", "value", "message"), [
    ("NCCL_PROTO", "LL256", "the tuner table knows ll, ll128, simple"),
    ("NCCL_ALGO", "CollNet", "the tuner table knows tree, ring"),
    ("NCCL_MAX_NCHANNELS", "0", "a channel count from 1 to 64"),
])
def test_a_value_the_table_cannot_hold_is_refused(name, value, message):
    with pytest.raises(UserError, match=message):
        tuner_table.check_values(name, (value,))
    tuner_table.check_values("NCCL_PROTO", ("LL128", "Simple"))  # NCCL's own spellings pass


def test_sharing_the_error_over_many_sizes_asks_for_more_evidence():
    """The same runs pass alone and fail when the error is shared over 1000 sizes."""
    base, cand = [1.00, 1.01, 0.99, 1.00], [0.985, 0.995, 0.975, 0.985]
    decided = {}
    for family in (1, 1000):
        selection = ArmSelection("inc", ["cand"], min_rounds=4, max_rounds=4, family=family)
        for a, b in zip(base, cand, strict=True):
            selection.add("inc", a)
            selection.add("cand", b)
        decided[family] = selection.decide().outcome
    assert decided == {1: "choose", 1000: "incumbent"}


# -- the simulated fabric reads the table ------------------------------------------------------


def test_the_simulated_fabric_takes_algorithm_and_protocol_from_the_matching_row(tmp_path):
    scenario = load_scenario("h100-per-size-protocol")
    root = copy_sysroot("h100-x86", tmp_path)
    (root / "etc/nccl_tuner.conf").write_text(nccl_tuner.render(
        nccl_tuner.check_rows([{**ROW, "max_bytes": 4 * MIB}], "rows"), "t"))
    loose = host_state(str(root))
    assert loose["tuner"] == []  # the file alone: no plugin loads it
    with (root / "etc/nccl.conf").open("a") as conf:
        conf.write("NCCL_TUNER_PLUGIN=libnccl-tuner-example.so\n"
                   "NCCL_TUNER_CONFIG_FILE=/etc/nccl_tuner.conf\n")
    state = host_state(str(root))
    assert settings_at(state, scenario, "all_gather", MIB, 2) == {"NCCL_PROTO": "ll128",
                                                                  "NCCL_ALGO": "ring"}
    assert settings_at(state, scenario, "all_gather", MIB, 3)["NCCL_PROTO"] == "auto"  # nodes
    assert settings_at(state, scenario, "all_gather", 8 * MIB, 2)["NCCL_PROTO"] == "auto"
    assert settings_at(state, scenario, "reduce_scatter", MIB, 2)["NCCL_PROTO"] == "auto"
