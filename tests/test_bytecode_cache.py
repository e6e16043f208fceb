"""The module payloads' bytecode cache (plugins/module_utils/glue/bytecode_cache.py).

Two levels: real AnsiballZ payloads built by ``ansible`` (kept with
``ANSIBLE_KEEP_REMOTE_FILES``) run again with every ``compile`` call counted, and small zips
laid out as a payload for the cases a real payload cannot easily show (a changed source, a
traceback, hostile cache entries).
"""

from __future__ import annotations

import json
import marshal
import os
import stat
import subprocess
import sys
import zipfile
from importlib.util import MAGIC_NUMBER
from pathlib import Path

import pytest

from tests.conftest import REPO, SYSROOTS

PACKAGE_DIR = "ansible_collections/exemplar/tune/plugins/module_utils"
CACHE_ENV = "EXEMPLAR_TUNE_BYTECODE_CACHE"
# Imported by the zip importer before the cache is in place (each compiled twice there).
BEFORE_THE_CACHE = {"__init__.py": 2, "glue/__init__.py": 2, "glue/bytecode_cache.py": 2}

# Runs a module payload (or a script) with every compile() of this collection's module_utils
# counted; writes {file: count} as JSON to the path in COUNTS_OUT.
COUNTER = """
import builtins, json, os, runpy, sys, atexit
counts = {}
real = builtins.compile
def counted(source, filename, *args, **kwargs):
    name = str(filename)
    if "plugins/module_utils/" in name:
        key = name.split("plugins/module_utils/")[-1]
        counts[key] = counts.get(key, 0) + 1
    return real(source, filename, *args, **kwargs)
builtins.compile = counted
atexit.register(lambda: open(os.environ["COUNTS_OUT"], "w").write(json.dumps(counts)))
path = sys.argv[1]
sys.argv = [path]
runpy.run_path(path, run_name="__main__")
"""


