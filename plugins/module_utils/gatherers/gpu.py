"""gpu-layer facts: GPU inventory and health, NVLink and IMEX, and the Xid events in the kernel
log.

Inventory and per-GPU health come from ``nvidia-smi -q -x`` (:mod:`nvidia_smi`); in a captured
sysroot without the XML, from the plain-text ``nvidia-smi -q`` (:mod:`nvidia_smi_text`); on a
live host without nvidia-smi but with ``pynvml`` and a driver, from NVML (:mod:`nvml`). Xid
events come from the kernel log (:mod:`xid`): ``xids`` holds one event per reporting line,
``xid_incidents`` the events grouped into incidents with their recovery action
(:mod:`xid_incidents`, default window), ``xid_log`` what else the log told (boots seen, clock,
NVSwitch SXid lines not read). ``nvlink`` holds each GPU's NVLink links from ``nvidia-smi nvlink
-s`` (:mod:`nvlink`), ``nvlink_errors`` their error counters from ``nvidia-smi nvlink -e`` (read
only where a GPU lists links); ``imex`` the IMEX domain from ``nvidia-imex-ctl -N``
(:mod:`imex`), read only where a GPU is in a multi-node NVLink domain; ``nvswitches`` the
NVSwitches on the PCI bus and ``fabric_manager`` the state of their service
(:mod:`fabric_manager`), read only where there are NVSwitches. Having no GPU, no driver
or no nvidia-smi is an answer (``present: False`` with a ``reason``), not an error; an output
that cannot be understood (malformed or unsafe XML, an unexpected failure) is ``present: None``
plus an ``errors`` entry; a single field that cannot be read is ``None`` plus an ``errors``
entry naming it (``gpus.N``).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.exemplar.tune.plugins.module_utils.gatherers.factsheet import FactSheet
from ansible_collections.exemplar.tune.plugins.module_utils.readers import (
    fabric_manager,
    imex,
    nvidia_smi,
    nvlink,
    nvml,
    xid,
    xid_incidents,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotSupported,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.pci import PCI_DEVICES
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import COMMANDS_DIR, Sysroot


def _nvidia_smi(root: Sysroot) -> tuple[dict[str, Any], str]:
    """(report, its source): the XML; in a sysroot that has only the text, the text."""
    try:
        return nvidia_smi.read_nvidia_smi(root), nvidia_smi.SOURCE
    except nvidia_smi.NoGpu:
        raise
    except NotSupported:
        if root.live or not root.exists(f"{COMMANDS_DIR}/{nvidia_smi.TEXT_COMMAND}"):
            raise
    # loaded only for the captured sysroots that hold the text form (never on a live host)
    from ansible_collections.exemplar.tune.plugins.module_utils.readers import nvidia_smi_text

    return nvidia_smi_text.read_nvidia_smi_text(root), nvidia_smi_text.SOURCE


def _inventory(root: Sysroot, sheet: FactSheet,
               nvml_ok: bool) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(report, its source, why there is none); errors go to ``sheet``."""
    try:
        return (*_nvidia_smi(root), None)
    except NotSupported as exc:
        report = nvml.read_nvml(root) if nvml_ok else None
        if report is not None:
            return report, nvml.SOURCE, None
        return None, None, f"{exc.path}: {exc.reason}"
    except HostStateError as exc:
        sheet.error("present", exc)
        return None, None, None


def _present(report: dict[str, Any] | None, why_not: str | None) -> tuple[bool | None, str | None]:
    if report is None:
        return (False, why_not) if why_not else (None, None)
    if not report["gpus"]:
        return False, "no GPU listed"
    return True, None


def _kernel_log(root: Sysroot, sheet: FactSheet) -> None:
    """``xids``, ``xid_incidents`` and ``xid_log``; all ``None`` (one error) when unreadable."""
    try:
        log = xid.read_kernel_log(root)
    except HostStateError as exc:
        sheet.error("xids", exc)
        log = None
    events = log["events"] if log else None
    sheet.put("xids", events, xid.SOURCE)
    sheet.put("xid_incidents", None if log is None else xid_incidents.group_incidents(events),
              xid.SOURCE)
    sheet.put("xid_log", None if log is None else {k: log[k] for k in (
        "boots", "clock", "sxid_lines")}, xid.SOURCE)


def gather(root: Sysroot) -> dict[str, Any]:
    """Facts of the gpu layer (keys: present, reason, source, driver_version, cuda_version,
    attached_gpus, count, gpus, nvlink, nvlink_missing, nvlink_errors, nvlink_errors_missing,
    nvswitches, fabric_manager, fabric_manager_missing, imex, imex_missing, xids, xid_incidents,
    xid_log, nvml;
    plus ``sources`` and ``errors``)."""
    sheet = FactSheet()
    status = nvml.nvml_status(root)
    report, src, why_not = _inventory(root, sheet, status["available"])
    put_report(sheet, report, src or nvidia_smi.SOURCE, why_not)
    present = _present(report, why_not)[0]
    links = sheet.attempt_command("nvlink", nvlink.SOURCE, nvlink.read_nvlink_status, root,
                                  wanted=present)
    # error counters only where a GPU lists links: a PCIe-only host runs no second command
    sheet.attempt_command("nvlink_errors", nvlink.ERRORS_SOURCE, nvlink.read_nvlink_errors,
                          root, wanted=any(g["links"] for g in links or []))
    switches = sheet.attempt("nvswitches", root.display(PCI_DEVICES),
                             fabric_manager.list_nvswitches, root) if present else \
        sheet.put("nvswitches", None, root.display(PCI_DEVICES))
    sheet.attempt_command("fabric_manager", fabric_manager.SOURCE,
                          fabric_manager.read_fabric_manager, root, wanted=switches)
    # IMEX only matters in a multi-node NVLink domain: elsewhere its tool is not even run
    sheet.attempt_command("imex", imex.SOURCE, imex.read_imex_nodes, root,
                          wanted=present and any(in_cluster(g) for g in report["gpus"]))
    _kernel_log(root, sheet)
    sheet.put("nvml", status, nvml.SOURCE)
    return sheet.result()


def in_cluster(gpu: dict[str, Any]) -> bool:
    """Whether the GPU is registered in a multi-node NVLink domain (a non-zero cluster UUID:
    GB200/GB300 NVL)."""
    uuid = (gpu.get("fabric") or {}).get("cluster_uuid")
    return bool(uuid) and set(uuid) - set("0-") != set()


def put_report(sheet: FactSheet, report: dict[str, Any] | None, src: str,
               why_not: str | None = None) -> None:
    """The inventory facts of one report (nvidia-smi XML or text, or NVML) into ``sheet``.

    ``report`` ``None`` means none: no GPU when ``why_not`` says why, else unknown. The
    report's own ``errors`` (fields it could not read) become the sheet's.
    """
    present, reason = _present(report, why_not)
    sheet.put("present", present, src)
    sheet.put("reason", reason, src)
    sheet.put("source", None if report is None else
              "nvml" if src == nvml.SOURCE else "nvidia-smi", src)
    for key in ("driver_version", "cuda_version", "attached_gpus"):
        sheet.put(key, report.get(key) if report else None, src)
    known = present is not None
    sheet.put("count", len(report["gpus"]) if report else (0 if known else None), src)
    sheet.put("gpus", report["gpus"] if report else ([] if known else None), src)
    for err in (report or {}).get("errors", []):
        sheet.error(err["fact"], HostStateError(err["path"], err["error"]))
