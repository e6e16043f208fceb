"""Where the ``exemplar.tune`` collection lives, for checkouts, editable and wheel installs."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
from pathlib import Path

from exemplar_tune.runs import state_dir

DEFAULT_COLLECTIONS = ("~/.ansible/collections", "/usr/share/ansible/collections")


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


def playbook_line(name: str, inventory: str, hosts: list[str]) -> str:
    """``ansible-playbook -i INVENTORY exemplar.tune.NAME --limit HOSTS`` as a shell line
    that runs as printed: the ``ansible-playbook`` of this Python where ``PATH`` finds
    another or none, and ``ANSIBLE_COLLECTIONS_PATH`` naming a link to the collection in the
    state directory where Ansible's search path (a wheel install, ``ANSIBLE_COLLECTIONS_PATH``)
    lacks it."""
    program = Path(sys.executable).parent / "ansible-playbook"
    if not program.is_file() or shutil.which(program.name) == str(program):
        program = Path(program.name)
    line = shlex.join([str(program), "-i", inventory, f"exemplar.tune.{name}", "--limit",
                       ",".join(hosts)])
    searched = [*os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep),
                *DEFAULT_COLLECTIONS, *sys.path]
    found = f"ansible_collections/exemplar/tune/playbooks/{name}.yml"
    if any(Path(os.path.expanduser(d), found).is_file() for d in searched if d):
        return line
    linked = state_dir() / "collections"
    link = linked / "ansible_collections" / "exemplar" / "tune"
    try:
        if link.is_symlink() and link.resolve() != collection_root().resolve():
            link.unlink()  # left by another checkout or install
        link_collection(linked)
    except OSError:
        return line
    return f"ANSIBLE_COLLECTIONS_PATH={shlex.quote(str(linked))} {line}"
