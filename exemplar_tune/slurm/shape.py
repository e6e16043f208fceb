"""The ``slurm:`` form of a benchmark shape, and the srun / sbatch argv it gives.

With ``slurm:`` the shape's ``command`` is the program every rank runs; this module adds the
launcher::

    slurm: {mode: srun, partition: gpu, nodes: 2, ntasks_per_node: 8, time_limit: "30:00",
            nodelist: inventory, container_image: nvcr.io#nvidia/pytorch:24.05-py3,
            container_mounts: ["/etc/nccl/topo.xml:/etc/nccl/topo.xml:ro"],
            export: [PATH, NCCL_DEBUG], options: [--gpus-per-node=8]}

``srun`` mode runs ``srun [options] --label -- COMMAND``; ``sbatch`` mode writes a batch
script (``#!/bin/sh`` + ``exec srun --export=ALL --label ... -- COMMAND``, every word quoted
with :func:`shlex.join`) and runs ``sbatch --wait --parsable [options] SCRIPT``. Ranks are
placed block-wise (``--distribution=block``), ``ntasks_per_node`` per node, so rank ``r`` ran
on the ``r // ntasks_per_node``-th node of the job. ``export`` lists the variables carried into
the job (``--export=``; the shape's ``env`` keys are added; without it: ``ALL``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INVENTORY = "inventory"
LAUNCHERS = ("srun", "sbatch", "salloc")


@dataclass(frozen=True)
class SlurmShape:
    """How one benchmark shape runs on Slurm (see the module docstring)."""

    mode: str
    partition: str
    nodes: int | None = None
    ntasks_per_node: int = 1
    nodelist: str | tuple[str, ...] | None = None  # INVENTORY or node names
    time_limit: str | None = None
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    export: tuple[str, ...] | None = None
    options: tuple[str, ...] = ()
    output_dir: str | None = None

    @property
    def needs_inventory(self) -> bool:
        """True when the job's node list is the inventory's hosts."""
        return self.nodelist == INVENTORY


def slurm_shape(form: Mapping[str, Any], base: Path | None = None) -> SlurmShape:
    """A :class:`SlurmShape` from a validated ``slurm:`` mapping; a relative ``output_dir``
    is taken relative to ``base`` (the benchmark file's directory)."""
    nodelist = form.get("nodelist")
    limit = form.get("time_limit")
    output_dir = form.get("output_dir")
    if output_dir and base is not None:
        output_dir = str(base / output_dir)
    return SlurmShape(
        mode=form["mode"], partition=form["partition"], nodes=form.get("nodes"),
        ntasks_per_node=form.get("ntasks_per_node", 1),
        nodelist=tuple(nodelist) if isinstance(nodelist, list) else nodelist,
        time_limit=None if limit is None else str(limit),
        container_image=form.get("container_image"),
        container_mounts=tuple(form.get("container_mounts", ())),
        export=tuple(form["export"]) if "export" in form else None,
        options=tuple(form.get("options", ())), output_dir=output_dir)


def check_slurm_command(argv: Sequence[str]) -> None:
    """``ValueError`` when a Slurm shape's command is itself a launcher (srun in srun)."""
    name = argv[0].rsplit("/", 1)[-1] if argv else ""
    if name in LAUNCHERS:
        raise ValueError(f"command: with slurm:, give the program each rank runs, not {name} "
                         "(slurm.mode chooses srun or sbatch)")


def allocation_options(shape: SlurmShape, job_name: str, nodes: Sequence[str],
                       env_keys: Sequence[str]) -> list[str]:
    """Options that request the allocation (both modes): partition, nodes, time, export."""
    argv = [f"--job-name={job_name}", f"--partition={shape.partition}"]
    count = shape.nodes or (len(nodes) if nodes else None)
    if count:
        argv.append(f"--nodes={count}")
    if nodes:
        argv.append(f"--nodelist={','.join(nodes)}")
    if shape.time_limit:
        argv.append(f"--time={shape.time_limit}")
    argv.append(f"--export={export_value(shape, env_keys)}")
    return argv + list(shape.options)


def step_options(shape: SlurmShape) -> list[str]:
    """Options of the job step that runs the ranks: placement, labels, container."""
    argv = [f"--ntasks-per-node={shape.ntasks_per_node}", "--distribution=block", "--label"]
    if shape.container_image:
        argv.append(f"--container-image={shape.container_image}")
    if shape.container_mounts:
        argv.append(f"--container-mounts={','.join(shape.container_mounts)}")
    return argv


def export_value(shape: SlurmShape, env_keys: Sequence[str]) -> str:
    """``ALL``, or the listed variables plus the shape's ``env`` keys, without repeats."""
    if shape.export is None:
        return "ALL"
    names = list(dict.fromkeys([*shape.export, *env_keys]))
    return ",".join(names) if names else "NONE"


def srun_argv(srun: str, shape: SlurmShape, command: Sequence[str], job_name: str,
              nodes: Sequence[str], env_keys: Sequence[str]) -> list[str]:
    """The ``srun`` argv of srun mode."""
    return [srun, *allocation_options(shape, job_name, nodes, env_keys),
            *step_options(shape), "--", *command]


def batch_script(srun: str, shape: SlurmShape, command: Sequence[str]) -> str:
    """The batch script of sbatch mode: one ``srun`` step over the whole allocation."""
    step = [srun, "--export=ALL", *step_options(shape), "--", *command]
    return f"#!/bin/sh\n# written by exemplar-tune: one step, every rank\nexec {shlex.join(step)}\n"


def sbatch_argv(sbatch: str, shape: SlurmShape, script: str, job_name: str,
                nodes: Sequence[str], env_keys: Sequence[str], output: str,
                error: str) -> list[str]:
    """The ``sbatch --wait`` argv of sbatch mode, output and error files per job."""
    return [sbatch, "--wait", "--parsable", *allocation_options(shape, job_name, nodes, env_keys),
            f"--ntasks-per-node={shape.ntasks_per_node}", f"--output={output}",
            f"--error={error}", script]
