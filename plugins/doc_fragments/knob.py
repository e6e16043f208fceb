"""Options shared by every exemplar.tune knob module."""

from __future__ import annotations


class ModuleDocFragment:
    """Run id, layer/knob labels, sysroot, reboot flag; the journal contract."""

    DOCUMENTATION = r"""
options:
  run_id:
    description:
      - Names the host-local journal (C(/var/lib/exemplar-tune/journal/<run_id>.json)) where
        the previous state is recorded before anything is changed. Required unless in check
        mode. Letters, digits, C(.), C(_), C(-).
    type: str
  layer:
    description:
      - Layer the change belongs to, from the layer registry (C(layers.JOURNAL_SCOPES) - the
        layers, and C(slurm_prolog) for the Slurm prolog gate).
    type: str
    required: true
    choices: [gpu, vm, cpu, runtime, fabric, workload, slurm_prolog]
  knob:
    description: Name of the knob, recorded in the journal and reported by audits.
    type: str
    required: true
  sysroot:
    description:
      - Directory that mirrors C(/) of the host to change instead of the live system; the
        journal is written inside it too. No host command is run with a sysroot.
    type: path
    default: /
  reboot_required:
    description: The change only takes effect after a reboot; reported back when something changed.
    type: bool
    default: false
notes:
  - Supports check mode (writes nothing, journal included) and diff mode.
  - Every change is read back after writing; on a failure everything this task had changed is
    put back from the journal before the task fails.
  - M(exemplar.tune.restore) puts a run back, newest change first, byte for byte.
"""
