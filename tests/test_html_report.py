"""The HTML report's charts, tables and script (`--format html`) and `history --format html`
and `--group-by`: through the CLI on the demo estate, and the renderer on hostile input."""

from __future__ import annotations

import base64
import hashlib
import html.parser
import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine.core.model import Finding, Report, ResourceRef, Summary
from engine.outputs import RenderContext, ResourceFacts
from engine.outputs import html as html_output
from engine.outputs.breakdown import MAX_GROUPS, fold, money_by
from engine.outputs.charts import INSTALL_HINT, UnsafeSvg, checked_svg
from tests.test_cli import run_cli
from tests.test_startup_imports import REPO, imported_modules

NIGHT = "2026-06-08T23:00:00Z"
DAY = "2026-06-09T12:00:00Z"
HOSTILE = "</script><svg onload=\"document.body.dataset.pwned=1\"><script>alert(1)</script>"
needs_charts = pytest.mark.skipif(
    html_output.report_charts({}, []).note == INSTALL_HINT,
    reason="the charts need: python3 -m pip install -e '.[report]'")


class Page(html.parser.HTMLParser):
    """Every start tag with its attributes, and the text of each <script>."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.tags if name == tag]


def finding(policy: str, resource_id: str, usd: float, cost_kind: str,
            provider: str = "aws", **details: Any) -> Finding:
    return Finding.model_validate({
        "policy": policy, "severity": "high", "result": "fail",
        "resource": ResourceRef(provider=provider, kind="aws_instance", id=resource_id,
                                name=resource_id),
        "message": f"{policy} on {resource_id}", "enforcement": "deny",
        "estimated_monthly_usd": usd, "cost_kind": cost_kind,
        "details": details})


def context(findings: list[Finding], facts: tuple[ResourceFacts, ...] = (),
            trend: tuple[dict[str, Any], ...] = ()) -> RenderContext:
    report = Report(generated_at=datetime(2026, 6, 9, 12, tzinfo=UTC), findings=findings,
                    summary=Summary(resources=len(facts), findings=len(findings),
                                    failed=len(findings)))
    return RenderContext(report=report, resources=facts, trend=trend)


def scan_html(tmp_path: Path, capsys: pytest.CaptureFixture[str],
              monkeypatch: pytest.MonkeyPatch, *extra: str) -> str:
    out_file = tmp_path / "report.html"
    code, _, err = run_cli(["scan", "--demo", "--now", DAY, "-q", "--format", "html", "-o",
                            str(out_file), *extra], capsys, monkeypatch)
    assert code in (0, 1), err
    return out_file.read_text("utf-8")


# ---------------------------------------------------------------------------- the figures


def test_breakdowns_add_up_to_the_summary_figures(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """By team and by provider, each kind of money adds up to the report's own total: spend
    to the scanned spend, savings (combined per resource) to the savings."""
    from engine.demo import demo_policy_paths, demo_snapshot_path
    from engine.outputs.breakdown import facts_of
    from engine.pipeline import ScanRequest, build_engine, parse_instant, run_scan
    from engine.sources.registry import ScanOptions

    code, out, err = run_cli(["scan", "--demo", "--now", DAY, "-q", "-f", "json"], capsys,
                             monkeypatch)
    assert code in (0, 1), err
    summary = json.loads(out)["summary"]

    request = ScanRequest(sources=(f"snapshot:{demo_snapshot_path()}",), options=ScanOptions(),
                          now=parse_instant(DAY), policies=tuple(demo_policy_paths()))
    result = run_scan(request)
    facts = facts_of(result.collected.resources, build_engine(None).catalog)
    for dimension in ("team", "provider", "account"):
        rows = money_by(dimension, result.report.findings, facts, keep=None)
        assert round(sum(r.spend_usd for r in rows), 2) == pytest.approx(
            summary["monthly_spend_usd"], abs=0.05)
        assert round(sum(r.savings_usd for r in rows), 2) == pytest.approx(
            summary["savings_usd"], abs=0.05)
        assert round(sum(r.unallocated_usd for r in rows), 2) == pytest.approx(
            summary["unallocated_usd"], abs=0.05)
        assert sum(r.failed for r in rows) == summary["failed"]
    teams = {r.group for r in money_by("team", result.report.findings, facts)}
    assert {"research", "ml", "(no team)"} <= teams


def test_policy_breakdown_keeps_each_policys_own_figure() -> None:
    findings = [finding("gpu-spot-required", "i-1", 600.0, "savings",
                        resource_monthly_spend_usd=1000.0),
                finding("gpu-off-hours-shutdown", "i-1", 640.0, "savings",
                        resource_monthly_spend_usd=1000.0),
                finding("required-cost-tags", "i-1", 1000.0, "unallocated")]
    by_policy = {r.group: r for r in money_by("policy", findings)}
    assert by_policy["gpu-spot-required"].savings_usd == 600.0
    assert by_policy["gpu-off-hours-shutdown"].savings_usd == 640.0
    assert by_policy["required-cost-tags"].unallocated_usd == 1000.0
    # by provider the two savings combine as rates: 1 - 0.4 * 0.36, never 1,240
    (aws,) = money_by("provider", findings)
    assert aws.savings_usd == pytest.approx(856.0)
    assert aws.unallocated_usd == 1000.0 and aws.spend_usd == 0.0


def test_many_groups_fold_into_one_other_row() -> None:
    findings = [finding(f"p-{n:02}", f"i-{n}", float(100 - n), "savings") for n in range(30)]
    rows = money_by("policy", findings)
    assert len(rows) == MAX_GROUPS
    assert rows[-1].group == f"other ({30 - MAX_GROUPS + 1} groups)"
    assert sum(r.savings_usd for r in rows) == sum(f.estimated_monthly_usd for f in findings)
    assert fold(rows[:3]) == rows[:3]


# ---------------------------------------------------------------------------- the page


@needs_charts
def test_scan_report_draws_charts_by_team_provider_policy_and_the_trend(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    history = str(tmp_path / "week.db")
    code, _, err = run_cli(["scan", "--demo", "--now", NIGHT, "--history", history, "-q",
                            "-f", "json"], capsys, monkeypatch)
    assert code in (0, 1), err
    page = scan_html(tmp_path, capsys, monkeypatch, "--history", history)
    parsed = Page(page)
    figures = {attrs["id"] for attrs in parsed.named("figure")}
    assert figures == {"chart-by-team", "chart-by-account", "chart-by-provider",
                       "chart-by-policy", "chart-trend-money", "chart-trend-findings"}
    assert len(parsed.named("svg")) == len(figures)
    assert len(parsed.named("rect")) + len(parsed.named("path")) > 50  # bars and axes drawn
    trend_table = page.split('id="trend"')[1].split("</table>")[0]
    assert trend_table.count("<tr>") == 3  # header and two runs
    # the summary figures stay apart, and spend with no owner is never called waste
    money = page.split('id="money"')[1].split("</ul>")[0]
    assert money.count("<li>") == 4 and "no owner" in money
    assert "waste" not in page.lower()


def test_scan_report_without_history_has_no_trend(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    page = scan_html(tmp_path, capsys, monkeypatch)
    assert 'id="trend"' not in page
    team_table = page.split('id="by-team"')[1].split("</table>")[0]
    research = next(row for row in team_table.split("<tr>") if "<td>research</td>" in row)
    # its GPU spend, and the team budget's over-budget figure under the team it is about
    assert "$59,828.44" in research and "$9,605.66" in research


def test_without_the_report_extra_the_page_keeps_its_tables(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "altair", None)  # `import altair` raises ImportError
    findings = [finding("gpu-idle", "i-1", 100.0, "savings")]
    page = html_output.render(context(findings))
    assert "<svg" not in page and "<figure" not in page
    assert page.count(INSTALL_HINT.replace("'", "&#39;")) == 1
    provider_table = page.split('id="by-provider"')[1].split("</table>")[0]
    assert "$100.00" in provider_table


def test_findings_table_sorts_and_filters_with_a_script_the_csp_allows() -> None:
    findings = [finding("gpu-off-hours-shutdown", f"i-{n}", float(n), "savings")
                for n in range(3)]
    page = html_output.render(context(findings))
    parsed = Page(page)
    (script,) = parsed.scripts
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    (csp,) = [a["content"] for a in parsed.named("meta")
              if a.get("http-equiv") == "Content-Security-Policy"]
    assert csp is not None and f"script-src 'sha256-{digest}';" in csp
    assert "default-src 'none'" in csp
    table = [a for a in parsed.named("table") if a.get("data-filter") == "filter-failing"]
    assert table and "findings" in (table[0]["class"] or "")
    # JS off: every row is in the page, by dollars, and the filter box stays hidden
    rows = page.split('data-filter="filter-failing"')[1].split("</table>")[0]
    assert re.findall(r"<code>i-(\d)</code>", rows) == ["2", "1", "0"]
    (box,) = [a for a in parsed.named("div") if a.get("id") == "filter-failing"]
    assert "hidden" in box
    # policy ids never break mid-word
    assert '<code class="policy">gpu-off-hours-shutdown</code>' in page
    assert re.search(r"code\.policy \{[^}]*white-space: nowrap", page)


def test_hostile_names_are_escaped_everywhere() -> None:
    findings = [finding(HOSTILE, HOSTILE, 50.0, "savings", provider=HOSTILE),
                finding("required-cost-tags", "i-2", 70.0, "unallocated")]
    facts = (ResourceFacts(provider=HOSTILE, id=HOSTILE, team=HOSTILE, account=HOSTILE,
                           monthly_spend_usd=120.0),
             ResourceFacts(provider="aws", id="i-2", team=None, account="1",
                           monthly_spend_usd=70.0))
    trend = ({"run": 1, "at": "2026-06-09T12:00:00+00:00", "command": HOSTILE,
              "monthly_spend_usd": 1.0, "savings_usd": 1.0, "unallocated_usd": 0.0,
              "failed": 1, "new": [], "open": [], "fixed": []},)
    page = html_output.render(context(findings, facts, trend))
    parsed = Page(page)
    assert len(parsed.named("script")) == 1
    assert not [tag for tag, attrs in parsed.tags
                if any(name.startswith("on") for name in attrs)]
    assert "&lt;/script&gt;&lt;svg onload=" in page
    assert HOSTILE not in page


@pytest.mark.parametrize("svg", [
    '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
    '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"></svg>',
    '<svg xmlns="http://www.w3.org/2000/svg"><foreignObject/></svg>',
    '<svg xmlns="http://www.w3.org/2000/svg"><a href="https://x.test"><text>x</text></a></svg>',
    '<svg xmlns="http://www.w3.org/2000/svg"><rect fill="url(https://x.test/a)"/></svg>',
    '<!DOCTYPE svg [<!ENTITY a "b">]><svg xmlns="http://www.w3.org/2000/svg"/>',
    '<svg xmlns="http://www.w3.org/2000/svg"><g>',
    "<div/>",
])
def test_a_chart_with_active_content_is_refused(svg: str) -> None:
    with pytest.raises(UnsafeSvg):
        checked_svg(svg)


def test_a_plain_chart_passes_the_check() -> None:
    svg = ('<svg xmlns="http://www.w3.org/2000/svg"><defs><clipPath id="c"><rect/></clipPath>'
           '</defs><g clip-path="url(#c)"><text>$1</text></g></svg>')
    assert checked_svg(svg) == svg


def test_json_runs_import_no_chart_library(tmp_path: Path) -> None:
    """`scan` and `check-plan` in JSON never load Altair, vl-convert or the HTML renderer."""
    import subprocess

    report = tmp_path / "r.json"
    command = [sys.executable, "-X", "importtime", "-m", "engine", "scan", "--demo", "--now",
               DAY, "-q", "--format", "json", "-o", str(report)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode in (0, 1), result.stderr[-2000:]
    names = imported_modules(result.stderr)
    assert "engine.pipeline" in names
    assert not {n for n in names if n.split(".")[0] in ("altair", "vl_convert")
                or n in ("engine.outputs.html", "engine.outputs.charts")}


# ---------------------------------------------------------------------------- history


@pytest.fixture
def week(tmp_path: Path, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch) -> str:
    history = str(tmp_path / "week.db")
    for now in (NIGHT, DAY):
        code, _, err = run_cli(["scan", "--demo", "--now", now, "--history", history, "-q",
                                "-f", "json"], capsys, monkeypatch)
        assert code in (0, 1), err
    return history


def test_history_by_team_splits_the_runs_figures(week: str, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_cli(["history", "--history", week, "--format", "json"], capsys,
                             monkeypatch)
    assert code == 0, err
    overall = json.loads(out)["runs"]
    code, out, err = run_cli(["history", "--history", week, "--format", "json", "--group-by",
                              "team"], capsys, monkeypatch)
    assert code == 0, err
    grouped = json.loads(out)
    assert grouped["group_by"] == "team"
    for run, whole in zip(grouped["runs"], overall, strict=True):
        groups = run["groups"]
        assert sum(g["failed"] for g in groups) == whole["failed"]
        assert sum(g["new"] for g in groups) == len(whole["new"])
        assert sum(g["fixed"] for g in groups) == len(whole["fixed"])
        assert sum(g["savings_usd"] for g in groups) == pytest.approx(whole["savings_usd"],
                                                                      abs=0.05)
        assert sum(g["monthly_spend_usd"] for g in groups) == pytest.approx(
            whole["monthly_spend_usd"], abs=0.05)
    research = [g for g in grouped["runs"][1]["groups"] if g["group"] == "research"]
    assert research and research[0]["fixed"] > 0  # its off-hours findings, fixed at noon


@pytest.mark.parametrize("dimension", ["account", "policy"])
def test_history_table_by_account_and_policy(week: str, dimension: str,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_cli(["history", "--history", week, "--group-by", dimension], capsys,
                             monkeypatch)
    assert code == 0, err
    header, *lines = out.splitlines()
    assert dimension in header.split()
    assert {line.split()[0] for line in lines} == {"1", "2"}
    if dimension == "policy":
        off_hours = [line for line in lines if "gpu-off-hours-shutdown" in line]
        assert off_hours[0].split()[-4:] == ["14", "14", "0", "0"]


@needs_charts
def test_history_html_draws_the_trend_overall_and_by_group(
        week: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_cli(["history", "--history", week, "--format", "html", "--group-by",
                              "team"], capsys, monkeypatch)
    assert code == 0, err
    parsed = Page(out)
    assert {a["id"] for a in parsed.named("figure")} == {
        "chart-trend-money", "chart-trend-findings", "chart-group-savings", "chart-group-failed"}
    assert len(parsed.scripts) == 1
    group_table = out.split('id="by-group"')[1].split("</table>")[0]
    assert "research" in group_table and group_table.count("<tr>") > 4


@pytest.mark.parametrize(("args", "message"), [
    (["--group-by", "region"], "--group-by: 'region' is not one of team, account, policy"),
    (["--format", "sarif"], "--format: 'sarif' is not one of table, json, html"),
])
def test_history_refuses_unknown_choices(week: str, args: list[str], message: str,
                                         capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_cli(["history", "--history", week, *args], capsys, monkeypatch)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"gpuwarden: error: {message}"]


def test_check_plan_report_charts_the_plans_teams(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_startup_imports import GPU_INSTANCE_CHANGE

    change = json.loads(json.dumps(GPU_INSTANCE_CHANGE))
    change["change"]["after"]["tags"] = change["change"]["after"]["tags_all"] = {
        "team": "<b>research</b>"}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"format_version": "1.2", "resource_changes": [change]}))
    code, out, err = run_cli(["check-plan", str(plan), "--format", "html"], capsys, monkeypatch)
    assert code == 1, err
    team_table = out.split('id="by-team"')[1].split("</table>")[0]
    assert "<td>&lt;b&gt;research&lt;/b&gt;</td>" in team_table
    assert "$2,233.80" in team_table  # p3.2xlarge list price $3.06/h × 730 h
    assert 'id="trend"' not in out
