"""Bounded memory wherever input is taken: YAML aliases (profiles, their ``extends``, benchmark
files, inventories and their ``group_vars``), a schema message about a huge value, the node
benchmark's output, the total of ``--limit``.

Nothing here allocates gigabytes: the CLI runs under an address-space limit
(:data:`AS_LIMIT`; before the fixes each case ran out of it: an internal error, exit 70, or
a misleading error after half a minute) and in-process cases are measured with
``tracemalloc``. Each case reproduces a probe failure of issue 48.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from exemplar_tune.fleet.ansible_run import AnsibleRun, local_inventory
from exemplar_tune.fleet.hostlist import MAX_HOSTS, ansible_limit
from exemplar_tune.orchestration.slow_nodes import node_value
from exemplar_tune.profile import ProfileError, load_profile
from tests.conftest import SYSROOTS
from tests.helpers import cli_env

AS_LIMIT = 1 << 30  # bytes of address space the CLI may use here (it needs about 300 MiB)
ALIASES = "its aliases (*name) expand to more than"


def laughs(levels: int = 9, indent: str = "") -> str:
    """YAML anchors ``a0``..``aN``, each aliasing the one before nine times: ``aN`` spelt out
    is ``9 ** (N + 1)`` strings (a billion for 9)."""
    lines = [f'{indent}a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{indent}a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]"
              for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def bounded_cli(*args: str, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                               float]:
    """The CLI under :data:`AS_LIMIT`, and how many seconds it took."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))

    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "exemplar_tune.cli", *args], capture_output=True,
                         text=True, env=cli_env(), cwd=cwd, preexec_fn=limit, timeout=300,
                         check=False)
    return out, time.monotonic() - start


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("exemplar-tune: error: "), out.stderr
    return lines[0]


@pytest.mark.parametrize("how", ["profile", "extends"])
def test_a_profile_alias_bomb_is_refused_before_validation(tmp_path, how):
    """Before: the schema message spelt the aliased value out (5.5 GB; here MemoryError,
    exit 70)."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("name: bomb\n" + laughs() + "cpu: {governor: *a9}\n")
    site = tmp_path / "site.yaml"
    site.write_text(f"extends: {bomb}\nname: site\n")
    chosen = bomb if how == "profile" else site
    for args in (["profile", "show", str(chosen)],
                 ["preflight", "--sysroot", str(SYSROOTS / "h100-x86"), "--profile", str(chosen)]):
        out, seconds = bounded_cli(*args)
        line = one_line_error(out)
        assert f"profile {bomb}: {ALIASES}" in line and seconds < 60


def test_a_benchmark_file_alias_bomb_is_refused_before_validation(tmp_path):
    """Before: the schema's messages spelt ``env: *a9`` out (MemoryError, exit 70)."""
    bench = tmp_path / "bench.yaml"
    bench.write_text("x-anchors:\n" + laughs(indent="  ") + "shapes:\n  - name: dense\n"
                     "    command: [\"true\"]\n    parser: regex\n    pattern: \"(x)\"\n"
                     "    env: *a9\n")
    out, _ = bounded_cli("tune", "--bench", str(bench), "--dry-run", "--sysroot",
                         str(SYSROOTS / "h100-x86"))
    assert f"benchmark file {bench}: {ALIASES}" in one_line_error(out)


@pytest.mark.parametrize("where", ["inventory", "group_vars"])
def test_an_inventory_alias_bomb_is_refused_before_ansible_reads_it(tmp_path, where):
    """Ansible's variable manager spells every alias out for each host, in this process and
    in every run. Before: after half a minute under the limit, 'no host matched'."""
    host = "  hosts:\n    n1: {ansible_connection: local}\n"
    inventory = tmp_path / "hosts.yml"
    if where == "inventory":
        inventory.write_text("all:\n  vars:\n" + laughs(indent="    ") + host)
        bad = inventory
    else:
        inventory.write_text("all:\n" + host)
        bad = tmp_path / "group_vars" / "all.yml"
        bad.parent.mkdir()
        bad.write_text(laughs())
    out, seconds = bounded_cli("facts", "-i", str(inventory), "--layer", "cpu")
    assert f"inventory {bad}: {ALIASES}" in one_line_error(out)
    assert seconds < 30


def test_inventories_with_merge_keys_on_every_host_are_not_taken_for_bombs(tmp_path):
    """``<<: *defaults`` on each of 5,000 hosts repeats far more values than a bomb's
    hundred thousand, but no more than ten times the file's own."""
    defaults = ", ".join(f"v{i}: {i}" for i in range(20))
    hosts = "".join(f"    h{i:04d}: {{<<: *d, ip: 10.0.{i // 250}.{i % 250}}}\n"
                    for i in range(5000))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"all:\n  vars:\n    defaults: &d {{{defaults}}}\n  hosts:\n{hosts}")
    from exemplar_tune.fleet.inventory import check_source

    check_source(str(inventory))


