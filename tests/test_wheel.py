"""A wheel built from this tree gives a working CLI and collection in a fresh venv."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import run_ok, tracked_tree

pytestmark = pytest.mark.system  # slow: real Ansible/Slurm/SSH end to end


def test_wheel_in_fresh_venv(tmp_path):
    clean = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    # build from the tracked files only (no stale build/ directory, no untracked files)
    source = tracked_tree(tmp_path / "src")
    run_ok([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
            str(source)], dict(clean, PIP_CACHE_DIR=str(tmp_path / "pipcache")))
    wheel = next((tmp_path / "dist").glob("exemplar_tune-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for part in ("ansible_collections/exemplar/tune/plugins/modules/facts.py",
                 "ansible_collections/exemplar/tune/plugins/module_utils/layers.py",
                 "ansible_collections/exemplar/tune/playbooks/facts.yml",
                 "ansible_collections/exemplar/tune/galaxy.yml",
                 "exemplar_tune/cli.py", "exemplar_tune/profiles/h100-x86.yaml",
                 "exemplar_tune/profiles/schema.json",
                 "exemplar_tune/schemas/preflight-result.schema.json",
                 "exemplar_tune/schemas/audit-result.schema.json",
                 "exemplar_tune/schemas/slow-nodes-result.schema.json",
                 "exemplar_tune/checks/cpu.py", "exemplar_tune/diagnose/perf.py",
                 "exemplar_tune/templates/base.html.j2", "exemplar_tune/templates/tune.html.j2",
                 "exemplar_tune/templates/preflight.html.j2",
                 "exemplar_tune/templates/sweep.html.j2",
                 "ansible_collections/exemplar/tune/roles/cpu/tasks/main.yml",
                 "ansible_collections/exemplar/tune/plugins/lookup/layers.py",
                 "ansible_collections/exemplar/tune/playbooks/audit.yml"):
        assert part in names, part
    assert not any(n.startswith(("tests/", "ansible_collections/exemplar/tune/tests/"))
                   for n in names)

    venv = tmp_path / "venv"
    run_ok([sys.executable, "-m", "venv", str(venv)], clean)
    run_ok([str(venv / "bin/pip"), "install", "-q", str(wheel)], clean)

    # the CLI, run without an activated venv and without any collection path set
    out = run_ok([str(venv / "bin/exemplar-tune"), "facts", "--layer", "vm", "--format", "json"],
                 clean, cwd=tmp_path)
    assert list(json.loads(out.stdout)) == ["vm"]
    out = subprocess.run([str(venv / "bin/exemplar-tune"), "preflight", "--layer", "cpu",
                          "--format", "json"], capture_output=True, text=True, env=clean,
                         cwd=tmp_path, check=False)
    assert out.returncode in (0, 1), out.stderr
    assert json.loads(out.stdout)["tool"] == "exemplar-tune"

    # the collection's playbook by FQCN, for users who bring their own ansible-playbook
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                         f"      ansible_python_interpreter: {venv}/bin/python\n")
    out = run_ok([str(venv / "bin/ansible-playbook"), "-i", str(inventory), "exemplar.tune.facts",
                  "-e", '{"exemplar_layers": ["vm"]}'],
                 dict(clean, PATH=f"{venv}/bin:/usr/bin:/bin"), cwd=tmp_path)
    assert "failed=0" in out.stdout and "vm: " in out.stdout

    # the roles, the lookup and the audit playbook ship too (check mode: nothing is written)
    out = run_ok([str(venv / "bin/exemplar-tune"), "audit", "--layer", "fabric", "--format",
                  "json"], dict(clean, EXEMPLAR_TUNE_STATE_DIR=str(tmp_path / "state")),
                 cwd=tmp_path)
    assert json.loads(out.stdout)["drift"] == []

    # the simulated cluster's trees and scenarios ship: create one and benchmark it
    out = run_ok([str(venv / "bin/exemplar-tune"), "sim", "create", str(tmp_path / "c"),
                  "--hosts", "1"], clean, cwd=tmp_path)
    assert "scenario gb300-exemplar-gap, 1 host(s)" in out.stdout
    out = run_ok([str(venv / "bin/exemplar-tune"), "sim", "bench", str(tmp_path / "c"),
                  "--workload", "nccl-allgather"], clean, cwd=tmp_path)
    assert "# Collective test concluded: all_gather_perf" in out.stdout
