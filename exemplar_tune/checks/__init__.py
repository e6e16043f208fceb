"""Preflight checks, one module per layer, then those the family knobs declare; importing
this package registers them all."""

from exemplar_tune.checks import (  # noqa: F401 - imported for registration
    cpu,
    fabric,
    gpu,
    runtime,
    vm,
    workload,
)
from exemplar_tune.checks.base import CHECKS, Check, Outcome  # noqa: F401
from exemplar_tune.checks.declared import register_declared

register_declared()  # after the hand-written ones: each layer's declared checks come last