@pytest.fixture(scope="module")
def facts_payload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The AnsiballZ file of a real ``exemplar.tune.facts`` run on a fixture sysroot."""
    work = tmp_path_factory.mktemp("payload")
    env = dict(os.environ, ANSIBLE_KEEP_REMOTE_FILES="1", ANSIBLE_REMOTE_TMP=str(work / "rt"),
               **{CACHE_ENV: "off"})
    ansible = Path(sys.executable).with_name("ansible")
    out = subprocess.run(
        [str(ansible), "localhost", "-c", "local", "-e",
         f"ansible_python_interpreter={sys.executable}", "-m", "exemplar.tune.facts",
         "-a", f"sysroot={SYSROOTS / 'h100-x86'}"],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (payload,) = (work / "rt").rglob("AnsiballZ_facts.py")
    return payload


def _run_counted(script: Path, tmp_path: Path, cache: str,
                 *flags: str) -> tuple[dict, dict[str, int]]:
    """(module result, compile counts per module_utils file) of one run of ``script`` by this
    Python with ``flags``."""
    counter = tmp_path / "counter.py"
    counter.write_text(COUNTER)
    counts = tmp_path / "counts.json"
    env = dict(os.environ, COUNTS_OUT=str(counts), **{CACHE_ENV: cache})
    out = subprocess.run([sys.executable, *flags, str(counter), str(script)], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return json.loads(out.stdout), json.loads(counts.read_text())


def _after_the_cache(counts: dict[str, int]) -> dict[str, int]:
    """The counts of the files the cache serves (the others are checked once, here)."""
    assert {name: counts.get(name) for name in BEFORE_THE_CACHE} == BEFORE_THE_CACHE
    return {name: n for name, n in counts.items() if name not in BEFORE_THE_CACHE}


def _facts(result: dict) -> dict:
    return result["ansible_facts"]["exemplar_tune"]


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.codecache"))


def test_payload_compiles_each_file_once_then_none(facts_payload, tmp_path):
    cache = tmp_path / "cache"
    cold, counts = _run_counted(facts_payload, tmp_path, str(cache))
    ours = _after_the_cache(counts)
    assert len(ours) > 20, counts  # every layer's readers were imported
    assert set(ours.values()) == {1}, counts
    assert len(_entries(cache)) == len(ours)
    (tag_dir,) = cache.iterdir()
    assert stat.S_IMODE(tag_dir.stat().st_mode) == 0o700
    assert {stat.S_IMODE(e.stat().st_mode) for e in _entries(cache)} == {0o600}

    warm, counts = _run_counted(facts_payload, tmp_path, str(cache))
    assert _after_the_cache(counts) == {}
    assert _facts(warm) == _facts(cold)


def test_payload_without_cache_compiles_once_and_writes_nothing(facts_payload, tmp_path):
    result, counts = _run_counted(facts_payload, tmp_path, "off")
    ours = _after_the_cache(counts)
    assert ours and set(ours.values()) == {1}, counts
    assert _facts(result)["gpu"]["present"] is True
    assert not list(tmp_path.rglob("*.codecache"))


# -- small payload-shaped zips -------------------------------------------------------------

def _payload_zip(path: Path, modules: dict[str, str]) -> Path:
    """A zip laid out like a module payload: this collection's packages, the real
    bytecode_cache.py and ``modules`` (name -> source) in module_utils."""
    with zipfile.ZipFile(path, "w") as archive:
        parts = PACKAGE_DIR.split("/")
        for depth in range(1, len(parts) + 1):
            archive.writestr("/".join(parts[:depth]) + "/__init__.py", "")
        archive.writestr(f"{PACKAGE_DIR}/glue/__init__.py", "")
        archive.write(REPO / "plugins/module_utils/glue/bytecode_cache.py",
                      f"{PACKAGE_DIR}/glue/bytecode_cache.py")
        for name, source in modules.items():
            archive.writestr(f"{PACKAGE_DIR}/{name}.py", source)
    return path


def _script(tmp_path: Path, archive: Path, body: str) -> Path:
    """A script that puts ``archive`` first on sys.path, turns the cache on, then runs
    ``body``."""
    script = tmp_path / "run_payload.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(archive)!r})\n"
        "from ansible_collections.exemplar.tune.plugins.module_utils.glue.bytecode_cache import "
        "use_bytecode_cache\n"
        "use_bytecode_cache()\n"
        "import json\n" + body)
    return script


MODULES = {
    "first": "VALUE = 'first'\n",
    "second": "from ansible_collections.exemplar.tune.plugins.module_utils.first import VALUE\n"
              "BOTH = VALUE + '+second'\n",
}
IMPORT_BOTH = ("from ansible_collections.exemplar.tune.plugins.module_utils import second\n"
               "print(json.dumps(second.BOTH))\n")


def test_changed_source_is_compiled_again_alone(tmp_path):
    cache = tmp_path / "cache"
    archive = _payload_zip(tmp_path / "v1.zip", MODULES)
    script = _script(tmp_path, archive, IMPORT_BOTH)
    assert _run_counted(script, tmp_path, str(cache)) == (
        "first+second", {"first.py": 1, "second.py": 1, **BEFORE_THE_CACHE})
    assert _run_counted(script, tmp_path, str(cache))[1] == BEFORE_THE_CACHE

    _payload_zip(archive, {**MODULES, "first": "VALUE = 'changed'\n"})
    assert _run_counted(script, tmp_path, str(cache)) == (
        "changed+second", {"first.py": 1, **BEFORE_THE_CACHE})
    assert len(_entries(cache)) == 3


def test_traceback_shows_the_cached_module_source(tmp_path):
    archive = _payload_zip(tmp_path / "p.zip", {
        "boom": "def explode():\n    raise RuntimeError('boom from the payload')\n"})
    script = _script(tmp_path, archive, (
        "import traceback\n"
        "from ansible_collections.exemplar.tune.plugins.module_utils.boom import explode\n"
        "try:\n    explode()\n"
        "except RuntimeError:\n    print(json.dumps(traceback.format_exc()))\n"))
    cache = tmp_path / "cache"
    for compiled in ({"boom.py": 1}, {}):  # compiled, then from the cache
        text, counts = _run_counted(script, tmp_path, str(cache))
        assert counts == {**compiled, **BEFORE_THE_CACHE}
        assert f"{PACKAGE_DIR}/boom.py\", line 2, in explode" in text
        assert "raise RuntimeError('boom from the payload')" in text


def _poison(cache: Path, tmp_path: Path, archive: Path) -> Path:
    """Replace the cache entry of ``first`` with code that writes a marker file."""
    marker = tmp_path / "poisoned"
    (entry,) = [e for e in _entries(cache) if _entry_code(e).co_consts[:1] == ("first",)]
    code = compile(f"open({str(marker)!r}, 'w').write('ran')\nVALUE = 'poisoned'\n",
                   f"{PACKAGE_DIR}/first.py", "exec")
    entry.write_bytes(MAGIC_NUMBER + marshal.dumps(code))
    return marker


def _entry_code(entry: Path):
    return marshal.loads(entry.read_bytes()[len(MAGIC_NUMBER):])


@pytest.mark.parametrize("attack", ["group-writable entry", "group-writable directory",
                                    "symlinked directory"])
def test_entries_nobody_else_could_have_written_are_the_only_ones_run(tmp_path, attack):
    cache = tmp_path / "cache"
    archive = _payload_zip(tmp_path / "p.zip", MODULES)
    script = _script(tmp_path, archive, IMPORT_BOTH)
    _run_counted(script, tmp_path, str(cache))
    marker = _poison(cache, tmp_path, archive)
    (tag_dir,) = cache.iterdir()
    if attack == "group-writable entry":
        for entry in _entries(cache):
            entry.chmod(0o620)
    elif attack == "group-writable directory":
        tag_dir.chmod(0o770)
    else:
        moved = tmp_path / "elsewhere"
        tag_dir.rename(moved)
        tag_dir.symlink_to(moved, target_is_directory=True)
    result, counts = _run_counted(script, tmp_path, str(cache))
    assert result == "first+second"
    assert counts["first.py"] == 1
    assert not marker.exists()


def test_the_poisoned_entry_would_run_if_trusted(tmp_path):
    """The attack tests above can fail: an entry of our own is used as written."""
    cache = tmp_path / "cache"
    archive = _payload_zip(tmp_path / "p.zip", MODULES)
    script = _script(tmp_path, archive, IMPORT_BOTH)
    _run_counted(script, tmp_path, str(cache))
    marker = _poison(cache, tmp_path, archive)
    assert _run_counted(script, tmp_path, str(cache))[0] == "poisoned+second"
    assert marker.exists()


@pytest.mark.parametrize("damage", [b"", b"garbage", MAGIC_NUMBER + b"\x00\x01",
                                    MAGIC_NUMBER + marshal.dumps("not code")])
def test_a_damaged_entry_is_compiled_again_and_replaced(tmp_path, damage):
    cache = tmp_path / "cache"
    archive = _payload_zip(tmp_path / "p.zip", MODULES)
    script = _script(tmp_path, archive, IMPORT_BOTH)
    _run_counted(script, tmp_path, str(cache))
    for entry in _entries(cache):
        entry.write_bytes(damage)
    assert _run_counted(script, tmp_path, str(cache)) == (
        "first+second", {"first.py": 1, "second.py": 1, **BEFORE_THE_CACHE})
    assert _run_counted(script, tmp_path, str(cache))[1] == BEFORE_THE_CACHE


def test_an_unusable_cache_location_only_means_compiling(tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    archive = _payload_zip(tmp_path / "p.zip", MODULES)
    script = _script(tmp_path, archive, IMPORT_BOTH)
    for _ in range(2):
        assert _run_counted(script, tmp_path, str(blocker / "cache")) == (
            "first+second", {"first.py": 1, "second.py": 1, **BEFORE_THE_CACHE})


def test_old_entries_are_swept_when_new_ones_are_written(tmp_path):
    cache = tmp_path / "cache"
    archive = _payload_zip(tmp_path / "p.zip", MODULES)
    script = _script(tmp_path, archive, IMPORT_BOTH)
    _run_counted(script, tmp_path, str(cache))
    (tag_dir,) = cache.iterdir()
    stale, stray = tag_dir / ("0" * 64 + ".codecache"), tag_dir / ("1" * 64 + ".9.ab.tmp")
    other, linked = tag_dir / "notes.txt", tag_dir / ("2" * 64 + ".codecache")
    outside = tmp_path / "outside.codecache"
    for path in (stale, stray, other, outside):
        path.write_bytes(b"old")
        os.utime(path, (1, 1))
    linked.symlink_to(outside)
    os.utime(linked, (1, 1), follow_symlinks=False)
    _run_counted(script, tmp_path, str(cache))  # all hits: nothing written, nothing swept
    assert stale.exists() and stray.exists()
    _payload_zip(archive, {**MODULES, "second": MODULES["second"] + "# new version\n"})
    _run_counted(script, tmp_path, str(cache))
    assert not stale.exists() and not stray.exists()
    assert other.exists() and linked.is_symlink() and outside.read_bytes() == b"old"
    assert len([e for e in _entries(cache) if not e.is_symlink()]) == 3


def test_imports_outside_a_payload_are_untouched():
    from ansible_collections.exemplar.tune.plugins.module_utils.glue import bytecode_cache

    before = list(sys.meta_path)
    bytecode_cache.use_bytecode_cache()
    assert sys.meta_path == before


def test_optimisation_levels_keep_separate_entries(tmp_path):
    """``python -O`` drops asserts at compile time: its code must not serve a plain run."""
    cache = tmp_path / "cache"
    archive = _payload_zip(tmp_path / "p.zip", {
        "checked": "def guarded():\n    assert False, 'asserts are on'\n"
                   "    return 'asserts off'\n"})
    script = _script(tmp_path, archive, (
        "from ansible_collections.exemplar.tune.plugins.module_utils.checked import guarded\n"
        "try:\n    print(json.dumps(guarded()))\n"
        "except AssertionError as exc:\n    print(json.dumps(str(exc)))\n"))
    compiled = {"checked.py": 1, **BEFORE_THE_CACHE}
    assert _run_counted(script, tmp_path, str(cache), "-O") == ("asserts off", compiled)
    assert _run_counted(script, tmp_path, str(cache)) == ("asserts are on", compiled)
    assert _run_counted(script, tmp_path, str(cache), "-O") == ("asserts off",
                                                               BEFORE_THE_CACHE)
    assert _run_counted(script, tmp_path, str(cache)) == ("asserts are on", BEFORE_THE_CACHE)
    assert len(_entries(cache)) == 2


@pytest.fixture
def finder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A finder over a payload-shaped zip, its cache (``tmp_path/cache``) opened as a module
    run opens it; closed afterwards."""
    import zipimport

    from ansible_collections.exemplar.tune.plugins.module_utils.glue import bytecode_cache

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    archive = _payload_zip(tmp_path / "p.zip", MODULES)
    found = bytecode_cache.PayloadFinder(zipimport.zipimporter(str(archive)),
                                         bytecode_cache.open_cache_directory())
    assert found.cache is not None
    yield found
    if found.cache is not None:
        os.close(found.cache)


