"""Facts load only the readers a host has something for.

Facts run on every host of a fleet at every run, so a reader whose input is absent (no
``nvidia-smi`` output, no BMC, no tuned profile ...) must not even be imported. Each case
gathers every layer in a fresh interpreter and lists which of the optional readers ended up
in ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SYSROOTS

PACKAGE = "ansible_collections.exemplar.tune.plugins.module_utils"
OPTIONAL = {
    "xml": "xml.etree.ElementTree",
    "defusedxml": "defusedxml",
    "nvidia-smi text": f"{PACKAGE}.readers.nvidia_smi_text",
    "bios": f"{PACKAGE}.readers.bios",
    "bios attributes": f"{PACKAGE}.readers.bios_attributes",
    "redfish": f"{PACKAGE}.readers.redfish",
    "configparser": "configparser",
    "gzip": "gzip",
    "calendar": "calendar",
}
GATHER = f"""
import json, sys
from {PACKAGE}.readers.bmc import BmcConfig
from {PACKAGE}.layers import gather_facts
from {PACKAGE}.sysroot import Sysroot
bmc = BmcConfig.from_params(json.loads(sys.argv[2]))
gather_facts(Sysroot(sys.argv[1]), context={{"bmc": bmc}})
print(json.dumps(sorted(k for k, m in {OPTIONAL!r}.items() if m in sys.modules)))
"""


def loaded_readers(root: Path, bmc: dict | None = None) -> list[str]:
    """The optional readers imported by gathering every layer of ``root`` (with ``bmc``)."""
    env = dict(os.environ, PYTHONPATH=os.environ["ANSIBLE_COLLECTIONS_PATH"])
    out = subprocess.run([sys.executable, "-c", GATHER, str(root), json.dumps(bmc)],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def test_a_host_with_nothing_to_read_loads_no_optional_reader(tmp_path):
    assert loaded_readers(tmp_path) == []


H100 = SYSROOTS / "h100-x86"
COPY = object()  # the file of the same name in the h100-x86 sysroot
TUNED = "usr/lib/tuned/accelerator-performance/tuned.conf"
KERNEL_LOG = ".exemplar/commands/dmesg.txt"
# input -> (files to put in an empty sysroot, the readers it needs)
INPUTS = {
    "nvidia-smi XML": ({".exemplar/commands/nvidia-smi-q-x.xml": COPY}, ["defusedxml", "xml"]),
    "nvidia-smi text": ({".exemplar/commands/nvidia-smi-q.txt": "GPU 00000000:18:00.0\n"},
                        ["nvidia-smi text", "xml"]),  # builds a tree, parses no XML
    "BIOS capture": ({".exemplar/commands/redfish-bios.json": '{"Bios": {"Attributes": {}}}'},
                     ["bios", "bios attributes"]),
    "tuned profile": ({"etc/tuned/active_profile": "accelerator-performance\n", TUNED: COPY},
                      ["configparser"]),
    "compressed kernel config": ({"proc/config.gz": b"\x1f\x8b"}, ["gzip"]),
    "kernel log from dmesg": ({KERNEL_LOG: "[    5.000000] NVRM: x\n"}, []),
    "kernel log with wall clocks": ({KERNEL_LOG: "May 02 21:43:54 n1 kernel: x\n"}, ["calendar"]),
}


@pytest.mark.parametrize("name", INPUTS)
def test_each_input_loads_its_readers_and_no_other(tmp_path, name):
    files, readers = INPUTS[name]
    for rel, content in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is COPY:
            path.write_bytes((H100 / rel).read_bytes())
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    assert loaded_readers(tmp_path) == readers


def test_a_bmc_loads_the_redfish_client(tmp_path):
    # nothing listens on port 1: the read fails (an error in the facts), after the import
    # (calendar: for the HTTP stack's date handling)
    assert loaded_readers(tmp_path, {"address": "127.0.0.1:1", "timeout": 2}) == [
        "bios", "bios attributes", "calendar", "redfish"]
