"""gpu-layer checks: inventory against the profile, and GPU health (ECC, row remapping,
retired pages, PCIe link, clock-event reasons, temperature, NVLink fabric state and links, IMEX,
DCGM diagnostics, Xid events).

Inventory checks (count, product, persistence, temperature) compare with the profile's ``gpu``
section and skip when it is silent. Health checks have no profile key: an uncorrectable ECC
error or a pending row remap is a finding on every cluster. Xid incidents are judged by the
profile's ``gpu.xid_policy`` (defaults in :mod:`exemplar_tune.xid_policy`). The semantics follow
the nvidia-smi XML fields, the NVIDIA Xid catalog and the public health tools (DCGM diag r1
"page retirement/row remap", AzNHC ``azure_gpu_ecc.nhc``).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.gpu import in_cluster
from ansible_collections.exemplar.tune.plugins.module_utils.readers import xid_catalog as cat
from ansible_collections.exemplar.tune.plugins.module_utils.readers.xid_incidents import (
    group_incidents,
)

from exemplar_tune import xid_policy
from exemplar_tune.checks.base import (
    FAIL,
    PASS,
    SKIP,
    WARN,
    Facts,
    Outcome,
    Profile,
    check,
    not_applicable,
    not_read,
    read_error,
    source,
    unknown,
)
from exemplar_tune.checks.compare import Comparison, Devices, Example, declare
from exemplar_tune.dcgm import problems as dcgm_problems

LAYER = "gpu"
# Clock-event reasons (nvidia-smi ``clocks_event_reason_*``, NVML bitmask names).
CLOCK_FAIL = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
              "sw_thermal_slowdown")
CLOCK_WARN = ("sw_power_cap",)
# AzNHC azure_gpu_ecc.nhc: more uncorrectable remapped rows than this fails the GPU.
REMAP_UNC_MAX = 512


# -- helpers ---------------------------------------------------------------------------------


def _layer(facts: Facts) -> dict[str, Any]:
    return facts.get(LAYER) or {}


def _error(facts: Facts, key: str) -> str:
    """The recorded read error of ``gpu.<key>``, as ``": path: reason"`` (or ``""``)."""
    found = read_error(facts, LAYER, key)
    return f": {found}" if found else ""


def _unread(facts: Facts, *keys: str) -> str:
    """Why the gpu facts ``keys`` are unknown, as ``": why"``: the first read error, else the
    gpu layer not gathered."""
    found = next((err for key in keys if (err := _error(facts, key))), "")
    if found or LAYER in facts:
        return found or ": no read error recorded"
    return ": the gpu layer was not gathered"


def gpus_on_bus(facts: Facts) -> list[str] | None:
    """PCI addresses of the NVIDIA GPUs on the host's PCI bus (the cpu layer's ``gpus_pci``);
    ``None`` where the bus was not read (or the cpu layer not gathered)."""
    listed = (facts.get("cpu") or {}).get("gpus_pci")
    return None if listed is None else [str(d.get("bdf")) for d in listed]


def no_gpu(facts: Facts) -> Outcome:
    """Where nvidia-smi (or NVML) lists no GPU (``present`` false): not applicable, unless the
    PCI bus shows NVIDIA GPUs (then nvidia-smi is missing or failing there: unknown)."""
    why = _layer(facts).get("reason") or "none listed"
    bus = gpus_on_bus(facts)
    if bus:
        return unknown(f"{len(bus)} NVIDIA GPUs on the PCI bus ({_list(bus, 2)}) but none "
                       f"listed ({why})")
    return not_applicable(f"no GPU on this host ({why})")


def _gpus(facts: Facts) -> tuple[list[dict[str, Any]], Outcome | None]:
    """The GPU list, or a skip when GPUs are absent or could not be listed."""
    gpu = _layer(facts)
    present = gpu.get("present")
    if present is None:
        return [], unknown(f"GPU inventory unknown{_unread(facts, 'present', 'gpus')}")
    if not present:
        return [], no_gpu(facts)
    if not gpu.get("gpus"):
        return [], unknown(f"GPU list unknown{_unread(facts, 'gpus')}")
    return gpu["gpus"], None


def _tool_absent(facts: Facts, key: str) -> bool:
    """Whether the command behind gpu fact ``key`` is not installed on the (live) host; a
    capture that lacks it ("not captured") cannot tell."""
    return str(_layer(facts).get(f"{key}_missing") or "").endswith("command not found")


def _field_error(facts: Facts, gpus: list[dict[str, Any]], *marks: str) -> str:
    """The first read error of a field of ``gpus`` whose place (an nvidia-smi XML tag, or a
    label of the text report, in snake case) holds one of ``marks``; ``": path: reason"``,
    ``""`` when none was recorded (the field is then not reported: N/A or absent)."""
    mine = {f"gpus.{g.get('index')}" for g in gpus}
    for err in _layer(facts).get("errors") or []:
        place = str(err.get("path")).lower().replace(" ", "_").replace("-", "_")
        if err.get("fact") in mine and any(mark in place for mark in marks):
            return f": {err.get('path')}: {err.get('error')}"
    return ""


def _name(gpu: dict[str, Any]) -> str:
    """``00000000:C2:00.0`` (nvidia-smi's address), else the sysfs one, else ``GPU <index>``."""
    return gpu.get("bdf") or gpu.get("sysfs_bdf") or f"GPU {gpu.get('index')}"


def _get(gpu: dict[str, Any], *path: str) -> Any:
    """``gpu[path[0]][path[1]]...``, ``None`` where a level is missing or ``None``."""
    value: Any = gpu
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _expect(profile: Profile, key: str) -> Any:
    return (profile.get(LAYER) or {}).get(key)


def _evidence(facts: Facts, key: str = "gpus") -> tuple[str, ...]:
    return source(facts, LAYER, key)


def _list(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


# -- inventory -------------------------------------------------------------------------------


@check("gpu.count",
       hand="nvidia-smi's count together with the GPUs on the PCI bus",
       health=True, actions=("drain", "reboot", "replace"),
       severity="high",
       title="Every expected GPU is visible",
       risk="A missing GPU (fallen off the bus, driver not bound, failed board) leaves the job "
            "short of ranks or makes it fail to start; the whole node is lost to the job",
       fix="manual: reseat or replace the GPU, check `lspci -d 10de:` and the kernel log, "
           "then reload the driver or reboot")
def check_count(facts: Facts, profile: Profile) -> Outcome:
    want = _expect(profile, "count")
    if want is None:
        return not_applicable("profile sets no gpu.count")
    gpu = _layer(facts)
    present, have = gpu.get("present"), gpu.get("count")
    if present is None or have is None:
        return unknown(f"GPU inventory unknown{_unread(facts, 'present', 'count')}")
    evidence = _evidence(facts, "count")
    if not present and want > 0:
        return Outcome(FAIL, 0, want, f"no GPU visible ({gpu.get('reason') or 'none listed'}); "
                       f"profile expects {want}", evidence)
    if have < want:
        return Outcome(FAIL, have, want, f"{have} GPUs visible, profile expects {want}",
                       evidence)
    more = f" (profile expects {want})" if have > want else ""
    return Outcome(PASS, have, want, f"{have} GPUs visible{more}", evidence)


@check("gpu.nvidia-smi",
       hand="whether a GPU tool answered, from several facts",
       health=True, actions=("drain", "reboot", "investigate"),
       severity="high",
       title="nvidia-smi answers (a failing nvidia-smi is a finding of its own)",
       risk="nvidia-smi fails when a GPU has fallen off the bus or the driver cannot reach "
            "it (exit status 15), or NVML is broken: the GPUs cannot be listed, so the other "
            "GPU checks cannot judge them, and jobs fail at CUDA initialisation",
       fix="manual: read the kernel log for Xid 79 or 'fallen off the bus' (gpu.xids), "
           "check `lspci -d 10de:`, then reset the GPU, reload the driver or reboot")
def check_nvidia_smi(facts: Facts, profile: Profile) -> Outcome:
    gpu = _layer(facts)
    failed = next((e for e in gpu.get("errors") or [] if e.get("fact") == "present"), None)
    if failed is not None:
        return Outcome(FAIL, failed.get("error"), "nvidia-smi answers",
                       f"{failed.get('path')}: {failed.get('error')}",
                       (str(failed.get("path")),))
    if gpu.get("present") is None:
        return unknown("GPU facts not gathered" if LAYER not in facts else
                       "GPU inventory unknown: no read error recorded")
    if gpu.get("source") is None:
        bus = gpus_on_bus(facts)
        if bus:
            return unknown(f"{len(bus)} NVIDIA GPUs on the PCI bus but no GPU tool answered "
                           f"({gpu.get('reason') or 'none'})")
        return not_applicable(f"no GPU tool to ask ({gpu.get('reason') or 'none'})")
    return Outcome(PASS, gpu.get("source"), "nvidia-smi answers",
                   f"{gpu['source']} answered ({gpu.get('count', 0)} GPUs)",
                   _evidence(facts, "present"))


GPUS = Devices("gpu", "GPUs", _gpus, _name,
               lambda facts, gpus, marks: _field_error(facts, gpus, *marks), "gpus")

declare(Comparison(
    "gpu.product", severity="medium", title="The GPUs are the profile's model",
    risk="A different GPU model invalidates every other expectation of the profile "
         "(topology, power, NCCL tuning, benchmark references)",
    fix="manual: run this host with the profile of its GPU model, or fix the inventory",
    label="product name", field=("product_name",), compare="contains",
    key="product_contains", devices=GPUS, status=FAIL, error_marks=("product_name",),
    schema={"type": "string", "description": "substring of nvidia-smi product_name, e.g. H100"},
    examples=(Example(["NVIDIA H100 80GB HBM3"], "H100", PASS),
              Example(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"], "H100", FAIL))))

declare(Comparison(
    "gpu.persistence-mode", severity="medium", title="Persistence mode as the profile says",
    risk="Without persistence the driver tears the GPU state down whenever no client holds "
         "it: every job start pays the re-initialisation (about 1-2 s per GPU) and the "
         "first NVML/CUDA calls are slow; health tools (DCGM r1) flag it",
    fix="exemplar-tune apply --layer gpu (knob gpu.persistence_mode: nvidia-persistenced "
        "--persistence-mode, or nvidia-smi -pm 1)",
    knob="gpu.persistence_mode", label="persistence mode", field=("persistence_mode",),
    compare="equals", key="persistence_mode", devices=GPUS, status=FAIL,
    shown=lambda on: "on" if on else "off", error_marks=("persistence_mode",),
    examples=(Example([True], True, PASS), Example([True, False], True, FAIL),
              Example([False], False, PASS))))

# -- memory health ---------------------------------------------------------------------------


def _ecc_findings(gpus: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str], list[str]]:
    """(per-GPU counts of the affected GPUs, fail lines, warn lines)."""
    observed: dict[str, Any] = {}
    fails: list[str] = []
    warns: list[str] = []
    for g in gpus:
        vol = _get(g, "ecc", "volatile", "uncorrectable")
        agg = _get(g, "ecc", "aggregate", "uncorrectable")
        sram = _get(g, "ecc", "sram_threshold_exceeded")
        if vol or agg or sram:
            observed[_name(g)] = {"volatile_uncorrectable": vol, "aggregate_uncorrectable": agg,
                                  "sram_threshold_exceeded": sram}
        if vol:
            fails.append(f"{_name(g)}: {vol} volatile uncorrectable")
        if sram:
            fails.append(f"{_name(g)}: SRAM uncorrectable threshold exceeded")
        if agg and not vol:
            warns.append(f"{_name(g)}: {agg} aggregate (lifetime) uncorrectable")
    return observed, fails, warns


@check("gpu.ecc-uncorrectable",
       hand="three counters per GPU and two statuses (volatile fails, lifetime warns)",
       health=True, actions=("drain", "reset_gpu", "replace"),
       severity="high",
       title="No uncorrectable ECC errors",
       risk="An uncorrectable ECC error kills the running job (Xid 48/94/95) and may recur; a "
            "GPU past the SRAM threshold needs replacement",
       fix="manual: drain the node, reset the GPU (nvidia-smi -r) and run dcgmi diag -r 3; "
           "RMA if errors recur or the SRAM threshold is exceeded")
def check_ecc_uncorrectable(facts: Facts, profile: Profile) -> Outcome:
    gpus, not_judged = _gpus(facts)
    if not_judged:
        return not_judged
    if all(_get(g, "ecc", "volatile", "uncorrectable") is None
           and _get(g, "ecc", "aggregate", "uncorrectable") is None for g in gpus):
        unread = _field_error(facts, gpus, "uncorrectable", "double_bit")
        if unread:
            return unknown(f"ECC error counts not read{unread}")
        return not_applicable("ECC error counts not reported (ECC off or not supported)")
    observed, fails, warns = _ecc_findings(gpus)
    expected = "0 volatile uncorrectable, SRAM threshold not exceeded"
    if fails:
        return Outcome(FAIL, observed, expected, "; ".join(fails + warns), _evidence(facts))
    if warns:
        return Outcome(WARN, observed, expected,
                       "; ".join(warns) + " (none since the last driver load)", _evidence(facts))
    return Outcome(PASS, observed, expected,
                   f"no uncorrectable ECC error on {len(gpus)} GPUs", _evidence(facts))


def _remap_findings(gpus: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    observed: dict[str, Any] = {}
    fails: list[str] = []
    for g in gpus:
        rows = g.get("remapped_rows") or {}
        unc = rows.get("uncorrectable") or 0
        if rows.get("pending") or rows.get("failure") or unc > REMAP_UNC_MAX:
            observed[_name(g)] = {k: rows.get(k) for k in
                                  ("pending", "failure", "correctable", "uncorrectable")}
        if rows.get("failure"):
            fails.append(f"{_name(g)}: row remapping failure: drain and RMA")
        elif rows.get("pending"):
            fails.append(f"{_name(g)}: row remap pending: reset GPU to activate")
        if unc > REMAP_UNC_MAX:
            fails.append(f"{_name(g)}: {unc} uncorrectable remapped rows > {REMAP_UNC_MAX}: RMA")
    return observed, fails


@check("gpu.remapped-rows",
       hand="pending, failure and a count per GPU, each with its own action",
       health=True, actions=("reset_gpu", "replace"),
       severity="high",
       title="No pending or failed row remapping",
       risk="A pending remap leaves a known-bad HBM row in use until the GPU is reset (more "
            "uncorrectable errors, Xid 63/64); a remapping failure means no spare rows: the GPU "
            "must be replaced",
       fix="manual: pending -> drain and reset the GPU (nvidia-smi -r or reboot); failure or "
           "more than 512 uncorrectable remaps -> drain and RMA")
def check_remapped_rows(facts: Facts, profile: Profile) -> Outcome:
    gpus, not_judged = _gpus(facts)
    if not_judged:
        return not_judged
    if all(_get(g, "remapped_rows", "pending") is None
           and _get(g, "remapped_rows", "failure") is None for g in gpus):
        unread = _field_error(facts, gpus, "remapped_row", "pending", "failure")
        if unread:
            return unknown(f"remapped rows not read{unread}")
        return not_applicable("remapped rows not reported (pre-A100, MIG or pass-through)")
    observed, fails = _remap_findings(gpus)
    expected = {"pending": False, "failure": False, "uncorrectable_max": REMAP_UNC_MAX}
    if fails:
        spent = any("RMA" in line for line in fails)  # no spare rows left: only a new GPU
        return Outcome(FAIL, observed, expected, "; ".join(fails), _evidence(facts),
                       actions=("drain", "replace") if spent else ())
    return Outcome(PASS, observed, expected,
                   f"no pending or failed row remap on {len(gpus)} GPUs", _evidence(facts))


declare(Comparison(
    "gpu.retired-pages-pending", health=True, actions=("reset_gpu",), severity="medium",
    title="No page retirement pending",
    risk="Pages marked for retirement stay in use until the next driver reload: the bad "
         "memory can raise more ECC errors and kill jobs (pre-A100 GPUs)",
    fix="manual: drain the node and reset the GPU or reboot to retire the pages",
    label="page retirement", field=("retired_pages", "pending"), compare="equals",
    default=False, source="nvidia-smi -q 'Pending Page Blacklist' (NVIDIA's page retirement "
                          "notes: the pages retire at the next driver reload)",
    devices=GPUS, status=FAIL, shown=lambda flag: "pending" if flag else "none",
    not_reported="not reported (A100 and later use row remapping)",
    error_marks=("pending_retirement", "pending_blacklist", "pending_page"),
    examples=(Example([False], None, PASS), Example([False, True], None, FAIL),
              Example([None], None, SKIP))))


# -- link, clocks, temperature ---------------------------------------------------------------


def _pcie_findings(gpu: dict[str, Any], gen_min: int | None,
                   width_min: int | None) -> tuple[list[str], list[str]]:
    """(fail lines, warn lines) for one GPU's link."""
    link = gpu.get("pcie") or {}
    gen, gen_max = link.get("gen_current"), link.get("gen_max")
    width, width_max = link.get("width_current"), link.get("width_max")
    name, fails, warns = _name(gpu), [], []
    if width is not None and width_max is not None and width < width_max:
        fails.append(f"{name}: width x{width} < max x{width_max}")
    for label, value in (("max width", width_max), ("width", width)):
        if value is not None and width_min is not None and value < width_min:
            fails.append(f"{name}: {label} x{value} < profile x{width_min}")
            break
    if gen_max is not None and gen_min is not None and gen_max < gen_min:
        fails.append(f"{name}: max gen {gen_max} < profile gen {gen_min}")
    elif gen is not None and gen_min is not None and gen < gen_min:
        warns.append(f"{name}: gen {gen} < profile gen {gen_min}")
    elif gen is not None and gen_max is not None and gen < gen_max:
        warns.append(f"{name}: gen {gen} < max gen {gen_max}")
    return fails, warns


@check("gpu.pcie-link",
       hand="current against maximum link and the profile's minima, two statuses",
       health=True, actions=("drain", "investigate", "replace"),
       severity="medium",
       title="GPU PCIe links trained at full width and speed",
       risk="A link trained narrow halves (x8) or quarters (x4) host<->GPU bandwidth (Gen5 x16 "
            "is about 64 GB/s per direction): slower data loading, checkpoints and host-staged "
            "NCCL traffic",
       fix="manual: reseat the GPU or riser, check the BIOS PCIe settings; re-read under load "
           "(idle GPUs lower the link gen to save power)")
def check_pcie_link(facts: Facts, profile: Profile) -> Outcome:
    gpus, not_judged = _gpus(facts)
    if not_judged:
        return not_judged
    gen_min, width_min = _expect(profile, "pcie_gen_min"), _expect(profile, "pcie_width_min")
    links = {_name(g): g.get("pcie") or {} for g in gpus}
    if all(link.get("gen_current") is None and link.get("width_current") is None
           for link in links.values()):
        unread = _field_error(facts, gpus, "link_gen", "link_width", "pcie_generation")
        if unread:
            return unknown(f"PCIe link state not read{unread}")
        return not_applicable("PCIe link state not reported")
    fails: list[str] = []
    warns: list[str] = []
    for g in gpus:
        more_fails, more_warns = _pcie_findings(g, gen_min, width_min)
        fails, warns = fails + more_fails, warns + more_warns
    observed = {name: {k: link.get(k) for k in ("gen_current", "gen_max", "width_current",
                                                "width_max")} for name, link in links.items()}
    expected = {"gen_min": gen_min, "width_min": width_min, "current": "= max"}
    if fails:
        return Outcome(FAIL, observed, expected, "; ".join(fails + warns), _evidence(facts))
    if warns:
        return Outcome(WARN, observed, expected, "; ".join(warns) + " (an idle GPU lowers its "
                       "link gen: re-check under load)", _evidence(facts))
    return Outcome(PASS, observed, expected, f"all {len(gpus)} links at max gen and width",
                   _evidence(facts))


@check("gpu.clock-events",
       hand="two sets of reasons with two statuses",
       health=True, severity="high",
       title="No hardware or thermal clock slowdown",
       risk="An active HW slowdown, power-brake or thermal slowdown caps the clocks (often to "
            "half or less) and the slowest GPU sets the pace of every synchronous step",
       fix="manual: check cooling, PSUs and the power-brake signal (BMC/ipmitool sensors); "
           "sw_power_cap: raise the power limit (nvidia-smi -pl) or accept it")
def check_clock_events(facts: Facts, profile: Profile) -> Outcome:
    gpus, not_judged = _gpus(facts)
    if not_judged:
        return not_judged
    reasons = {_name(g): g.get("clocks_event_reasons_active") for g in gpus}
    if all(r is None for r in reasons.values()):
        unread = _field_error(facts, gpus, "clocks_event_reason", "clocks_throttle_reason")
        if unread:
            return unknown(f"clock-event reasons not read{unread}")
        return not_applicable("clock-event reasons not reported")
    bad = {n: [r for r in rs if r in CLOCK_FAIL] for n, rs in reasons.items() if rs}
    capped = {n: [r for r in rs if r in CLOCK_WARN] for n, rs in reasons.items() if rs}
    bad, capped = {n: r for n, r in bad.items() if r}, {n: r for n, r in capped.items() if r}
    observed = {n: sorted(set(bad.get(n, [])) | set(capped.get(n, [])))
                for n in {**bad, **capped}}
    expected = f"none of {', '.join(CLOCK_FAIL + CLOCK_WARN)} active"
    lines = [f"{n}: {', '.join(r)}" for n, r in sorted(observed.items())]
    if bad:
        return Outcome(FAIL, observed, expected, "; ".join(lines), _evidence(facts))
    if capped:
        return Outcome(WARN, observed, expected,
                       "; ".join(lines) + " (software power cap)", _evidence(facts))
    return Outcome(PASS, observed, expected,
                   f"no slowdown reason active on {len(gpus)} GPUs", _evidence(facts))


declare(Comparison(
    "gpu.temperature", health=True, severity="low",
    title="GPU temperature below the profile maximum",
    risk="A hot GPU is close to its slowdown threshold: under load it throttles (clock "
         "events) and slows every rank that waits for it",
    fix="manual: check airflow, fans and inlet temperature (BMC); compare with other nodes",
    label="GPU temperature", field=("temperature_c",), compare="at_most",
    key="temperature_max_c", devices=GPUS, unit=" C", error_marks=("gpu_temp", "gpu_current_temp"),
    schema={"type": "number"},
    examples=(Example([45, 52], 85, PASS), Example([45, 91], 85, WARN),
              Example([45, None], 85, SKIP))))


# -- NVLink fabric ---------------------------------------------------------------------------

FABRIC_EXPECTATIONS = ("multi-node", "node", "none")


def _domain(gpu: dict[str, Any]) -> str:
    """``none`` (no fabric: PCIe GPUs, no NVSwitch), ``node`` (registered, no cluster: HGX with
    NVSwitch) or ``multi-node`` (a clique of a cluster: GB200/GB300 NVL)."""
    if (gpu.get("fabric") or {}).get("state") is None:
        return "none"
    return "multi-node" if in_cluster(gpu) else "node"


def _fabric_problems(gpu: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(broken, degraded) words about one GPU's fabric registration and health."""
    fab = gpu.get("fabric") or {}
    health = fab.get("health") or {}
    broken, degraded = [], []
    if fab.get("state") not in (None, "Completed"):
        broken.append(f"registration {fab['state']}")
    if fab.get("status") not in (None, "Success"):
        broken.append(f"status {fab['status']}")
    if health.get("summary") not in (None, "Healthy"):
        (degraded if health["summary"] == "Limited Capacity" else broken).append(
            f"health {health['summary']}")
    if health.get("route_unhealthy"):
        broken.append("route unhealthy")
    if health.get("incorrect_configuration") not in (None, "None"):
        broken.append(f"incorrect configuration {health['incorrect_configuration']}")
    if health.get("bandwidth") not in (None, "Full"):
        degraded.append(f"bandwidth {health['bandwidth']}")
    degraded += [key.replace("_", " ") for key in ("route_recovery_in_progress",
                                                   "access_timeout_recovery") if health.get(key)]
    return broken, degraded


@check("gpu.fabric-state",
       hand="registration, health, domain and clique across the GPUs",
       health=True, actions=("restart_service", "reset_gpu", "reboot"),
       severity="high",
       title="Every GPU is registered in its NVLink fabric, healthy, in the domain expected",
       risk="A GPU whose fabric registration is not Completed/Success, or whose fabric health "
            "is unhealthy, cannot use NVLink: on GB200/GB300 NVL the multi-node NVLink "
            "collectives fail or fall back; a degraded bandwidth slows every collective",
       fix="manual: on HGX with NVSwitch check nvidia-fabricmanager (systemctl status, its log); "
           "on GB200/GB300 NVL check the NVLink switch trays and NMX, then reset the GPU or "
           "reboot; `nvidia-smi -q | grep -A12 Fabric` shows the state")
def check_fabric_state(facts: Facts, profile: Profile) -> Outcome:
    """Per GPU: the fabric registration (``nvidia-smi -q`` Fabric State/Status), its health
    and its NVLink domain (``none``, ``node``, ``multi-node``), judged against the profile's
    ``gpu.nvlink_fabric`` when set. A domain the profile does not expect is *not configured*;
    a registration that did not complete or an unhealthy fabric is *broken*."""
    gpus, not_judged = _gpus(facts)
    if not_judged:
        return not_judged
    want = _expect(profile, "nvlink_fabric")
    domains = {_name(g): _domain(g) for g in gpus}
    found = {_name(g): _fabric_problems(g) for g in gpus}
    observed = {name: {"domain": domains[name], "broken": found[name][0],
                       "degraded": found[name][1]} for name in domains}
    broken = [f"{name}: {', '.join(b)}" for name, (b, _) in found.items() if b]
    if broken:
        return Outcome(FAIL, observed, want or "registered and healthy",
                       f"NVLink fabric broken on {len(broken)} of {len(gpus)} GPUs: "
                       f"{_list(broken, 4)}", _evidence(facts))
    missing = [n for n, d in domains.items() if want and d != want and want != "none"]
    if missing:
        return Outcome(FAIL, observed, want,
                       f"not configured: {len(missing)} of {len(gpus)} GPUs are not in a "
                       f"{want} NVLink domain (the profile's gpu.nvlink_fabric): "
                       f"{_list([f'{n} ({domains[n]})' for n in missing], 4)}",
                       _evidence(facts))
    cliques = {(g["fabric"].get("cluster_uuid"), g["fabric"].get("clique_id")) for g in gpus
               if domains[_name(g)] == "multi-node"}
    if len(cliques) > 1:
        return Outcome(FAIL, observed, "one clique of one cluster per host",
                       f"the GPUs are split over {len(cliques)} NVLink cliques or clusters: "
                       f"{sorted(cliques, key=str)}", _evidence(facts))
    if set(domains.values()) == {"none"}:
        if want == "none":
            return Outcome(PASS, observed, want, "no NVLink fabric, as the profile says",
                           _evidence(facts))
        return not_applicable("no NVLink fabric on these GPUs: not configured (PCIe GPUs or no "
                              "NVSwitch; gpu.nvlink_fabric in the profile makes it a finding)")
    degraded = [f"{name}: {', '.join(d)}" for name, (_, d) in found.items() if d]
    where = ", ".join(sorted(set(domains.values())))
    if degraded:
        return Outcome(WARN, observed, want or "registered and healthy",
                       f"NVLink fabric degraded on {len(degraded)} of {len(gpus)} GPUs: "
                       f"{_list(degraded, 4)}", _evidence(facts))
    clique = f"; clique {next(iter(cliques))[1]} of cluster {next(iter(cliques))[0]}" \
        if cliques else ""
    return Outcome(PASS, observed, want or "registered and healthy",
                   f"all {len(gpus)} GPUs registered (Completed/Success), healthy, NVLink "
                   f"domain {where}{clique}", _evidence(facts))


def _nvlink_line(gpu: dict[str, Any]) -> str:
    shown = f"GPU {gpu['index']}"
    if gpu["all_inactive"]:
        return f"{shown}: all links inactive"
    return f"{shown}: link{'s' if len(gpu['inactive']) > 1 else ''} " \
        f"{', '.join(map(str, gpu['inactive']))} inactive ({gpu['active']} of {gpu['links']} " \
        "active)"


@check("gpu.nvlink-links",
       hand="link counts against the profile or the host, link speeds across links",
       health=True, actions=("drain", "reset_gpu", "replace"),
       severity="high",
       title="Every NVLink link of every GPU is active, at one speed",
       risk="An inactive link takes its share of NVLink bandwidth out of every collective on "
            "that GPU (one of 18 is about 6 %); all links down leaves peer traffic on PCIe or "
            "the network; a link trained slower drags its GPU's collectives",
       fix="manual: reset the GPU (nvidia-smi -r) or reboot; on HGX check the NVSwitch trays "
           "and nvidia-fabricmanager, on GB200/GB300 NVL the switch trays and cables; replace "
           "the board if a link stays down")
def check_nvlink_links(facts: Facts, profile: Profile) -> Outcome:
    """Per GPU, ``nvidia-smi nvlink -s``. With the profile's ``gpu.nvlink_links`` set, a GPU
    with fewer active links fails (links beyond that number may be unwired by design: H100
    PCIe bridges wire 12 of 18); unset, any inactive link fails. A GPU whose links are all
    inactive fails, except the only GPU of a host when the profile is silent (no peer to link
    to). Links slower than the fastest of the host warn. GPUs that list no link have no
    NVLink."""
    gpus, not_judged = _gpus(facts)
    if not_judged:
        return not_judged
    links = _layer(facts).get("nvlink")
    if links is None:
        why = not_read(facts, LAYER, "nvlink")
        return unknown(f"NVLink state not read ({why or 'no read error recorded'})")
    want = _expect(profile, "nvlink_links")
    if want == 0:
        return Outcome(PASS, len(links), 0, "no NVLink expected (the profile's "
                       "gpu.nvlink_links is 0)", _evidence(facts, "nvlink"))
    observed = {f"GPU {g['index']}": {k: g[k] for k in ("links", "active", "inactive",
                                                         "all_inactive", "gbps_max")}
                for g in links}
    with_links = [g for g in links if g["links"] or g["all_inactive"]]
    if not with_links and not want:
        return not_applicable("no NVLink on these GPUs: not configured (PCIe GPUs, no bridge)")
    lone = len(gpus) == 1 and want is None
    if want is None:
        down = [g for g in with_links if g["inactive"] or (g["all_inactive"] and not lone)]
        short = []
    else:  # links beyond those wanted may be unwired by design (a 12-link PCIe bridge)
        down = [g for g in links if g["all_inactive"]]
        short = [g for g in links if g["active"] < want and not g["all_inactive"]]
    if down or short:
        lines = [_nvlink_line(g) for g in down] + [
            f"GPU {g['index']}: {g['active']} links active, {want} expected" for g in short]
        return Outcome(FAIL, observed, want if want is not None else "every link active",
                       f"NVLink down on {len(lines)} of {len(links)} GPUs: {_list(lines, 4)}",
                       _evidence(facts, "nvlink"))
    if lone and with_links[0]["all_inactive"]:
        return not_applicable("one GPU, all its links inactive: no peer to link to (not "
                              "configured; gpu.nvlink_links in the profile makes it a finding)")
    fastest = max((g["gbps_max"] for g in links if g["gbps_max"]), default=None)
    slow = [f"GPU {g['index']}: {g['gbps_min']:g} GB/s" for g in links
            if g["gbps_min"] is not None and fastest and g["gbps_min"] < fastest]
    if slow:
        return Outcome(WARN, observed, f"{fastest:g} GB/s per link",
                       f"links slower than the host's {fastest:g} GB/s: {_list(slow, 4)}",
                       _evidence(facts, "nvlink"))
    active = sum(g["active"] for g in links)
    return Outcome(PASS, observed, want if want is not None else "every link active",
                   f"all {active} NVLink links of {len(with_links)} GPUs active"
                   + (f" at {fastest:g} GB/s" if fastest else ""), _evidence(facts, "nvlink"))


# Counts that should stay at zero since the driver loaded: NVIDIA DCGM's limit for NVLink replay
# and recovery errors is 1 (GpuHardwareLimits.h, DCGM_LIMIT_MAX_NVLINK_ERROR) and Meta's GCM
# nvlink check tolerates none by default; Blackwell drivers count link recoveries as events.
# CRC and post-FEC errors are not judged unless the profile says so: DCGM counts CRC errors
# only at 100 per second or more, which counts since the driver loaded cannot tell.
NVLINK_ERROR_THRESHOLDS = {"replay errors": 0, "recovery errors": 0,
                           "link recovery successful events": 0,
                           "link recovery failed events": 0}


@check("gpu.nvlink-errors",
       hand="per-counter thresholds merged from defaults and the profile",
       health=True, actions=("reset_gpu", "investigate"),
       severity="medium",
       title="No NVLink replay or recovery errors since the driver loaded",
       risk="A link that replays or retrains stalls the transfers on it; links that keep "
            "recovering precede the link going down (Xid 74) and an aborted job",
       fix="manual: watch whether the counts rise (nvidia-smi nvlink -e twice, minutes "
           "apart); reseat or replace what keeps erroring (on GB200/GB300 NVL the cable "
           "cartridge or switch tray of that link), then nvidia-smi nvlink -re to reset them")
def check_nvlink_errors(facts: Facts, profile: Profile) -> Outcome:
    """Per link, ``nvidia-smi nvlink -e``: a counter above its threshold warns (counts since
    the driver loaded or the counters were reset cannot tell old errors from new ones).
    Thresholds by counter name in lower case: the defaults above, or the profile's
    ``gpu.nvlink_error_thresholds`` (which can name any counter the driver prints)."""
    _, not_judged = _gpus(facts)
    if not_judged:
        return not_judged
    layer = _layer(facts)
    counters, links = layer.get("nvlink_errors"), layer.get("nvlink")
    if counters is None:
        if links is None:
            why = not_read(facts, LAYER, "nvlink") or "no read error recorded"
            return unknown(f"NVLink state not read ({why}): error counters not read")
        if not any(g["links"] for g in links):
            return not_applicable("no NVLink on these GPUs: not configured")
        why = not_read(facts, LAYER, "nvlink_errors") or "no read error recorded"
        return unknown(f"NVLink error counters not read ({why})")
    over = {**NVLINK_ERROR_THRESHOLDS, **(_expect(profile, "nvlink_error_thresholds") or {})}
    above = [f"GPU {g['index']} link {link} {name} {value}"
             for g in counters for link, names in g["links"].items()
             for name, value in names.items() if name in over and value > over[name]]
    judged = sum(len(g["links"]) for g in counters)
    observed = {"over": above, "links": judged}
    if above:
        return Outcome(WARN, observed, over, "since the driver loaded or the counters were "
                       f"reset: {_list(above, 6)}", _evidence(facts, "nvlink_errors"))
    return Outcome(PASS, observed, over, f"{judged} NVLink links of {len(counters)} GPUs "
                   "within their thresholds since the driver loaded",
                   _evidence(facts, "nvlink_errors"))


@check("gpu.fabric-manager",
       hand="the service, its log and the GPUs' fabric state together",
       health=True, actions=("restart_service",),
       severity="high",
       title="nvidia-fabricmanager runs where NVSwitches are on the host's PCI bus (HGX/DGX)",
       risk="Without Fabric Manager the NVSwitches are not configured: the GPUs of an HGX "
            "board cannot use NVLink and CUDA fails to start (error 802, system not ready) or "
            "peer traffic falls back to PCIe; once registered, the GPUs' fabric state keeps "
            "reading Completed after the daemon dies",
       fix="manual: systemctl enable --now nvidia-fabricmanager (its version must match the "
           "driver's); on HGX B200/B100 and later it needs NVLink Subnet Manager (nvlsm) too; "
           "journalctl -u nvidia-fabricmanager says why it stopped")
def check_fabric_manager(facts: Facts, profile: Profile) -> Outcome:
    """Where the PCI bus shows NVSwitches, the ``nvidia-fabricmanager`` unit must be loaded,
    active and running. Without NVSwitches (PCIe GPUs, GB200/GB300 NVL compute trays, whose
    switches live in switch trays) Fabric Manager is not configured here: not judged."""
    del profile
    _, not_judged = _gpus(facts)
    if not_judged:
        return not_judged
    layer = _layer(facts)
    switches = layer.get("nvswitches")
    if switches is None:
        return unknown(f"NVSwitches unknown (PCI bus not read{_unread(facts, 'nvswitches')})")
    if not switches:
        return not_applicable("no NVSwitch on this host's PCI bus: Fabric Manager is not "
                              "configured here (on GB200/GB300 NVL compute trays "
                              "gpu.fabric-state is the signal)")
    state = layer.get("fabric_manager")
    evidence = _evidence(facts, "fabric_manager")
    if state is None:
        why = not_read(facts, LAYER, "fabric_manager") or "systemd is not the init"
        return unknown(f"{len(switches)} NVSwitches; Fabric Manager's state not read ({why})")
    observed = {"nvswitches": len(switches), **state}
    if state["load"] == "not-found":
        return Outcome(FAIL, observed, "active (running)", f"{len(switches)} NVSwitches and "
                       "no nvidia-fabricmanager.service installed", evidence)
    if (state["active"], state["sub"]) != ("active", "running"):
        result = f", result {state['result']}" if state["result"] not in (None, "success") \
            else ""
        return Outcome(FAIL, observed, "active (running)", f"{len(switches)} NVSwitches and "
                       f"nvidia-fabricmanager {state['active']} ({state['sub']}{result})",
                       evidence)
    return Outcome(PASS, observed, "active (running)", f"nvidia-fabricmanager active (running) "
                   f"for {len(switches)} NVSwitches", evidence)


@check("gpu.imex",
       hand="the daemon, its peers and the profile together",
       health=True, actions=("restart_service",),
       severity="high",
       title="IMEX is up on a multi-node NVLink domain, every node READY and connected",
       risk="Without a working IMEX domain the GPUs of an NVL72 rack cannot import each "
            "other's memory: multi-node NVLink jobs fail to start or NCCL leaves NVLink for "
            "the network",
       fix="manual: systemctl status nvidia-imex and journalctl -u nvidia-imex on the node "
           "named; check /etc/nvidia-imex/nodes_config.cfg lists every node of the domain and "
           "that the daemons run the same version")
def check_imex(facts: Facts, profile: Profile) -> Outcome:
    """Only where the GPUs are in a multi-node NVLink domain (:func:`check_fabric_state`'s
    ``multi-node``): ``nvidia-imex-ctl -N`` must show ``Domain State: UP``, every node READY
    and every connection ``C``. A tool that is not installed or has no configuration is *not
    configured* (not applicable, or a failure where the profile's ``gpu.imex`` is true); one
    whose answer could not be read (it failed, or a capture lacks it) is unknown there; a
    domain that is not up is *broken*."""
    gpus, not_judged = _gpus(facts)
    if not_judged:
        return not_judged
    if not any(_domain(g) == "multi-node" for g in gpus):
        return not_applicable("no multi-node NVLink domain: IMEX is not needed here (not "
                              "configured)")
    want = bool(_expect(profile, "imex"))
    found = _layer(facts).get("imex")
    if found is None or not found["configured"]:
        why = "no IMEX configuration" if found else (
            not_read(facts, LAYER, "imex")
            or "not read")
        if not want and (found or _tool_absent(facts, "imex")):
            return not_applicable(f"IMEX not configured on this node ({why}); gpu.imex in the "
                                  "profile makes it a finding")
        if not want:  # the tool failed, its output unreadable, or not captured
            return unknown(f"IMEX state not read ({why}); gpu.imex in the profile makes a "
                           "missing IMEX a finding")
        return Outcome(FAIL, None, "IMEX up", f"not configured: multi-node NVLink domain "
                       f"without IMEX ({why})", _evidence(facts, "imex"))
    nodes = found["nodes"]
    down = [f"node {n['index']} ({n['address']}) {n['state']}" for n in nodes
            if n["state"] != "READY"]
    links = [f"{a}->{b} {state}" for a, b, state in found["not_connected"]]
    observed = {"domain_state": found["domain_state"], "nodes": len(nodes),
                "not_ready": down, "not_connected": links}
    if found["domain_state"] != "UP" or down or links:
        parts = [f"domain {found['domain_state']}"] + ([f"{len(down)} node(s) not READY: "
                                                         f"{_list(down, 4)}"] if down else [])
        parts += [f"{len(links)} connection(s) not C: {_list(links, 4)}"] if links else []
        return Outcome(FAIL, observed, "domain UP, every node READY and connected",
                       f"IMEX broken: {'; '.join(parts)}", _evidence(facts, "imex"))
    versions = sorted({n["version"] for n in nodes if n["version"]})
    return Outcome(PASS, observed, "domain UP, every node READY and connected",
                   f"IMEX domain UP: {len(nodes)} node(s) READY, every connection C"
                   + (f", version {', '.join(versions)}" if versions else ""),
                   _evidence(facts, "imex"))


@check("gpu.dcgm-diag",
       hand="each DCGM test's result with its own meaning",
       health=True, severity="high",
       title="DCGM diagnostics pass (preflight --dcgm-level N)",
       risk="a GPU that fails DCGM's diagnostics (memory, PCIe, NVLink, stress) fails or slows "
            "jobs; DCGM finds what the driver's counters do not",
       fix="manual: read the failing test's warning (dcgmi diag -r N -j), follow DCGM's "
           "advice (reset the GPU, check the link, RMA the board), then run the level again")
def check_dcgm_diag(facts: Facts, profile: Profile) -> Outcome:
    """The ``dcgmi diag -r N -j`` run that ``preflight --dcgm-level N`` put in the facts
    (``gpu.dcgm_diag``): a failing test fails, a warning warns; not run (not asked for) is not
    applicable, asked for but without results (DCGM absent) unknown, each saying so."""
    del profile
    diag = _layer(facts).get("dcgm_diag")
    if diag is None:
        return not_applicable("DCGM diagnostics not run (preflight --dcgm-level 1|2|3|4 runs "
                              "them)")
    if diag.get("absent"):  # asked for, but no result: dcgmi missing, its engine down ...
        return unknown(f"DCGM absent: {diag['absent']}")
    found = dcgm_problems(diag)
    worst = next((s for s in (FAIL, WARN) if any(f[0] == s for f in found)), PASS)
    lines = [message for _, message, _ in found]
    observed = {t["test"]: t["status"] for t in diag["tests"]}
    return Outcome(worst, observed, "every test Pass or Skip",
                   f"level {diag.get('level')}: " + "; ".join(lines[:4])
                   + (f"; {len(lines) - 4} more" if len(lines) > 4 else ""),
                   (f"dcgmi diag -r {diag.get('level')} -j",))


# -- Xid incidents ---------------------------------------------------------------------------


def _xid_rows(judged: list[xid_policy.Judged]) -> list[dict[str, Any]]:
    """One row per GPU, Xid, action and status: incidents and lines summed, first/last time."""
    rows: dict[tuple, dict[str, Any]] = {}
    for item in judged:
        i = item.incident
        key = (i["gpu"], i["xid"], i["action"], item.status)
        row = rows.setdefault(key, {
            "gpu": i["gpu"], "xid": i["xid"], "name": i["name"], "incidents": 0, "lines": 0,
            "first_seen": i["first_seen"], "last_seen": i["last_seen"], "action": i["action"],
            "action_source": i["action_source"], "status": item.status, "repeated": False,
            "uuid": i["uuid"], "driver_said": i.get("driver_said")})
        row["incidents"] += 1
        row["lines"] += i["lines"]
        row["last_seen"] = i["last_seen"]
        row["repeated"] = row["repeated"] or item.why == "repeated"
    return sorted(rows.values(), key=lambda r: (xid_policy.STATUSES.index(r["status"]), r["gpu"],
                                                -1 if r["xid"] is None else r["xid"]))


def _xid_line(row: dict[str, Any]) -> str:
    number = f"Xid {row['xid']}" if row["xid"] is not None else "no Xid line"
    count = row["incidents"]
    first, last = row["first_seen"], row["last_seen"]
    when = "no timestamp" if first is None else (
        f"[{first}]" if first == last else f"[{first}] .. [{last}]")
    repeated = ", repeated" if row["repeated"] else ""
    source = row["action_source"]
    if source == "driver" and row.get("driver_said"):
        source = f"the driver's Xid 154: recovery action {row['driver_said']}"
    return (f"{row['gpu']} {number} ({row['name'] or 'not in the Xid catalog'}): "
            f"{_plural(count, 'incident')}, {_plural(row['lines'], 'line')}, {when}"
            f" -> {row['action']} ({source}{repeated})")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


_APP_ACTIONS = (cat.NONE, cat.IGNORE, cat.RESTART_APP, cat.INVESTIGATE)
# The operator's actions for each recovery action of NVIDIA's Xid catalog, first to last
# (``verdict``: HV's chain reset_gpu -> restart_os -> service_required; drain where the
# catalog says to drain first).
XID_ACTIONS = {
    cat.NONE: ("investigate",), cat.IGNORE: ("investigate",),
    cat.RESTART_APP: ("investigate",), cat.INVESTIGATE: ("investigate",),
    cat.RESET_GPU: ("reset_gpu", "reboot", "replace"), cat.DRAIN_P2P: ("drain", "reset_gpu"),
    cat.DRAIN_AND_RESET: ("drain", "reset_gpu"), cat.RECOVER_IMEX_DOMAIN: ("restart_service",),
    cat.REBOOT: ("reboot", "replace"), cat.HARDWARE: ("drain", "replace"),
}


def _xid_fix(rows: list[dict[str, Any]]) -> str:
    """The actions the failing and warning rows call for, worst first, with their GPUs."""
    parts = []
    for action in reversed(cat.ACTIONS):
        gpus = sorted({r["gpu"] for r in rows if r["action"] == action})
        if gpus:
            parts.append(f"{action} on {_list(gpus, 4)}: {cat.ACTION_TEXT[action]}")
    after = "; after a reset or reboot run dcgmi diag -r 3" if any(
        r["action"] not in _APP_ACTIONS for r in rows) else (
        "; recurring on one GPU: run dcgmi diag -r 3 on it to tell the GPU from the job"
        if any(r["repeated"] for r in rows) else "")
    return ("manual: " + "; ".join(parts) + ". Actions from NVIDIA's Xid catalog, or the "
            "driver's own (Xid 154)" + after)


@check("gpu.xids",
       hand="incidents judged by the Xid policy and their recurrence",
       health=True, severity="high",
       title="No GPU Xid incident that needs action",
       risk="Xids whose recovery is a GPU reset, a reboot or hardware service (ECC, NVLink, "
            "GSP, timeouts, a GPU fallen off the bus) mean a faulty or degraded GPU: jobs "
            "crash or hang and restart from a checkpoint; application Xids (13/31/43/45) "
            "usually point at the job, unless they keep recurring on one GPU",
       fix="manual: follow the recovery action of each incident (NVIDIA Xid catalog, or the "
           "driver's Xid 154): reset the GPU (nvidia-smi -r), reboot or power-cycle, or send "
           "the GPU for service; then run dcgmi diag -r 3")
def check_xids(facts: Facts, profile: Profile) -> Outcome:
    """Judged from the kernel log alone: a GPU that fell off the bus, whose nvidia-smi fails,
    still has its Xid incidents judged."""
    _, not_listed = _gpus(facts)
    events = _layer(facts).get("xids")
    if events is None:
        return not_listed or unknown(f"kernel log not readable{_unread(facts, 'xids')}")
    if not events and not_listed:
        return not_listed
    policy = xid_policy.policy_from_profile(profile)
    judged, earlier = xid_policy.judge(group_incidents(events, policy.incident_window_s), policy)
    rows = _xid_rows(judged)
    found = [r for r in rows if r["status"] in (FAIL, WARN)]
    noted = [r for r in rows if r["status"] == xid_policy.NOTE]
    boots = "" if policy.include_earlier_boots else " since the last boot"
    expected = (f"no incident{boots} whose action fails ("
                f"{', '.join(a for a, s in policy.action_status.items() if s == FAIL)}), nor "
                f"{policy.repeat_count} of one Xid on one GPU within {policy.repeat_window_s:g} s")
    more = f" ({_plural(earlier, 'incident')} before the last boot not counted)" if earlier else ""
    ignored = sum(r["status"] == xid_policy.IGNORE for r in rows)
    more += f" ({ignored} ignored by the policy)" if ignored else ""
    if noted:
        more += ("; the application's own faults, not the GPU's (restart the job; "
                 f"{policy.repeat_count} on one GPU within {policy.repeat_window_s:g} s warn): "
                 + "; ".join(_xid_line(r) for r in noted))
    evidence = _evidence(facts, "xids")
    if not found:
        what = "no Xid incident that needs action on the node" if noted else "no Xid incident"
        return Outcome(PASS, rows, expected, f"{what}{boots}{more}", evidence)
    detail = "; ".join(_xid_line(r) for r in found) + more
    status = FAIL if any(r["status"] == FAIL for r in found) else WARN
    worst = max((r["action"] for r in found if r["status"] == status), key=cat.ACTIONS.index)
    return Outcome(status, rows, expected, detail, evidence, fix=_xid_fix(found),
                   actions=XID_ACTIONS[worst])
