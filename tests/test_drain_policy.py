"""What may drain a node: a failing health check at or above the threshold, never a tuning
preference (``checks.base.makes_unfit``), as the prolog gate and ``slurm drain`` apply it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from exemplar_tune.checks import CHECKS
from exemplar_tune.checks.base import FAIL, WARN, makes_unfit
from exemplar_tune.slurm.nodes import read_failing
from tests.conftest import SYSROOTS
from tests.helpers import cli_env


def _result(check_id: str, status: str = FAIL, **more) -> dict:
    found = next(c for c in CHECKS if c.id == check_id)
    return {"id": check_id, "status": status, "severity": found.severity,
            "health": found.health, **more}


def test_only_gpu_and_fabric_health_checks_may_drain():
    """The drain policy is each declaration's class: health checks of the GPUs and the
    fabric; no knob's check (a tuning preference) and no other layer's."""
    health = [c for c in CHECKS if c.health]
    assert {c.layer for c in health} == {"gpu", "fabric"}
    assert not [c.id for c in health if c.knob]
    assert {"gpu.xids", "gpu.ecc-uncorrectable", "gpu.temperature", "fabric.ports"} <= {
        c.id for c in health}


@pytest.mark.parametrize(("result", "threshold", "drains"), [
    (_result("gpu.xids"), "high", True),
    (_result("gpu.xids", WARN), "low", False),  # only failures
    (_result("gpu.pcie-link"), "high", False),  # medium
    (_result("gpu.pcie-link"), "medium", True),
    (_result("gpu.temperature"), "medium", False),  # low
    (_result("gpu.temperature"), "low", True),
    (_result("cpu.governor"), "low", False),  # a tuning preference, at any threshold
    (_result("cpu.deep-cstates-disabled"), "low", False),
    (_result("gpu.persistence-mode"), "low", False),
    ({"id": "gpu.remapped-rows", "status": FAIL, "severity": "high"}, "high", True),  # older doc
    ({"id": "gpu.nosuch", "status": FAIL, "severity": "high"}, "high", False),
])
def test_makes_unfit(result, threshold, drains):
    assert makes_unfit(result, threshold) is drains


def test_drain_reads_only_unfit_hosts_from_a_real_preflight_result(tmp_path: Path):
    """h100-x86 fails persistence mode, C-states, housekeeping (tuning) and a pending row
    remap (health, high); healthy-h100 with C6 disabled fails only a tuning check."""
    tuned_only = tmp_path / "tuned"
    shutil.copytree(SYSROOTS / "healthy-h100", tuned_only, symlinks=True)
    (tuned_only / "sys/devices/system/cpu/cpu2/cpuidle/state3/disable").write_text("1\n")
    doc = {"hosts": {}}
    for name, tree in (("gpu01", SYSROOTS / "h100-x86"), ("gpu02", tuned_only)):
        out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", "preflight",
                              "--sysroot", str(tree), "--profile", "h100-x86", "--format",
                              "json"], capture_output=True, text=True, env=cli_env(),
                             timeout=300, check=False)
        assert out.returncode == 1, out.stderr
        doc["hosts"][name] = next(iter(json.loads(out.stdout)["hosts"].values()))
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(doc))
    assert read_failing(path) == {"gpu01": "gpu.remapped-rows"}
    assert read_failing(path, "low") == {"gpu01": "gpu.remapped-rows"}
