"""Deeply nested input is a one-line error, never an internal one.

A 100,000-deep ``nvidia-smi -q -x`` capture used to end ``diagnose`` and ``facts`` with a
RecursionError (exit 70). Every XML input goes through ``safe_xml.parse_xml``, which refuses
more than ``MAX_DEPTH`` levels as a ``ParseError``; the plain-text report nests by indentation
and is refused the same way, and a JSON ``dcgmi diag`` document nested deeper than Python
reads is refused by its analyzer.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.readers import (
    nvidia_smi,
    nvidia_smi_text,
    safe_xml,
    topo_xml,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import ParseError
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from tests.corpus import REALWORLD
from tests.helpers import captured_host, cli_env

DEPTH = 100_000
HEAD = '<?xml version="1.0" ?>\n<nvidia_smi_log>\n<driver_version>550.54.15</driver_version>\n'


def deep_report(depth: int = DEPTH) -> str:
    """An ``nvidia-smi -q -x`` report of ``depth`` nested ``<gpu>`` elements, one a line (the
    capture that ended ``diagnose`` and ``facts`` with exit 70)."""
    return HEAD + "<gpu>\n" * depth + "</gpu>\n" * depth + "</nvidia_smi_log>\n"


def deep_text_report(depth: int = 1000) -> str:
    """An ``nvidia-smi -q`` text report whose lines each go one space deeper."""
    lines = "".join(f"{' ' * (i + 4)}Field {i}                 :\n" for i in range(depth))
    return f"==============NVSMI LOG==============\n\nGPU 00000000:07:00.0\n{lines}"


def deep_dcgm_json(depth: int = DEPTH) -> str:
    """A ``dcgmi diag -j`` document whose first test nests ``depth`` arrays."""
    return ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": '
            + "[" * depth + "]" * depth + "}]}}\n")


def cli(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    """The command line as a user runs it, its crash reports (if any) under ``state``."""
    env = cli_env() | {"EXEMPLAR_TUNE_STATE_DIR": str(state)}
    return subprocess.run([sys.executable, "-m", "exemplar_tune.cli", *args], env=env,
                          capture_output=True, text=True, check=False, timeout=300)


def one_line_refusal(out: subprocess.CompletedProcess[str]) -> str:
    """The refusal ``out`` printed: exit 2, one line on stderr, no traceback."""
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    return out.stderr


@pytest.mark.parametrize("defused", [True, False], ids=["defusedxml", "without defusedxml"])
def test_parse_xml_refuses_deep_nesting_in_one_line(defused, monkeypatch):
    if not defused:  # a managed host without defusedxml: the guarded standard parser
        monkeypatch.setitem(sys.modules, "defusedxml", None)
    with pytest.raises(ParseError) as caught:
        safe_xml.parse_xml("<a>" * DEPTH + "</a>" * DEPTH, "deep.xml")
    assert str(caught.value).startswith("deep.xml: XML nested more than 64 elements deep")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("defused", [True, False], ids=["defusedxml", "without defusedxml"])
def test_parse_xml_reads_the_deepest_allowed_document(defused, monkeypatch):
    if not defused:
        monkeypatch.setitem(sys.modules, "defusedxml", None)
    depth = safe_xml.MAX_DEPTH
    root = safe_xml.parse_xml("<a>" * depth + "x" + "</a>" * depth, "deep.xml")
    assert len(list(root.iter())) == depth and list(root.iter())[-1].text == "x"


def test_every_real_xml_capture_is_within_the_depth():
    xml = sorted(p for p in REALWORLD.rglob("*.xml"))
    assert xml
    for path in xml:
        assert safe_xml.parse_xml(path.read_text(), path.name).tag in (
            "nvidia_smi_log", "system", "graphs"), path


def test_xml_readers_refuse_a_deep_document():
    with pytest.raises(ParseError, match="nested more than 64"):
        nvidia_smi.parse_nvidia_smi(deep_report(), "nvidia-smi -q -x")
    with pytest.raises(ParseError, match="nested more than 64"):
        topo_xml.parse_topo_xml('<system version="1">' + "<cpu>" * DEPTH + "</cpu>" * DEPTH
                                + "</system>", "topo.xml")


def test_a_deep_topology_file_is_an_invalid_one(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "topo.xml").write_text("<system>" * DEPTH + "</system>" * DEPTH)
    summary = topo_xml.read_topo_file(Sysroot(str(tmp_path)), "etc/topo.xml")
    assert summary["valid"] is False and "nested more than 64" in summary["error"]


def test_text_report_nested_by_indentation_is_refused():
    with pytest.raises(ParseError, match=r"nvidia-smi -q:67: lines nested more than 64 deep"):
        nvidia_smi_text.parse_nvidia_smi_text(deep_text_report(), "nvidia-smi -q")


@pytest.mark.parametrize(("name", "text"), [
    ("deep-q-x.xml", deep_report()),
    ("deep-q.txt", deep_text_report()),
    ("deep-diag.json", deep_dcgm_json()),
], ids=["nvidia-smi -q -x", "nvidia-smi -q", "dcgmi diag -j"])
def test_diagnose_of_deep_input_is_a_one_line_error(name, text, tmp_path):
    path = tmp_path / name
    path.write_text(text)
    stderr = one_line_refusal(cli("diagnose", str(path), state=tmp_path / "state"))
    assert str(path) in stderr and "nested" in stderr
    assert not (tmp_path / "state" / "crashes").exists()


def test_facts_of_a_host_with_a_deep_capture_name_the_nesting(tmp_path):
    root = captured_host(tmp_path / "host", {"nvidia-smi-q-x.xml": deep_report()})
    out = cli("facts", "--sysroot", str(root), "--layer", "gpu", state=tmp_path / "state")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    assert "nvidia-smi-q-x.xml: XML nested more than 64 elements deep" in out.stdout
    assert not (tmp_path / "state" / "crashes").exists()
