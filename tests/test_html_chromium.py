"""The HTML report opened in a real browser: headless Chromium loads the file offline, runs its
script under its Content-Security-Policy, and draws the charts. Checked on the DOM Chromium
dumps and on the pixels of its screenshot."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.outputs import html as html_output
from engine.outputs.charts import INSTALL_HINT, KIND_COLOURS
from tests.test_cli import run_cli
from tests.test_html_report import DAY, HOSTILE, NIGHT, context, finding

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None,
                       reason="needs headless Chromium: apt-get install chromium"),
    pytest.mark.skipif(html_output.report_charts({}, []).note == INSTALL_HINT,
                       reason="the charts need: python3 -m pip install -e '.[report]'"),
]
WINDOW = (1280, 1800)


def chromium(tmp_path: Path, page: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", "--no-first-run", "--allow-file-access-from-files",
               f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
               f"--window-size={WINDOW[0]},{WINDOW[1]}", *flags, page.as_uri()]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def dump_dom(tmp_path: Path, page: Path, *flags: str) -> str:
    return chromium(tmp_path, page, "--dump-dom", *flags).stdout


@pytest.fixture
def report_page(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo's HTML report, recorded in a history after a first run the night before."""
    history = str(tmp_path / "week.db")
    code, _, err = run_cli(["scan", "--demo", "--now", NIGHT, "--history", history, "-q",
                            "-f", "json"], capsys, monkeypatch)
    assert code in (0, 1), err
    page = tmp_path / "report.html"
    code, _, err = run_cli(["scan", "--demo", "--now", DAY, "--history", history, "-q",
                            "--format", "html", "-o", str(page)], capsys, monkeypatch)
    assert code in (0, 1), err
    return page


def test_chromium_draws_the_charts_and_runs_the_table_script(tmp_path: Path,
                                                             report_page: Path) -> None:
    dom = dump_dom(tmp_path, report_page)
    charts = re.findall(r'<figure class="chart" id="(chart-[a-z-]+)"><svg', dom)
    assert charts == ["chart-by-team", "chart-by-account", "chart-by-provider",
                      "chart-by-policy", "chart-trend-money", "chart-trend-findings"]
    assert dom.count('class="mark-rect') == 5 and dom.count('class="mark-line') == 3
    # the script ran (the CSP allowed it): sort buttons in every findings table header,
    # the filter box shown
    assert dom.count('<button type="button" class="sort">') >= 6
    assert re.search(r'<div class="filter" id="filter-failing">', dom)


def test_chromium_screenshot_shows_bars_in_the_chart_colours(tmp_path: Path,
                                                             report_page: Path) -> None:
    from PIL import Image

    shot = tmp_path / "report.png"
    chromium(tmp_path, report_page, f"--screenshot={shot}")
    with Image.open(shot) as image:
        pixels = image.convert("RGB")
        assert pixels.size == WINDOW
        counts = {name: 0 for name in ("GPU spend", "savings")}
        wanted = {name: _rgb(KIND_COLOURS[name]) for name in counts}
        for colour in pixels.get_flattened_data():
            for name, rgb in wanted.items():
                if _close(colour, rgb):
                    counts[name] += 1
    # solid bars, not a few pixels of text: the first chart (by team) is within the window
    assert counts["GPU spend"] > 5000 and counts["savings"] > 2000, counts


def test_with_javascript_off_the_page_reads_the_same(tmp_path: Path, report_page: Path) -> None:
    """Scripts blocked (the page's CSP set to `script-src 'none'`; headless Chromium dumps no
    DOM with scripting switched off): the charts, the rows and no half-working controls."""
    text = report_page.read_text("utf-8")
    blocked = tmp_path / "blocked.html"
    csp = re.compile(r"script-src &#39;sha256-[^&]+&#39;")  # the attribute escapes its quotes
    assert csp.search(text)
    blocked.write_text(csp.sub("script-src &#39;none&#39;", text, count=1), "utf-8")
    dom = dump_dom(tmp_path, blocked)
    assert 'class="sort"' not in dom
    assert re.search(r'<div class="filter" id="filter-failing" hidden="">', dom)
    assert len(re.findall(r'<figure class="chart" id="chart-[a-z-]+"><svg', dom)) == 6
    failing = dom.split('data-filter="filter-failing"')[1].split("</table>")[0]
    heading = re.search(r"Failing findings \((\d+)\)", dom)
    assert heading is not None and int(heading.group(1)) > 30
    assert failing.count("<tr>") == 1 + int(heading.group(1))  # the header and every finding


