"""Judgements on Nsight Systems data, whether it came as ``nsys stats`` tables or the SQLite export.

* ``fabric.nccl-kernel-time`` (info): per NCCL collective, its share of GPU kernel time, its
  kernel count and mean kernel duration. The collective comes from the kernel name NCCL gives
  it: ``ncclDevKernel_<Coll>_...`` from NCCL 2.19 (``ncclDevKernel_AllGather_RING_LL``,
  ``ncclDevKernel_AllReduce_Sum_f16_RING_LL``), ``ncclKernel_<Coll>_...`` before
  (``ncclKernel_AllReduce_RING_LL_Sum_float``), ``nccl<Coll>...Kernel`` in the oldest releases.
  Kernel time counts NCCL kernels that overlap compute on another stream, so the share alone is
  no verdict; ``diagnose --compare A B`` sets two captures side by side.
* ``workload.kernel-launch-rate``: warn when kernels are many and tiny: a median below
  :data:`TINY_NS` with at least :data:`MANY_PER_STEP` kernels per step (or, with no step ranges,
  :data:`MANY_IN_CAPTURE` in the capture), or with at least :data:`MANY_OUTPACED` kernels each
  launched in more CPU time (mean ``cudaLaunchKernel``) than the median kernel runs: one thread
  launching back to back cannot keep the GPU busy. Launch overhead then dominates, as with
  fine-grained MoE expert kernels or per-launch IOMMU (SMMU) work on nodes without CMDQ-V
  (``vm.cmdqv``).
* ``workload.gpu-idle-gaps`` (SQLite only, :func:`idle_finding`): the share of a device's kernel
  timeline spent in gaps of at least the threshold with no kernel running.

Steps are NVTX ranges whose name says step or iteration (``train_step``, ``Iteration 12``);
digits are folded (``step 12`` and ``step 13`` are one range name), and of several such names
the one with the longest mean range is the step (the outer range).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from exemplar_tune.diagnose.base import FAIL, INFO, PASS, WARN, Finding, Report, cite, finding

KIND = "nsys"
CHECK_NCCL = "fabric.nccl-kernel-time"
CHECK_LAUNCH = "workload.kernel-launch-rate"
CHECK_IDLE = "workload.gpu-idle-gaps"
TINY_NS = 10_000
MANY_PER_STEP = 1000
MANY_IN_CAPTURE = 10_000
MANY_OUTPACED = 1000
LAUNCH_CALL = re.compile(r"^cu(?:da)?LaunchKernel")  # cudaLaunchKernel, cuLaunchKernel(Ex)
WARN_IDLE_PCT, FAIL_IDLE_PCT = 10.0, 25.0
_NCCL = re.compile(r"\bnccl(?:Dev)?Kernel_([A-Za-z0-9]+)"
                   r"|\bnccl(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv)\w*Kernel")
_STEP = re.compile(r"(?i)step|iteration|(?<![a-z])iter(?![a-z])")


def collective(kernel: str) -> str | None:
    """``AllGather`` for ``ncclDevKernel_AllGather_RING_LL``; ``None`` for a non-NCCL kernel."""
    m = _NCCL.search(kernel)
    return (m.group(1) or m.group(2)) if m else None


def base_name(kernel: str) -> str:
    """The kernel's function name: no ``void``, no argument list."""
    return re.sub(r"^void\s+", "", kernel.split("(", 1)[0]).strip()


def human_ns(ns: float) -> str:
    """``375 ms``, ``45.5 us``: three significant digits in the largest unit that fits."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def step_name(totals: dict[str, tuple[int, float]]) -> str | None:
    """Of ``{range name: (instances, total ns)}``, the step range (see module doc), or ``None``."""
    groups: dict[str, list[float]] = {}
    for name, (count, total) in totals.items():
        if _STEP.search(name):
            group = groups.setdefault(re.sub(r"\d+", "#", name.strip()), [0, 0.0])
            group[0] += count
            group[1] += total
    steps = {k: v for k, v in groups.items() if v[0] >= 2}
    return max(steps, key=lambda k: steps[k][1] / steps[k][0]) if steps else None


def is_step(name: str, step: str) -> bool:
    return re.sub(r"\d+", "#", name.strip()) == step


def steps_from_ranges(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Steps from an ``nvtx_sum`` table: the step range's name and instance count."""
    totals = {r["name"]: (r.get("instances") or 0, r.get("total_ns") or 0.0) for r in rows}
    name = step_name(totals)
    if name is None:
        return None
    chosen = [r for r in rows if is_step(r["name"], name)]
    count = sum(r.get("instances") or 0 for r in chosen)
    total = sum(r.get("total_ns") or 0 for r in chosen)
    return {"name": name, "count": count, "mean_ns": round(total / count, 1),
            "lines": [r["line"] for r in chosen if "line" in r]}


