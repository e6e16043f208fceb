"""The performance model of a simulated host: step times that follow the host's state.

The state is read from the host's sysroot with the same fact readers as a real host, so a
role that fixes a layer changes the simulated performance exactly as far as it changes what
the facts show. Each effect of the scenario file (``scenarios/*.yaml``) applies while its
condition holds:

* ``cmdqv_missing`` -- an arm64 host with SMMUv3 translation whose CMDQV is not active;
* ``deep_cstates_blocked`` -- the deepest idle state is disabled on some CPU, or the active
  tuned profile resolves a ``force_latency`` below that state's exit latency;
* ``housekeeping_shared`` -- ``system.slice`` may run on every online CPU (not confined):
  occasional 50-100 ms stalls;
* ``topo_missing_in_container`` -- enroot is installed but carries no ``NCCL_TOPO_FILE``;
* a degraded link -- an InfiniBand port slower than the host's other rails (``rate``) paces
  the bandwidth-bound part of every collective across hosts (:func:`link_factor`; a host alone
  never sees it), and a GPU with NVLinks down (``nvidia-smi nvlink -s``) every collective
  that includes it, inside the host too;
* ``fabric_response`` -- the host's NCCL settings (``/etc/nccl.conf`` and the other sources the
  fabric facts resolve) against the scenario's response of the fabric, by message size
  (:mod:`exemplar_tune.sim.fabric`). A host that loads NCCL's example tuner plugin
  (``NCCL_TUNER_PLUGIN`` and ``NCCL_TUNER_CONFIG_FILE`` set, the file present) takes
  ``NCCL_ALGO``, ``NCCL_PROTO`` and, unless ``-1``, ``NCCL_MAX_NCHANNELS`` of each call from
  the table's first matching row, as the plugin's README describes it.

Training workloads (``dense``, ``moe``) give seconds per step: the communication share is
slowed by the topology effect and by the fabric response at the message sizes of the
workload's ``comm_sizes`` (collective -> {size: calls per step}); the settings' cost adds
microseconds per call and a fraction of the compute share; CMDQV and C-states slow the whole
step, and stalls are added step by step. Collectives (``nccl-allgather``,
``nccl-reducescatter``) give the time of one collective at each message size: a base curve
(``latency_us`` + size / bandwidth, through ``time_ms`` at the reference ``size``) times the
fabric response at that size times the topology effect, plus the settings' cost per call.

Noise is seeded by (scenario seed, host, workload, run): the same inputs give the same
numbers, different runs give independent noise.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.exemplar.tune.plugins.module_utils.knobs import nccl_tuner
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.readers.cpulist import parse_cpulist
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotSupported,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.nvlink import (
    read_nvlink_status,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

from exemplar_tune.bounded_yaml import load_yaml
from exemplar_tune.errors import UserError
from exemplar_tune.inputs import read_input
from exemplar_tune.sim.fabric import (
    effective_values,
    extra_cost,
    parse_size,
    time_factor,
    validate_response,
)

SCENARIOS = Path(__file__).with_name("scenarios")
DEFAULT_SCENARIO = SCENARIOS / "gb300-exemplar-gap.yaml"
SCENARIO_KEYS = ("name", "base", "hosts", "gpus_per_host", "seed", "faults", "fabric_response",
                 "noise_cv", "workloads", "effects", "profile")
COLLECTIVE_KEYS = ("collective", "size", "time_ms")
TRAINING_KEYS = ("step_time_s", "comm_share", "cmdqv_missing", "comm_sizes")
COMM_OPS = ("all_gather", "reduce_scatter", "all_reduce")
LATENCY_US = 30.0  # a collective's fixed time unless the workload gives latency_us


def shipped_scenarios() -> list[str]:
    """Names of the scenarios that ship with the package."""
    return sorted(p.stem for p in SCENARIOS.glob("*.yaml"))


def load_scenario(name_or_path: str | Path | None = None) -> dict[str, Any]:
    """A shipped scenario by name, or a scenario file (the GB300 gap by default).

    ``ValueError`` with one line naming the file and the key when it cannot be used.
    """
    path = Path(name_or_path) if name_or_path else DEFAULT_SCENARIO
    if not path.suffix and str(name_or_path) in shipped_scenarios():
        path = SCENARIOS / f"{name_or_path}.yaml"
    if not path.exists():
        raise ValueError(f"scenario {name_or_path}: no such file or shipped scenario (shipped: "
                         f"{', '.join(shipped_scenarios())})")
    try:
        scenario = load_yaml(read_input(path, "scenario"), f"scenario {name_or_path}")
    except UserError as exc:
        raise ValueError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise ValueError(f"scenario {name_or_path}: not readable YAML: "
                         f"{str(exc).splitlines()[0]}") from None
    missing = [k for k in SCENARIO_KEYS if not isinstance(scenario, dict) or k not in scenario]
    if missing:
        raise ValueError(f"scenario {name_or_path}: missing {', '.join(missing)} (see the "
                         f"shipped {DEFAULT_SCENARIO.name})")
    try:
        validate_response(scenario["fabric_response"])
        _validate_workloads(scenario["workloads"])
    except ValueError as exc:
        raise ValueError(f"scenario {name_or_path}: {exc}") from None
    return scenario


def _validate_workloads(workloads: Any) -> None:
    if not isinstance(workloads, dict) or not workloads:
        raise ValueError("workloads: a mapping of workload name -> shape")
    for name, shape in workloads.items():
        at = f"workloads.{name}"
        if not isinstance(shape, dict):
            raise ValueError(f"{at}: a mapping")
        keys = COLLECTIVE_KEYS if is_collective(shape) else TRAINING_KEYS
        missing = [k for k in keys if k not in shape]
        if missing:
            raise ValueError(f"{at}: missing {', '.join(missing)}")
        try:
            if is_collective(shape):
                parse_size(shape["size"])
            else:
                _validate_comm_sizes(shape["comm_sizes"])
        except ValueError as exc:
            raise ValueError(f"{at}.{'size' if is_collective(shape) else 'comm_sizes'}: "
                             f"{exc}") from None


def _validate_comm_sizes(comm: Any) -> None:
    if not isinstance(comm, dict) or not comm:
        raise ValueError("a mapping of collective -> {message size: calls per step}")
    for op, sizes in comm.items():
        if op not in COMM_OPS:
            raise ValueError(f"{op}: not a collective ({', '.join(COMM_OPS)})")
        if not isinstance(sizes, dict) or not sizes:
            raise ValueError(f"{op}: a mapping of message size -> calls per step")
        for size, calls in sizes.items():
            try:
                parse_size(size)
            except ValueError as exc:
                raise ValueError(f"{op}.{size}: {exc}") from None
            if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
                raise ValueError(f"{op}.{size}: calls per step {calls!r} is not a positive "
                                 "integer")


def comm_calls(shape: dict[str, Any]) -> list[tuple[str, int, int]]:
    """``(collective, size in bytes, calls per step)`` of a training workload, in file order."""
    return [(op, parse_size(size), calls) for op, sizes in shape["comm_sizes"].items()
            for size, calls in sizes.items()]


def host_state(sysroot: str) -> dict[str, Any]:
    """The conditions the model reacts to, read from the host's facts.

    ``nccl`` maps every NCCL setting the host resolves (environment, then the configuration
    files) to its value; ``tuner`` holds the rows of the tuner table the host loads (empty when
    it loads none).
    """
    root = Sysroot(sysroot)
    facts = gather_facts(root, ["vm", "cpu", "runtime", "fabric"])
    vm, cpu, runtime = facts["vm"], facts["cpu"], facts["runtime"]
    settings = facts["fabric"].get("nccl_settings") or {}
    nccl = {key: (entry or {}).get("value") for key, entry in settings.items()}
    return {
        "rail_rate_ratio": _rail_rate_ratio(facts["fabric"].get("ib_devices") or []),
        "nvlink_ratio": _nvlink_ratio(root),
        "cmdqv_missing": bool(vm.get("arch") == "aarch64" and vm.get("smmu_v3")
                              and (vm.get("cmdqv") or {}).get("state") != "active"),
        "deep_cstates_blocked": _cstates_blocked(cpu),
        "housekeeping_shared": _housekeeping_shared(cpu),
        "topo_missing_in_container": bool((runtime.get("enroot") or {}).get("installed")
                                          and not runtime["enroot"].get("carries_topo_env")),
        "nccl": nccl,
        "tuner": _tuner_rows(root, nccl),
    }


def _rail_rate_ratio(devices: list[dict[str, Any]]) -> float:
    """The slowest compute rail's rate over the fastest's (the InfiniBand ports, or on a RoCE
    host every RDMA port): NCCL stripes a collective across the rails, so the slowest one
    paces the bandwidth-bound part of every inter-host call."""
    ports = [p for d in devices for p in d["ports"] if p.get("rate_gbps")]
    rails = [p for p in ports if p.get("link_layer") == "InfiniBand"] or ports
    rates = [p["rate_gbps"] for p in rails]
    return min(rates) / max(rates) if rates else 1.0


def _nvlink_ratio(root: Sysroot) -> float:
    """The least share of NVLinks active on one GPU (``nvidia-smi nvlink -s``): a GPU with links
    down paces every collective that includes it; 1.0 when the capture is absent."""
    try:
        gpus = read_nvlink_status(root)
    except HostStateError:
        return 1.0
    shares = [g["active"] / g["links"] for g in gpus if g["links"]]
    return min(shares) if shares else 1.0


def link_factor(state: dict[str, Any], nodes: int) -> float:
    """How much longer the bandwidth-bound part of a collective takes on this host: its
    slowest rail across hosts (``nodes`` > 1) and its GPU with the fewest NVLinks (always)."""
    factor = 1.0 / state.get("nvlink_ratio", 1.0)
    return factor / state.get("rail_rate_ratio", 1.0) if nodes > 1 else factor


def _tuner_rows(root: Sysroot, nccl: dict[str, Any]) -> list[dict[str, Any]]:
    path = nccl.get("NCCL_TUNER_CONFIG_FILE")
    if not nccl.get("NCCL_TUNER_PLUGIN") or not path or not str(path).startswith("/"):
        return []
    try:
        return nccl_tuner.parse(root.read_bytes(str(path)).decode("utf-8", errors="replace"))
    except NotSupported:
        return []


def _cstates_blocked(cpu: dict[str, Any]) -> bool:
    idle = cpu.get("cpuidle") or {}
    if idle.get("deepest_state_disabled_anywhere"):
        return True
    deepest = next((s for s in idle.get("states") or [] if s["name"] == idle.get("deepest_state")),
                   None)
    forced = (cpu.get("tuned") or {}).get("force_latency_us")
    return bool(deepest and forced is not None and forced < deepest["latency_us"])


def _housekeeping_shared(cpu: dict[str, Any]) -> bool:
    unit = (cpu.get("housekeeping") or {}).get("system.slice") or {}
    allowed = unit.get("cpus") or unit.get("effective")
    online = ((cpu.get("cgroup") or {}).get("root") or {}).get("effective")
    if not allowed or not online:
        return False
    return set(parse_cpulist(allowed)) >= set(parse_cpulist(online))


def is_collective(workload: dict[str, Any]) -> bool:
    """Whether a scenario workload is an nccl-tests collective (else a training job)."""
    return "collective" in workload


def settings_of(state: dict[str, Any], scenario: dict[str, Any]) -> dict[str, str]:
    """The values of the response's settings that count on a host in ``state``."""
    return effective_values(scenario["fabric_response"], state.get("nccl") or {})


