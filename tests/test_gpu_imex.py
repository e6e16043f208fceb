"""``gpu.imex`` on real ``nvidia-imex-ctl -N`` outputs by others (sources in
``tests/fixtures/realworld/imex/SOURCES.md``): a GH200 domain of one and of two nodes, an
18-node GB200 domain, a node without IMEX configuration; the broken states as one-state edits of
the real 18-node report. Each host is the real GB200 ``nvidia-smi -q -x`` (a multi-node NVLink
domain) or the real B200 one (a node's own fabric: IMEX not needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.imex import parse_imex_nodes
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, PASS, SKIP
from tests.corpus import REALWORLD
from tests.helpers import captured_host

IMEX = REALWORLD / "imex"
GB200_Q = REALWORLD / "nvidia-smi-xml" / "nvidia-k8s-test-infra-gb200-q-x.xml"
B200_Q = REALWORLD / "nvidia-smi-xml" / "nvidia-k8s-test-infra-b200-q-x.xml"
EIGHTEEN = IMEX / "aws-parallelcluster-guide-gb200-p6e-18node-imex-ctl-N.txt"
CHECK = next(c for c in CHECKS if c.id == "gpu.imex")


def judge(tmp_path: Path, imex: str | None, profile: dict | None = None,
          report: Path = GB200_Q):
    root = captured_host(tmp_path / "host", {"nvidia-smi-q-x.xml": report,
                                             "nvidia-imex-ctl-N.txt": imex})
    facts = gather_facts(Sysroot(str(root)), ["gpu"])
    return CHECK.func(facts, profile or {})


@pytest.mark.parametrize(("name", "nodes", "versions"), [
    ("jgehrcke-jpsnips-nv-gh200-1node-imex-ctl-q-N.txt", 1, {None}),
    ("jgehrcke-jpsnips-nv-gh200-2node-imex-ctl-q-N.txt", 2, {None}),
    ("aws-parallelcluster-guide-gb200-p6e-18node-imex-ctl-N.txt", 18, {"570.172"}),
])
def test_healthy_domains_read_and_pass(tmp_path, name, nodes, versions):
    read = parse_imex_nodes((IMEX / name).read_text())
    assert read["domain_state"] == "UP" and len(read["nodes"]) == nodes
    assert {n["state"] for n in read["nodes"]} == {"READY"} and read["not_connected"] == []
    assert {n["version"] for n in read["nodes"]} == versions
    outcome = judge(tmp_path, (IMEX / name).read_text())
    assert outcome.status == PASS and f"{nodes} node(s) READY" in outcome.detail


@pytest.mark.parametrize(("old", "new", "words"), [
    ("Domain State: UP", "Domain State: DEGRADED", "IMEX broken: domain DEGRADED"),
    ("172.31.50.39    - READY", "172.31.50.39    - UNAVAILABLE",
     "1 node(s) not READY: node 4 (172.31.50.39) UNAVAILABLE"),
    ("       4        C   C   C   C   C   C   C", "       4        C   C   I   C   C   C   C",
     "1 connection(s) not C: 4->2 I"),
])
def test_a_domain_not_up_fails(tmp_path, old, new, words):
    text = EIGHTEEN.read_text()
    assert old in text
    outcome = judge(tmp_path, text.replace(old, new, 1))
    assert outcome.status == FAIL and words in outcome.detail, outcome.detail


def test_not_needed_not_configured_and_required_are_told_apart(tmp_path):
    healthy = EIGHTEEN.read_text()
    outcome = judge(tmp_path / "a", healthy, report=B200_Q)
    assert outcome.status == SKIP and "no multi-node NVLink domain" in outcome.detail
    no_config = (IMEX / "bottlerocket-kernel-kit-pr204-imex-ctl-no-config.txt").read_text()
    assert parse_imex_nodes(no_config)["configured"] is False
    outcome = judge(tmp_path / "b", no_config)
    assert outcome.status == SKIP and "IMEX not configured on this node" in outcome.detail
    outcome = judge(tmp_path / "c", no_config, {"gpu": {"imex": True}})
    assert outcome.status == FAIL and outcome.detail.startswith("not configured: multi-node")
    outcome = judge(tmp_path / "d", None, {"gpu": {"imex": True}})
    assert outcome.status == FAIL and "not captured" in outcome.detail
