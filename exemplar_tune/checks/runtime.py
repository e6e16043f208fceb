"""runtime-layer checks."""

from __future__ import annotations
