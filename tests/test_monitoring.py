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
from tests.conftest import REPO, SYSROOTS
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
    assert checked.returncode == 0 and "SUCCESS: 10 rules found" in checked.stdout, \
        checked.stdout + checked.stderr
    tested = subprocess.run([tool("promtool"), "test", "rules", str(RULE_TESTS)],
                            capture_output=True, text=True, timeout=120, cwd=RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    rules = {rule["alert"]: rule for group in yaml.safe_load(RULES.read_text())["groups"]
             for rule in group["rules"]}
    assert set(rules) == {"ExemplarTuneCheckFailing", "ExemplarTuneRepeatOffender",
                          "ExemplarTuneUntuned", "ExemplarTunePendingReboot",
                          "ExemplarTuneDrift", "ExemplarTuneNotChecked", "ExemplarTuneUnknown",
                          "ExemplarTuneNodeSlow", "ExemplarTuneReportStale",
                          "ExemplarTuneReportMissing"}
    tests = RULE_TESTS.read_text()
    assert all(f"alertname: {name}" in tests for name in rules)  # every alert has a test
    # only health pages; tuning, a pending reboot and unknown warn
    assert {name for name, rule in rules.items() if rule["labels"]["severity"] == "critical"
            } == {"ExemplarTuneCheckFailing", "ExemplarTuneRepeatOffender"}
    for name in ("ExemplarTuneCheckFailing", "ExemplarTuneRepeatOffender"):
        assert 'class="health"' in rules[name]["expr"], name
    assert 'class="tuning"' in rules["ExemplarTuneUntuned"]["expr"]
    assert 'pending_reboot="true"' in rules["ExemplarTunePendingReboot"]["expr"]
    assert 'class="unknown"' in rules["ExemplarTuneUnknown"]["expr"]
    assert "{{ $labels.next }}" in rules["ExemplarTuneUntuned"]["annotations"]["description"]


def test_the_rules_tell_health_from_tuning_on_what_exemplar_tune_writes(tmp_path: Path) -> None:
    """promtool unit tests over the series a real preflight of the h100-x86 fixture writes
    (a failing health check, failing tuning checks, checks that could not be judged): the
    page names the health check only, and nothing is paged for a host with only tuning
    failures (its cpu layer) but its untuned verdict warns after an hour."""
    series = []
    for name, layers in (("broken", ("gpu", "cpu")), ("untuned", ("cpu",))):
        out = cli("preflight", "--sysroot", str(SYSROOTS / "h100-x86"), "--profile", "h100-x86",
                  *(arg for layer in layers for arg in ("--layer", layer)),
                  "--format", "prometheus")
        assert out.returncode == 1, out.stderr
        for family in text_string_to_metric_families(out.stdout.replace(
                'host="h100-x86"', f'host="{name}"')):
            for sample in family.samples:
                if sample.name.startswith(("exemplar_tune_check_status",
                                           "exemplar_tune_host_verdict")):
                    labels = ",".join(f'{k}={json.dumps(v)}' for k, v in
                                      sorted({**sample.labels, "instance": f"{name}:9100",
                                              "job": "node"}.items()))
                    series.append({"series": f"{sample.name}{{{labels}}}",
                                   "values": f"{sample.value:g}x90"})
    failing = [s["series"] for s in series if s["series"].startswith("exemplar_tune_check_status")
               and s["values"].startswith("2x")]
    assert any('class="tuning"' in s and 'severity="high"' in s for s in failing)
    untuned = ('exemplar_tune_host_verdict{action="apply",class="tuning",command="preflight",'
               'host="untuned",instance="untuned:9100",job="node",next=')
    assert any(s["series"].startswith(untuned) for s in series)
    next_step = next(s["series"] for s in series if s["series"].startswith(untuned)
                     ).split('next="')[1].split('"')[0]
    assert next_step.startswith("exemplar-tune apply --layer cpu --sysroot ")
    (tmp_path / "rules.yml").write_text(RULES.read_text())
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": [
            {"eval_time": "20m", "alertname": "ExemplarTuneCheckFailing", "exp_alerts": [{
                "exp_labels": {"severity": "critical", "instance": "broken:9100", "job": "node",
                               "host": "broken", "layer": "gpu", "check": "gpu.remapped-rows",
                               "class": "health", "pending_reboot": "false"},
                "exp_annotations": {
                    "summary": "broken: gpu.remapped-rows fails (health)",
                    "description": "The exemplar-tune health check gpu.remapped-rows (gpu "
                    "layer, high severity) has failed on broken for 15 minutes: the node is "
                    "broken or degrading. On broken, 'exemplar-tune preflight --layer gpu' "
                    "names the finding and its actions."}}]},
            {"eval_time": "50m", "alertname": "ExemplarTuneUntuned", "exp_alerts": []},
            {"eval_time": "70m", "alertname": "ExemplarTuneUntuned", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "instance": "untuned:9100", "job": "node",
                               "host": "untuned", "command": "preflight", "class": "tuning",
                               "action": "apply", "pending_reboot": "false",
                               "next": next_step},
                "exp_annotations": {
                    "summary": "untuned does not meet its profile (tuning)",
                    "description": "untuned works but has missed a tuning preference of its "
                    "profile for an hour (preflight): it runs slower than it could. Next step "
                    f"(apply): {next_step}"}}]},
            {"eval_time": "70m", "alertname": "ExemplarTuneUnknown", "exp_alerts": []},
        ]}]}))
    tested = subprocess.run([tool("promtool"), "test", "rules", "test.yml"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


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


def labels_of(stored: dict[str, float], name: str) -> list[dict[str, str]]:
    """The labels of every stored series of metric ``name``."""
    return [json.loads(key[len(name):]) for key in stored if key.startswith(name + "{")]


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
    # one verdict per host and command: node01 drifts (tuning, apply), node02 was not reached
    verdicts = {(v["command"], v["host"]): v for v in labels_of(stored,
                                                                "exemplar_tune_host_verdict")}
    assert {h: (v["class"], v["action"]) for (c, h), v in verdicts.items() if c == "audit"} == {
        "node01": ("tuning", "apply"), "node02": ("unknown", "investigate")}
    assert verdicts[("audit", "node01")]["next"].startswith("exemplar-tune apply --layer ")
    assert [h for c, h in verdicts if c == "preflight"] == [machine]  # the local preflight's
    drift = labels_of(stored, "exemplar_tune_knob_drift")
    assert drift and {(d["profile"], d["inventory"]) for d in drift} == {
        (str(cluster / "profile.yaml"), str(cluster / "mixed.yml"))}
    rules = api(port, "rules")["groups"][0]["rules"]
    assert len(rules) == 10 and {r["health"] for r in rules} == {"ok"}, rules
    expected = {("ExemplarTuneNotChecked", "node02", "pending"),
                ("ExemplarTuneUntuned", "node01", "pending"),
                ("ExemplarTuneDrift", "node01", "pending")}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        alerts = api(port, "alerts")["alerts"]
        waiting = {(a["labels"]["alertname"], a["labels"].get("host"), a["state"])
                   for a in alerts}
        if expected <= waiting:
            break
        time.sleep(0.5)
    assert expected <= waiting, alerts
    # node02 was not reached: that is ExemplarTuneNotChecked's, not a second alert
    assert not {(name, host) for name, host, _ in waiting
                if name == "ExemplarTuneUnknown" and host in ("node01", "node02")}, alerts
