"""The real-world GPUDirect RDMA corpus (``tests/fixtures/realworld/gpudirect/``: ``lsmod``
greps, peer-memory modules that fail to load, NCCL's ``GPU Direct RDMA Enabled/Disabled for
HCA`` lines, by others), read as ``exemplar-tune diagnose`` reads it; plus edge cases: a whole
lsmod, a grep that could not show a module, a distance-limited pair, and captures that are
not this format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exemplar_tune.diagnose import DiagnoseError, detect, diagnose_text
from tests.corpus import REALWORLD, cases, diagnosed, mismatches, readings

FAMILY = "gpudirect"



def _gdr(doc: dict[str, Any]) -> dict[str, Any]:
    (found,) = [f for f in doc["findings"] if f["check_id"] == "fabric.gpudirect-rdma"]
    return found


def test_every_entry_has_a_check() -> None:
    assert all(e.get("check") for e in readings(FAMILY))


@pytest.mark.parametrize(("path", "entry"), [c.values for c in cases(FAMILY)],
                         ids=[c.id for c in cases(FAMILY)])
def test_corpus_reading(path: Path, entry: dict[str, Any]) -> None:
    doc, error = diagnosed(path)
    assert mismatches(doc, error, entry["check"]) == []


def test_forced_gdr_level_is_named_and_disabled_hcas_say_what_to_do() -> None:
    doc, _ = diagnosed(REALWORLD / FAMILY /
                       "nvidia-nccl-tests-issue350-nccl-log-gdr-enabled-roce-and-ib-dmabuf.txt")
    assert doc is not None
    message = _gdr(doc)["message"]
    assert "NCCL_NET_GDR_LEVEL=SYS" in message and "HCA 0 at distance 7" in message
    doc, _ = diagnosed(REALWORLD / FAMILY /
                       "nvidia-nccl-issue1537-nccl-log-gdr-disabled-roce-two-hcas.txt")
    assert doc is not None
    assert "HCA 0 mlx5_0, HCA 1 mlx5_1" in _gdr(doc)["message"]
    assert "nvidia_peermem" in _gdr(doc)["message"]


def test_a_pair_beyond_the_gdr_level_warns() -> None:
    text = ("h1:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
            "h1:1:2 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 "
            "(distance 7 > 4), read 0\n")
    found = _gdr(diagnose_text(text, "n.txt").to_dict())
    assert found["status"] == "warn" and "GPU 1b000 / HCA 0 (distance 7 > 4)" in \
        found["message"]


def test_a_whole_lsmod_without_peer_memory_fails() -> None:
    text = ("Module                  Size  Used by\nmlx5_ib               454656  0\n"
            "ib_core               434176  2 mlx5_ib,ib_uverbs\nnvidia              "
            "56598528  2\n")
    doc = diagnose_text(text, "lsmod.txt").to_dict()
    assert doc["kind"] == "lsmod" and _gdr(doc)["status"] == "fail"
    assert "nvidia_peermem and nv_peer_mem not loaded (lsmod lists no row of it)" in \
        _gdr(doc)["message"]


def test_a_whole_lsmod_without_the_driver_or_rdma_is_not_applicable() -> None:
    path = REALWORLD / "sos" / ("canonical-hotsos-fake_data_root-openstack-sos_commands-kernel-"
                                "lsmod-no-nvidia-no-rdma.txt")
    found = _gdr(diagnose_text(path.read_text(), path.name).to_dict())
    assert found["status"] == "info" and found["message"].startswith("not applicable")
    assert found["values"]["not_loaded"] == ["nvidia", "ib_core"]


def test_a_grep_that_could_not_show_the_module_proves_nothing() -> None:
    with pytest.raises(DiagnoseError, match="lsmod: no lsmod rows"):
        diagnose_text("$ lsmod | grep mlx5\n$\n", "g.txt")


def test_a_kernel_log_with_other_lines_stays_the_kernel_log_s() -> None:
    text = "\n".join(f"[{i}.000000] usb 1-{i}: new device" for i in range(10)) + \
        "\n[11.000000] nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err 0)\n"
    found = detect(text)
    assert found is not None and found.kind == "kernel log"


def test_peer_memory_failures_inside_a_whole_kernel_log_are_found() -> None:
    """A whole kernel log is the kernel log's format, and the peer-memory failures in it are
    still read. Made of two real captures (derived, joined here): leptonai/gpud's ``dmesg
    -T`` with an Xid 119 (tests/fixtures/realworld/kernel-log) and the nvidia_peermem lines
    of NVIDIA/gpu-operator#2868, also ``dmesg -T``."""
    xid = (REALWORLD / "kernel-log" / "leptonai-gpud-xid-testdata-dmesg-with-xid-119.log")
    peer = (REALWORLD / "gpudirect" /
            "nvidia-gpu-operator-issue2868-dmesg-nvidia_peermem-unknown-symbol-gb300.txt")
    text = xid.read_text() + peer.read_text()
    report = diagnose_text(text, "dmesg").to_dict()
    assert report["kind"] == "kernel log"
    found = {f["check_id"]: f for f in report["findings"]}
    assert found["gpu.xids"]["status"] == "fail"  # the Xid 119: reset the GPU
    gdr = found["fabric.gpudirect-rdma"]
    assert gdr["status"] == "fail"
    assert "nvidia_peermem does not load: unknown symbols ib_register_peer_memory_client, " \
           "ib_unregister_peer_memory_client, 2 load attempts" in gdr["message"]
    first = len(xid.read_text().splitlines()) + 1
    assert gdr["evidence"] == [f"dmesg:{first}-{first + 7}"]
    alone = diagnose_text(xid.read_text(), "x").to_dict()["findings"]
    assert [f["check_id"] for f in alone] == ["gpu.xids"]  # no peer-memory line: no finding
