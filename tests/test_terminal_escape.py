"""Clean terminal output: what a host, a file or a claim holds is printed escaped.

Every case carries the same hostile text (a screen clear, a carriage return, a fake line and a
right-to-left override) in a host's claim, a sysroot's name and files, a capture's name and
lines or a path named in an error, runs the command as a user does (standard output and error
read as bytes, so that no carriage return is hidden by newline translation) and checks that no
control character reaches the terminal but the tool's own newlines (and, on a terminal, its
colours), and that the hostile text is shown in its escaped form.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import re
import shutil
import subprocess
import sys
import tty
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exemplar_tune.progress import HostProgress, say
from exemplar_tune.terminal import EscapingFormatter, escape, guarded
from tests.conftest import SYSROOTS
from tests.helpers import cli_env

HOSTILE = "\x1b[2J\r\nFAKE LINE\u202e"
SHOWN = "\\x1b[2J\\r\\nFAKE LINE\\u202e"
# what must never reach a terminal raw: C0 but newline, DEL, C1, separators, bidi controls
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
OUR_COLOURS = re.compile(r"\x1b\[(?:0|2|3[1235])m")  # reports.preflight.COLOUR and RESET
CLAIM = "var/lib/exemplar-tune/claim.json"
GOVERNORS = "sys/devices/system/cpu/cpufreq"


def run(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """The CLI's exit status, stdout and stderr, decoded from bytes as they were written."""
    env = {**cli_env(), "EXEMPLAR_TUNE_STATE_DIR": str(tmp_path / "state")}
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", *args],
                         capture_output=True, env=env, check=False, timeout=300)
    return out.returncode, _text(out.stdout), _text(out.stderr)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")


def assert_clean(*streams: str, colours: bool = False) -> None:
    """No raw control character but newline (and our own colours where ``colours``), and no
    line that a hostile value started."""
    for text in streams:
        shown = OUR_COLOURS.sub("", text) if colours else text
        assert not RAW.findall(shown), RAW.findall(shown)
        assert not any(line.startswith("FAKE LINE") for line in text.split("\n")), text


def hostile_sysroot(tmp_path: Path) -> Path:
    """A copy of the h100-x86 sysroot named with the hostile text (the host's name), whose
    CPU frequency governor (a fact the cpu.governor check fails on) holds it too."""
    root = tmp_path / f"node{HOSTILE}"
    shutil.copytree(SYSROOTS / "h100-x86", root, symlinks=True)
    for governor in (root / GOVERNORS).glob("policy*/scaling_governor"):
        governor.write_text(f"power{HOSTILE}\n")
    return root


def forged_claim(root: Path) -> dict[str, str]:
    """A claim of a controller on another machine with the hostile text in every field."""
    claim = {key: f"{key}{HOSTILE}" for key in
             ("token", "machine", "controller", "pid", "created", "command", "started")}
    (root / CLAIM).parent.mkdir(parents=True, exist_ok=True)
    (root / CLAIM).write_text(json.dumps(claim))
    return claim


def test_unlock_shows_a_forged_claim_escaped_and_its_json_as_it_is(tmp_path: Path) -> None:
    host = tmp_path / "node01"
    shutil.copytree(SYSROOTS / "h100-x86", host, symlinks=True)
    claim = forged_claim(host)
    status, out, err = run(tmp_path, "unlock", "--sysroot", str(host), "--check")
    assert status == 0, out + err
    assert_clean(out, err)
    assert out == (f"node01: would remove the claim of pid pid{SHOWN} on controller{SHOWN}, "
                   f"'command{SHOWN}', since started{SHOWN}\n")
    status, out, err = run(tmp_path, "unlock", "--sysroot", str(host), "--check",
                           "--format", "json")
    assert_clean(out)
    assert json.loads(out)["removed"]["node01"] == claim  # escaped once, by JSON alone


def test_a_host_held_by_a_forged_claim_is_named_escaped(tmp_path: Path) -> None:
    host = tmp_path / "node01"
    shutil.copytree(SYSROOTS / "h100-x86", host, symlinks=True)
    forged_claim(host)
    profile = tmp_path / "profile.yaml"
    profile.write_text("name: t\nfabric: {nccl: {NCCL_IB_QPS_PER_CONNECTION: '4'}}\n")
    status, out, err = run(tmp_path, "apply", "--layer", "fabric", "--sysroot", str(host),
                           "--profile", str(profile))
    assert status == 1, out + err
    assert_clean(out, err)
    assert "node01: FAILED: /var/lib/exemplar-tune/claim.json: claimed by another " \
        "exemplar-tune (pid pid\\x1b[2J" in out


def test_facts_table_shows_host_names_and_values_escaped(tmp_path: Path) -> None:
    root = hostile_sysroot(tmp_path)
    desc = root / "sys/devices/system/cpu/cpu0/cpuidle/state0/desc"
    desc.write_text(f"POLL{HOSTILE}\n")
    status, out, err = run(tmp_path, "facts", "--sysroot", str(root), "--layer", "cpu")
    assert status == 0, err
    assert_clean(out, err)
    assert out.startswith(f"### node{SHOWN}\n== cpu\n")
    assert re.search(rf"\n  cpuidle\.states\[0\]\.desc +POLL{re.escape(SHOWN)}\n", out)


