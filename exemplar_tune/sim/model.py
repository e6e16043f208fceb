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
* QPS -- ``NCCL_IB_QPS_PER_CONNECTION`` against the fabric's best value (4 on ``cx8``).

Training workloads (``dense``, ``moe``) give seconds per step: the communication share is
slowed by the topology and QPS effects, the whole step by CMDQV and C-states, and stalls are
added step by step. Collectives (``nccl-allgather``, ``nccl-reducescatter``) give the time of
one collective at the reference size.

Noise is seeded by (scenario seed, host, workload, run index): the same inputs give the same
numbers, different runs give independent noise.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.exemplar.tune.plugins.module_utils.cpulist import parse_cpulist
from ansible_collections.exemplar.tune.plugins.module_utils.layers import gather_facts
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import Sysroot

SCENARIOS = Path(__file__).with_name("scenarios")
DEFAULT_SCENARIO = SCENARIOS / "gb300-exemplar-gap.yaml"
SCENARIO_KEYS = ("name", "base", "hosts", "gpus_per_host", "seed", "faults", "fabric",
                 "noise_cv", "workloads", "effects", "profile")


def shipped_scenarios() -> list[str]:
    """Names of the scenarios that ship with the package."""
    return sorted(p.stem for p in SCENARIOS.glob("*.yaml"))


def load_scenario(name_or_path: str | Path | None = None) -> dict[str, Any]:
    """A shipped scenario by name, or a scenario file (the GB300 gap by default)."""
    path = Path(name_or_path) if name_or_path else DEFAULT_SCENARIO
    if not path.suffix and str(name_or_path) in shipped_scenarios():
        path = SCENARIOS / f"{name_or_path}.yaml"
    try:
        scenario = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"scenario {name_or_path}: no such file or shipped scenario (shipped: "
                         f"{', '.join(shipped_scenarios())})") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"scenario {name_or_path}: not readable YAML: "
                         f"{str(exc).splitlines()[0]}") from None
    missing = [k for k in SCENARIO_KEYS if not isinstance(scenario, dict) or k not in scenario]
    if missing:
        raise ValueError(f"scenario {name_or_path}: missing {', '.join(missing)} (see the "
                         f"shipped {DEFAULT_SCENARIO.name})")
    return scenario


def host_state(sysroot: str) -> dict[str, Any]:
    """The conditions the model reacts to, read from the host's facts."""
    facts = gather_facts(Sysroot(sysroot), ["vm", "cpu", "runtime", "fabric"])
    vm, cpu, runtime = facts["vm"], facts["cpu"], facts["runtime"]
    qps = ((facts["fabric"].get("nccl_settings") or {}).get("NCCL_IB_QPS_PER_CONNECTION") or {})
    return {
        "cmdqv_missing": bool(vm.get("arch") == "aarch64" and vm.get("smmu_v3")
                              and (vm.get("cmdqv") or {}).get("state") != "active"),
        "deep_cstates_blocked": _cstates_blocked(cpu),
        "housekeeping_shared": _housekeeping_shared(cpu),
        "topo_missing_in_container": bool((runtime.get("enroot") or {}).get("installed")
                                          and not runtime["enroot"].get("carries_topo_env")),
        "qps": int(qps.get("value") or 1),
    }


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


def step_times(state: dict[str, Any], scenario: dict[str, Any], workload: str, host: str,
               run: int, steps: int) -> list[float]:
    """Seconds per iteration of one training run on a host in ``state``."""
    shape = scenario["workloads"][workload]
    effects = scenario["effects"]
    factor = 1.0 + _comm_extra(state, scenario) * shape["comm_share"]
    if state["cmdqv_missing"]:
        factor *= 1.0 + shape["cmdqv_missing"]
    if state["deep_cstates_blocked"]:
        factor *= 1.0 + effects["deep_cstates_blocked"]
    rng = random.Random(_seed(scenario["seed"], host, workload, run))  # noqa: S311 - noise
    mean = shape["step_time_s"] * factor * (1.0 + rng.gauss(0.0, scenario["noise_cv"]))
    stall = effects["housekeeping_shared"]
    times = []
    for _ in range(steps):
        value = mean * (1.0 + rng.gauss(0.0, scenario["noise_cv"] / 2))
        if state["housekeeping_shared"] and rng.random() < stall["stall_rate"]:
            value += rng.uniform(*stall["stall_ms"]) / 1000.0
        times.append(value)
    return times


def collective_time(state: dict[str, Any], scenario: dict[str, Any], workload: str, host: str,
                    run: int) -> float:
    """Milliseconds of one collective at the workload's reference size on a host in ``state``."""
    shape = scenario["workloads"][workload]
    base = shape["qps1_time_ms"] if _qps_short(state, scenario) else shape["time_ms"]
    factor = 1.0
    if state["topo_missing_in_container"]:
        factor += scenario["effects"]["topo_missing_in_container"]
    if scenario["fabric"] != "cx8" and state["qps"] >= 4:
        factor += scenario["effects"]["qps4_on_other_fabric"]
    rng = random.Random(_seed(scenario["seed"], host, workload, run))  # noqa: S311 - noise
    return base * factor * (1.0 + rng.gauss(0.0, scenario["noise_cv"]))


def reference(scenario: dict[str, Any], workload: str) -> float:
    """The workload's figure on a host with nothing to fix (ms per step, or ms per collective)."""
    shape = scenario["workloads"][workload]
    return shape["time_ms"] if is_collective(shape) else shape["step_time_s"] * 1000.0


def _qps_short(state: dict[str, Any], scenario: dict[str, Any]) -> bool:
    return scenario["fabric"] == "cx8" and state["qps"] < 4


def _comm_extra(state: dict[str, Any], scenario: dict[str, Any]) -> float:
    """Relative slow-down of the communication share of a training step."""
    effects = scenario["effects"]
    extra = effects["topo_missing_in_container"] if state["topo_missing_in_container"] else 0.0
    allgather = scenario["workloads"]["nccl-allgather"]
    if _qps_short(state, scenario):
        extra += allgather["qps1_time_ms"] / allgather["time_ms"] - 1.0
    elif scenario["fabric"] != "cx8" and state["qps"] >= 4:
        extra += effects["qps4_on_other_fabric"]
    return extra


def _seed(*parts: Any) -> int:
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:16], 16)
