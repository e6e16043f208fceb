"""A simulated cluster in one directory: hosts, inventory, profile and benchmarks.

Layout of ``DIR`` after :func:`create_cluster`::

    cluster.yaml     name, scenario, seed, hosts (what ``sim bench`` reads)
    scenario.yaml    the scenario, seed included (every model parameter in one file)
    hosts/NAME/      one sysroot tree per host, in the kernel's layout
    inventory.yml    the hosts for Ansible: local connection, each with its sysroot and the
                     command that boots it (``exemplar_boot_command``) and its node
                     benchmark (``exemplar_node_bench_command``)
    profile.yaml     the profile tune works towards, with the workloads' reference figures
    bench.yaml       the training shapes (``exemplar-tune sim bench DIR --workload ...``)
    nccl.yaml        the nccl-tests shapes, for ``sweep``
    state/           the benchmark run counter

Every later step reads the hosts' *current* trees, so what the roles change is what the
benchmarks see.
"""

from __future__ import annotations

import copy
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

from exemplar_tune.bounded_yaml import load_yaml
from exemplar_tune.errors import UserError
from exemplar_tune.inputs import read_input
from exemplar_tune.profile import load_profile
from exemplar_tune.sim.boot import boot, mkconfig
from exemplar_tune.sim.captures import imex_domains
from exemplar_tune.sim.hosts import build_host
from exemplar_tune.sim.model import is_collective, load_scenario, reference

TRAINING_SHAPES = ("dense", "moe")


def create_cluster(directory: Path, scenario_name: str, *, hosts: int | None = None,
                   seed: int | None = None,
                   host_faults: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Build the cluster of ``scenario_name`` in ``directory`` (new or empty); returns cluster.yaml.

    ``host_faults`` adds faults to single hosts (``{"node05": ["deep_cstate_disabled"]}``:
    one host made slow through a fact) on top of the scenario's, which every host has.
    ``ValueError`` for an unknown scenario, host or fault, a bad host count or a non-empty
    directory; on any error nothing is left in the directory.
    """
    scenario = load_scenario(scenario_name)
    scenario["hosts"] = scenario["hosts"] if hosts is None else hosts
    scenario["seed"] = scenario["seed"] if seed is None else seed
    if not 1 <= scenario["hosts"] <= 4096:
        raise ValueError(f"--hosts {scenario['hosts']}: between 1 and 4096")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ValueError(f"{directory}: exists and is not an empty directory")
    names = [f"node{i:0{max(2, len(str(scenario['hosts'])))}d}"
             for i in range(1, scenario["hosts"] + 1)]
    extra = host_faults or {}
    unknown = [host for host in extra if host not in names]
    if unknown:
        raise ValueError(f"--fault {unknown[0]}=...: no such host ({names[0]} .. {names[-1]})")
    try:
        _build(directory.resolve(), scenario, names, extra)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return cluster_info(directory)


def _build(directory: Path, scenario: dict[str, Any], names: list[str],
           host_faults: dict[str, list[str]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    domains = imex_domains(names)  # the racks: where the GPUs share an NVLink domain
    for name in names:
        faults = list(dict.fromkeys([*scenario["faults"], *host_faults.get(name, [])]))
        host = build_host(scenario["base"], faults, directory / "hosts" / name, domains[name])
        mkconfig(host)
        boot(host)
    (directory / "state").mkdir()
    _dump(directory / "scenario.yaml", scenario)
    _dump(directory / "inventory.yml", inventory(directory, names))
    _dump(directory / "profile.yaml", cluster_profile(scenario))
    _dump(directory / "bench.yaml", benchmarks(directory, TRAINING_SHAPES))
    _dump(directory / "nccl.yaml", collective_benchmarks(directory, scenario))
    _dump(directory / "cluster.yaml", {"name": directory.name, "scenario": scenario["name"],
                                       "seed": scenario["seed"], "hosts": names,
                                       "host_faults": host_faults})


def _dump(path: Path, data: Any) -> None:
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def cluster_info(directory: Path) -> dict[str, Any]:
    """``cluster.yaml`` of a simulated cluster; ``ValueError`` when ``directory`` is not one."""
    path = directory / "cluster.yaml"
    if not path.is_file():
        raise ValueError(f"{directory}: not a simulated cluster (no cluster.yaml; create one "
                         "with 'exemplar-tune sim create')")
    try:
        return load_yaml(read_input(path, "simulated cluster file"), str(path))
    except (UserError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: {str(exc).splitlines()[0]}") from None


def inventory(directory: Path, names: list[str]) -> dict[str, Any]:
    """Local-connection hosts, each reading and changing its own tree."""
    hosts = {}
    for name in names:
        root = str(directory / "hosts" / name)
        hosts[name] = {"exemplar_sysroot": root,
                       "exemplar_boot_command": [sys.executable, "-m", "exemplar_tune.sim.boot",
                                                 root],
                       "exemplar_bootloader_command": [sys.executable, "-m",
                                                       "exemplar_tune.sim.boot", "--mkconfig",
                                                       root],
                       "exemplar_node_bench_command": node_bench_command(directory, name)}
    return {"all": {"vars": {"ansible_connection": "local",
                             "ansible_python_interpreter": sys.executable},
                    "hosts": hosts}}


def node_bench_command(directory: Path, host: str) -> list[str]:
    """What ``exemplar.tune.node_bench`` runs on a simulated host: the dense workload on that
    host alone (its Megatron lines; ``slow-nodes`` reads the median step time)."""
    return [sys.executable, "-m", "exemplar_tune.cli", "sim", "bench", str(directory),
            "--workload", "dense", "--steps", "20", "--hosts", host]


def cluster_profile(scenario: dict[str, Any]) -> dict[str, Any]:
    """The scenario's base profile with its overrides and the workloads' references."""
    wanted = copy.deepcopy(scenario["profile"])
    profile = load_profile(wanted.pop("base"))
    for section, values in wanted.items():
        profile.setdefault(section, {}).update(values)
    profile["name"] = f"sim-{scenario['name']}"
    profile.setdefault("workload", {})["reference"] = {
        name: {"value": reference(scenario, name), "unit": "ms"}
        for name, shape in scenario["workloads"].items() if not is_collective(shape)}
    return profile


def collective_benchmarks(directory: Path, scenario: dict[str, Any]) -> dict[str, Any]:
    """The nccl-tests shapes of the scenario (what ``sweep`` measures): busbw at the largest
    size, or at the sizes ``--sizes-from`` finds in the training job's COLL log."""
    return {"shapes": [
        {"name": name, "parser": "nccl-tests", "collective": shape["collective"],
         "metric": "busbw", "timeout": 120,
         "command": [sys.executable, "-m", "exemplar_tune.cli", "sim", "bench",
                     str(directory), "--workload", name]}
        for name, shape in scenario["workloads"].items() if is_collective(shape)]}


def benchmarks(directory: Path, shapes: tuple[str, ...]) -> dict[str, Any]:
    """The benchmark file: each shape runs ``exemplar-tune sim bench`` on every host."""
    return {"shapes": [
        {"name": shape, "parser": "megatron", "warmup": 5, "timeout": 120,
         "command": [sys.executable, "-m", "exemplar_tune.cli", "sim", "bench",
                     str(directory), "--workload", shape]}
        for shape in shapes]}