def on_a_terminal(tmp_path: Path, *args: str) -> str:
    """The CLI's standard output written to a terminal (no output translation), as text."""
    env = {**cli_env(), "EXEMPLAR_TUNE_STATE_DIR": str(tmp_path / "state")}
    env.pop("NO_COLOR", None)
    main, side = pty.openpty()
    tty.setraw(side)
    proc = subprocess.Popen([sys.executable, "-m", "exemplar_tune.cli", *args], stdout=side,
                            stderr=subprocess.DEVNULL, env=env)
    os.close(side)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the terminal's other side is closed: all was read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    proc.wait(timeout=300)
    return _text(b"".join(chunks))


def test_preflight_table_escapes_values_and_keeps_its_colours(tmp_path: Path) -> None:
    root = hostile_sysroot(tmp_path)
    out = on_a_terminal(tmp_path, "preflight", "--sysroot", str(root))
    assert "\x1b[31mFAIL\x1b[0m" in out  # our colours work on a terminal
    assert_clean(out, colours=True)
    assert f"### node{SHOWN}: \x1b[31mFAIL\x1b[0m (health)\n" in out
    assert f"cpu.governor: governor power{SHOWN} on CPUs 0-7, want performance\n" in out
    # a value inside JSON is shown as JSON escapes it, not escaped twice
    assert f'observed {{"power{json.dumps(HOSTILE)[1:-1]}": "0-7"}}' in out


def test_preflight_markdown_and_prometheus_stay_in_their_formats(tmp_path: Path) -> None:
    root = hostile_sysroot(tmp_path)
    _, markdown, err = run(tmp_path, "preflight", "--sysroot", str(root), "--format",
                           "markdown")
    assert_clean(markdown, err)
    assert f"- **fail** `cpu.governor` on node{SHOWN} (1/1): governor power{SHOWN} on " \
        "CPUs 0-7, want performance; evidence: " in markdown
    _, metrics, err = run(tmp_path, "preflight", "--sysroot", str(root), "--format",
                          "prometheus")
    assert_clean(metrics, err)
    samples = [s for f in text_string_to_metric_families(metrics) for s in f.samples]
    hosts = {s.labels["host"] for s in samples if "host" in s.labels}
    # the format's own escape brings the newline back; the rest reads as its escapes
    assert hosts == {"node\\x1b[2J\\r\nFAKE LINE\\u202e"}
    assert all(line.startswith(("# HELP ", "# TYPE ", "exemplar_tune_"))
               for line in metrics.splitlines())


def test_diagnose_shows_file_names_and_captured_lines_escaped(tmp_path: Path) -> None:
    capture = tmp_path / f"nccl{HOSTILE}.log"
    capture.write_text("node1:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
                       "node1:1234:1240 [0] misc/socket.cc:50 NCCL WARN Net : peer \u202e"
                       "gone\n")
    status, out, err = run(tmp_path, "diagnose", str(capture))
    assert status == 0, err
    assert_clean(out, err)
    assert out.startswith(f"== {tmp_path}/nccl{SHOWN}.log (nccl-log): WARN\n")
    assert "NCCL WARN Net : peer \\u202egone on node1\n" in out
    assert f"        evidence {tmp_path}/nccl{SHOWN}.log:2\n" in out


def test_an_error_shows_the_path_it_names_escaped(tmp_path: Path) -> None:
    status, out, err = run(tmp_path, "facts", "--sysroot", f"/nonexistent/{HOSTILE}")
    assert status == 2
    assert_clean(out, err)
    assert err.startswith("exemplar-tune: error: ") and f"/nonexistent/{SHOWN}" in err
    assert err.count("\n") == 1


def test_escape_shows_controls_and_keeps_printable_text() -> None:
    assert escape(f"é 中 \\ {HOSTILE}\t\x7f\x85\u2028\u2066\udc80") == \
        f"é 中 \\ {SHOWN}\\t\\x7f\\x85\\u2028\\u2066\\udc80"
    assert escape(escape(HOSTILE)) == escape(HOSTILE) == SHOWN


def test_the_guard_escapes_whatever_any_code_prints(capsys: pytest.CaptureFixture) -> None:
    with guarded():
        print("a library line\x1b[2J\r\u202e\n\tits own tab", flush=True)
        say(f"a step{HOSTILE}")
    out, err = capsys.readouterr()
    assert out == "a library line\\x1b[2J\\r\\u202e\n\tits own tab\n"  # its lines kept
    assert err == f"a step{SHOWN}\n"
    record = logging.LogRecord("exemplar_tune.x", logging.WARNING, __file__, 1,
                               "host %s", (HOSTILE,), None)
    assert EscapingFormatter("%(name)s: %(message)s").format(record) == \
        f"exemplar_tune.x: host {SHOWN}"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bars_show_task_names_escaped() -> None:
    stream = _Terminal()
    progress = HostProgress("apply", lambda: 1, stream)
    progress.event({"event": "playbook_on_task_start", "event_data": {"task": "t\x1b[2J"}})
    progress.event({"event": "runner_on_ok", "event_data": {"host": "node01"}})
    progress.close()
    assert "apply: t\\x1b[2J" in stream.getvalue() and "t\x1b[2J" not in stream.getvalue()
