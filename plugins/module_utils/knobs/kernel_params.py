"""Kernel parameters of the memory and network stacks, one declaration each: the settings
NVIDIA's published TuneD host profiles make (``nvidia-tuned`` in NVIDIA/skyhook-packages,
``profiles/common/nvidia-base``, ``os/common/nvidia-gb200-performance``,
``...-inference`` and ``...-multiNodeTraining``), so that a profile can audit and set them.

Each row is ``(layer, name, parameter, schema, floor, what it guards against)``: a floor
(``True``) is checked *at least* and raised to, never lowered (a host that already has more
keeps it); the others must equal the profile's value. The schema's description says what the
value means and where the vendor value comes from.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.knobs import CheckSpec, Knob
from ansible_collections.exemplar.tune.plugins.module_utils.knobs.families import sysctl

INT_MAX = 2147483647
NAME = "^[a-z0-9_]{1,32}$"  # a congestion-control or qdisc name

Row = tuple[str, str, str, dict[str, Any], bool, str]
ROWS: tuple[Row, ...] = (
    ("cpu", "vm_min_free_kbytes", "vm.min_free_kbytes",
     {"type": "integer", "minimum": 128, "maximum": INT_MAX,
      "description": "least free memory the kernel keeps, KiB (nvidia-gb200-performance: "
                     "65536)"}, True,
     "too small a reserve sends allocations under I/O bursts (checkpoint writes, RDMA "
     "registrations) into direct reclaim: stalls inside the step"),
    ("cpu", "vm_overcommit_memory", "vm.overcommit_memory",
     {"type": "integer", "minimum": 0, "maximum": 2,
      "description": "overcommit policy: 0 heuristic, 1 always, 2 never "
                     "(nvidia-gb200-performance: 1)"}, False,
     "under the heuristic policy a large fork or a runtime's big virtual reservation can be "
     "refused (ENOMEM) although the memory is never touched"),
    ("cpu", "vm_swappiness", "vm.swappiness",
     {"type": "integer", "minimum": 0, "maximum": 200,
      "description": "how readily anonymous memory is swapped (nvidia-*-inference: 1)"}, False,
     "a higher swappiness lets the kernel swap out cold pages of a serving process: page-in "
     "latency on the next request"),
    ("cpu", "threads_max", "kernel.threads-max",
     {"type": "integer", "minimum": 20, "maximum": 1073741823,
      "description": "least system-wide thread limit (nvidia-gb200-performance: 16512444)"},
     True,
     "at the limit thread creation fails (EAGAIN) for data loaders, NCCL proxies and the "
     "container runtime"),
    ("cpu", "inotify_max_user_instances", "fs.inotify.max_user_instances",
     {"type": "integer", "minimum": 1, "maximum": INT_MAX,
      "description": "least inotify instances per user (nvidia-gb200-performance: 65535)"},
     True,
     "container runtimes, the kubelet and tooling each hold inotify instances: past the "
     "limit new watchers fail with 'too many open files'"),
    ("cpu", "inotify_max_user_watches", "fs.inotify.max_user_watches",
     {"type": "integer", "minimum": 1, "maximum": INT_MAX,
      "description": "least inotify watches per user (nvidia-gb200-performance: 524288)"},
     True,
     "past the limit file watchers (log shippers, the kubelet, IDE servers) stop seeing "
     "changes or fail to start"),
    ("cpu", "sched_latency_ns", "kernel.sched_latency_ns",
     {"type": "integer", "minimum": 100000, "maximum": 1000000000,
      "description": "CFS target latency, ns (nvidia-*-inference: 1000000); kernels from "
                     "5.13 keep it in debugfs and 6.6 removed it: not applicable there"},
     False,
     "a long CFS period lets a busy co-runner delay the serving threads by milliseconds"),
    ("cpu", "sched_min_granularity_ns", "kernel.sched_min_granularity_ns",
     {"type": "integer", "minimum": 100000, "maximum": 1000000000,
      "description": "CFS minimum slice, ns (nvidia-*-inference: 100000); not applicable on "
                     "kernels without it (5.13 and later)"}, False,
     "a long minimum slice lets a co-runner hold the CPU longer before a woken serving "
     "thread runs"),
    ("fabric", "arp_announce_all", "net.ipv4.conf.all.arp_announce",
     {"type": "integer", "minimum": 0, "maximum": 2,
      "description": "ARP source address choice on every interface (nvidia-base: 2, the "
                     "best local address for the target)"}, False,
     "with several NICs in one subnet (rail-optimised RoCE) an ARP request may carry another "
     "rail's address: peers send that rail's traffic over the wrong port"),
    ("fabric", "arp_announce_default", "net.ipv4.conf.default.arp_announce",
     {"type": "integer", "minimum": 0, "maximum": 2,
      "description": "arp_announce of interfaces created later (nvidia-base: 2)"}, False,
     "an interface that appears after boot (a VF, a reloaded driver) answers for the wrong "
     "rail"),
    ("fabric", "arp_ignore_all", "net.ipv4.conf.all.arp_ignore",
     {"type": "integer", "minimum": 0, "maximum": 8,
      "description": "which ARP requests an interface answers (nvidia-base: 1, only for its "
                     "own addresses)"}, False,
     "every port answers ARP for every address of the host: peers learn one MAC for several "
     "rails and traffic crosses rails"),
    ("fabric", "arp_ignore_default", "net.ipv4.conf.default.arp_ignore",
     {"type": "integer", "minimum": 0, "maximum": 8,
      "description": "arp_ignore of interfaces created later (nvidia-base: 1)"}, False,
     "an interface that appears after boot answers ARP for other rails' addresses"),
    ("fabric", "rmem_max", "net.core.rmem_max",
     {"type": "integer", "minimum": 4096, "maximum": INT_MAX,
      "description": "least socket receive buffer a program may set, bytes "
                     "(nvidia-*-multiNodeTraining: 536870912)"}, True,
     "TCP transports (NCCL's socket transport, object storage, checkpoint streams) cannot "
     "open the window a fast long link needs"),
    ("fabric", "wmem_max", "net.core.wmem_max",
     {"type": "integer", "minimum": 4096, "maximum": INT_MAX,
      "description": "least socket send buffer a program may set, bytes "
                     "(nvidia-*-multiNodeTraining: 536870912)"}, True,
     "senders over TCP stall on a full buffer before the link is busy"),
    ("fabric", "rmem_default", "net.core.rmem_default",
     {"type": "integer", "minimum": 4096, "maximum": INT_MAX,
      "description": "least default socket receive buffer, bytes "
                     "(nvidia-*-multiNodeTraining: 134217728)"}, True,
     "programs that do not size their sockets get a window too small for the link"),
    ("fabric", "wmem_default", "net.core.wmem_default",
     {"type": "integer", "minimum": 4096, "maximum": INT_MAX,
      "description": "least default socket send buffer, bytes "
                     "(nvidia-*-multiNodeTraining: 134217728)"}, True,
     "programs that do not size their sockets stall on a full send buffer"),
    ("fabric", "netdev_max_backlog", "net.core.netdev_max_backlog",
     {"type": "integer", "minimum": 1, "maximum": INT_MAX,
      "description": "least packets queued per CPU before the stack drops "
                     "(nvidia-*-multiNodeTraining: 10000)"}, True,
     "bursts at 100-400 Gb/s overflow the input queue: drops and retransmits"),
    ("fabric", "tcp_max_syn_backlog", "net.ipv4.tcp_max_syn_backlog",
     {"type": "integer", "minimum": 1, "maximum": INT_MAX,
      "description": "least half-open connections queued (nvidia-*-multiNodeTraining: 8192)"},
     True,
     "thousands of ranks connecting at start-up (rendezvous, NCCL bootstrap) overflow the "
     "queue: connections retried after a second"),
    ("fabric", "tcp_congestion_control", "net.ipv4.tcp_congestion_control",
     {"type": "string", "pattern": NAME,
      "description": "TCP congestion control (nvidia-*-multiNodeTraining: bbr; the module "
                     "must be available)"}, False,
     "loss-based congestion control backs off on the first drop and underuses long fast "
     "paths"),
    ("fabric", "default_qdisc", "net.core.default_qdisc",
     {"type": "string", "pattern": NAME,
      "description": "default queueing discipline (nvidia-*-multiNodeTraining: fq, the pacing "
                     "BBR expects)"}, False,
     "without fair queueing BBR's pacing falls back to the stack's own, and flows share a "
     "port unevenly"),
)


def _knob(row: Row) -> Knob:
    layer, name, parameter, schema, floor, risk = row
    title = (f"{parameter} is at least the profile's value" if floor
             else f"{parameter} matches the profile")
    return sysctl(layer, name, parameter, f"{parameter} now and in sysctl.d", schema,
                  check=CheckSpec("low", title, risk), minimum=floor)


def layer_params(layer: str) -> tuple[Knob, ...]:
    """The knobs of ``layer``'s kernel parameters, in declaration order."""
    return tuple(_knob(row) for row in ROWS if row[0] == layer)
