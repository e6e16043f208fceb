"""``gpu.nvlink-links`` on real ``nvidia-smi nvlink -s`` outputs by others (sources in
``tests/fixtures/realworld/nvlink/SOURCES.md``), each laid out in a sysroot beside a real
``nvidia-smi -q`` of the same GPU model, and read as a host would be."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.nvlink import (
    parse_nvlink_status,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, PASS, SKIP, WARN
from tests.corpus import REALWORLD
from tests.helpers import captured_host

NVLINK = REALWORLD / "nvlink"
H200_Q = (REALWORLD / "nvidia-smi-text"
          / "utkuozdemir-nvidia_gpu_exporter-captures-linux-x86_64-nvidia-h200-590.48.01-q.txt")
H200 = NVLINK / "utkuozdemir-nvidia_gpu_exporter-h200-590.48.01-nvlink-s.txt"
GB200 = NVLINK / "nvidia-k8s-test-infra-issue371-gb200-nvlink-s.txt"
CHECK = next(c for c in CHECKS if c.id == "gpu.nvlink-links")


def judge(tmp_path: Path, status: str | None, profile: dict | None = None,
          report: Path = H200_Q):
    """The check's outcome on a host with ``report`` as its nvidia-smi -q and ``status`` as
    its nvidia-smi nvlink -s (None: not captured)."""
    root = captured_host(tmp_path / "host", {"nvidia-smi-q.txt": report,
                                             "nvidia-smi-nvlink-s.txt": status})
    facts = gather_facts(Sysroot(str(root)), ["gpu"])
    return CHECK.func(facts, profile or {}), facts["gpu"]


def test_the_real_reports_read_link_by_link():
    h200 = parse_nvlink_status(H200.read_text())
    assert [(g["index"], g["name"], g["links"], g["active"], g["gbps_max"]) for g in h200] == [
        (0, "NVIDIA H200", 18, 18, 26.562)]
    gb200 = parse_nvlink_status(GB200.read_text())  # the author cut it after GPU 1 link 1
    assert [(g["index"], g["links"], g["active"], g["gbps_min"]) for g in gb200] == [
        (0, 18, 18, 53.125), (1, 2, 2, 53.125)]
    assert gb200[0]["uuid"] == "GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde"


def test_every_link_active_passes_and_one_lone_gpu_with_all_links_down_is_not_configured(
        tmp_path):
    outcome, facts = judge(tmp_path / "a", H200.read_text())
    assert outcome.status == PASS and outcome.detail == (
        "all 18 NVLink links of 1 GPUs active at 26.562 GB/s")
    assert facts["sources"]["nvlink"] == "nvidia-smi nvlink -s"
    lone = "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n" \
        "\t Unable to retrieve NVLink information as all links are inActive\n"
    outcome, _ = judge(tmp_path / "b", lone)
    assert outcome.status == SKIP and "no peer to link to (not configured" in outcome.detail
    outcome, _ = judge(tmp_path / "c", lone, {"gpu": {"nvlink_links": 18}})
    assert outcome.status == FAIL and "GPU 0: all links inactive" in outcome.detail


def test_an_inactive_link_of_a_real_report_fails(tmp_path):
    """The real H200 report with link 5 down, as nvidia-smi prints a link that is down."""
    text = H200.read_text().replace("Link 5: 26.562 GB/s", "Link 5: <inactive>")
    outcome, _ = judge(tmp_path, text)
    assert outcome.status == FAIL
    assert outcome.detail == "NVLink down on 1 of 1 GPUs: GPU 0: link 5 inactive (17 of 18 active)"


def test_a_slower_link_warns_and_fewer_links_than_expected_fail(tmp_path):
    text = H200.read_text().replace("Link 7: 26.562 GB/s", "Link 7: 13.281 GB/s")
    outcome, _ = judge(tmp_path / "a", text)
    assert outcome.status == WARN and "GPU 0: 13.281 GB/s" in outcome.detail
    outcome, _ = judge(tmp_path / "b", H200.read_text(), {"gpu": {"nvlink_links": 20}})
    assert outcome.status == FAIL and "18 links active, 20 expected" in outcome.detail


def test_not_captured_and_not_configured_are_told_apart(tmp_path):
    outcome, _ = judge(tmp_path / "a", None)
    assert outcome.status == SKIP and outcome.detail.startswith("NVLink state not read (")
    assert "not captured" in outcome.detail
    no_links = "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
    outcome, _ = judge(tmp_path / "b", no_links)
    assert outcome.status == SKIP and "no NVLink on these GPUs: not configured" in outcome.detail
    outcome, _ = judge(tmp_path / "c", no_links, {"gpu": {"nvlink_links": 0}})
    assert outcome.status == PASS


def test_an_unreadable_report_is_an_error_not_a_pass(tmp_path):
    with pytest.raises(ParseError):
        parse_nvlink_status("Link 0: 26.562 GB/s\n")
    outcome, facts = judge(tmp_path, "NVIDIA-SMI has failed because it couldn't communicate\n")
    assert outcome.status == SKIP and "nvidia-smi-nvlink-s.txt:1: not a 'GPU N: ...' header" \
        in outcome.detail
    assert "nvlink" in [e["fact"] for e in facts["errors"]]


B200_Q = REALWORLD / "nvidia-smi-xml" / "nvidia-k8s-test-infra-b200-q-x.xml"


def judge_on(tmp_path: Path, capture: str, report: Path, profile: dict | None = None):
    report_name = "nvidia-smi-q-x.xml" if report.suffix == ".xml" else "nvidia-smi-q.txt"
    root = captured_host(tmp_path / "host", {report_name: report,
                                             "nvidia-smi-nvlink-s.txt": NVLINK / capture})
    return CHECK.func(gather_facts(Sysroot(str(root)), ["gpu"]), profile or {})


@pytest.mark.parametrize(("capture", "read"), [
    ("azure-azhpc-diagnostics-issue73-v100-nvlink-s.txt", [(3, 6, 4, [3, 5], False)]),
    ("hpe-japan-presales-e-learning-h100-pcie-nvlink-s.txt",
     [(0, 18, 12, [4, 5, 10, 11, 16, 17], False), (1, 18, 12, [4, 5, 10, 11, 16, 17], False)]),
    ("openfabric-systems-simllm-b200-nvlink-s.txt",
     [(i, 0, 0, [], True) if i == 4 else (i, 18, 18, [], False) for i in range(8)]),
    ("siboehm-bench-rtx-a6000-nvlink-s.txt",
     [(0, 4, 4, [], False), (1, 4, 4, [], False), (2, 0, 0, [], True)]),
    ("leptonai-gpud-issue1085-b200-nvlink-s.txt", [(2, 0, 0, [], True)]),
    ("baeyunseon-xe9780-b300-nvlink-s.txt", [(i, 18, 18, [], False) for i in range(7)]),
])
def test_real_reports_of_inactive_and_active_links(capture, read):
    """Every real report reads link by link: which links are down, which GPUs printed the
    driver's all-links-inactive line (``NVLink`` or ``Nvlink``, after ``NVML:``)."""
    gpus = parse_nvlink_status((NVLINK / capture).read_text())
    assert [(g["index"], g["links"], g["active"], g["inactive"], g["all_inactive"])
            for g in gpus] == read


