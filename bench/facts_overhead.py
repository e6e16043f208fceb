#!/usr/bin/env python3
"""Cost of ``exemplar.tune.facts`` (all layers) against ``ping`` and ``setup``, side by side.

Builds an inventory of N local-connection hosts (all this machine), then runs, for each N,
``ansible all -m ping``, ``-m exemplar.tune.facts`` and ``-m setup`` in turn (interleaved,
``--repeat`` rounds, median kept) and prints wall times and the ratios to ping. Local
connection measures the module cost itself (AnsiballZ packaging, interpreter start, the
reads), which is what a fleet pays per host on top of its transport.

``facts`` runs with the payload bytecode cache (a private directory here, warmed by the
first run: a host's second and later runs); ``facts-cold`` with the cache off (what a host's
first run compiles).

    python bench/facts_overhead.py                 # N = 50 and 200, 1 round
    python bench/facts_overhead.py --hosts 20 --repeat 3 --forks 8
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# label -> (module, extra environment)
MODULES = {"ping": ("ansible.builtin.ping", {}),
           "facts": ("exemplar.tune.facts", {}),
           "facts-cold": ("exemplar.tune.facts", {"EXEMPLAR_TUNE_BYTECODE_CACHE": "off"}),
           "setup": ("ansible.builtin.setup", {})}


def write_inventory(directory: Path, count: int) -> Path:
    """INI inventory of ``count`` local hosts using this interpreter."""
    lines = ["[fleet]"] + [f"h{i:04d}" for i in range(count)]
    lines += ["[fleet:vars]", "ansible_connection=local",
              f"ansible_python_interpreter={sys.executable}"]
    path = directory / f"hosts-{count}.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def environment(directory: Path) -> dict[str, str]:
    """Environment with the collection linked in and quiet output."""
    link = directory / "colls" / "ansible_collections" / "exemplar" / "tune"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(REPO, target_is_directory=True)
    bindir = os.path.dirname(sys.executable)
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(directory / "colls"),
                PATH=f"{bindir}:{os.environ['PATH']}", ANSIBLE_LOAD_CALLBACK_PLUGINS="0",
                ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal",
                ANSIBLE_LOCAL_TEMP=str(directory / "tmp"),
                EXEMPLAR_TUNE_BYTECODE_CACHE=str(directory / "bytecode"))


def time_module(module: str, inventory: Path, forks: int, env: dict[str, str]) -> float:
    """Wall seconds of one ad-hoc run; fails loudly if any host failed."""
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible"), "all", "-i",
            str(inventory), "-m", module, "-f", str(forks), "-o"]
    start = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{module} failed (rc {out.returncode}): {out.stdout[-500:]}")
    return seconds


def main() -> None:
    """Parse arguments, run the rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, action="append", help="inventory sizes (50, 200)")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds per size")
    parser.add_argument("--forks", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-facts-") as tmp:
        directory = Path(tmp)
        env = environment(directory)
        print(f"{'hosts':>6} {'module':>10} {'wall s':>8} {'per host ms':>12} {'x ping':>7}")
        for count in args.hosts or [50, 200]:
            inventory = write_inventory(directory, count)
            walls = {name: [] for name in MODULES}
            for _ in range(args.repeat):
                for name, (module, extra) in MODULES.items():
                    walls[name].append(time_module(module, inventory, args.forks,
                                                   {**env, **extra}))
            ping = statistics.median(walls["ping"])
            for name in MODULES:
                wall = statistics.median(walls[name])
                print(f"{count:>6} {name:>10} {wall:>8.1f} {1000 * wall / count:>12.0f} "
                      f"{wall / ping:>7.2f}")


if __name__ == "__main__":
    main()