FIRST = (f"{PACKAGE_DIR}/first.py", MODULES["first"].encode())


def _value(finder) -> str:
    """What ``first`` defines when run from the code ``finder`` gives."""
    namespace: dict = {}
    exec(finder.code(*FIRST), namespace)  # noqa: S102 - the code under test
    return namespace["VALUE"]


def _plant(directory: Path, name: str) -> None:
    """An entry named ``name`` in ``directory`` whose code says 'planted'."""
    directory.mkdir(mode=0o777, exist_ok=True)
    directory.chmod(0o777)
    (directory / name).write_bytes(MAGIC_NUMBER + marshal.dumps(compile(
        "VALUE = 'planted'\n", FIRST[0], "exec")))


def test_a_directory_swapped_after_opening_is_not_used(tmp_path, finder):
    """Whoever can write the cache's parent may rename the directory and put their own in
    its place after the module opened it: reads and writes stay in the one it checked."""
    _value(finder)
    tag_dir = next((tmp_path / "cache").iterdir())
    (name,) = os.listdir(tag_dir)
    tag_dir.rename(tmp_path / "checked")
    _plant(tag_dir, name)
    assert _value(finder) == "first"
    finder.code(f"{PACKAGE_DIR}/second.py", MODULES["second"].encode())
    assert os.listdir(tag_dir) == [name]
    assert len(os.listdir(tmp_path / "checked")) == 2


