"""Snapshot archives: unsafe members are refused before anything is written."""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path

import pytest

from exemplar_tune.bundle import BundleError, open_sysroot


def _archive(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, payload
                tar.addfile(info)
            elif kind == "chr":
                info.type = tarfile.CHRTYPE
                tar.addfile(info)
    return path


@pytest.mark.parametrize("members, message", [
    ([("../evil", "file", b"x")], "unsafe path"),
    ([("/etc/evil", "file", b"x")], "unsafe path"),
    ([("sys/../../evil", "file", b"x")], "unsafe path"),
    ([("dev/null", "chr", None)], "unsupported member type"),
    ([("etc/link", "sym", "../../../etc/passwd")], "symlink leaves the archive"),
])
def test_unsafe_archive_is_refused_and_nothing_written(tmp_path, members, message):
    archive = _archive(tmp_path / "bad.tar.gz", [("etc/ok", "file", b"ok")] + members)
    with pytest.raises(BundleError, match=message), open_sysroot(str(archive)):
        pass
    assert not (tmp_path / "evil").exists()


def test_file_through_absolute_symlink_is_refused(tmp_path):
    archive = _archive(tmp_path / "b.tar.gz", [("etc", "sym", "/etc"), ("etc/evil", "file", b"x")])
    with pytest.raises(BundleError), open_sysroot(str(archive)):
        pass


def test_garbage_archive(tmp_path):
    bad = tmp_path / "x.tar.gz"
    bad.write_bytes(b"not an archive")
    with pytest.raises(BundleError) as error, open_sysroot(str(bad)):
        pass
    assert str(error.value) == (f"sysroot {bad}: not a directory or a snapshot archive (.tar, "
                                ".tar.gz, .tar.bz2, .tar.xz)")


def test_member_count_is_limited_while_reading(tmp_path, monkeypatch):
    """The limit holds as members are read: the archive is not listed whole first."""
    monkeypatch.setattr("exemplar_tune.bundle.MAX_MEMBERS", 50)
    archive = tmp_path / "many.tar"
    with tarfile.open(archive, "w") as tar:
        for index in range(500):
            info = tarfile.TarInfo(f"etc/f{index}")
            tar.addfile(info, io.BytesIO(b""))
    seen = []
    original = tarfile.TarFile.next

    def counting(self):
        member = original(self)
        seen.append(member)
        return member

    monkeypatch.setattr(tarfile.TarFile, "next", counting)
    before = set(Path(tempfile.gettempdir()).glob("exemplar-sysroot-*"))
    with pytest.raises(BundleError, match="more than 50 members"), open_sysroot(str(archive)):
        pass
    assert len(seen) <= 52
    assert set(Path(tempfile.gettempdir()).glob("exemplar-sysroot-*")) == before


def test_missing_sysroot(tmp_path):
    with pytest.raises(BundleError, match="no such file"), open_sysroot(str(tmp_path / "nope")):
        pass


def test_good_archive_is_unpacked_then_removed(tmp_path):
    archive = _archive(tmp_path / "ok.tar.gz", [
        ("proc/cmdline", "file", b"ro quiet\n"),
        ("proc/1/fd/9", "sym", "/dev/cpu_dma_latency"),
    ])
    with open_sysroot(str(archive)) as root:
        with open(f"{root}/proc/cmdline") as handle:
            assert handle.read() == "ro quiet\n"
        kept = root
    import os
    assert not os.path.exists(kept)
