"""The layer registry: the single list of layers, in preflight order, and their knobs.

Everything that walks layers (the facts module, the CLI, the preflight and the tuning loop)
reads :data:`LAYERS`; nothing else names them. Adding a layer is one entry here plus its
gatherer, its knobs (``knobs/<layer>.py``), its role and checks. Each knob is declared once in
``knobs/<layer>.py`` and listed here by its layer (:attr:`Layer.knobs`, :data:`KNOBS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils import (
    layer_cpu,
    layer_fabric,
    layer_gpu,
    layer_runtime,
    layer_vm,
    layer_workload,
)
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import Knob
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import cpu as cpu_knobs
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import fabric as fabric_knobs
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import gpu as gpu_knobs
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import runtime as runtime_knobs
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import vm as vm_knobs
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot


@dataclass(frozen=True)
class Layer:
    """One layer of the stack: its name, what it covers and how its host facts are read."""

    name: str
    title: str
    summary: str
    gather: Callable[..., dict[str, Any]]
    knobs: tuple[Knob, ...] = ()  # in the order they are planned and applied
    options: tuple[str, ...] = ()  # keyword arguments of ``gather`` taken from the context

    @property
    def has_role(self) -> bool:
        """True when ``roles/<name>`` applies and restores the layer's knobs."""
        return bool(self.knobs)


LAYERS: tuple[Layer, ...] = (
    Layer("gpu", "GPU health", "count, model, driver, persistence, ECC, remapped rows, XIDs, "
          "PCIe link, clock-event reasons", layer_gpu.gather, gpu_knobs.KNOBS),
    Layer("vm", "Grace/VM readiness", "virtualisation, arch, IOMMU/SMMU, CMDQV evidence",
          layer_vm.gather, vm_knobs.KNOBS),
    Layer("cpu", "CPU power and placement", "C-states, PM-QoS, tuned, frequency policy, NUMA, "
          "cpusets, isolation, IRQs, BIOS C-state policy (BMC)", layer_cpu.gather,
          cpu_knobs.KNOBS, options=("bmc",)),
    Layer("runtime", "Runtime topology", "NCCL_TOPO_FILE on the host and in container "
          "configuration (enroot, pyxis)", layer_runtime.gather, runtime_knobs.KNOBS),
    Layer("fabric", "Fabric and collectives", "InfiniBand/RoCE ports, NCCL settings",
          layer_fabric.gather, fabric_knobs.KNOBS),
    Layer("workload", "Workload", "benchmark results per workload shape", layer_workload.gather),
)

LAYER_NAMES: tuple[str, ...] = tuple(layer.name for layer in LAYERS)
ROLE_LAYERS: tuple[str, ...] = tuple(layer.name for layer in LAYERS if layer.has_role)
KNOBS: dict[str, Knob] = {knob.id: knob for layer in LAYERS for knob in layer.knobs}
# Journal scopes that are not layers: what the slurm_prolog role installs.
JOURNAL_SCOPES: tuple[str, ...] = (*LAYER_NAMES, "slurm_prolog")


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
    if knob_id not in KNOBS:
        raise KeyError(f"unknown knob {knob_id!r}; registered: {', '.join(KNOBS)}")
    return KNOBS[knob_id]


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
