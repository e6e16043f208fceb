"""Kernel-log Xid lines -> events -> incidents with their recovery action.

The corpus (tests/test_corpus_kernel_log.py) has no real capture of Xid 154, 48, 63, 64, 94, 95
or 120. Their lines here are built from the exact formats in NVIDIA's driver sources and docs,
each named where it is used:

* the Xid line: ``"NVRM: Xid (" attr "): %d, pid=%s, name=%s, %s%s"``, or ``"..: %d, %s%s"``
  when no process is attributed, with attr ``PCI:%04x:%02x:%02x`` (`` GPU-I:%02u`` under MIG):
  ``XID_PRINT_WITH_ATTR``, NVIDIA/open-gpu-kernel-modules ``src/nvidia/src/kernel/gpu/rc/
  kernel_rc.c`` (595.45.04, df1c9a3);
* Xid 154: ``"GPU recovery action changed from 0x%x (%s) to 0x%x (%s)"`` with the names of
  ``_gpuRecoveryActionName`` (``src/nvidia/src/kernel/gpu/gpu.c``) and the codes of
  ``NV2080_CTRL_GPU_RECOVERY_ACTION_*`` (``ctrl2080gpu.h``);
* Xid 94/95: the example lines in the comment of ``kern_gpu_error_cont_ga100.c``;
* Xid 48: ``"GSP-RISCV uncorrectable ECC error"`` (``kernel_gsp_ecc_gb100.c``);
* Xid 120: ``"%s %s"`` engine name "GSP" + ``"%s exception: %s (cause:0x%llx) @ pc:0x%llx,
  partition:%u#%u, task:%u"`` (``kernel_crashcat_engine.c``, ``crashcat_report_v1_libos3.c``,
  cause names in ``crashcat_report.c``);
* Xid 63/64 (page retirement): "Dynamic Page Retirement: New retired page, reload the driver to
  activate. (<address>)" / "Dynamic Page Retirement: Fatal error, unable to retire page
  (<address>)", https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html; the row
  remapper form of 63 is the real line in tests/fixtures/samples/dmesg_nvrm_xid_samples.txt.
"""

from __future__ import annotations