def test_hostile_names_do_not_run_in_the_browser(tmp_path: Path) -> None:
    findings = [finding(HOSTILE, HOSTILE, 50.0, "savings", provider=HOSTILE)]
    page = tmp_path / "hostile.html"
    page.write_text(html_output.render(context(findings)), "utf-8")
    dom = dump_dom(tmp_path, page)
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None and "pwned" not in body.group(0)
    assert "<svg onload" not in dom
    assert dom.count("&lt;/script&gt;&lt;svg onload=") >= 2  # shown as text, table and chart


def _rgb(colour: str) -> tuple[int, int, int]:
    value = int(colour.lstrip("#"), 16)
    return value >> 16, (value >> 8) & 0xFF, value & 0xFF


def _close(colour: tuple[int, int, int], wanted: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 8 for a, b in zip(colour, wanted, strict=True))


# Clicks the failing table's "$/month" header twice, then types in its filter box, and leaves
# what it saw on <body> for the DOM dump. Added after the page's own script, allowed by hash.
PROBE = """(function () {
  var table = document.querySelector('table[data-filter="filter-failing"]');
  var button = table.tHead.rows[0].cells[3].querySelector("button.sort");
  function column() {
    return Array.prototype.map.call(table.tBodies[0].rows, function (row) {
      return parseFloat(row.cells[3].getAttribute("data-sort"));
    });
  }
  button.click();
  var ascending = column();
  button.click();
  var descending = column();
  var input = document.querySelector("#filter-failing input");
  input.value = "GPU-IDLE";
  input.dispatchEvent(new Event("input"));
  var shown = Array.prototype.filter.call(table.tBodies[0].rows, function (row) {
    return !row.hidden;
  }).map(function (row) { return row.cells[1].textContent; });
  document.body.setAttribute("data-probe", JSON.stringify({
    ascending: ascending, descending: descending, shown: shown,
    count: document.querySelector("#filter-failing output").textContent,
    sorted: table.tHead.rows[0].cells[3].getAttribute("aria-sort")}));
})();"""


def test_clicking_a_header_sorts_and_typing_filters(tmp_path: Path, report_page: Path) -> None:
    text = report_page.read_text("utf-8")
    digest = base64.b64encode(hashlib.sha256(PROBE.encode()).digest()).decode()
    csp = re.compile(r"(script-src &#39;sha256-[^&]+&#39;)")
    assert csp.search(text)
    probed = csp.sub(lambda m: f"{m.group(1)} &#39;sha256-{digest}&#39;", text, count=1)
    probed = probed.replace("</body>", f"<script>{PROBE}</script>\n</body>", 1)
    page = tmp_path / "probed.html"
    page.write_text(probed, "utf-8")
    dom = dump_dom(tmp_path, page)
    found = re.search(r'<body data-probe="([^"]*)"', dom)
    assert found is not None, "the probe did not run"
    probe = json.loads(html.unescape(found.group(1)))
    assert probe["ascending"] == sorted(probe["ascending"]) != probe["descending"]
    assert probe["descending"] == sorted(probe["ascending"], reverse=True)
    assert probe["sorted"] == "descending"
    idle = len(re.findall(r'<tr><td data-sort="\d+" class="sev[^"]*">[a-z]+</td><td><code '
                          r'class="policy">gpu-idle</code>',
                          text.split('data-filter="filter-failing"')[1].split("</table>")[0]))
    assert idle > 0 and probe["shown"] == ["gpu-idle"] * idle
    assert probe["count"] == f"{idle} shown"
