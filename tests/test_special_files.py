"""A FIFO or a device given where a file is read or written: one line, exit 2, at once, and the
node left as it was (before, reading waited forever, and a report replaced the node)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from tests.test_cli import cli


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "in.fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(("argv", "message"), [
    (["diagnose", "{fifo}"], "capture {fifo} is a FIFO, not a regular file (give - to read "
                             "standard input)"),
    (["diagnose", "/dev/zero"], "capture /dev/zero is a device, not a regular file (give - "
                                "to read standard input)"),
    (["facts", "--sysroot", "{fifo}"], "sysroot {fifo}: neither a directory nor an archive file"),
    (["facts", "--sysroot", "/dev/zero"],
     "sysroot /dev/zero: neither a directory nor an archive file"),
    (["profile", "show", "{fifo}"], "profile {fifo} is a FIFO, not a regular file (give - to "
                                   "read standard input)"),
])
def test_a_fifo_or_device_as_input_is_one_line(fifo: Path, argv, message):
    out = cli(*(a.format(fifo=fifo) for a in argv))  # cli's timeout: a hang fails the test
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == f"exemplar-tune: error: {message.format(fifo=fifo)}"
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_profile_extending_a_fifo_is_one_line(tmp_path: Path, fifo: Path):
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"extends": str(fifo)}))
    out = cli("profile", "show", str(site))
    assert out.returncode == 2
    assert out.stderr.strip() == (f"exemplar-tune: error: profile {fifo} is a FIFO, not a "
                                  "regular file (give - to read standard input)")