def test_a_schema_message_never_spells_out_a_huge_value(tmp_path):
    """A 700 kB value of the wrong type: the message keeps its start and end. Before, the
    whole value was the message."""
    profile = tmp_path / "big.yaml"
    profile.write_text("name: big\ncpu:\n  governor: [" + ",".join(["x" * 60] * 12_000) + "]\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(profile))
    message = str(err.value)
    assert len(message) < 600 and "\n" not in message
    assert message.startswith(f"profile {profile}: cpu.governor: ['xxx")
    assert "characters left out ...]" in message and message.endswith("is not of type 'string'")


def test_the_total_of_a_limit_is_bounded_before_any_host_is_spelt_out():
    """Each item was bounded, their sum was not: 20 items of 100,000 hosts took 176 MiB and
    16 s here before (538 MB and still running in Ansible)."""
    pattern = ",".join(f"rack{i:02d}-node[000001-100000]" for i in range(20))
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=rf"names 2000000 hosts, more than {MAX_HOSTS} "
                                             r"\(its 20 items together"):
            ansible_limit(pattern)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    out, seconds = bounded_cli("preflight", "-i", "x,", "--limit", pattern)
    assert "--limit: the pattern names 2000000 hosts" in one_line_error(out) and seconds < 30
    half = ",".join(f"r{i}-n[1-{MAX_HOSTS // 4}]" for i in range(4))
    assert ansible_limit(half).count(",") == MAX_HOSTS - 1  # the bound itself is allowed


def _printer(mebibytes: int, tail: str = "") -> list[str]:
    """A command printing ``mebibytes`` MiB of lines, then ``tail``, and ``done`` on stderr."""
    code = ("import sys\nline = b'x' * 1023 + b'\\n'\n"
            f"for _ in range({mebibytes} * 1024): sys.stdout.buffer.write(line)\n"
            f"sys.stdout.write({tail!r})\nsys.stderr.write('done\\n')\n")
    return [sys.executable, "-c", code]


def test_the_node_benchmark_reads_its_output_in_bounded_chunks():
    """Before: ``capture_output`` held all of it, twice (64 MiB printed: 128 MiB; 1 GB on 4
    hosts: 6.8 GB)."""
    from ansible_collections.exemplar.tune.plugins.modules import node_bench

    tracemalloc.start()
    try:
        run = node_bench.run_once(_printer(64, "# Avg bus bandwidth : 42.0\n"), 120)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20
    output = run["output"]
    kept = node_bench.OUTPUT_HEAD + node_bench.OUTPUT_TAIL
    left_out = 64 * 1024 * 1024 + len("# Avg bus bandwidth : 42.0\n") - kept
    assert f"\n[exemplar-tune: {left_out} bytes left out of this output; its first 16 KiB " \
           "and last 48 KiB are kept]\n" in output
    assert output.startswith("x" * 1023 + "\n") and len(output) < kept + 200
    assert output.endswith("# Avg bus bandwidth : 42.0\ndone\n")


def test_a_failing_node_benchmark_names_a_bounded_stderr_line():
    from ansible_collections.exemplar.tune.plugins.modules import node_bench

    code = "import sys; sys.stderr.write('e' * 5_000_000 + '\\n'); sys.exit(4)"
    with pytest.raises(RuntimeError) as err:
        node_bench.run_once([sys.executable, "-c", code], 60)
    assert str(err.value) == "exit status 4: " + "e" * node_bench.MAX_REASON


@pytest.mark.system
def test_the_controller_reads_a_node_benchmark_that_printed_much():
    """Real Ansible: the result that comes back holds the kept bytes, and the controller
    reads the step times from its end."""
    steps = "".join(f"iteration {i}/30 | elapsed time per iteration (ms): 50{i % 2}\n"
                    for i in range(1, 31))
    run = AnsibleRun(local_inventory(["n1"], {"n1": {
        "exemplar_node_bench_command": _printer(32, steps),
        "exemplar_sysroot": str(SYSROOTS / "h100-x86")}}), timeout=300)
    outcome = run.module("exemplar.tune.node_bench", {"runs": 3})
    (task,) = outcome.hosts["n1"].tasks
    assert task["status"] == "ok", task
    runs = task["result"]["runs"]
    assert len(runs) == 3 and all(len(r["output"]) < 70_000 for r in runs)
    assert all("bytes left out of this output" in r["output"] for r in runs)
    assert node_value("command", runs[0], "n1") == (500.5, "median step time (ms)")


def test_bounded_yaml_keeps_ordinary_aliases_and_refuses_cycles():
    from exemplar_tune.bounded_yaml import load_yaml
    from exemplar_tune.errors import UserError

    assert load_yaml("a: &x {k: 1}\nb: *x\nc: {<<: *x, d: 2}\n", "t") == {
        "a": {"k": 1}, "b": {"k": 1}, "c": {"k": 1, "d": 2}}
    assert load_yaml("", "t") is None
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: [1\n", "t")
    for cycle in ("a: &a [*a]\n", "&r {k: *r}\n"):
        with pytest.raises(UserError, match=r"^t: its aliases \(\*name\) expand to more than"):
            load_yaml(cycle, "t")