def nccl_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per collective: kernel names, instances, total and mean ns, share of kernel time.

    ``rows`` are per-kernel-name totals (``name``, ``instances``, ``total_ns``, optionally
    ``time_pct``). With a ``Time (%)`` column on every row the share is its sum: the column is
    of the whole report even when the table was cut; else it is of the rows' total time.
    """
    listed = sum(r.get("total_ns") or 0 for r in rows) or 1
    with_pct = all(r.get("time_pct") is not None for r in rows)
    groups: dict[str, dict[str, Any]] = {}
    for r in rows:
        if (coll := collective(r["name"])) is None:
            continue
        g = groups.setdefault(coll, {"collective": coll, "kernels": [], "instances": 0,
                                     "total_ns": 0, "time_pct": 0.0, "lines": []})
        g["kernels"].append(base_name(r["name"]))
        g["instances"] += r.get("instances") or 0
        g["total_ns"] += r.get("total_ns") or 0
        g["time_pct"] += r.get("time_pct") or 0.0
        g["lines"] += [r["line"]] if "line" in r else []
    collectives = []
    for g in sorted(groups.values(), key=lambda g: -g["total_ns"]):
        share = g.pop("time_pct")
        share = share if with_pct else 100.0 * g["total_ns"] / listed
        collectives.append({**g, "share_pct": round(share, 2),
                            "mean_ns": round(g["total_ns"] / g["instances"], 1)
                            if g["instances"] else None})
    nccl_total = sum(c["total_ns"] for c in collectives)
    return {"present": bool(collectives),
            "share_pct": round(sum(c["share_pct"] for c in collectives), 2),
            "share_of_listed_pct": round(100.0 * nccl_total / listed, 2),
            "listed_time_pct": round(sum(r["time_pct"] for r in rows), 1) if with_pct else None,
            "collectives": collectives}


def nccl_finding(nccl: dict[str, Any], evidence: list[str]) -> Finding:
    if not nccl["present"]:
        return finding(CHECK_NCCL, INFO, "no NCCL kernels in this capture", evidence,
                       share_pct=0.0)
    parts = [f"{c['collective']} {c['share_pct']:g} % ({c['instances']:,} kernels, mean "
             f"{human_ns(c['mean_ns'] or 0)})" for c in nccl["collectives"]]
    text = f"NCCL kernels take {nccl['share_pct']:g} % of GPU kernel time: {', '.join(parts)}"
    if nccl["listed_time_pct"] is not None and nccl["listed_time_pct"] < 99.0:
        text += f" (the table lists {nccl['listed_time_pct']:g} % of kernel time)"
    return finding(CHECK_NCCL, INFO, text, evidence, share_pct=nccl["share_pct"],
                   collectives={c["collective"]: {k: c[k] for k in
                                                  ("share_pct", "instances", "mean_ns")}
                                for c in nccl["collectives"]})


def weighted_median(pairs: Iterable[tuple[float, int]]) -> float | None:
    """The median of values given as ``(value, how many times)``."""
    ordered = sorted((v, w) for v, w in pairs if v is not None and w)
    half, seen = sum(w for _, w in ordered) / 2, 0
    for value, weight in ordered:
        seen += weight
        if seen >= half:
            return value
    return None


def kernels_from_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Kernel count and median duration from per-name rows (each name's ``Med``, else
    ``Avg``, weighted by its instances: an estimate, the per-launch times are not there)."""
    per_name = [(r.get("med_ns", r.get("avg_ns")), r.get("instances") or 0) for r in rows]
    count = sum(w for _, w in per_name)
    tiny = sum(w for v, w in per_name if v is not None and v < TINY_NS)
    return {"instances": count, "names": len(rows), "median_ns": weighted_median(per_name),
            "under_10us_pct": round(100.0 * tiny / count, 1) if count else None,
            "estimated": True}


def launch_mean_ns(rows: Iterable[dict[str, Any]]) -> float | None:
    """The mean CPU time of a kernel launch call from CUDA API rows (name, instances, total)."""
    calls = [r for r in rows if LAUNCH_CALL.match(r["name"]) and r.get("instances")]
    count = sum(r["instances"] for r in calls)
    return round(sum(r.get("total_ns") or 0 for r in calls) / count, 1) if count else None


def launch_finding(kernels: dict[str, Any], steps: dict[str, Any] | None,
                   evidence: list[str]) -> Finding:
    """``kernels``: ``instances``, ``median_ns`` and, when known, ``launch_ns``."""
    count, median, launch = kernels["instances"], kernels["median_ns"], kernels.get("launch_ns")
    per_step = steps.get("kernels_per_step") if steps else None
    many = per_step >= MANY_PER_STEP if per_step is not None else count >= MANY_IN_CAPTURE
    tiny = median is not None and median < TINY_NS
    outpaced = tiny and launch is not None and launch >= median and count >= MANY_OUTPACED
    where = (f"{per_step:,.0f} kernels per step ({steps['count']} '{steps['name']}' ranges)"
             if steps and per_step is not None else f"{count:,} kernels in the capture")
    where += f", a launch takes the CPU {human_ns(launch)}" if launch is not None else ""
    shown = human_ns(median) if median is not None else "unknown"
    values = {"median_ns": median, "instances": count, "kernels_per_step": per_step,
              "launch_ns": launch, "under_10us_pct": kernels.get("under_10us_pct")}
    if tiny and (many or outpaced):
        what = "many tiny kernels" if many else "tiny kernels launched slower than they run"
        return finding(CHECK_LAUNCH, WARN, f"{what}: median {shown}, {where}: "
                       "launch overhead dominates (fine-grained MoE kernels, or per-launch "
                       "SMMU work without CMDQ-V: vm.cmdqv)", evidence, **values)
    return finding(CHECK_LAUNCH, PASS, f"median kernel {shown}, {where}", evidence, **values)


