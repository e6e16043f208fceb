"""``diagnose`` reads gzip and zstd captures as clusters keep them: real logs of the corpus,
compressed here with the real tools (zlib, the ``zstd`` program), read back to the same report;
damaged data, a missing ``zstd``, bombs and data that expands past ``--max-input`` are one-line
refusals."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from exemplar_tune.diagnose import KINDS_TEXT, diagnose_job, diagnose_paths
from exemplar_tune.errors import UserError
from exemplar_tune.inputs import MAX_INPUT
from tests.corpus import REALWORLD
from tests.helpers import cli_env

CAPTURES = [
    REALWORLD / "steptime" / "bigscience-workshop-bigscience-tr1-13B-chronicles-interval10.log",
    REALWORLD / "nccl-log"
    / "datacrunch-research-nccl-ebpf-gb300-nvl72-2trays-mnnvl-init-2.29.7.log",
    REALWORLD / "nccl-tests"
    / "aws-samples-awsome-distributed-training-aws-batch-readme-stdout-tag-allreduce.txt",
]


def zstd(data: bytes) -> bytes:
    if shutil.which("zstd") is None:
        pytest.fail("the zstd program is missing: apt install zstd (.ci/packages.txt)")
    return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True,
                          check=True).stdout


def report_of(path: Path) -> str:
    """The report as JSON, its file named ``CAPTURE`` wherever it is cited."""
    (report,), errors = diagnose_paths([str(path)])
    assert errors == []
    return json.dumps(report.to_dict(), sort_keys=True).replace(str(path), "CAPTURE")


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.parent.name)
@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_a_compressed_capture_reads_as_the_plain_one(tmp_path, capture, kind):
    data = capture.read_bytes()
    packed = tmp_path / f"capture.{kind}"
    packed.write_bytes(gzip.compress(data) if kind == "gz" else zstd(data))
    assert report_of(packed) == report_of(capture)


def test_concatenated_gzip_members_read_as_one_text(tmp_path):
    """logrotate with delaycompress, or ``cat a.gz b.gz``: several members, one file."""
    lines = CAPTURES[0].read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    packed = tmp_path / "two-members.gz"
    packed.write_bytes(gzip.compress(b"".join(lines[:half]))
                       + gzip.compress(b"".join(lines[half:])))
    assert report_of(packed) == report_of(CAPTURES[0])


def test_the_files_of_a_job_may_be_compressed(tmp_path):
    text = CAPTURES[0].read_bytes()
    (tmp_path / "node01.out.gz").write_bytes(gzip.compress(text))
    (tmp_path / "node02.out.zst").write_bytes(zstd(text))
    report = diagnose_job([str(tmp_path)])
    assert report.kind == "step-time" and "(2 files)" in report.source


@pytest.mark.parametrize(("kind", "message"), [
    ("gz", "truncated gzip data (the file ends inside it)"),
    ("zst", "damaged zstd data"),
])
def test_damaged_data_is_one_line_and_exit_2(tmp_path, kind, message):
    data = CAPTURES[0].read_bytes()
    packed = gzip.compress(data) if kind == "gz" else zstd(data)
    bad = tmp_path / f"cut.{kind}"
    bad.write_bytes(packed[: len(packed) // 2])
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "diagnose", str(bad)],
                         capture_output=True, text=True, env=cli_env(), timeout=60,
                         check=False)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and message in out.stderr


def test_gzip_whose_body_is_not_deflate_is_refused(tmp_path):
    bad = tmp_path / "bad.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 64)
    assert "damaged gzip data" in diagnose_paths([str(bad)])[1][0]


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_a_bomb_is_read_as_a_stream_and_refused_by_its_first_window(tmp_path, kind):
    """64 MiB of zeros in a few kB: expanded only as far as the first window, then refused as
    binary; a log that expands past --max-input is refused by that bound, in one line."""
    bomb = b"\0" * (MAX_INPUT + 1)
    packed = tmp_path / f"bomb.{kind}"
    packed.write_bytes(gzip.compress(bomb, 1) if kind == "gz" else zstd(bomb))
    assert packed.stat().st_size < 1 << 20
    assert diagnose_paths([str(packed)]) == ([], [f"{packed}: binary content, not a text "
                                                  f"capture ({KINDS_TEXT})"])
    log = CAPTURES[1].read_bytes() * 200
    packed.write_bytes(gzip.compress(log, 1) if kind == "gz" else zstd(log))
    assert diagnose_paths([str(packed)], max_bytes=len(log) - 1) == (
        [], [f"capture {packed}: more than {(len(log) - 1) / 2**20:.4g} MiB to read; "
             "--max-input raises the bound"])
    (report,), [] = diagnose_paths([str(packed)], max_bytes=len(log))
    assert report.kind == "nccl-log"


def test_a_zstd_capture_without_the_zstd_program_says_what_to_install(tmp_path, monkeypatch):
    packed = tmp_path / "log.zst"
    packed.write_bytes(zstd(CAPTURES[0].read_bytes()))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UserError, match="is zstd-compressed: install zstd"):
        diagnose_job([str(packed), str(packed)])
