"""A FIFO or a device given where a file is read or written: one line, exit 2, at once, and the
node left as it was (before, reading a FIFO nobody wrote to waited forever, /dev/zero was read
up to the size limit, and a report replaced the node). A pipe with a writer (``<(cat log)``,
``-``) is still read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from tests.test_cli import cli

DEVICE = "is a device, not a regular file (give - to read standard input)"


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "in.fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(("argv", "message"), [
    (["diagnose", "{fifo}"], "{fifo}: not a recognised format"),  # nobody writes: empty
    (["diagnose", "/dev/zero"], f"capture /dev/zero {DEVICE}"),
    (["facts", "--sysroot", "{fifo}"], "sysroot {fifo}: neither a directory nor an archive file"),
    (["facts", "--sysroot", "/dev/zero"],
     "sysroot /dev/zero: neither a directory nor an archive file"),
    (["profile", "show", "{fifo}"], "profile {fifo}: (top level): a mapping of sections"),
    (["profile", "show", "/dev/zero"], f"profile /dev/zero {DEVICE}"),
])
def test_a_fifo_or_device_as_input_is_one_line_at_once(fifo: Path, argv, message):
    out = cli(*(a.format(fifo=fifo) for a in argv))  # cli's timeout: a hang fails the test
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"exemplar-tune: error: {message.format(fifo=fifo)}"), out.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_profile_extending_a_fifo_or_device_reads_neither(tmp_path: Path, fifo: Path):
    for parent in (fifo, Path("/dev/zero")):
        site = tmp_path / "site.yaml"
        site.write_text(yaml.safe_dump({"extends": str(parent)}))
        out = cli("profile", "show", str(site))
        assert out.returncode == 2
        assert out.stderr.strip() == (f"exemplar-tune: error: profile {site}: extends: {parent} "
                                      "is neither a shipped profile nor a .yaml/.yml file")
