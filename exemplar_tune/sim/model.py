"""The performance model of a simulated host: step times that follow the host's state.

The state is read from the host's sysroot with the same fact readers as a real host, so a
role that fixes a layer changes the simulated performance exactly as far as it changes what
the facts show. Each effect of ``scenario.yaml`` applies while its condition holds:

* ``cmdqv_missing`` -- an arm64 guest with SMMUv3 translation whose CMDQV is not active;
* ``deep_cstates_blocked`` -- the deepest idle state is disabled on some CPU, or the active
  tuned profile resolves a ``force_latency`` below that state's exit latency;
* ``housekeeping_shared`` -- ``system.slice`` may run on every online CPU (not confined):
  occasional 50-100 ms stalls;
* ``topo_missing_in_container`` -- enroot is installed but carries no ``NCCL_TOPO_FILE``;
* ``nccl_qps`` -- ``NCCL_IB_QPS_PER_CONNECTION`` against the fabric's best value.

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

DEFAULT_SCENARIO = Path(__file__).with_name("scenario.yaml")


def load_scenario(path: Path | None = None) -> dict[str, Any]:
    """The scenario parameters (the shipped one by default)."""
    return yaml.safe_load((path or DEFAULT_SCENARIO).read_text())


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


def step_times(state: dict[str, Any], scenario: dict[str, Any], workload: str, host: str,
               run: int, steps: int) -> list[float]:
    """Seconds per iteration of one benchmark run on a host in ``state``."""
    shape = scenario["workloads"][workload]
    effects = scenario["effects"]
    factor = 1.0 + _comm_factor(state, effects) * shape["comm_share"]
    if state["cmdqv_missing"]:
        factor *= 1.0 + effects["cmdqv_missing"][workload]
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


def _comm_factor(state: dict[str, Any], effects: dict[str, Any]) -> float:
    extra = effects["topo_missing_in_container"] if state["topo_missing_in_container"] else 0.0
    qps = effects["nccl_qps"]
    if qps["fabric"] == "cx8":
        extra += qps["qps1_vs_qps4"] if state["qps"] < 4 else 0.0
    elif state["qps"] >= 4:
        extra += qps["qps4_penalty_other_fabric"]
    return extra


def _seed(*parts: Any) -> int:
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:16], 16)
