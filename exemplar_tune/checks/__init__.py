"""Preflight checks, one module per layer; importing this package registers them all."""

from exemplar_tune.checks import (  # noqa: F401 - imported for registration
    cpu,
    fabric,
    gpu,
    runtime,
    vm,
    workload,
)
from exemplar_tune.checks.base import CHECKS, Check, Outcome  # noqa: F401
