"""The exemplar-tune command line as a user runs it: exit codes, one-line errors, formats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import LAYER_NAMES

from tests.conftest import SYSROOTS
from tests.helpers import cli_env

H100 = str(SYSROOTS / "h100-x86")


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "exemplar_tune.cli", *args], capture_output=True,
                          text=True, env=cli_env(), cwd=cwd, check=False, timeout=300)


def test_help_teaches_layers_and_examples():
    out = cli("facts", "--help")
    assert out.returncode == 0
    for word in ("--sysroot", "--layer", "examples:", "exemplar-tune snapshot"):
        assert word in out.stdout


def test_facts_json_has_one_key_per_layer():
    out = cli("facts", "--sysroot", H100, "--format", "json")
    assert out.returncode == 0, out.stderr
    assert list(json.loads(out.stdout)) == list(LAYER_NAMES)


def test_facts_layer_selection_in_preflight_order():
    out = cli("facts", "--sysroot", H100, "--layer", "cpu", "--layer", "gpu", "--format", "json")
    assert list(json.loads(out.stdout)) == ["gpu", "cpu"]


def test_table_format_shows_layers_and_sources():
    out = cli("facts", "--sysroot", H100, "--layer", "cpu", "--sources")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("### h100-x86\n== cpu\n")
    assert "sources." in out.stdout


@pytest.mark.parametrize("args, message", [
    (["facts", "--layer", "disk"], "unknown layer 'disk'; choose from gpu, vm, cpu"),
    (["facts", "--sysroot", "/nonexistent/x.tar.gz"], "no such file or directory"),
    (["snapshot", "-o", "out.zip"], "must end in .tar.gz or .tgz"),
    (["tune", "--bench", "b.yaml", "--confidence", "1.5"], "--confidence 1.5: a fraction"),
    (["tune", "--bench", "b.yaml", "--confidence", "0"], "--confidence 0.0: a fraction"),
    (["tune", "--bench", "b.yaml", "--confidence", "nan"], "--confidence nan: a fraction"),
    (["apply", "--layer", "cpu", "--bench", "b.yaml", "--min-effect", "-0.01"],
     "--min-effect -0.01: a fraction"),
    (["tune", "--bench", "b.yaml", "--min-runs", "4", "--max-runs", "3"],
     "need 2 <= min-runs <= max-runs"),
    (["tune", "--bench", "b.yaml", "--sysroot", H100, "--canary", "99"],
     "--canary 99: the target has 1 host(s); a canary is fewer hosts than that (0 for none)"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    out = cli(*args, cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert "Traceback" not in out.stderr


def test_unsafe_bundle_is_refused(tmp_path):
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("../escaped")
        tar.addfile(info)
    out = cli("facts", "--sysroot", str(archive))
    assert out.returncode == 2
    assert "unsafe path in archive: '../escaped'" in out.stderr
    assert not (tmp_path.parent / "escaped").exists()


def test_usage_error_from_argparse_is_exit_2():
    assert cli("facts", "--format", "xml").returncode == 2


def test_live_facts_through_ansible(tmp_path):
    out = cli("facts", "--layer", "vm", "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    assert list(facts) == ["vm"]


def test_inventory_with_unreachable_host_is_exit_1(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n"
        "    here:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
        "    gone:\n      ansible_host: 127.0.0.1\n      ansible_port: 1\n"
        "      ansible_ssh_common_args: -o ConnectTimeout=3\n")
    out = cli("facts", "-i", str(inventory), "--layer", "vm", "--format", "json")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert list(doc["hosts"]) == ["here"]
    assert list(doc["unreachable"]) == ["gone"]


def test_snapshot_round_trip_gives_the_live_facts(tmp_path):
    archive = tmp_path / "me.tar.gz"
    out = cli("snapshot", "-o", str(archive))
    assert out.returncode == 0, out.stderr
    assert f"wrote {archive}" in out.stdout
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile(".exemplar/manifest.json"))
    assert "proc/cmdline" in names
    assert manifest["entries"] > 10
    assert not any(n.startswith("etc/shadow") or n.startswith("root/") for n in names)
    replay = json.loads(cli("facts", "--sysroot", str(archive), "--format", "json").stdout)
    live = json.loads(cli("facts", "--format", "json", cwd=tmp_path).stdout)
    assert _stable(replay) == _stable(live)


# Counters that move between two reads, and texts that name where a fact came from
# (a command on the live host, the captured file in the archive).
VOLATILE = {"usage", "time", "time_us", "above", "below", "rejected", "sources", "errors",
            "reason", "virt_evidence"}


def _stable(value):
    """Facts without moving counters and without source-naming texts."""
    if isinstance(value, dict):  # "<fact>_missing": why a command's output is absent
        return {k: _stable(v) for k, v in value.items()
                if k not in VOLATILE and not k.endswith("_missing")}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def test_version():
    out = cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("exemplar-tune ")
    assert os.environ.get("PATH")


def test_diagnose_maps_findings_to_checks_and_exits_1_on_failure():
    from tests.conftest import SAMPLES
    out = cli("diagnose", str(SAMPLES / "perf_top_arm_smmu_cmdq_issue_cmdlist.txt"),
              "--format", "json")
    assert out.returncode == 1, out.stderr
    finding = json.loads(out.stdout)["reports"][0]["findings"][0]
    assert (finding["layer"], finding["check_id"], finding["status"]) == ("vm", "vm.cmdqv", "fail")


def test_diagnose_unrecognised_and_bad_compare_are_exit_2(tmp_path):
    from tests.conftest import SAMPLES
    junk = tmp_path / "junk.txt"
    junk.write_text("hello world\n")
    out = cli("diagnose", str(junk))
    assert out.returncode == 2 and "not a recognised format" in out.stderr
    out = cli("diagnose", str(SAMPLES / "perf_top_arm_smmu_cmdq_issue_cmdlist.txt"), "--compare")
    assert out.returncode == 2 and "exactly two nccl-tests files" in out.stderr


def test_reading_commands_never_create_a_ledger(tmp_path):
    """show/report/rollback on a ledger path that does not exist: one line, no file made;
    history: nothing recorded yet, no file made."""
    missing = tmp_path / "new.sqlite3"
    for argv in (["show", "latest"], ["report", "latest"], ["rollback", "--run", "latest"]):
        out = cli(*argv, "--ledger", str(missing))
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip() == (f"exemplar-tune: error: no ledger at {missing}: nothing "
                                      "has been recorded there (tune, apply and sweep write "
                                      "it; --ledger names another)")
    history = cli("history", "--ledger", str(missing))
    assert history.returncode == 0 and history.stdout.startswith("no experiments recorded yet")
    assert json.loads(cli("history", "--ledger", str(missing), "--format", "json").stdout) == []
    assert not missing.exists() and list(tmp_path.iterdir()) == []


def test_a_ledger_that_cannot_be_opened_does_not_stop_commands_that_need_none(tmp_path):
    """The hint about unfinished experiments reads the ledger; a ledger this user cannot open
    (read-only home, a container, a damaged file) only means no hint."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "ledger.sqlite3").write_text("not a database\n")
    env = {**cli_env(), "EXEMPLAR_TUNE_STATE_DIR": str(state)}
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "facts", "--sysroot",
                          str(SYSROOTS / "h100-x86"), "--layer", "workload"],
                         capture_output=True, text=True, env=env, check=False, timeout=120)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    history = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "history"],
                             capture_output=True, text=True, env=env, check=False, timeout=120)
    assert history.returncode == 2 and "not a readable exemplar-tune ledger" in history.stderr