import pytest
from ansible_collections.exemplar.tune.plugins.module_utils.readers import (
    kernel_log,
    xid,
    xid_catalog,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.xid_incidents import (
    group_incidents,
)


def incidents(text: str, window_s: float = 300.0) -> list[dict]:
    return group_incidents(xid.parse_xid_events(text), window_s)


def summary(text: str, window_s: float = 300.0) -> list[tuple]:
    return [(i["gpu"], i["xid"], i["lines"], i["boot"], i["action"], i["action_source"])
            for i in incidents(text, window_s)]


# -- Xid 154: the driver's recovery action ---------------------------------------------------

BUS_LOSS = ("[  512.000100] NVRM: Xid (PCI:0000:04:00): 79, GPU has fallen off the bus.\n"
            "[  512.000200] NVRM: GPU 0000:04:00.0: GPU has fallen off the bus.\n")
RECOVERY = ("[{t}] NVRM: Xid (PCI:0000:04:00): 154, "
            "GPU recovery action changed from {old} to {new}\n")


@pytest.mark.parametrize(("new", "action"), [
    ("0x0 (None)", "NONE"), ("0x1 (GPU Reset Required)", "RESET_GPU"),
    ("0x2 (Node Reboot Required)", "REBOOT"), ("0x3 (Drain P2P)", "DRAIN_P2P"),
    ("0x4 (Drain and Reset)", "DRAIN_AND_RESET"), ("0x5 (Recover IMEX Domain)",
                                                   "RECOVER_IMEX_DOMAIN"),
    ("0x2 (OS Reboot)", "REBOOT"),  # the code decides, not the wording
    ("0x9 (Node Reboot Required)", "REBOOT"),  # unknown code: the name
    ("0x9 (Something New)", "INVESTIGATE"),
])
def test_driver_action_of_xid_154(new, action):
    assert xid_catalog.driver_action(f"GPU recovery action changed from 0x0 (None) to {new}") \
        == action


def test_xid_154_wins_over_the_catalog_for_its_incident():
    text = BUS_LOSS + RECOVERY.format(t="  512.300000", old="0x0 (None)",
                                      new="0x1 (GPU Reset Required)")
    (incident,) = incidents(text)
    assert (incident["xid"], incident["lines"], incident["catalog_action"]) == (79, 2, "RESTART_BM")
    assert (incident["driver_action"], incident["action"], incident["action_source"]) == (
        "RESET_GPU", "RESET_GPU", "driver")


def test_latest_xid_154_in_the_window_is_the_one_that_counts():
    text = (BUS_LOSS
            + RECOVERY.format(t="  512.300000", old="0x0 (None)", new="0x1 (GPU Reset Required)")
            + RECOVERY.format(t="  513.000000", old="0x1 (GPU Reset Required)",
                              new="0x2 (Node Reboot Required)"))
    assert summary(text) == [("00000000:04:00.0", 79, 2, 0, "REBOOT", "driver")]


def test_a_lone_or_late_xid_154_is_its_own_incident():
    late = BUS_LOSS + RECOVERY.format(t=" 1512.000000", old="0x0 (None)", new="0x3 (Drain P2P)")
    assert summary(late) == [("00000000:04:00.0", 79, 2, 0, "REBOOT", "catalog"),
                             ("00000000:04:00.0", 154, 1, 0, "DRAIN_P2P", "driver")]
    other_gpu = BUS_LOSS.replace("04:00", "05:00") + RECOVERY.format(
        t="  512.300000", old="0x0 (None)", new="0x1 (GPU Reset Required)")
    assert [(i["gpu"], i["xid"], i["action"]) for i in incidents(other_gpu)] == [
        ("00000000:05:00.0", 79, "REBOOT"), ("00000000:04:00.0", 154, "RESET_GPU")]


# -- Xids with no real capture in the corpus -------------------------------------------------


@pytest.mark.parametrize(("line", "want"), [
    # kern_gpu_error_cont_ga100.c, the comment's three examples
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
     "RST: No, D-RST: No", ("00000000:01:00.0", 94, [7194], "Contained memory error",
                            "RESTART_APP", "RESTART_APP")),
    ("NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9). RST: No, "
     "D-RST: No", ("00000000:01:00.0", 94, [7062], "Contained memory error", "RESTART_APP",
                   "RESTART_APP")),
    ("NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, "
     "D-RST: No", ("00000000:01:00.0", 95, [7062], "Uncontained memory error", "RESET_GPU",
                   "RESET_GPU")),
    # kernel_rc.c format without a process + kernel_gsp_ecc_gb100.c message
    ("NVRM: Xid (PCI:0000:1b:00): 48, GSP-RISCV uncorrectable ECC error",
     ("00000000:1B:00.0", 48, [], "Double Bit ECC Error", "WORKFLOW_XID_48", "RESET_GPU")),
    # kernel_rc.c + the crashcat report format (GSP task exception)
    ("NVRM: Xid (PCI:0000:1b:00): 120, GSP task exception: load access fault (cause:0x5) @ "
     "pc:0x1f3c0, partition:1#0, task:3",
     ("00000000:1B:00.0", 120, [], "GSP Error", "RESET_GPU", "RESET_GPU")),
    # dynamic page retirement (docs) in the kernel_rc.c line
    ("NVRM: Xid (PCI:0000:1b:00): 63, Dynamic Page Retirement: New retired page, reload the "
     "driver to activate. (0x00000000003a9e2c)",
     ("00000000:1B:00.0", 63, [], "GPU memory remapping event", "IGNORE", "IGNORE")),
    ("NVRM: Xid (PCI:0000:1b:00): 64, Dynamic Page Retirement: Fatal error, unable to retire "
     "page (0x00000000003a9e2c)",
     ("00000000:1B:00.0", 64, [], "GPU memory remapping failure", "RESET_GPU", "RESET_GPU")),
    # the real row-remapper line (samples/dmesg_nvrm_xid_samples.txt)
    ("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, "
     "reset gpu to activate.",
     ("00000000:10:1C.0", 63, [1896], "GPU memory remapping event", "IGNORE", "IGNORE")),
])
def test_catalog_action_of_documented_lines(line, want):
    (incident,) = incidents(line + "\n")
    assert (incident["gpu"], incident["xid"], incident["pids"], incident["name"],
            incident["catalog_action"], incident["action"]) == want
    assert (incident["lines"], incident["action_source"], incident["first_seen"]) == (
        1, "catalog", None)


