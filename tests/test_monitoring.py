"""The monitoring path checked by the real components: the shipped alert rules by ``promtool``,
and the textfile metrics by a real ``prometheus-node-exporter`` (textfile collector) scraped by
a real Prometheus server, both on 127.0.0.1, queried through Prometheus's HTTP API.

Both come from Debian's ``prometheus`` and ``prometheus-node-exporter`` packages
(``.ci/packages.txt``).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from exemplar_tune.sim.cluster import create_cluster
from tests.conftest import REPO
from tests.test_cli import cli

RULES = REPO / "monitoring" / "exemplar-tune.rules.yml"
RULE_TESTS = REPO / "monitoring" / "exemplar-tune.rules.test.yml"
NODE_EXPORTER = "prometheus-node-exporter"
INSTALL = "apt-get install prometheus prometheus-node-exporter (.ci/packages.txt lists them)"


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is needed: {INSTALL}")
    return path


def test_the_alert_rules_are_valid_and_their_unit_tests_pass() -> None:
    """Each alert fires where it should and stays silent where it should not
    (``monitoring/exemplar-tune.rules.test.yml``)."""
    checked = subprocess.run([tool("promtool"), "check", "rules", str(RULES)],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0 and "SUCCESS: 7 rules found" in checked.stdout, \
        checked.stdout + checked.stderr
    tested = subprocess.run([tool("promtool"), "test", "rules", str(RULE_TESTS)],
                            capture_output=True, text=True, timeout=120, cwd=RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    names = {rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"]
             for rule in group["rules"]}
    tests = RULE_TESTS.read_text()
    assert all(f"alertname: {name}" in tests for name in names)  # every alert has a test


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def api(port: int, path: str, **query: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - 127.0.0.1 only
        doc = json.load(response)
    assert doc["status"] == "success", doc
    return doc["data"]


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A textfile directory, node_exporter reading it and Prometheus scraping that every
    second with the shipped rules: ``(directory, Prometheus port)``."""
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    exporter_port, prometheus_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "node", "static_configs": [
            {"targets": [f"127.0.0.1:{exporter_port}"]}]}]}))
    procs = [subprocess.Popen(
        [tool(NODE_EXPORTER), "--collector.disable-defaults", "--collector.textfile",
         f"--collector.textfile.directory={textfiles}",
         f"--web.listen-address=127.0.0.1:{exporter_port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "exporter.log", "w")),  # noqa: SIM115
        subprocess.Popen(
        [tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'db'}",
         f"--web.listen-address=127.0.0.1:{prometheus_port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))]  # noqa: SIM115
    try:
        yield textfiles, prometheus_port
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def scraped(port: int, written: dict[str, float], timeout: float = 60) -> dict[str, float]:
    """Every exemplar_tune series Prometheus holds, once it holds all of ``written``:
    ``{series without instance and job: value}``."""
    deadline = time.monotonic() + timeout
    while True:
        found = {}
        for result in api(port, "query", query='{__name__=~"exemplar_tune_.+"}')["result"]:
            labels = {k: v for k, v in result["metric"].items() if k not in ("instance", "job")}
            found[_key(labels.pop("__name__"), labels)] = float(result["value"][1])
        if written.keys() <= found.keys() or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _key(name: str, labels: dict[str, str]) -> str:
    return name + json.dumps(labels, sort_keys=True)


def written_series(text: str) -> dict[str, float]:
    return {_key(s.name, s.labels): s.value for family in text_string_to_metric_families(text)
            for s in family.samples}


@pytest.mark.system
def test_prometheus_reads_back_what_exemplar_tune_meant(prometheus, tmp_path: Path) -> None:
    """A local preflight (this machine, the node recipe) and a fleet audit with a host that
    cannot be reached, in one textfile directory: every series, label and value Prometheus
    stores is the one written, times to the millisecond; the shipped rules evaluate them."""
    textfiles, port = prometheus
    local = cli("preflight", "--profile", "generic", "--format", "prometheus", "--output",
                str(textfiles / "preflight.prom"))
    assert local.returncode in (0, 1), local.stderr
    cluster = tmp_path / "c"
    create_cluster(cluster, "gb300-exemplar-gap", hosts=2)
    inventory = yaml.safe_load((cluster / "inventory.yml").read_text())
    inventory["all"]["hosts"]["node02"].update(
        {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9})
    (cluster / "mixed.yml").write_text(yaml.safe_dump(inventory))
    audit = cli("audit", "-i", str(cluster / "mixed.yml"), "--profile",
                str(cluster / "profile.yaml"), "--format", "prometheus", "--output",
                str(textfiles / "audit.prom"))
    assert audit.returncode == 1, audit.stderr
    written = {}
    for name in ("preflight.prom", "audit.prom"):
        written.update(written_series((textfiles / name).read_text()))
    stored = scraped(port, written)
    assert {k: v for k, v in stored.items() if k in written} == written
    assert set(written) <= set(stored)
    machine = socket.gethostname()
    assert _key("exemplar_tune_host_status", {"command": "preflight", "host": machine,
                                              "status": "ok"}) in stored
    assert _key("exemplar_tune_host_status", {"command": "audit", "host": "node02",
                                              "status": "unreachable"}) in stored
    stamp = _key("exemplar_tune_run_timestamp_seconds", {"command": "audit"})
    assert abs(stored[stamp] - time.time()) < 120  # before: %g, off by up to an hour
    rules = api(port, "rules")["groups"][0]["rules"]
    assert len(rules) == 7 and {r["health"] for r in rules} == {"ok"}, rules
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        alerts = api(port, "alerts")["alerts"]
        waiting = {(a["labels"]["alertname"], a["labels"].get("host"), a["state"])
                   for a in alerts}
        if ("ExemplarTuneNotChecked", "node02", "pending") in waiting:
            break
        time.sleep(0.5)
    assert ("ExemplarTuneNotChecked", "node02", "pending") in waiting, alerts
