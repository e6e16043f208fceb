"""The in-container probe, run for real through bubblewrap set up to clear the environment.

bubblewrap (``bwrap``, Debian package ``bubblewrap``, listed in ``.ci/packages.txt``) plays
enroot: ``--clearenv`` drops the host environment as enroot's ``clearenv()`` does, ``--tmpfs``
hides the host's topology directory as an unmounted path would be absent, and ``--setenv`` /
``--ro-bind`` are what enroot ``environ.d`` / ``mounts.d`` carry. The checks are then run on
live host facts (``Sysroot("/")``) with the probe stored under ``facts["runtime"]["container"]``.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.gatherers import (
    runtime as layer_runtime,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.checks.base import FAIL, PASS, SKIP
from exemplar_tune.checks.runtime import check_topo_in_container
from exemplar_tune.probe import SCRIPT, compare_container, parse_probe_output, probe_container
from tests.conftest import SYSROOTS

TOPO = SYSROOTS / "h100-x86" / "etc" / "nccl" / "topo.xml"
BWRAP = shutil.which("bwrap")


@pytest.fixture(scope="module")
def bwrap() -> str:
    """The bwrap base command; a failure that says why when bwrap cannot run here.

    The probe is only proven with a real launcher, so a machine without one fails loudly
    instead of passing without having tested anything (``.ci/run`` installs bubblewrap).
    """
    if not BWRAP:
        pytest.fail("bubblewrap not installed: apt-get install -y bubblewrap (.ci/packages.txt)")
    run = subprocess.run([BWRAP, "--ro-bind", "/", "/", "true"], capture_output=True,
                         text=True, check=False)
    if run.returncode != 0:
        pytest.fail(f"bwrap cannot create namespaces here: {run.stderr.strip()}")
    return f"{BWRAP} --ro-bind / / --dev /dev --proc /proc --clearenv --setenv PATH /usr/bin:/bin"


@pytest.fixture()
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A topology file at ``<tmp>/nccl/topo.xml`` that the host's NCCL_TOPO_FILE names."""
    topo_dir = tmp_path / "nccl"
    topo_dir.mkdir()
    path = topo_dir / "topo.xml"
    shutil.copy(TOPO, path)
    monkeypatch.setenv("NCCL_TOPO_FILE", str(path))
    runtime = layer_runtime.gather(Sysroot("/"))
    assert runtime["nccl_topo_file"]["value"] == str(path)
    assert runtime["nccl_topo_file"]["readable"] is True
    return {"dir": str(topo_dir), "path": str(path), "runtime": runtime, "tmp": tmp_path}


def _judge(host: dict, probe: dict):
    facts = {"runtime": dict(host["runtime"], container=probe)}
    profile = {"name": "t", "runtime": {"nccl_topo_file": host["path"],
                                        "require_in_container": True}}
    return check_topo_in_container(facts, profile)


def test_nothing_carried_fails(bwrap: str, host: dict) -> None:
    probe = probe_container(f"{bwrap} --tmpfs {host['dir']}")
    assert probe["ok"] is True, probe["error"]
    assert probe["env"] == {}
    assert probe["topo_file"]["path"] is None
    assert probe["python"] is None or probe["python"].startswith("Python 3")
    outcome = _judge(host, probe)
    assert outcome.status == FAIL
    assert "not set inside the container" in outcome.detail
    assert host["path"] in outcome.detail


def test_variable_and_file_carried_pass(bwrap: str, host: dict) -> None:
    path = host["path"]
    probe = probe_container(f"{bwrap} --tmpfs {host['dir']} --ro-bind {path} {path} "
                            f"--setenv NCCL_TOPO_FILE {path} --setenv NCCL_IB_HCA =mlx5_0:1")
    assert probe["ok"] is True, probe["error"]
    assert probe["env"] == {"NCCL_TOPO_FILE": path, "NCCL_IB_HCA": "=mlx5_0:1"}
    assert probe["topo_file"] | {"head": ""} == {
        "path": path, "source": "environment", "exists": True, "readable": True,
        "looks_valid": True, "head": ""}
    assert '<system version="1">' in probe["topo_file"]["head"]
    outcome = _judge(host, probe)
    assert outcome.status == PASS, outcome.detail
    assert outcome.observed["path"] == path


