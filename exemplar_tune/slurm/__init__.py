"""Slurm integration: benchmarks as Slurm jobs, the prolog gate, fleet-wide drain and resume.

* :mod:`.shape` -- the ``slurm:`` form of a benchmark shape and the srun/sbatch argv it gives;
* :mod:`.jobs` -- submit a shape, wait for it, collect each rank's output, judge the job;
* :mod:`.ranks` -- split ``srun --label`` output by rank and place ranks on nodes;
* :mod:`.records` -- parse what ``squeue`` and ``scontrol`` print about jobs and nodes;
* :mod:`.commands` -- run the Slurm clients (argv lists only, with a deadline);
* :mod:`.inventory` -- inventory hosts and the Slurm nodes they are (``exemplar_slurm_node``);
* :mod:`.prolog` -- ``exemplar-tune preflight --slurm-prolog``: this node's checks, drain on
  failure with ``Reason=exemplar:<check id>``;
* :mod:`.nodes` -- ``exemplar-tune slurm drain --failing RESULT.json`` / ``slurm resume``;
* :mod:`.cli` -- the command-line glue.
"""
