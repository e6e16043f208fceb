"""One version everywhere: the package's ``__version__`` is what pip installs (pyproject
reads it), what the collection's galaxy.yml says and the changelog's newest release."""

from __future__ import annotations

from importlib.metadata import version

import yaml

from exemplar_tune import __version__
from tests.conftest import REPO


def _newest(releases: dict[str, object]) -> str:
    return max(releases, key=lambda v: tuple(int(part) for part in v.split(".")))


def test_the_package_the_collection_and_the_changelog_say_one_version():
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    changelog = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())
    assert version("exemplar-tune") == __version__
    assert galaxy["version"] == __version__
    assert _newest(changelog["releases"]) == __version__
