"""The HTML reports as a browser shows them.

A real tune experiment (two hosts of the simulated cluster, the cpu and runtime layers) and a
real preflight of fixture hosts are rendered by exemplar-tune, then opened in headless
Chromium at 1280 px: a screenshot, and the page's widths read by a script added to a test
copy (the shipped page has no script). Chromium comes from .ci/packages.txt; without it these
tests fail.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from defusedxml import ElementTree
from markupsafe import escape

from exemplar_tune.reports.experiment import html_page
from exemplar_tune.reports.preflight import html_report, markdown
from exemplar_tune.sim.cluster import create_cluster
from tests.conftest import SYSROOTS
from tests.test_cli import cli

WIDTH = 1280
SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert("x")</script>'
LONG = "n" * 400  # one word wider than the page
PROBE = """<script>
const root = document.documentElement;
const wide = [...document.querySelectorAll("body *")].filter(e => !e.closest("svg")
  && e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1);
document.title = JSON.stringify({scroll: root.scrollWidth, client: root.clientWidth,
  wide: wide.slice(0, 5).map(e => e.tagName + ":" + e.textContent.slice(0, 60))});
</script>"""


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium is not installed: apt-get install chromium (.ci/packages.txt)")
    return path


def browse(page, tmp_path):
    """Screenshot ``page`` at 1280 px, then return the widths a test copy measures."""
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu",
            f"--window-size={WIDTH},900", f"--user-data-dir={tmp_path / 'chromium'}"]
    env = dict(os.environ, HOME=str(tmp_path))
    shot = tmp_path / f"{page.stem}.png"
    out = subprocess.run([*argv, f"--screenshot={shot}", page.as_uri()], capture_output=True,
                         text=True, env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == WIDTH
    probe = tmp_path / f"{page.stem}-probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    out = subprocess.run([*argv, "--dump-dom", probe.as_uri()], capture_output=True, text=True,
                         env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(html.unescape(re.search(r"<title>(.*?)</title>", out.stdout, re.S)[1]))


def assert_fits(page, tmp_path):
    widths = browse(page, tmp_path)
    assert widths["scroll"] <= widths["client"] <= WIDTH, widths
    assert widths["wide"] == [], widths


def assert_self_contained(text):
    """No script, nothing fetched (the only URLs are SVG namespace names), print CSS."""
    assert text.startswith("<!DOCTYPE html>")
    assert "<script" not in text.lower()
    rest = re.sub(r'xmlns(:\w+)?="http://www\.w3\.org/[\w/.]+"', "", text)
    assert "http://" not in rest and "https://" not in rest and "@import" not in rest
    assert "@media print" in text


def chart_labels(text):
    """Per inline SVG chart: its axes' x and y labels (every axes must have both)."""
    charts = []
    for chart in re.findall(r"<svg\b.*?</svg>", text, re.S):
        root = ElementTree.fromstring(chart)
        groups = list(root.iter(f"{SVG}g"))
        axes = [g for g in groups if re.fullmatch(r"axes_\d+", g.get("id", ""))]
        labels = {letter: ["".join(g.itertext()).strip() for g in groups
                           if g.get("id", "").endswith(f"-{letter}-label")] for letter in "xy"}
        assert len(axes) >= 1 and len(labels["x"]) == len(labels["y"]) == len(axes), labels
        assert all(labels["x"] + labels["y"]), labels
        charts.append(labels)
    return charts


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A finished tune of the cpu and runtime layers on two simulated hosts: its ledger
    document and the directory it ran in."""
    directory = tmp_path_factory.mktemp("tuned")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXEMPLAR_TUNE_STATE_DIR", str(directory / "state"))
        cluster = directory / "c"
        create_cluster(cluster, "gb300-exemplar-gap", hosts=2)
        out = cli("tune", "-i", str(cluster / "inventory.yml"), "--profile",
                  str(cluster / "profile.yaml"), "--bench", str(cluster / "bench.yaml"),
                  "--layer", "cpu", "--layer", "runtime")
        assert out.returncode in (0, 1), out.stdout + out.stderr
        doc = json.loads(cli("show", "latest", "--format", "json").stdout)
        page = directory / "tune.html"
        out = cli("report", "latest", "--format", "html", "--output", str(page))
        assert out.returncode == 0, out.stderr
        markdown = cli("report", "latest").stdout
    return doc, page, markdown


@pytest.mark.system
def test_tune_report_shows_the_way_to_the_reference_and_fits_1280_px(tuned, tmp_path):
    doc, page, markdown = tuned
    text = page.read_text()
    assert_self_contained(text)
    kept = [d for d in doc["decisions"] if d["action"] == "keep"]
    assert kept, "the gb300 gap scenario keeps the cpu and runtime layers"
    shapes = sorted({s["shape"] for s in doc["samples"]})
    charts = chart_labels(text)
    # a waterfall per shape, a distribution per decided layer and shape
    assert len(charts) == len(shapes) * (1 + len(doc["decisions"]))
    labels = [label for chart in charts for label in chart["x"] + chart["y"]]
    for shape in shapes:
        assert f"{shape} step time (ms), lower is better" in labels
        reference = doc["experiment"]["summary"]["shapes"][shape]["reference"]
        assert f"reference {reference:g} ms" in text
    assert "kept layers, in the order they were measured" in charts[0]["x"]
    assert all(chart["y"] == ["steps per bin"] for chart in charts[len(shapes):])
    for decision in kept:
        for c in decision["comparisons"]:
            assert (f"{c['confidence']:.0%}: {c['ci_low']:+.2%} .. {c['ci_high']:+.2%}"
                    in text), c
            assert f"{c['n_baseline']} + {c['n_candidate']}" in text
    # both hosts made the same changes: one group naming both, each path once
    assert "2 hosts: node[01-02]" in text
    assert text.count("<code>/proc/sys/kernel/numa_balancing</code>") == 1
    assert "| cpu | kept |" in markdown and "## Gap to the reference" in markdown
    assert_fits(page, tmp_path)

    hostile = json.loads(json.dumps(doc).replace('"node02"', json.dumps(HOSTILE + LONG))
                         .replace('"moe"', json.dumps("moe <&>")))
    page = tmp_path / "hostile.html"
    page.write_text(html_page(hostile))
    text = page.read_text()
    assert_self_contained(text)
    assert "&lt;script&gt;alert(" in text and "moe &lt;&amp;&gt; step time (ms)" in text
    assert len(chart_labels(text)) == len(charts)
    assert_fits(page, tmp_path)


def fleet_doc(tmp_path):
    """Preflight of three fixture hosts (two with findings, one healthy) as JSON, and the
    HTML page exemplar-tune writes for it."""
    inventory = {"all": {"hosts": {}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    for name, tree in (("node1", "h100-x86"), ("node2", "h100-x86"), ("node3", "healthy-h100")):
        inventory["all"]["hosts"][name] = {"exemplar_sysroot": str(SYSROOTS / tree)}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    page = tmp_path / "preflight.html"
    common = ("preflight", "-i", str(path), "--profile", "h100-x86")
    out = cli(*common, "--format", "html", "--output", str(page))
    assert out.returncode == 1 and out.stdout.strip() == f"wrote {page}", out.stderr
    return json.loads(cli(*common, "--format", "json").stdout), page


@pytest.mark.system
def test_without_matplotlib_the_page_is_made_and_each_chart_says_why_it_is_missing(
        tuned, monkeypatch):
    """matplotlib is the ``charts`` extra: without it the same page, each chart a note."""
    from exemplar_tune.reports.html import NO_CHARTS

    doc, page, _ = tuned
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    text = html_page(doc)
    assert "<svg" not in text and str(NO_CHARTS) in text
    assert text.count(str(NO_CHARTS)) == page.read_text().count("<svg")
    assert_self_contained(text)


def test_preflight_report_details_findings_only_and_fits_1280_px(tmp_path):
    doc, page = fleet_doc(tmp_path)
    text = page.read_text()
    assert_self_contained(text)
    assert text.index("Fleet summary") < text.index("<h2>gpu</h2>")
    assert "<h2>node1" not in text  # hosts are folded into each finding, not sections
    assert re.search(r"made \d{4}-\d\d-\d\dT[\d:]+Z on \S+ by exemplar-tune ", text)
    for g in doc["groups"]:
        assert f"on <b>{g['hostlist']}</b> ({g['count']} / {g['total']} hosts)" in text
    # the headline: hosts by verdict, checks by outcome (skips as n/a or unknown)
    summary = doc["summary"]
    assert set(summary) == {"fail", "warn", "pass", "n/a", "unknown"}
    assert summary["n/a"] and summary["unknown"]
    assert (f"<p>profile h100-x86; 3 host(s): 2 health, 1 ok; checks: {summary['fail']} fail, "
            f"{summary['warn']} warn, {summary['pass']} pass, {summary['n/a']} n/a, "
            f"{summary['unknown']} unknown.</p>") in text
    for g in doc["groups"]:  # check, status, class, host count
        pending = ", pending reboot" if g["pending_reboot"] else ""
        assert re.search(rf'<code>{re.escape(g["id"])}</code>.*?<td class="{g["status"]}">'
                         rf'{g["status"]}<br><span class="muted">{g["class"]}{pending}</span>'
                         rf'</td>\s*<td class="num">{g["count"]} / {g["total"]}',
                         text, re.S), g["id"]
    assert {g["class"] for g in doc["groups"]} == {"health", "tuning"}
    for g in doc["groups"]:  # each finding's next steps, the commands that do them spelt out
        steps = "; ".join(a["kind"] + (f": <code>{escape(a['command'])}</code>"
                                       if a.get("command") else "") for a in g["actions"])
        assert f"<dt>next</dt><dd>{steps}</dd>" in text, g["id"]
    apply = next(g for g in doc["groups"] if g["id"] == "cpu.deep-cstates-disabled")
    assert apply["actions"][0]["command"].startswith("exemplar-tune apply --layer cpu -i ")
    assert apply["actions"][0]["command"].endswith(" --limit 'node[1-2]' --profile h100-x86")
    # a check skipped says why: n/a where it cannot apply, UNKN where it could not be judged
    skipped = {r["id"]: r["class"] for data in doc["hosts"].values() for r in data["results"]
               if r["status"] == "skip"}
    assert set(skipped.values()) == {"not_applicable", "unknown"}
    for check, klass in skipped.items():
        symbol = "UNKN" if klass == "unknown" else "n/a"
        assert f'<span class="skip">{symbol}</span> <code>{check}</code>' in text, check
    assert '<span class="skip">skip</span>' not in text
    results = {r["id"]: r for r in doc["hosts"]["node1"]["results"]}
    failing = [r for r in results.values() if r["status"] in ("fail", "warn")]
    for r in failing:
        for field in ("risk", "fix", "detail"):
            assert str(escape(r[field])) in text, (r["id"], field)
        observed = r["observed"] if isinstance(r["observed"], str) else json.dumps(
            r["observed"], separators=(", ", ": "))
        assert str(escape(observed)) in text, r["id"]
    fixes = {r["fix"] for r in failing}
    passing = [r for r in results.values() if r["status"] == "pass" and r["fix"] not in fixes]
    assert passing, "h100-x86 passes some checks"
    for r in passing:
        assert f"<code>{r['id']}</code>" in text
        assert str(escape(r["fix"])) not in text, r["id"]
    assert_fits(page, tmp_path)

    hostile = json.loads(json.dumps(doc).replace('"node2"', json.dumps(HOSTILE)))
    first = hostile["groups"][0]
    first.update(title=HOSTILE, observed="x" * 600, evidence=["/" + LONG], hostlist=HOSTILE)
    page = tmp_path / "hostile.html"
    page.write_text(html_report(hostile))
    text = page.read_text()
    assert_self_contained(text)
    assert text.count("&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;") >= 2
    assert_fits(page, tmp_path)


def test_the_fleet_page_grows_with_findings_not_hosts():
    """Before, the page repeated every host's full section: 163 KB for 16 identical hosts.
    16 and 256 hosts with the same findings give pages of nearly one size (the hostlist and
    the counts are all that differ)."""
    from exemplar_tune.facts import facts_from_sysroot
    from exemplar_tune.preflight import preflight_hosts
    from exemplar_tune.profile import GIVEN, load_profile

    facts = facts_from_sysroot(str(SYSROOTS / "h100-x86"), None)
    profile = load_profile("h100-x86")
    sizes = {}
    for count in (16, 256):
        hosts = {f"gpu{i:03d}": facts for i in range(1, count + 1)}
        doc = preflight_hosts(hosts, dict.fromkeys(hosts, (profile, GIVEN)), None, False)
        page, text = html_report(doc), markdown(doc)
        sizes[count] = (len(page.encode()), len(text.encode()))
        assert f"gpu[001-{count:03d}]" in page
        failing = next(g for g in doc["groups"] if g["status"] == "fail")
        assert f"- **fail** `{failing['id']}` on gpu[001-{count:03d}] ({count}/{count}): " \
            in text
        assert "gpu002" not in page + text  # no host is spelt out on its own
    assert sizes[256][0] < sizes[16][0] * 1.02 and sizes[256][1] < sizes[16][1] * 1.02, sizes
    assert sizes[16][0] < 40_000, sizes