def test_help_teaches_each_command():
    restore = cli("restore", "--help").stdout
    assert "exemplar-tune rollback --run latest" in restore and "--bench" not in restore
    assert "an Ansible pattern" in cli("audit", "--help").stdout
    assert "The newest experiments in the ledger" in cli("history", "--help").stdout
    assert "the workload shapes to measure" in cli("tune", "--help").stdout


def test_history_last_is_a_count_and_limit_stays_a_host_pattern_elsewhere(tmp_path):
    """``history --last N``: the newest N experiments (``--limit N``, its earlier name, is
    still read); no other command takes a count under ``--limit``."""
    from exemplar_tune.ledger import Ledger

    path = tmp_path / "l.db"
    with Ledger(path) as ledger:
        ids = [ledger.start_experiment("apply", f"p{n}", {"inventory": "i.yml"}, {})
               for n in range(3)]
    for option in ("--last", "--limit"):
        out = cli("history", option, "2", "--ledger", str(path), "--format", "json")
        assert [row["id"] for row in json.loads(out.stdout)] == ids[:0:-1], out.stderr
    assert "--limit" not in cli("history", "--help").stdout


def test_every_option_of_every_command_says_what_it_is():
    """No option or argument of any command (sub-commands included) without help text."""
    import argparse

    from exemplar_tune.cli import build_parser

    silent: list[str] = []

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    walk(f"{name} {sub}".strip(), child)
            elif not action.help and not isinstance(action, argparse._HelpAction):
                silent.append(f"{name}: {'/'.join(action.option_strings) or action.dest}")

    walk("", build_parser())
    assert silent == []


