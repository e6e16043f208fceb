"""A simulated boot of a simulated host: what the kernel derives at boot, written into its tree.

    python -m exemplar_tune.sim.boot HOST_DIR

* ``/proc/cmdline``: the boot image and root device of the previous boot, then
  ``GRUB_CMDLINE_LINUX`` and ``GRUB_CMDLINE_LINUX_DEFAULT`` of ``/etc/default/grub`` (what
  ``update-grub`` puts on a normal entry);
* CMDQV (a Grace host with the ``NVDA200C`` device and ``CONFIG_TEGRA241_CMDQV``): the
  ``arm_smmu_v3`` parameters, the driver's kernel-log lines and the ``tegra241-cmdqv`` interrupt,
  as the driver's probe leaves them with that command line;
* ``.exemplar/sim/boots`` counts the boots.

Runtime settings written under ``/sys`` and ``/proc`` are kept: the roles persist every
runtime change they make (udev rules, sysctl.d, drop-ins), so a real boot restores them too.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ansible_collections.exemplar.tune.plugins.module_utils.grub import VARIABLES, read_variable

from exemplar_tune.sim.hosts import CMDQV_PARAM

BOOT_WORDS = re.compile(r"^(BOOT_IMAGE=|root=|ro$|rw$)")
CMDQV_LOG = ("[    0.404120] arm-smmu-v3 arm-smmu-v3.0.auto: found companion CMDQV device: "
             "NVDA200C:00\n")
CMDQV_OFF_LOG = ("[    0.404120] tegra241_cmdqv: Detected disable_cmdqv=true\n"
                 "[    0.404131] tegra241_cmdqv: Falling back to standard SMMU CMDQ\n")
IRQ_LINE = ("  24:          0          0          0          0          0          0          0"
            "          0  GICv3  89 Level       tegra241-cmdqv\n")
TRUE_WORDS = ("", "1", "y", "Y", "true", "on")


def boot(root: Path) -> str:
    """Boot the host tree at ``root``; returns the new command line."""
    cmdline = _cmdline(root)
    (root / "proc/cmdline").write_text(cmdline + "\n")
    if (root / "sys/bus/acpi/devices/NVDA200C:00").exists():
        _probe_cmdqv(root, cmdline.split())
    counter = root / ".exemplar/sim/boots"
    counter.parent.mkdir(parents=True, exist_ok=True)
    boots = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(f"{boots + 1}\n")
    return cmdline


def _cmdline(root: Path) -> str:
    previous = (root / "proc/cmdline").read_text().split()
    words = [w for w in previous if BOOT_WORDS.match(w)]
    grub = (root / "etc/default/grub").read_text()
    for name in reversed(VARIABLES):  # GRUB_CMDLINE_LINUX first, then ..._DEFAULT
        words += (read_variable(grub, name) or "").split()
    return " ".join(words)


def _probe_cmdqv(root: Path, words: list[str]) -> None:
    values = [w.split("=", 1)[1] if "=" in w else "" for w in words
              if w.split("=", 1)[0] == CMDQV_PARAM]
    disabled = bool(values) and values[-1] in TRUE_WORDS
    params = root / "sys/module/arm_smmu_v3/parameters"
    (params / "disable_cmdqv").write_text("Y\n" if disabled else "N\n")
    log = root / ".exemplar/commands/dmesg.txt"
    kept = [line for line in log.read_text().splitlines(True)
            if "CMDQV" not in line and "tegra241_cmdqv" not in line]
    log.write_text("".join(kept) + (CMDQV_OFF_LOG if disabled else CMDQV_LOG))
    interrupts = root / "proc/interrupts"
    lines = [line for line in interrupts.read_text().splitlines(True)
             if not line.rstrip().endswith("tegra241-cmdqv")]
    interrupts.write_text("".join(lines) + ("" if disabled else IRQ_LINE))


def main(argv: list[str] | None = None) -> int:
    """Boot the host trees named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hosts", nargs="+", type=Path, metavar="HOST_DIR")
    args = parser.parse_args(argv)
    for host in args.hosts:
        if not (host / "proc/cmdline").is_file():
            print(f"exemplar-tune sim boot: {host}: not a simulated host", file=sys.stderr)
            return 2
        print(f"{host.name}: booted: {boot(host)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
