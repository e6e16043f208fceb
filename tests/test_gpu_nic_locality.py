"""``fabric.gpu-nic-locality`` and the ``nvidia-smi topo -m`` reader, on real outputs by others
(``tests/fixtures/realworld/nvidia-smi-topo/SOURCES.md``): B200 on GKE A4 (8 GPUs, 8 NICs, two
per PCIe switch), H100 with one NIC per GPU, a GB200 tray and an H200 that list no NIC; each
read from a sysroot as a host's capture would be."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.gpu_topology import (
    parse_topology,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import PASS, SKIP, WARN
from tests.corpus import REALWORLD
from tests.helpers import captured_host

TOPO = REALWORLD / "nvidia-smi-topo"
B200 = TOPO / "kubernetes-sigs-dranet-b200-gke-a4-8gpu-8nic-topo-m.txt"
H100 = TOPO / "nvidia-nccl-issue1617-h100-4gpu-4nic-topo-m.txt"
CHECK = next(c for c in CHECKS if c.id == "fabric.gpu-nic-locality")


def judge(tmp_path: Path, text: str | None):
    root = captured_host(tmp_path / "host", {"nvidia-smi-topo-m.txt": text})
    facts = gather_facts(Sysroot(str(root)), ["fabric"])
    return CHECK.func(facts, {})


def test_the_b200_matrix_reads_every_gpu_nic_pair_and_the_nic_names():
    topo = parse_topology(B200.read_text())
    assert sorted(topo["gpus"]) == [f"GPU{i}" for i in range(8)]
    assert topo["gpus"]["GPU2"]["nics"] == {"NIC0": "NODE", "NIC1": "NODE", "NIC2": "PIX",
                                            "NIC3": "PIX", "NIC4": "SYS", "NIC5": "SYS",
                                            "NIC6": "SYS", "NIC7": "SYS"}
    assert topo["gpus"]["GPU5"]["cpu_affinity"] == "56-111,168-223"
    assert topo["nics"]["NIC7"] == "mlx5_7"


@pytest.mark.parametrize(("capture", "status", "words"), [
    (B200, PASS, "every one of 8 GPUs has a NIC behind its PCIe switch (PIX)"),
    (H100, PASS, "every one of 4 GPUs has a NIC behind its PCIe switch (PIX)"),
    (TOPO / "nvidia-k8s-test-infra-issue371-gb200-4gpu-topo-m.txt", SKIP, "no NIC in"),
    (TOPO / "utkuozdemir-nvidia_gpu_exporter-h200-590.48.01-topo-m.txt", SKIP, "no NIC in"),
])
def test_real_matrices(tmp_path, capture, status, words):
    outcome = judge(tmp_path, capture.read_text())
    assert outcome.status == status and words in outcome.detail, outcome.detail


def test_a_gpu_whose_nics_are_all_through_the_cpu_warns(tmp_path):
    """The real H100 matrix with GPU1's own NIC moved off its switch (PIX -> NODE)."""
    lines = H100.read_text().splitlines()
    lines[2] = lines[2].replace("PIX", "NODE")
    outcome = judge(tmp_path, "\n".join(lines) + "\n")
    assert outcome.status == WARN
    assert outcome.detail == ("1 of 4 GPUs reach their nearest NIC through the CPU: GPU1: "
                              "nearest NIC NIC1 is NODE")


def test_not_captured_and_unreadable(tmp_path):
    outcome = judge(tmp_path / "a", None)
    assert outcome.status == SKIP and "not captured" in outcome.detail
    with pytest.raises(ParseError):
        parse_topology("NVIDIA-SMI has failed because it couldn't communicate with the driver\n")