def test_variable_without_the_file_fails(bwrap: str, host: dict) -> None:
    path = host["path"]
    probe = probe_container(f"{bwrap} --tmpfs {host['dir']} --setenv NCCL_TOPO_FILE {path}")
    assert probe["topo_file"]["exists"] is False
    outcome = _judge(host, probe)
    assert outcome.status == FAIL
    assert "does not exist inside the container" in outcome.detail


def test_file_that_is_not_a_topology_fails(bwrap: str, host: dict) -> None:
    bad = host["tmp"] / "bad.xml"
    bad.write_text("<topology/>\n")
    path = host["path"]
    probe = probe_container(f"{bwrap} --tmpfs {host['dir']} --ro-bind {bad} {path} "
                            f"--setenv NCCL_TOPO_FILE {path}")
    assert probe["topo_file"]["readable"] is True
    assert probe["topo_file"]["looks_valid"] is False
    assert _judge(host, probe).status == FAIL


def test_directory_is_not_readable_file(bwrap: str, host: dict) -> None:
    probe = probe_container(f"{bwrap} --setenv NCCL_TOPO_FILE {host['dir']}")
    assert probe["topo_file"]["exists"] is True
    assert probe["topo_file"]["readable"] is False
    assert "not a readable file" in _judge(host, probe).detail


def test_topology_from_the_container_nccl_conf(bwrap: str, host: dict) -> None:
    """NCCL_CONF_FILE (NCCL >= 2.23) with CRLF lines sets it; the environment does not."""
    conf = host["tmp"] / "nccl.conf"
    conf.write_bytes(f"# site\r\nNCCL_TOPO_FILE={host['path']}\r\nNCCL_TOPO_FILE=/other\r\n"
                     "NCCL_IB_QPS_PER_CONNECTION=4".encode())
    path = host["path"]
    probe = probe_container(f"{bwrap} --setenv NCCL_CONF_FILE {conf} --ro-bind {path} {path}")
    assert probe["ok"] is True, probe["error"]
    assert probe["topo_file"]["path"] == path
    assert probe["topo_file"]["source"] == str(conf)
    assert probe["nccl_conf"][str(conf)] == [
        {"line": 2, "key": "NCCL_TOPO_FILE", "value": path},
        {"line": 3, "key": "NCCL_TOPO_FILE", "value": "/other"},
        {"line": 4, "key": "NCCL_IB_QPS_PER_CONNECTION", "value": "4"},
    ]
    assert probe["nccl_conf"]["/etc/nccl.conf"] is None
    assert _judge(host, probe).status == PASS


def test_container_names_another_path_fails(bwrap: str, host: dict) -> None:
    other = host["tmp"] / "other.xml"
    shutil.copy(TOPO, other)
    probe = probe_container(f"{bwrap} --setenv NCCL_TOPO_FILE {other}")
    outcome = _judge(host, probe)
    assert outcome.status == FAIL
    assert f"expected {host['path']}" in outcome.detail


def test_bash_as_sh_and_hostile_values(bwrap: str, tmp_path: Path) -> None:
    """bash in POSIX mode as /bin/sh; values are printed, never evaluated; no globbing."""
    marker = tmp_path / "pwned"
    launcher = (f"{bwrap} --ro-bind /bin/bash /bin/sh --chdir {tmp_path} "
                f"--setenv NCCL_A {shlex.quote(f'x $(touch {marker}) *')} "
                "--setenv NCCL_B 'l1\nNCCL_FAKE=2' --setenv NCCL_EMPTY ''")
    (tmp_path / "NCCL_GLOB").write_text("")
    probe = probe_container(launcher)
    assert probe["ok"] is True, probe["error"]
    assert probe["env"] == {"NCCL_A": f"x $(touch {marker}) *", "NCCL_B": "l1",
                            "NCCL_EMPTY": ""}
    assert not marker.exists()


def test_launcher_not_found() -> None:
    probe = probe_container("/nonexistent/srun --container-image=x")
    assert probe == {"launcher": "/nonexistent/srun --container-image=x", "ok": False,
                     "error": "launcher not found: /nonexistent/srun", "env": {},
                     "topo_file": None, "nccl_conf": {}, "python": None}


def test_launcher_exits_nonzero() -> None:
    probe = probe_container("sh -c 'echo >&2 srun: error: Unable to allocate; exit 1' --")
    assert probe["ok"] is False
    assert probe["error"] == "launcher exited 1: srun: error: Unable to allocate"
    outcome = _judge_failed(probe)
    assert outcome.status == SKIP
    assert outcome.detail.startswith("container probe failed: launcher exited 1")