def settings_at(state: dict[str, Any], scenario: dict[str, Any], collective: str, size: int,
                nodes: int) -> dict[str, str]:
    """The values that count for one ``collective`` call of ``size`` bytes in a job of
    ``nodes`` hosts: the host's settings, with the tuner table's matching row on top."""
    nccl = dict(state.get("nccl") or {})
    ranks = nodes * scenario["gpus_per_host"]
    row = nccl_tuner.match(state.get("tuner") or [], collective, size, nodes, ranks)
    if row:
        nccl.update(NCCL_ALGO=row["algorithm"], NCCL_PROTO=row["protocol"])
        if row["channels"] != -1:
            nccl["NCCL_MAX_NCHANNELS"] = str(row["channels"])
    for key in ("NCCL_ALGO", "NCCL_PROTO"):  # NCCL reads both without regard to case
        if nccl.get(key) is not None:
            nccl[key] = str(nccl[key]).lower()
    return effective_values(scenario["fabric_response"], nccl)


def mean_step_time(state: dict[str, Any], scenario: dict[str, Any], workload: str,
                   nodes: int = 1) -> float:
    """Seconds per iteration of a training workload on a host in ``state`` in a job of
    ``nodes`` hosts, without noise."""
    shape = scenario["workloads"][workload]
    effects = scenario["effects"]
    response = scenario["fabric_response"]
    values = settings_of(state, scenario)
    extra = comm_factor(state, scenario, workload, nodes) * link_factor(state, nodes) - 1.0
    if state["topo_missing_in_container"]:
        extra += effects["topo_missing_in_container"]
    per_call_us, compute = extra_cost(response, values)
    factor = (1.0 + extra * shape["comm_share"]) * (1.0 + compute * (1 - shape["comm_share"]))
    if state["cmdqv_missing"]:
        factor *= 1.0 + shape["cmdqv_missing"]
    if state["deep_cstates_blocked"]:
        factor *= 1.0 + effects["deep_cstates_blocked"]
    calls = sum(n for _, _, n in comm_calls(shape))
    return shape["step_time_s"] * factor + calls * per_call_us / 1e6


