"""Profiles that extend others: merge rules, chains, cycles, errors, ``profile show``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from exemplar_tune.profile import ProfileError, load_profile, merge
from tests.test_cli import cli


def write(path: Path, data: dict | str) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_merge_rules() -> None:
    parent = {"a": {"x": 1, "y": [1, 2], "z": 3}, "b": 1, "c": {"k": "v"}}
    child = {"a": {"x": 9, "y": [7], "z": None, "new": None}, "c": None, "d": 4}
    assert merge(parent, child) == {"a": {"x": 9, "y": [7], "new": None}, "b": 1, "d": 4}
    assert parent == {"a": {"x": 1, "y": [1, 2], "z": 3}, "b": 1, "c": {"k": "v"}}


def test_a_minimal_site_profile_needs_only_what_differs(tmp_path: Path) -> None:
    site = write(tmp_path / "site.yaml", {"extends": "h100-x86", "cpu": {"governor": None},
                                          "fabric": {"nccl": {"NCCL_IB_HCA": None}}})
    shipped, merged = load_profile("h100-x86"), load_profile(str(site))
    assert merged["name"] == "site" and "extends" not in merged
    assert "governor" in shipped["cpu"] and "governor" not in merged["cpu"]
    assert merged["gpu"] == shipped["gpu"]
    # a null the parent lacks keeps its meaning: remove NCCL_IB_HCA from the NCCL file
    assert merged["fabric"]["nccl"]["NCCL_IB_HCA"] is None


def test_chains_resolve_paths_relative_to_each_file(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    write(tmp_path / "base/fleet.yaml", {"extends": "gb200-grace", "name": "fleet",
                                         "cpu": {"turbo": False}})
    site = write(tmp_path / "site.yaml", {"extends": "base/fleet.yaml",
                                          "gpu": {"count": 4}})
    merged = load_profile(str(site))
    assert merged["name"] == "site" and merged["cpu"]["turbo"] is False
    assert merged["gpu"]["count"] == 4
    assert merged["vm"] == load_profile("gb200-grace")["vm"]


@pytest.mark.parametrize(("content", "message"), [
    ({"extends": "a.yaml"}, r"extends itself \(a.yaml -> a.yaml\)"),
    ({"extends": "h100-x86", "cpu": {"governer": "performance"}},
     r"cpu: Additional properties are not allowed \('governer' was unexpected\)"),
    ({"extends": "nowhere"}, "profile 'nowhere' not found"),
    ({"extends": ["h100-x86"]}, "extends: a shipped profile name or a file path"),
    ("- a list\n", r"\(top level\): a mapping of sections"),
    ({"cpu": {"turbo": True}}, "'name' is a required property"),
])
def test_bad_profiles_are_one_line(tmp_path: Path, content: dict | str, message: str) -> None:
    path = write(tmp_path / "a.yaml", content)
    with pytest.raises(ProfileError, match=message):
        load_profile(str(path))


def test_a_longer_cycle_is_named(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", {"extends": "b.yaml"})
    write(tmp_path / "b.yaml", {"extends": "a.yaml"})
    with pytest.raises(ProfileError, match=r"a.yaml -> b.yaml -> a.yaml"):
        load_profile(str(tmp_path / "a.yaml"))


def test_profile_show_and_list(tmp_path: Path) -> None:
    site = write(tmp_path / "site.yaml", {"extends": "h100-x86",
                                          "gpu": {"temperature_max_c": 80}})
    shown = cli("profile", "show", str(site), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == load_profile(str(site))
    as_yaml = yaml.safe_load(cli("profile", "show", str(site)).stdout)
    assert as_yaml["gpu"]["temperature_max_c"] == 80 and as_yaml["name"] == "site"
    assert cli("profile", "list").stdout.split() == [
        "b200-x86", "gb200-grace", "gb300-grace", "generic", "h100-x86", "h200-x86",
        "nvidia-acs-disable", "nvidia-base", "nvidia-gb200-inference",
        "nvidia-gb200-multiNodeTraining", "nvidia-gb200-performance", "nvidia-h100-inference",
        "nvidia-h100-multiNodeTraining", "nvidia-h100-performance"]
    bad = cli("profile", "show", str(write(tmp_path / "b.yaml", {"extends": "b.yaml"})))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_extends_reads_only_profiles_and_never_quotes_another_file(tmp_path: Path) -> None:
    """``extends: /etc/passwd`` (or any file that is not YAML by name) is refused unread; a
    YAML error names the line and column, never the file's text."""
    site = write(tmp_path / "site.yaml", {"extends": "/etc/passwd"})
    with pytest.raises(ProfileError, match=r"extends: /etc/passwd is neither a shipped profile "
                                           r"nor a \.yaml/\.yml file$"):
        load_profile(str(site))
    secret = tmp_path / "secret.yaml"
    secret.write_text("token: s3cr3t-value\n  broken: [\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(write(tmp_path / "b.yaml", {"extends": str(secret)})))
    assert "s3cr3t" not in str(err.value) and "(line 2, column" in str(err.value)


def test_chains_and_nesting_have_bounds(tmp_path: Path) -> None:
    """A 3,000-deep extends chain and deeply nested YAML were internal errors (RecursionError)."""
    for i in range(20):
        write(tmp_path / f"p{i}.yaml", {"extends": f"p{i + 1}.yaml"} if i < 19 else
              {"extends": "h100-x86"})
    with pytest.raises(ProfileError, match="extends more than 16 profiles deep"):
        load_profile(str(tmp_path / "p0.yaml"))
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: d\ncpu: " + "[" * 5000 + "]" * 5000 + "\n")
    out = cli("profile", "show", str(deep))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "nested too deeply" in out.stderr
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: h\ndescription: " + "x" * (2 << 20) + "\n")
    with pytest.raises(ProfileError, match="huge.yaml is larger than 1 MiB"):
        load_profile(str(huge))  # before: 50 MiB of YAML parsed with no time bound
