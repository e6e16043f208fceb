"""Real nvidia-smi reports (plain-text ``-q`` and ``-q -x`` XML) read as a user reads them.

Each corpus file is read twice through the command line: as the only nvidia-smi capture of a
sysroot (``facts --sysroot DIR --layer gpu``: ``nvidia-smi-q.txt`` or ``nvidia-smi-q-x.xml``)
and as a file handed to ``diagnose``. Both must give the entry's ``check`` (see tests/corpus.py);
the facts carry no findings, so ``findings``/``no_findings`` are asserted on ``diagnose`` only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.corpus import cases, mismatches
from tests.helpers import cli_env

TEXT, XML = "nvidia-smi-text", "nvidia-smi-xml"
CAPTURED = {TEXT: "nvidia-smi-q.txt", XML: "nvidia-smi-q-x.xml"}
FINDING_KEYS = ("findings", "no_findings")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exemplar_tune.cli", *args], capture_output=True,
                          text=True, env=cli_env(), check=False, timeout=300)


def read(out: subprocess.CompletedProcess) -> tuple[dict[str, Any] | None, str | None]:
    """(the JSON document, None), or (None, the one-line refusal) for exit status 2."""
    if out.returncode == 2:
        assert "Traceback" not in out.stderr
        return None, out.stderr.strip()
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout), None


def via_facts(path: Path, family: str, tmp_path: Path) -> tuple[dict | None, str | None]:
    commands = tmp_path / "root" / ".exemplar" / "commands"
    commands.mkdir(parents=True)
    shutil.copyfile(path, commands / CAPTURED[family])
    return read(cli("facts", "--sysroot", str(tmp_path / "root"), "--layer", "gpu",
                    "--format", "json"))


def via_diagnose(path: Path) -> tuple[dict | None, str | None]:
    doc, error = read(cli("diagnose", str(path), "--format", "json"))
    if doc is None:
        return None, error
    (report,) = doc["reports"]
    assert report["kind"] == "nvidia-smi"
    return {**report["summary"], "findings": report["findings"]}, None


@pytest.mark.parametrize(("family", "path", "entry"), [
    pytest.param(family, *case.values, id=f"{family}/{case.id}")
    for family in (TEXT, XML) for case in cases(family)])
def test_reading_via_facts_sysroot(family, path, entry, tmp_path):
    check = {k: v for k, v in entry["check"].items() if k not in FINDING_KEYS}
    assert mismatches(*via_facts(path, family, tmp_path), check) == []


@pytest.mark.parametrize(("family", "path", "entry"), [
    pytest.param(family, *case.values, id=f"{family}/{case.id}")
    for family in (TEXT, XML) for case in cases(family)])
def test_reading_via_diagnose(family, path, entry):
    assert mismatches(*via_diagnose(path), entry["check"]) == []


def test_every_entry_has_a_check():
    assert len(cases(TEXT)) == 10
    assert len(cases(XML)) == 11
