"""The layer registry: the single list of layers, in preflight order, and their knobs.

Everything that walks layers (the facts module, the CLI, the preflight and the tuning loop)
reads :data:`LAYERS`; nothing else names them. Adding a layer is one entry here plus its
gatherer, its knobs (``knobs/<layer>.py``), its role and checks. Each knob is declared once in
``knobs/<layer>.py`` and listed here by its layer (:attr:`Layer.knobs`,
:func:`registered_knobs`).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING, Any, NamedTuple

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.pending_reboot import (
    PENDING_FACT,
    pending_knobs,
    pending_source,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

if TYPE_CHECKING:  # gatherers and knobs are imported by name on first use; these ship them
    import ansible_collections.exemplar.tune.plugins.module_utils.gatherers.cpu  # noqa: F401
    import ansible_collections.exemplar.tune.plugins.module_utils.gatherers.fabric  # noqa: F401
    import ansible_collections.exemplar.tune.plugins.module_utils.gatherers.gpu  # noqa: F401
    import ansible_collections.exemplar.tune.plugins.module_utils.gatherers.runtime  # noqa: F401
    import ansible_collections.exemplar.tune.plugins.module_utils.gatherers.vm  # noqa: F401
    import ansible_collections.exemplar.tune.plugins.module_utils.gatherers.workload  # noqa: F401
    import ansible_collections.exemplar.tune.plugins.module_utils.knobs.cpu  # noqa: F401
    import ansible_collections.exemplar.tune.plugins.module_utils.knobs.fabric  # noqa: F401
    import ansible_collections.exemplar.tune.plugins.module_utils.knobs.gpu  # noqa: F401
    import ansible_collections.exemplar.tune.plugins.module_utils.knobs.runtime  # noqa: F401
    import ansible_collections.exemplar.tune.plugins.module_utils.knobs.vm  # noqa: F401
    from ansible_collections.exemplar.tune.plugins.module_utils.knobs import Knob


class Layer(NamedTuple):
    """One layer of the stack: its name, what it covers, how its facts are read, its knobs."""

    name: str
    title: str
    summary: str
    has_role: bool = True  # roles/<name> applies and restores the layer's knobs
    reads_host: bool = True  # False: recorded by the controller, not read from hosts
    options: tuple[str, ...] = ()  # keyword arguments of ``gather`` taken from the context

    def gather(self, root: Sysroot, **options: Any) -> dict[str, Any]:
        """The layer's facts: its gatherer's (``gatherers/<name>.py``), then the state of each
        family knob of the layer (``Knob.state``), with its source and any error, and, for a
        layer with knobs, ``pending_reboot``: the ids of its knobs whose change waits for the
        next boot (``knobs/pending_reboot.py``; ``None`` with an error when the record is
        corrupt)."""
        facts = _gatherer(self.name)(root, **options)
        knobs = self.knobs
        if not knobs:
            return facts
        sheet = FactSheet()
        for state in (knob.state for knob in knobs if knob.state is not None):
            if state.fact in facts:
                raise ValueError(f"knob {self.name}.{state.fact}: the layer already has a "
                                 f"fact {state.fact!r}")
            sheet.attempt(state.fact, state.source(root), state.read, root)
        if PENDING_FACT in facts or PENDING_FACT in sheet.facts:
            raise ValueError(f"layer {self.name}: the fact {PENDING_FACT!r} is reserved")
        ids = [knob.id for knob in knobs]
        sheet.attempt(PENDING_FACT, pending_source(root),
                      lambda: [knob_id for knob_id in pending_knobs(root) if knob_id in ids])
        found = {key: value for key, value in facts.items() if key not in ("sources", "errors")}
        return {**found, **sheet.facts, "sources": {**facts["sources"], **sheet.sources},
                "errors": facts["errors"] + sheet.errors}

    @property
    def knobs(self) -> tuple[Knob, ...]:
        """The layer's knobs, in the order they are planned and applied."""
        return _layer_knobs(self)