def comm_factor(state: dict[str, Any], scenario: dict[str, Any], workload: str,
                nodes: int) -> float:
    """The fabric response over a training step's collective calls, weighted by their time."""
    response = scenario["fabric_response"]
    weights = [(calls * base_time_us(scenario, op, size), op, size)
               for op, size, calls in comm_calls(scenario["workloads"][workload])]
    total = sum(w for w, _, _ in weights)
    return sum(w * time_factor(response, settings_at(state, scenario, op, size, nodes), size)
               for w, op, size in weights) / total


def base_time_us(scenario: dict[str, Any], collective: str, size: int) -> float:
    """Microseconds of one ``collective`` of ``size`` bytes on the base curve (factor 1.0).

    The curve of the scenario's nccl-tests workload of that collective (else its first
    collective workload): latency plus size over the bandwidth that gives ``time_ms`` at its
    reference size.
    """
    shapes = [s for s in scenario["workloads"].values() if is_collective(s)]
    shape = next((s for s in shapes if s["collective"] == collective), shapes[0] if shapes
                 else {"size": "16G", "time_ms": 262})
    latency = shape.get("latency_us", LATENCY_US)
    return latency + (shape["time_ms"] * 1000.0 - latency) * size / parse_size(shape["size"])


def step_times(state: dict[str, Any], scenario: dict[str, Any], workload: str, host: str,
               run: int, steps: int, nodes: int = 1) -> list[float]:
    """Seconds per iteration of one training run on a host in ``state`` in a job of
    ``nodes`` hosts."""
    rng = random.Random(seed_of(scenario["seed"], host, workload, run))  # noqa: S311 - noise
    mean = mean_step_time(state, scenario, workload, nodes) * (
        1.0 + rng.gauss(0.0, scenario["noise_cv"]))
    stall = scenario["effects"]["housekeeping_shared"]
    times = []
    for _ in range(steps):
        value = mean * (1.0 + rng.gauss(0.0, scenario["noise_cv"] / 2))
        if state["housekeeping_shared"] and rng.random() < stall["stall_rate"]:
            value += rng.uniform(*stall["stall_ms"]) / 1000.0
        times.append(value)
    return times


