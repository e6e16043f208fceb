"""``gpu.nvlink-errors`` on real ``nvidia-smi nvlink -e`` outputs by others (sources in
``tests/fixtures/realworld/nvlink/SOURCES.md``): the complete 8-GPU A100 report and the H100
one with its middle links elided, read on a host whose ``nvidia-smi -q`` and ``nvlink -s`` are
a real H200's."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.readers.nvlink import (
    parse_nvlink_errors,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import PASS, SKIP, WARN
from tests.corpus import REALWORLD
from tests.helpers import captured_host

NVLINK = REALWORLD / "nvlink"
A100 = NVLINK / "brev-a100-sxm4-40gb-535.161.08-nvlink-e-per-gpu-loop.txt"
H100 = NVLINK / "stas00-ml-engineering-h100-nvlink-e.txt"
H200_Q = (REALWORLD / "nvidia-smi-text"
          / "utkuozdemir-nvidia_gpu_exporter-captures-linux-x86_64-nvidia-h200-590.48.01-q.txt")
H200_S = NVLINK / "utkuozdemir-nvidia_gpu_exporter-h200-590.48.01-nvlink-s.txt"
L40S_Q = (REALWORLD / "nvidia-smi-text"
          / "utkuozdemir-nvidia_gpu_exporter-captures-linux-x86_64-nvidia-l40s-595.80-q.txt")
CHECK = next(c for c in CHECKS if c.id == "gpu.nvlink-errors")


def one_report(path: Path) -> str:
    """The capture without the lines its author's loop echoed between GPUs: what one
    ``nvidia-smi nvlink -e`` over every GPU prints."""
    return "".join(line for line in path.read_text().splitlines(keepends=True)
                   if not line.startswith("==="))


def judge(tmp_path: Path, errors: str | None, profile: dict | None = None,
          status: Path | str | None = H200_S, report: Path = H200_Q):
    root = captured_host(tmp_path / "host", {"nvidia-smi-q.txt": report,
                                             "nvidia-smi-nvlink-s.txt": status,
                                             "nvidia-smi-nvlink-e.txt": errors})
    facts = gather_facts(Sysroot(str(root)), ["gpu"])
    return CHECK.func(facts, profile or {}), facts["gpu"]


def test_the_complete_a100_report_reads_every_link_and_counter():
    gpus = parse_nvlink_errors(one_report(A100))
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["name"] for g in gpus} == {"NVIDIA A100-SXM4-40GB"}
    assert all(list(g["links"]) == [str(n) for n in range(12)] for g in gpus)
    assert {name for g in gpus for counters in g["links"].values() for name in counters} == \
        {"replay errors", "recovery errors", "crc errors"}
    assert {v for g in gpus for c in g["links"].values() for v in c.values()} == {0}


def test_the_author_s_echo_lines_are_not_nvidia_smi_output_and_are_refused():
    with pytest.raises(ParseError, match="not a 'GPU N: ...' header"):
        parse_nvlink_errors(A100.read_text())


def test_an_elided_report_reads_the_links_it_shows():
    (gpu,) = parse_nvlink_errors(H100.read_text())
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert list(gpu["links"]) == ["0", "1", "17"]


@pytest.mark.parametrize("line", [  # the counter names one operator lists for B300 drivers
    "Link 0: Link recovery failed events: 2",
    "Link 0: Link Recovery Failed Events: 2",
    "Link 0:   Link recovery failed   events:   2",
])
def test_counter_names_are_keyed_in_lower_case_whatever_their_casing(line):
    (gpu,) = parse_nvlink_errors(f"GPU 0: NVIDIA B300 SXM6 AC (UUID: GPU-0)\n\t {line}\n"
                                 "\t Link 0: FEC Errors - 0: 36140749276\n"
                                 "\t Link 0: Effective BER: N/A\n")
    assert gpu["links"] == {"0": {"link recovery failed events": 2,
                                  "fec errors - 0": 36140749276}}


def test_zero_counters_pass(tmp_path):
    outcome, facts = judge(tmp_path, H100.read_text())
    assert facts["nvlink_errors_missing"] is None
    assert (outcome.status, outcome.detail) == (
        PASS, "3 NVLink links of 1 GPUs within their thresholds since the driver loaded")
    assert outcome.evidence == ("nvidia-smi nvlink -e",)


def test_recovery_errors_warn_naming_the_gpu_link_and_count(tmp_path):
    report = H100.read_text().replace("Link 17: Recovery Errors: 0", "Link 17: Recovery Errors: 3")
    outcome, _ = judge(tmp_path, report)
    assert outcome.status == WARN
    assert outcome.detail == ("since the driver loaded or the counters were reset: GPU 0 link "
                              "17 recovery errors 3")


def test_crc_errors_are_judged_only_with_a_profile_threshold(tmp_path):
    report = H100.read_text().replace("Link 1: CRC Errors: 0", "Link 1: CRC Errors: 250")
    assert judge(tmp_path / "a", report)[0].status == PASS  # DCGM: only a rate matters
    outcome, _ = judge(tmp_path / "b", report, {"gpu": {"nvlink_error_thresholds":
                                                        {"crc errors": 100}}})
    assert (outcome.status, outcome.observed["over"]) == (WARN, ["GPU 0 link 1 crc errors 250"])


def test_a_profile_threshold_tolerates_what_the_default_does_not(tmp_path):
    report = H100.read_text().replace("Link 0: Replay Errors: 0", "Link 0: Replay Errors: 2")
    assert judge(tmp_path / "a", report)[0].status == WARN
    profile = {"gpu": {"nvlink_error_thresholds": {"replay errors": 5}}}
    assert judge(tmp_path / "b", report, profile)[0].status == PASS


def test_gpus_without_nvlink_run_no_second_command_and_say_not_configured(tmp_path):
    outcome, facts = judge(tmp_path, None, status="GPU 0: NVIDIA L40S (UUID: GPU-0)\n",
                           report=L40S_Q)
    assert facts["nvlink_errors"] is None and facts["nvlink_errors_missing"] is None
    assert (outcome.status, outcome.detail) == (SKIP, "no NVLink on these GPUs: not configured")


def test_a_host_whose_capture_lacks_the_counters_says_so(tmp_path):
    outcome, _ = judge(tmp_path, None)
    assert outcome.status == SKIP
    assert outcome.detail.startswith("NVLink error counters not read (")
    assert "nvidia-smi-nvlink-e.txt" in outcome.detail


def test_a_malformed_report_is_a_fact_error_the_check_names(tmp_path):
    outcome, facts = judge(tmp_path, "Link 0: Replay Errors: 0\n")
    assert facts["nvlink_errors"] is None
    assert outcome.status == SKIP and "not a 'GPU N: ...' header" in outcome.detail