def _judge_failed(probe: dict):
    facts = {"runtime": {"nccl_topo_file": {"value": "/etc/nccl/topo.xml"}, "container": probe}}
    profile = {"name": "t", "runtime": {"nccl_topo_file": "/etc/nccl/topo.xml",
                                        "require_in_container": True}}
    return check_topo_in_container(facts, profile)


def test_launcher_times_out_and_its_children_end() -> None:
    started = time.monotonic()
    probe = probe_container("sh -c 'sleep 30 & sleep 30' --", timeout=1)
    assert time.monotonic() - started < 10
    assert probe["ok"] is False
    assert probe["error"] == "launcher timed out after 1 s"


def test_launcher_that_ignores_the_command() -> None:
    probe = probe_container("true")
    assert probe["ok"] is False
    assert probe["error"].startswith("no complete probe output")


@pytest.mark.parametrize("launcher, want", [
    ("", "empty launcher"),
    ("srun 'unbalanced", "cannot parse the launcher: No closing quotation"),
])
def test_unusable_launcher_text(launcher: str, want: str) -> None:
    probe = probe_container(launcher)
    assert (probe["ok"], probe["error"]) == (False, want)


def test_script_runs_under_dash_directly(tmp_path: Path) -> None:
    """The constant script needs only POSIX sh builtins (here: an empty PATH, no python3)."""
    assert Path("/bin/dash").exists(), "Debian's /bin/sh (dash) is needed for this test"
    run = subprocess.run(["/bin/dash", "-c", SCRIPT], capture_output=True, text=True,
                         env={"PATH": "", "HOME": str(tmp_path), "NCCL_DEBUG": "INFO"},
                         check=False)
    assert run.returncode == 0, run.stderr
    parsed = parse_probe_output(run.stdout)
    assert parsed["complete"] is True
    assert parsed["env"] == {"NCCL_DEBUG": "INFO"}
    assert parsed["python"] is None
    assert list(parsed["nccl_conf"]) == [f"{tmp_path}/.nccl.conf", "/etc/nccl.conf"]


@pytest.mark.parametrize("name, text, want", [
    ("empty", "", {"complete": False, "env": {}, "python": None}),
    ("truncated", "@xt begin 1\n@xt env NCCL_A=1\n", {"complete": False, "env": {"NCCL_A": "1"}}),
    ("garbage", "srun: job 12 queued\n@xt env not-a-name=1\n@xt env NCCL_B\n@xt bogus x\n"
                "@xt begin 1\n@xt end\n", {"complete": True, "env": {}}),
    ("valid", "pyxis: importing\n@xt begin 1\n@xt env NCCL_C=a=b\n@xt topo_path /t.xml\n"
              "@xt topo_source environment\n@xt topo_kind file\n@xt topo_readable 1\n"
              "@xt topo_head <?xml version=\"1.0\"?>\n@xt topo_head <system\n"
              "@xt topo_head   version='1'>\n@xt python Python 3.12.3\n@xt end\n",
     {"complete": True, "env": {"NCCL_C": "a=b"}, "python": "Python 3.12.3",
      "topo_file": {"path": "/t.xml", "source": "environment", "exists": True,
                    "readable": True, "looks_valid": True,
                    "head": "<?xml version=\"1.0\"?>\n<system\n  version='1'>"}}),
    ("wrong-version", "@xt begin 1\n@xt topo_path /t.xml\n@xt topo_kind file\n"
                      "@xt topo_readable 1\n@xt topo_head <system version=\"2\">\n@xt end\n",
     {"complete": True}),
])
def test_parse_probe_output(name: str, text: str, want: dict) -> None:
    have = parse_probe_output(text)
    assert {key: have[key] for key in want} == want, name
    if name == "wrong-version":
        assert have["topo_file"]["looks_valid"] is False


def test_compare_container_without_a_probe_result() -> None:
    failed = {"launcher": "x", "ok": False, "error": "launcher not found: x"}
    have = compare_container({"nccl_topo_file": {"value": "/t.xml", "readable": True}}, failed)
    assert have["ok"] is None
    assert have["expected"] == "/t.xml"
    assert have["error"] == "launcher not found: x"


def test_compare_container_nothing_expected() -> None:
    probe = {"ok": True, "topo_file": {"path": None, "exists": False}}
    have = compare_container({"nccl_topo_file": {"value": None}}, probe)
    assert (have["ok"], have["problems"]) == (True, [])
