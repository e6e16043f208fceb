"""Test set-up: make the repository importable as the collection ``exemplar.tune``.

A symlink ``<tmp>/ansible_collections/exemplar/tune -> <repo>`` is created once per session,
put on ``sys.path`` (for in-process imports) and exported as ``ANSIBLE_COLLECTIONS_PATH``
(for ansible-runner and ansible-playbook subprocesses).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SYSROOTS = FIXTURES / "sysroots"
SAMPLES = FIXTURES / "samples"

_COLLECTIONS = Path(tempfile.mkdtemp(prefix="exemplar-colls-"))
_link = _COLLECTIONS / "ansible_collections" / "exemplar" / "tune"
_link.parent.mkdir(parents=True)
_link.symlink_to(REPO, target_is_directory=True)
sys.path.insert(0, str(_COLLECTIONS))
os.environ["ANSIBLE_COLLECTIONS_PATH"] = str(_COLLECTIONS)
os.environ.setdefault("ANSIBLE_LOCAL_TEMP", str(_COLLECTIONS / "tmp"))
os.environ.setdefault("ANSIBLE_HOME", str(_COLLECTIONS / "ansible-home"))