def test_unknown_xid_is_investigate_not_an_error():
    (incident,) = incidents("[ 1.5] NVRM: Xid (PCI:0000:1b:00): 250, something new\n")
    assert (incident["name"], incident["catalog_action"], incident["action"],
            incident["action_source"]) == (None, None, "INVESTIGATE", "unknown")


# -- grouping: window, GPU, Xid --------------------------------------------------------------


def xid13(t: float, bdf: str = "38:00", number: int = 13) -> str:
    return f"[{t:12.6f}] NVRM: Xid (PCI:0000:{bdf}): {number}, pid=42, name=python, exc\n"


def test_gap_longer_than_the_window_starts_a_new_incident():
    text = xid13(100) + xid13(399) + xid13(698.5) + xid13(999)
    assert [i["lines"] for i in incidents(text)] == [3, 1]
    assert [i["lines"] for i in incidents(text, window_s=10)] == [1, 1, 1, 1]
    assert [i["lines"] for i in incidents(text, window_s=1000)] == [4]
    first = incidents(text)[0]
    assert (first["first_seen"], first["last_seen"], first["first_t"], first["last_t"]) == (
        "100.000000", "698.500000", 100.0, 698.5)


def test_gpus_and_xids_are_separate_incidents_even_when_interleaved():
    text = xid13(1) + xid13(1.1, "39:00") + xid13(1.2, number=31) + xid13(1.3) + xid13(1.4, "39:00")
    assert [(i["gpu"], i["xid"], i["lines"]) for i in incidents(text)] == [
        ("00000000:38:00.0", 13, 2), ("00000000:39:00.0", 13, 2), ("00000000:38:00.0", 31, 1)]


def test_lines_without_timestamps_are_one_incident_per_gpu_and_xid():
    text = "NVRM: Xid (PCI:0000:38:00): 13, a\nNVRM: Xid (PCI:0000:38:00): 13, b\n"
    assert summary(text) == [("00000000:38:00.0", 13, 2, 0, "RESTART_APP", "catalog")]


def test_processes_and_identity_are_collected():
    text = ("[ 10.0] NVRM: GPU at PCI:0000:38:00: GPU-af4f89ae-d08b-1b53-9938-c9ed209a3513\n"
            "[ 10.0] NVRM: GPU Board Serial Number: 1710424007242\n"
            + xid13(10.1) + xid13(10.2).replace("pid=42, name=python", "pid=43, name=torch"))
    (incident,) = incidents(text)
    assert (incident["pids"], incident["processes"]) == ([42, 43], ["python", "torch"])
    assert (incident["uuid"], incident["serial"]) == (
        "GPU-af4f89ae-d08b-1b53-9938-c9ed209a3513", "1710424007242")


# -- boots -----------------------------------------------------------------------------------


def test_dmesg_clock_restart_is_a_new_boot():
    text = (xid13(5000, number=79) + "[    0.000000] Linux version 6.8.0\n"
            "[    0.000000] Command line: ro\n" + xid13(12.5))
    assert summary(text) == [("00000000:38:00.0", 79, 1, -1, "REBOOT", "catalog"),
                             ("00000000:38:00.0", 13, 1, 0, "RESTART_APP", "catalog")]
    assert xid.parse_kernel_log(text)["boots"] == 2