@pytest.mark.parametrize(("capture", "profile", "status", "words"), [
    ("openfabric-systems-simllm-b200-nvlink-s.txt", None, FAIL,
     "NVLink down on 1 of 8 GPUs: GPU 4: all links inactive"),
    ("leptonai-gpud-issue1085-b200-nvlink-s.txt", None, FAIL, "GPU 2: all links inactive"),
    ("azure-azhpc-diagnostics-issue73-v100-nvlink-s.txt", None, FAIL,
     "GPU 3: links 3, 5 inactive (4 of 6 active)"),
    ("hpe-japan-presales-e-learning-h100-pcie-nvlink-s.txt", None, FAIL,
     "NVLink down on 2 of 2 GPUs: GPU 0: links 4, 5, 10, 11, 16, 17 inactive (12 of 18"),
    ("hpe-japan-presales-e-learning-h100-pcie-nvlink-s.txt", {"gpu": {"nvlink_links": 12}},
     PASS, "all 24 NVLink links of 2 GPUs active at 26.562 GB/s"),
    ("siboehm-bench-rtx-a6000-nvlink-s.txt", {"gpu": {"nvlink_links": 4}}, FAIL,
     "GPU 2: all links inactive"),
])
def test_the_check_on_real_reports(tmp_path, capture, profile, status, words):
    """On a host of eight B200 (a real -q -x): a dead GPU among healthy ones fails, also when
    the report quoted only that GPU; an H100 PCIe bridge's unwired links pass once the
    profile says 12 links are expected."""
    outcome = judge_on(tmp_path, capture, B200_Q, profile)
    assert outcome.status == status, outcome.detail
    assert words in outcome.detail