def test_an_entry_of_another_user_is_not_run(tmp_path, finder, monkeypatch):
    """The same entry is run while it is this user's, and not once the process runs as
    someone else (as if another user had written it)."""
    from ansible_collections.exemplar.tune.plugins.module_utils.glue.bytecode_cache import (
        entry_name,
    )

    _value(finder)
    tag_dir = next((tmp_path / "cache").iterdir())
    _plant(tag_dir, entry_name(*FIRST))
    tag_dir.chmod(0o700)
    assert _value(finder) == "planted"
    owner = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    assert _value(finder) == "first"


def test_a_descriptor_closed_or_reused_turns_the_cache_off(tmp_path, finder):
    """A module that closes descriptors may give the cache's number to another directory:
    the cache then neither reads from nor writes into it."""
    from ansible_collections.exemplar.tune.plugins.module_utils.glue.bytecode_cache import (
        entry_name,
    )

    other = tmp_path / "other"
    _plant(other, entry_name(*FIRST))
    planted = sorted(os.listdir(other))
    reused = os.open(other, os.O_RDONLY | os.O_DIRECTORY)
    os.dup2(reused, finder.cache)  # the cache's number now names the other directory
    os.close(reused)
    number = finder.cache
    assert _value(finder) == "first"
    assert finder.cache is None
    finder.code(f"{PACKAGE_DIR}/second.py", MODULES["second"].encode())
    assert sorted(os.listdir(other)) == planted
    os.close(number)


