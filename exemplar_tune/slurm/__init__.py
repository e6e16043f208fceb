"""Slurm integration: benchmarks as Slurm jobs, the prolog gate and health check, fleet-wide
drain, resume and undrain.

* :mod:`.shape` -- the ``slurm:`` form of a benchmark shape and the srun/sbatch argv it gives;
* :mod:`.jobs` -- submit a shape, wait for it, collect each rank's output, judge the job;
* :mod:`.ranks` -- split ``srun --label`` output by rank and place ranks on nodes;
* :mod:`.records` -- parse what ``squeue`` and ``scontrol`` print about jobs and nodes;
* :mod:`.commands` -- run the Slurm clients (argv lists only, with a deadline);
* :mod:`.inventory` -- inventory hosts and the Slurm nodes they are (``exemplar_slurm_node``);
* :mod:`.gate` -- the gate rule (health / unknown / pass), the reasons and the ``scontrol``
  argv that drain, reserve, resume and delete reservations;
* :mod:`.nodecheck` -- read one node in-process (``--sysroot`` with ``%n``, or live, under a
  deadline) and check it;
* :mod:`.prolog` -- ``exemplar-tune preflight --slurm-prolog``: this node's checks, drain (or
  reserve) with ``Reason=exemplar:health:<check id>`` / ``exemplar:unknown:<why>``;
* :mod:`.healthcheck` -- ``exemplar-tune preflight --slurm-health-check``: the same as
  slurm.conf's HealthCheckProgram, which also puts a node back once it passes;
* :mod:`.nodes` -- ``exemplar-tune slurm drain --failing RESULT.json`` / ``slurm resume``;
* :mod:`.undrain` -- ``exemplar-tune slurm undrain``: check our drained nodes again, resume
  those that pass.

The command-line glue is :mod:`exemplar_tune.commands.slurm`.
"""