@dataclass
class Judged:
    """What a kernel table gives: the NCCL and kernel summaries and their findings."""

    nccl: dict[str, Any]
    kernels: dict[str, Any]
    findings: list[Finding]


def judge_kernel_table(source: str, rows: list[dict[str, Any]], steps: dict[str, Any] | None,
                       api_rows: list[dict[str, Any]]) -> Judged:
    """The findings on a ``cuda_gpu_kern_sum`` table, with ``steps`` from ``nvtx_sum`` and
    the launch calls of ``cuda_api_sum`` (``api_rows``) when the file has them.

    Kernels per step are the table's instances over the step ranges' count: both tables
    cover the same capture.
    """
    nccl = nccl_summary(rows)
    kernels = {**kernels_from_rows(rows), "launch_ns": launch_mean_ns(api_rows)}
    if steps and steps["count"]:
        steps["kernels_per_step"] = round(kernels["instances"] / steps["count"], 1)
    all_lines = [r["line"] for r in rows]
    nccl_lines = [n for c in nccl["collectives"] for n in c["lines"]]
    launch_ev = [cite(source, all_lines, "Instances")]
    launch_ev += [cite(source, steps["lines"], "Instances")] if steps and steps["lines"] else []
    return Judged(nccl, kernels, [
        nccl_finding(nccl, [cite(source, nccl_lines or all_lines, "Total Time")]),
        launch_finding(kernels, steps, launch_ev)])


def idle_finding(gaps: dict[str, Any], evidence: list[str]) -> Finding:
    """``gaps`` from the SQLite timeline: ``idle_pct``, ``count``, ``threshold_ns``, ``longest``."""
    pct = gaps["idle_pct"]
    status = FAIL if pct >= FAIL_IDLE_PCT else WARN if pct >= WARN_IDLE_PCT else PASS
    text = (f"GPU idle {pct:g} % of the kernel timeline in {gaps['count']} gap(s) of "
            f"{human_ns(gaps['threshold_ns'])} or more")
    if gaps["longest"]:
        top = gaps["longest"][0]
        text += (f"; longest {human_ns(top['ns'])} on device {top['device']} at "
                 f"{human_ns(top['at_ns'])} into the capture")
    return finding(CHECK_IDLE, status, text, evidence, idle_pct=pct, gaps=gaps["count"],
                   idle_ns=gaps["idle_ns"], longest=gaps["longest"])


def compare_nsys(report_a: Report, report_b: Report) -> dict[str, Any]:
    """Per NCCL collective in both captures: mean kernel duration in A and B and B / A.

    A collective in one capture only is named in a warning; with none in common nothing is
    compared (a warning says so).
    """
    def by_name(report: Report) -> dict[str, dict[str, Any]]:
        nccl = report.summary.get("nccl") or {}
        return {c["collective"]: c for c in nccl.get("collectives", [])}

    colls_a, colls_b = by_name(report_a), by_name(report_b)
    common = [c for c in colls_a if c in colls_b]
    warnings = [f"{c} only in {src}" for c, src in
                [(c, report_a.source) for c in colls_a if c not in colls_b]
                + [(c, report_b.source) for c in colls_b if c not in colls_a]]
    if not common:
        warnings.append(f"no NCCL collective in common ({', '.join(colls_a) or 'none'} vs "
                        f"{', '.join(colls_b) or 'none'}): nothing compared")
    return {"a": report_a.source, "b": report_b.source, "warnings": warnings,
            "collectives": [_compare_one(colls_a[c], colls_b[c]) for c in common]}


def _compare_one(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    mean_a, mean_b = a["mean_ns"], b["mean_ns"]
    ratio = round(mean_b / mean_a, 4) if mean_a and mean_b is not None else None
    text = (f"{a['collective']}: mean kernel {human_ns(mean_a or 0)} -> "
            f"{human_ns(mean_b or 0)} (ratio {ratio}); share of kernel time "
            f"{a['share_pct']:g} % -> {b['share_pct']:g} %")
    return {"collective": a["collective"], "mean_ns_a": mean_a, "mean_ns_b": mean_b,
            "ratio": ratio, "instances_a": a["instances"], "instances_b": b["instances"],
            "share_pct_a": a["share_pct"], "share_pct_b": b["share_pct"], "text": text}