def test_any_error_in_the_cache_only_means_compiling(finder, monkeypatch):
    from ansible_collections.exemplar.tune.plugins.module_utils.glue import bytecode_cache

    assert _value(finder) == "first"  # written

    def broken(*_args: object) -> None:
        raise RuntimeError("not an OSError")

    before = sorted(os.listdir(bytecode_cache.cache_path()))
    monkeypatch.setattr(bytecode_cache.marshal, "loads", broken)
    monkeypatch.setattr(bytecode_cache.marshal, "dumps", broken)
    assert _value(finder) == "first"  # neither read nor written: compiled
    assert sorted(os.listdir(bytecode_cache.cache_path())) == before  # no temporary file left
    monkeypatch.setattr(bytecode_cache, "entry_name", broken)
    assert _value(finder) == "first"


def test_a_failed_write_leaves_nothing_behind(finder, monkeypatch):
    """Another process's temporary file of the same name is left alone (the entry is just
    not written); a rename that fails removes the run's own temporary file."""
    from ansible_collections.exemplar.tune.plugins.module_utils.glue import bytecode_cache

    tag_dir = Path(bytecode_cache.cache_path())
    name = bytecode_cache.entry_name(*FIRST)
    monkeypatch.setattr(os, "getpid", lambda: 1)
    monkeypatch.setattr(os, "urandom", lambda n: b"\0" * n)
    others = tag_dir / f"{name}.1.00000000.tmp"
    others.write_bytes(b"another process's")
    assert _value(finder) == "first"
    assert sorted(os.listdir(tag_dir)) == [others.name]
    assert others.read_bytes() == b"another process's"

    others.unlink()
    (tag_dir / name).mkdir()
    (tag_dir / name / "keep").write_text("")
    for _ in range(2):
        assert _value(finder) == "first"
    assert os.listdir(tag_dir) == [name]


def test_a_traceback_decodes_the_source_as_python_does(tmp_path):
    """A module declaring its encoding (PEP 263) shows its line right in a traceback."""
    archive = tmp_path / "p.zip"
    _payload_zip(archive, {})
    with zipfile.ZipFile(archive, "a") as payload:
        payload.writestr(f"{PACKAGE_DIR}/legacy.py", "# -*- coding: latin-1 -*-\n"
                         "def fail():\n    raise ValueError('caf\xe9')\n".encode("latin-1"))
    script = _script(tmp_path, archive, (
        "import traceback\n"
        "from ansible_collections.exemplar.tune.plugins.module_utils.legacy import fail\n"
        "try:\n    fail()\n"
        "except ValueError:\n    print(json.dumps(traceback.format_exc()))\n"))
    text, _counts = _run_counted(script, tmp_path, str(tmp_path / "cache"))
    assert "raise ValueError('caf\xe9')" in text


def test_a_relative_cache_path_turns_the_cache_off(tmp_path, monkeypatch):
    archive = _payload_zip(tmp_path / "p.zip", MODULES)
    script = _script(tmp_path, archive, IMPORT_BOTH)
    for _ in range(2):
        assert _run_counted(script, tmp_path, "relative/cache") == (
            "first+second", {"first.py": 1, "second.py": 1, **BEFORE_THE_CACHE})
    assert not (tmp_path / "relative").exists()