def test_every_limit_a_help_example_gives_names_hosts_the_way_it_means():
    """A ``--limit`` in any command's examples is a hostlist (``gpu[01-16]``) or a plain
    Ansible pattern, never a bracket Ansible reads as a group subscript (``gpu[01:16]``:
    "no host matched")."""
    import argparse
    import re

    from exemplar_tune.cli import build_parser
    from exemplar_tune.fleet.hostlist import ansible_limit

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    found = {}
    for name, parser in sub.choices.items():
        for value in re.findall(r"--limit '([^']+)'", parser.format_help()):
            found[f"{name}: {value}"] = value
    assert found, "no --limit example found in any --help"
    for where, value in found.items():
        assert "[" not in ansible_limit(value), where


@pytest.mark.parametrize("argv", [["preflight"], ["facts"], ["audit"],
                                  ["apply", "--layer", "cpu", "--check"]])
def test_a_missing_inventory_is_one_line_for_every_command(tmp_path, argv):
    """Ansible takes a path that does not exist for a host name (SSH, DNS, exit 1)."""
    missing = tmp_path / "nonexistent" / "inv.yml"
    out = cli(*argv, "-i", str(missing))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == (f"exemplar-tune: error: inventory {missing} not found (a file "
                                  "or directory; a host list needs a comma: -i node1,)")


@pytest.mark.parametrize("hosts", ["gone-a.invalid,gone-b.invalid,",
                                   "gone-a.invalid,gone-b.invalid"])
def test_a_comma_host_list_is_read_as_ansible_reads_it(hosts):
    """``-i a,b,`` names two hosts, as with ``ansible -i``; ansible-runner alone would take
    the text for an INI file and one host named ``a,b,``."""
    out = cli("facts", "-i", hosts, "--layer", "cpu", "--format", "json")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert sorted(doc["unreachable"]) == ["gone-a.invalid", "gone-b.invalid"], doc
    assert "0 host(s) answered, 2 failed or unreachable" in out.stderr
    text = cli("preflight", "-i", hosts, "--layer", "cpu").stdout
    assert "### gone-a.invalid,gone-b.invalid: UNREACHABLE" in text  # folded by reason
    assert "hostname <host>:" in text and "{host}" not in text, text


def test_apply_where_no_host_answers_offers_no_undo_and_names_the_profile_asked_for(tmp_path):
    """Nothing was journaled: no 'undo with' (a restore that would fail); the profile line
    says what was asked for, never 'auto ()'; unreachable hosts still exit 1."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  vars:\n    ansible_host: 127.0.0.1\n    ansible_port: 1\n"
                         "    ansible_ssh_common_args: -o ConnectTimeout=3\n"
                         "  hosts:\n    gone1:\n    gone2:\n")
    common = ["apply", "--layer", "cpu", "-i", str(inventory), "--ledger",
              str(tmp_path / "l.db")]
    out = cli(*common)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.splitlines()[0].startswith("apply cpu (profile auto (no host answered)),")
    assert "gone[1-2]: UNREACHABLE: " in out.stdout
    assert "undo with" not in out.stdout and "auto ()" not in out.stdout
    doc = json.loads(cli(*common, "--format", "json").stdout)
    assert doc["undo"] is None and sorted(doc["unreachable"]) == ["gone1", "gone2"]
