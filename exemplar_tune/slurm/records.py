"""What ``squeue`` and ``scontrol`` print about jobs and nodes, parsed; and what a job's final
state means for a measurement.

Job states and reasons: Slurm ``squeue(1)`` "JOB STATE CODES" and "JOB REASON CODES"; node
states: ``scontrol(1)`` / ``sinfo(1)`` "NODE STATE CODES" (``IDLE+DRAIN`` is drained,
``MIXED+DRAIN`` / ``ALLOCATED+DRAIN`` is draining).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# squeue -O: raw fields separated by "|" (the suffix after ":"), NodeList last
JOB_FIELDS = "JobID:|,State:|,Reason:|,exit_code:|,TimeLimit:|,NodeList:|"
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                 "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                 "STAGE_OUT", "RESV_DEL_HOLD"}
HELD_REASONS = ("launch_failed_requeued_held", "JobHeldAdmin", "JobHeldUser")
_WHY = {
    "TIMEOUT": "reached its time limit ({limit})",
    "CANCELLED": "was cancelled",
    "PREEMPTED": "was preempted",
    "NODE_FAIL": "lost a node (NODE_FAIL)",
    "BOOT_FAIL": "could not boot its nodes",
    "DEADLINE": "missed its deadline",
    "OUT_OF_MEMORY": "ran out of memory",
    "FAILED": "failed",
}
_USER_TIME = re.compile(r"\s*\[[^\]@]*@[^\]]*\]\s*$")


@dataclass(frozen=True)
class JobRecord:
    """One job as ``squeue --states=all`` shows it."""

    job_id: str
    state: str
    reason: str
    exit_status: int | None  # exit code, or -signal
    time_limit: str
    nodelist: str

    @property
    def active(self) -> bool:
        """Still pending, running or completing (its final state is not known yet)."""
        return self.state.split()[0] in ACTIVE_STATES

    @property
    def held(self) -> bool:
        """Pending and held: it will not start unless someone releases it."""
        code = self.reason.replace(" ", "_")  # squeue -O spells the codes with spaces
        return self.state == "PENDING" and code.startswith(HELD_REASONS)


@dataclass(frozen=True)
class NodeRecord:
    """One node as ``scontrol show node --oneliner`` shows it."""

    name: str
    state: str  # e.g. IDLE, IDLE+DRAIN, MIXED+DRAIN, DOWN+DRAIN+NOT_RESPONDING
    reason: str  # without the trailing "[user@time]"

    @property
    def draining(self) -> bool:
        """Drained, or draining (jobs still running)."""
        return "DRAIN" in self.state.split("+")


def parse_jobs(text: str) -> list[JobRecord]:
    """Records of ``squeue --noheader -O`` :data:`JOB_FIELDS` output; malformed lines skipped."""
    jobs = []
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 6 or not fields[0].strip():
            continue
        job_id, state, reason, raw, limit, nodelist = (f.strip() for f in fields[:6])
        jobs.append(JobRecord(job_id, state, reason, _exit_status(raw), limit, nodelist))
    return jobs


def _exit_status(raw: str) -> int | None:
    """squeue's ``exit_code`` is the raw wait status: code << 8, or the signal number."""
    if not raw.isdigit():
        return None
    status = int(raw)
    return -(status & 0x7F) if status & 0x7F else status >> 8


def parse_nodes(text: str) -> dict[str, NodeRecord]:
    """``{name: NodeRecord}`` of ``scontrol show node --oneliner`` output (one node a line).

    ``Reason=`` is the last field and may hold spaces; ``State=`` and ``NodeName=`` do not.
    """
    nodes = {}
    for line in text.splitlines():
        name = re.match(r"NodeName=(\S+)", line)
        state = re.search(r"\sState=(\S+)", line)
        if not (name and state):
            continue
        reason = line.split(" Reason=", 1)[1] if " Reason=" in line else ""
        reason = _USER_TIME.sub("", reason).strip()
        nodes[name.group(1)] = NodeRecord(name.group(1), state.group(1),
                                          "" if reason == "(null)" else reason)
    return nodes


def failure(job: JobRecord) -> str | None:
    """Why ``job`` (in its final state) gave no measurement, as one line; None if COMPLETED.

    ``slurm job 12 reached its time limit (1:00)``, ``slurm job 12 was preempted``,
    ``slurm job 12 failed: exit code 3`` ...
    """
    state = job.state.split()[0]
    if state == "COMPLETED":
        return None
    why = _WHY.get(state, f"ended {state}").format(limit=job.time_limit)
    if state in ("FAILED", "OUT_OF_MEMORY") and job.exit_status:
        code = job.exit_status
        why += f": {'exit code ' + str(code) if code > 0 else 'signal ' + str(-code)}"
    elif state not in _WHY and job.reason not in ("", "None"):
        why += f" ({job.reason})"
    return f"slurm job {job.job_id} {why}"