@pytest.mark.parametrize("marker", ["-- Boot 6f3ac2b14e0d4e9aa1c0e1a2b3c4d5e6 --", "-- Reboot --"])
def test_journalctl_boot_markers(marker):
    text = (f"{marker}\n"  # a leading marker starts no second boot
            "May 02 21:43:54 node7 kernel: NVRM: Xid (PCI:0000:38:00): 79, GPU has fallen off "
            "the bus.\n"
            f"{marker}\n"
            "May 02 22:10:01 node7 kernel: NVRM: Xid (PCI:0000:38:00): 79, GPU has fallen off "
            "the bus.\n")
    assert [(i["xid"], i["boot"], i["first_seen"]) for i in incidents(text)] == [
        (79, -1, "May 02 21:43:54"), (79, 0, "May 02 22:10:01")]
    assert xid.parse_kernel_log(text)["boots"] == 2


def test_a_clock_going_back_a_little_is_not_a_boot():
    text = xid13(100.5) + xid13(100.2)
    assert xid.parse_kernel_log(text)["boots"] == 1


# -- line prefixes ---------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "time", "t", "clock"), [
    ("[ 1843.308145] NVRM: x", "1843.308145", 1843.308145, "boot"),
    ("[Sun Feb 23 16:24:18 2025] NVRM: x", "Sun Feb 23 16:24:18 2025", 1740327858.0, "wall"),
    ("kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: x",
     "2025-01-21T04:41:44,283302+00:00", 1737434504.283302, "wall"),
    ("2025-01-21T05:41:44+0100 node7 kernel: NVRM: x", "2025-01-21T05:41:44+0100",
     1737434504.0, "wall"),
    ("May 02 21:43:54 ethan-desktop kernel: NVRM: x", "May 02 21:43:54", 957303834.0, "wall"),
    ("Nov 22 18:29:55 hostname kernel: [ 966.503025] NVRM: x", "966.503025", 966.503025, "boot"),
    ("> [6781741.548768] NVRM: x", "6781741.548768", 6781741.548768, "boot"),
    ("               NVRM: x", None, None, None),
    ("NVRM: x", None, None, None),
])
def test_line_prefixes(line, time, t, clock):
    body, have_time, have_t, have_clock = kernel_log.split_prefix(line)
    assert (body, have_time, have_clock) == ("NVRM: x", time, clock)
    assert have_t == pytest.approx(t) if t is not None else have_t is None


@pytest.mark.parametrize(("line", "body", "time", "t"), [
    ("[ 7.25]  x", " x", "7.25", 7.25),  # one space after the stamp belongs to it
    ("[7.25]\tx", "x", "7.25", 7.25),
    ("[\u0661\u0662.\u0663] x", "x", "\u0661\u0662.\u0663", 12.3),  # digits of any script
    ("[ 12.5 ] x", "[ 12.5 ] x", None, None),  # not dmesg's stamps: the line is the body
    ("[12.3.4] x", "[12.3.4] x", None, None),
    ("[1.] x", "[1.] x", None, None),
    ("[.5] x", "[.5] x", None, None),
    ("[ 5", "[ 5", None, None),
])
def test_dmesg_stamps_are_only_what_dmesg_writes(line, body, time, t):
    assert kernel_log.split_prefix(line) == (body, time, t, "boot" if t else None)


def test_multi_line_bus_loss_in_journalctl_form():
    text = ("Jun 02 13:13:04 n1 kernel: NVRM: The NVIDIA GPU 0000:b3:00.0\n"
            "Jun 02 13:13:04 n1 kernel: NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
            "Jun 02 13:13:04 n1 kernel: NVRM: fallen off the bus and is not responding to "
            "commands.\n")
    (incident,) = incidents(text)
    assert (incident["gpu"], incident["xid"], incident["kind"], incident["lines"],
            incident["action"]) == ("00000000:B3:00.0", None, "fallen_off_bus", 3, "REBOOT")


def test_a_started_message_that_is_not_a_bus_loss_is_no_event():
    text = ("[ 5.1] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
            "        NVRM: (PCI ID: 10de:1e04) installed in this system is\n"
            "        NVRM: not supported by the NVIDIA 595.45 driver release.\n")
    assert incidents(text) == []


@pytest.mark.parametrize("garbage", ["", "\x00\xff", "NVRM:", "-- Boot --", "[ abc] NVRM: Xid"])
def test_garbage_gives_an_empty_reading(garbage):
    reading = xid.parse_kernel_log(garbage)
    assert (reading["events"], reading["boots"]) == ([], 1)