LAYERS: tuple[Layer, ...] = (
    Layer("gpu", "GPU health", "count, model, driver, persistence, ECC, remapped rows, XIDs, "
          "PCIe link, clock-event reasons"),
    Layer("vm", "Grace/VM readiness", "virtualisation, arch, IOMMU/SMMU, CMDQV evidence"),
    Layer("cpu", "CPU power and placement", "C-states, PM-QoS, tuned, frequency policy, NUMA, "
          "cpusets, isolation, IRQs, BIOS C-state policy (BMC)", options=("bmc",)),
    Layer("runtime", "Runtime topology", "NCCL_TOPO_FILE on the host and in container "
          "configuration (enroot, pyxis)"),
    Layer("fabric", "Fabric and collectives", "InfiniBand/RoCE ports and counters, NCCL settings",
          options=("counter_window",)),
    Layer("workload", "Workload", "benchmark results per workload shape", has_role=False,
          reads_host=False),
)

LAYER_NAMES: tuple[str, ...] = tuple(layer.name for layer in LAYERS)
ROLE_LAYERS: tuple[str, ...] = tuple(layer.name for layer in LAYERS if layer.has_role)
# Journal scopes that are not layers: what the slurm_prolog role installs.
JOURNAL_SCOPES: tuple[str, ...] = (*LAYER_NAMES, "slurm_prolog")


# Each layer's gatherer and knobs are imported on first use, one layer at a time, so that a
# module compiles only what it runs: the knob modules need only the names, the facts module
# only the gatherers, a one-layer apply only that layer. Ansible ships every module_utils file
# imported anywhere in a file (the TYPE_CHECKING block included), which is what puts them all
# in the payload.
_PACKAGE = "ansible_collections.exemplar.tune.plugins.module_utils"


def _gatherer(name: str) -> Callable[..., dict[str, Any]]:
    return import_module(f"{_PACKAGE}.gatherers.{name}").gather


def _layer_knobs(layer: Layer) -> tuple[Knob, ...]:
    return import_module(f"{_PACKAGE}.knobs.{layer.name}").KNOBS if layer.has_role else ()


def registered_knobs() -> dict[str, Knob]:
    """Every knob by ``layer.name``, in layer order."""
    return {knob.id: knob for layer in LAYERS for knob in layer.knobs}


class UnknownLayer(ValueError):
    """A layer name that is not in the registry."""


def get_layer(name: str) -> Layer:
    """The layer called ``name``; ``UnknownLayer`` (naming the valid ones) otherwise."""
    for layer in LAYERS:
        if layer.name == name:
            return layer
    raise UnknownLayer(f"unknown layer {name!r}; choose from {', '.join(LAYER_NAMES)}")


def get_knob(knob_id: str) -> Knob:
    """The knob ``layer.name``; ``KeyError`` (naming the valid ones) otherwise."""
    knobs = registered_knobs()
    if knob_id not in knobs:
        raise KeyError(f"unknown knob {knob_id!r}; registered: {', '.join(knobs)}")
    return knobs[knob_id]


def select_layers(names: list[str] | None) -> list[Layer]:
    """The named layers in registry order (all when ``names`` is empty or ``None``)."""
    if not names:
        return list(LAYERS)
    wanted = {get_layer(name).name for name in names}
    return [layer for layer in LAYERS if layer.name in wanted]


def gather_facts(root: Sysroot, names: list[str] | None = None,
                 context: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Facts of the selected layers, one top-level key per layer, in preflight order.

    ``context`` holds what some gatherers need besides the sysroot (``bmc``: the host's BMC);
    each layer receives only the keys named in its ``options``.
    """
    context = context or {}
    return {layer.name: layer.gather(root, **{k: context[k] for k in layer.options
                                              if context.get(k) is not None})
            for layer in select_layers(names)}
