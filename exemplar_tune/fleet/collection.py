"""Where the ``exemplar.tune`` collection lives, for checkouts, editable and wheel installs."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def collection_root() -> Path:
    """Directory holding ``galaxy.yml``, ``plugins/``, ``roles/`` and ``playbooks/``."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "galaxy.yml").is_file() and (checkout / "plugins").is_dir():
        return checkout
    spec = importlib.util.find_spec("ansible_collections.exemplar.tune")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the exemplar.tune collection is not installed with this package")
    return Path(list(spec.submodule_search_locations)[0])


def link_collection(collections_dir: Path) -> Path:
    """Make ``<collections_dir>/ansible_collections/exemplar/tune`` point at the collection.

    Returns ``collections_dir``, ready for ``ANSIBLE_COLLECTIONS_PATH``.
    """
    link = collections_dir / "ansible_collections" / "exemplar" / "tune"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(collection_root(), target_is_directory=True)
    return collections_dir