def collective_times(state: dict[str, Any], scenario: dict[str, Any], workload: str, host: str,
                     run: int, sizes: list[int], nodes: int = 1) -> list[float]:
    """Microseconds of one collective at each of ``sizes`` on a host in ``state`` in a job of
    ``nodes`` hosts.

    Base curve x fabric response at that size x topology effect, plus the settings' cost per
    call; noise of the run (``noise_cv``) and of each size (half of it).
    """
    shape = scenario["workloads"][workload]
    response = scenario["fabric_response"]
    values = settings_of(state, scenario)
    topology = 1.0
    if state["topo_missing_in_container"]:
        topology += scenario["effects"]["topo_missing_in_container"]
    per_call_us, _ = extra_cost(response, values)
    rng = random.Random(seed_of(scenario["seed"], host, workload, run))  # noqa: S311 - noise
    run_noise = 1.0 + rng.gauss(0.0, scenario["noise_cv"])
    times = []
    latency, links = shape.get("latency_us", LATENCY_US), link_factor(state, nodes)
    for size in sizes:
        base = base_time_us(scenario, shape["collective"], size)
        base = latency + (base - latency) * links  # a slow rail or NVLink: the bandwidth part
        at = settings_at(state, scenario, shape["collective"], size, nodes)
        value = base * time_factor(response, at, size) * topology + per_call_us
        times.append(value * run_noise * (1.0 + rng.gauss(0.0, scenario["noise_cv"] / 2)))
    return times


def reference(scenario: dict[str, Any], workload: str) -> float:
    """The workload's figure at factor 1.0 with nothing to fix (ms per step, or ms per
    collective at its reference size)."""
    shape = scenario["workloads"][workload]
    return shape["time_ms"] if is_collective(shape) else shape["step_time_s"] * 1000.0


def seed_of(*parts: Any) -> int:
    """A reproducible seed from ``parts`` (the noise of one host, workload and run)."""
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:16], 16)
