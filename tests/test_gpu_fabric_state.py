"""``gpu.fabric-state`` on real ``nvidia-smi -q -x`` and ``-q`` captures by others: GB200 and
GB300 in a multi-node NVLink domain, B200 and H100/H200 registered on their node's NVSwitch
fabric, L40S without a fabric; and the broken and degraded states as one-field edits of a
real capture (the GB200 one), each laid out in a sysroot and read as a host would be."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, PASS, SKIP, WARN
from tests.corpus import REALWORLD
from tests.helpers import captured_host

XML = REALWORLD / "nvidia-smi-xml"
TEXT = REALWORLD / "nvidia-smi-text"
GB200 = XML / "nvidia-k8s-test-infra-gb200-q-x.xml"
GB300 = XML / "nvidia-k8s-test-infra-gb300-q-x.xml"
B200 = XML / "nvidia-k8s-test-infra-b200-q-x.xml"
H200 = TEXT / "utkuozdemir-nvidia_gpu_exporter-captures-linux-x86_64-nvidia-h200-590.48.01-q.txt"
L40S = TEXT / "utkuozdemir-nvidia_gpu_exporter-captures-linux-x86_64-nvidia-l40s-595.80-q.txt"
CHECK = next(c for c in CHECKS if c.id == "gpu.fabric-state")


def judge(capture: Path, tmp_path: Path, want: str | None = None, text: str | None = None):
    """The check's outcome on a host whose nvidia-smi report is ``capture`` (or ``text``)."""
    name = "nvidia-smi-q-x.xml" if capture.suffix == ".xml" else "nvidia-smi-q.txt"
    root = captured_host(tmp_path / "host", {name: capture if text is None else text})
    facts = gather_facts(Sysroot(str(root)), ["gpu"])
    return CHECK.func(facts, {"gpu": {"nvlink_fabric": want}} if want else {})


@pytest.mark.parametrize(("capture", "want", "status", "words"), [
    (GB200, "multi-node", PASS, "domain multi-node; clique 2 of cluster 00000001-"),
    (GB300, "multi-node", PASS, "domain multi-node; clique 32766"),
    (B200, None, PASS, "all 8 GPUs registered (Completed/Success), healthy, NVLink domain node"),
    (B200, "multi-node", FAIL, "not configured: 8 of 8 GPUs are not in a multi-node NVLink"),
    (H200, "node", PASS, "NVLink domain node"),
    (L40S, None, SKIP, "no NVLink fabric on these GPUs: not configured"),
    (L40S, "node", FAIL, "not configured: 1 of 1 GPUs are not in a node NVLink domain"),
    (L40S, "none", PASS, "no NVLink fabric, as the profile says"),
])
def test_real_captures(tmp_path, capture, want, status, words):
    outcome = judge(capture, tmp_path, want)
    assert outcome.status == status, outcome.detail
    assert words in outcome.detail


@pytest.mark.parametrize(("old", "new", "status", "words"), [
    ("<state>Completed</state>", "<state>In Progress</state>", FAIL,
     "NVLink fabric broken on 1 of 4 GPUs: 00000000:29:00.0: registration In Progress"),
    ("<status>Success</status>", "<status>Failure</status>", FAIL, "status Failure"),
    ("<summary>Healthy</summary>", "<summary>Unhealthy</summary>", FAIL, "health Unhealthy"),
    ("<route_unhealthy>False</route_unhealthy>", "<route_unhealthy>True</route_unhealthy>",
     FAIL, "route unhealthy"),
    ("<bandwidth>Full</bandwidth>", "<bandwidth>Degraded</bandwidth>", WARN,
     "NVLink fabric degraded on 1 of 4 GPUs: 00000000:29:00.0: bandwidth Degraded"),
    ("<summary>Healthy</summary>", "<summary>Limited Capacity</summary>", WARN,
     "health Limited Capacity"),
    ("<cliqueId>2</cliqueId>", "<cliqueId>3</cliqueId>", FAIL,
     "the GPUs are split over 2 NVLink cliques or clusters"),
])
def test_broken_and_degraded_states_of_one_gpu(tmp_path, old, new, status, words):
    """The first GPU of the real GB200 report with one field changed."""
    text = GB200.read_text()
    assert old in text
    outcome = judge(GB200, tmp_path, "multi-node", text.replace(old, new, 1))
    assert outcome.status == status, outcome.detail
    assert words in outcome.detail


def test_every_fabric_field_of_the_text_report_reads_as_the_xml_does(tmp_path):
    """H200 -q text: the same fabric facts as an XML report would give (clique 0, zero
    cluster UUID: a node's own fabric), no read errors."""
    root = captured_host(tmp_path / "host", {"nvidia-smi-q.txt": H200})
    facts = gather_facts(Sysroot(str(root)), ["gpu"])
    (gpu,) = facts["gpu"]["gpus"]
    assert gpu["fabric"] == {"state": "Completed", "status": "Success", "clique_id": 0,
                             "cluster_uuid": "00000000-0000-0000-0000-000000000000",
                             "health": {"summary": None, "bandwidth": None,
                                        "route_recovery_in_progress": None,
                                        "route_unhealthy": None,
                                        "access_timeout_recovery": None,
                                        "incorrect_configuration": None}}
