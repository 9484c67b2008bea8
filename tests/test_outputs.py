"""Reporters: every output format rendered from Reports built directly from engine.core.model
objects."""

from __future__ import annotations

import dataclasses
import hashlib
import html.parser
import importlib
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from typing import Any

import pytest

from engine.core.errors import InputError
from engine.core.evaluate import savings_total
from engine.core.model import (
    Finding,
    Remediation,
    Report,
    ResourceRef,
    Severity,
    SourceLocation,
    Summary,
)
from engine.outputs import (
    PolicyMeta,
    RenderContext,
    json_report,
    junit,
    markdown,
    registry,
    sarif,
    table,
)
from engine.outputs import html as html_output
from engine.outputs.actions import figure
from engine.outputs.markdown import TRUNCATION_NOTICE

NOW = datetime(2025, 3, 4, 21, 30, tzinfo=UTC)
ANSI_ESCAPE = re.compile(r"\x1b\[")


def make_finding(
    policy: str,
    resource_id: str,
    *,
    severity: Severity = Severity.HIGH,
    result: str = "fail",
    usd: float = 0.0,
    message: str | None = None,
    kind: str = "aws_instance",
    location: SourceLocation | None = None,
    remediation: Remediation | None = None,
    cost_kind: str | None = None,
) -> Finding:
    return Finding.model_validate(
        {
            "policy": policy,
            "severity": severity,
            "result": result,
            "resource": ResourceRef(
                provider="aws", kind=kind, id=resource_id, name=resource_id.rsplit(".", 1)[-1]
            ),
            "message": message if message is not None else f"{policy} on {resource_id}",
            "enforcement": "deny",
            "estimated_monthly_usd": usd,
            "cost_kind": cost_kind or ("savings" if usd else "none"),
            "location": location,
            "remediation": remediation,
        }
    )


def varied_findings() -> list[Finding]:
    """Every severity and result, with and without source lines, in no particular order."""
    return [
        make_finding(
            "required-cost-tags",
            "module.train.aws_instance.gpu[0]",
            severity=Severity.MEDIUM,
            usd=0.0,
            message="missing tags: team, cost-center",
            location=SourceLocation(file="infra/train.tf", line=3),
        ),
        make_finding(
            "gpu-spot-required",
            "module.train.aws_instance.gpu[0]",
            severity=Severity.HIGH,
            usd=17_046.74,
            message="p4d.24xlarge runs on-demand",
            location=SourceLocation(file="infra/train.tf", line=3),
            remediation=Remediation(action="set-spot", detail="use instance_market_options"),
        ),
        make_finding(
            "gpu-idle",
            "i-0abc",
            severity=Severity.CRITICAL,
            usd=2_400.0,
            message="average GPU activity 1.2% over 1h",
            location=SourceLocation(file="./infra\\live.tf"),
        ),
        make_finding(
            "encryption-at-rest",
            "aws_ebs_volume.data",
            severity=Severity.HIGH,
            result="unknown",
            kind="aws_ebs_volume",
            message="`encrypted` is only known after apply",
        ),
        make_finding(
            "gpu-underutilized",
            "aws_instance.small",
            severity=Severity.LOW,
            usd=310.25,
            message="average GPU activity 22% over 1h",
        ),
        make_finding(
            "gpu-off-hours-shutdown",
            "aws_instance.notebook",
            severity=Severity.INFO,
            usd=55.5,
            message="running outside business hours",
        ),
        make_finding(
            "gpu-mig-for-small-jobs",
            "Deployment/ml/infer",
            severity=Severity.MEDIUM,
            result="pass",
            kind="Deployment",
            message="uses a MIG slice",
        ),
    ]


POLICIES = {
    "gpu-spot-required": PolicyMeta(
        id="gpu-spot-required",
        title="GPU compute outside production runs on spot",
        description="Non-production GPU instances, node groups and workloads must use spot.",
        severity="high",
        help='Request spot capacity (instance_market_options { market_type = "spot" }).',
        help_uri="https://example.invalid/policies/gpu-spot-required",
    ),
    "encryption-at-rest": PolicyMeta(
        id="encryption-at-rest",
        title="Storage is encrypted at rest",
        description="Volumes and buckets must be encrypted.",
        severity="high",
    ),
}


def make_context(findings: list[Finding], **overrides: Any) -> RenderContext:
    report = Report(generated_at=NOW, findings=findings)
    ctx = RenderContext(report=report, policies=POLICIES, source_file="plan.json")
    return dataclasses.replace(ctx, **overrides)


def failing_by_dollars(findings: list[Finding]) -> list[Finding]:
    return sorted(
        (f for f in findings if f.result == "fail"), key=lambda f: -f.estimated_monthly_usd
    )


# ---------------------------------------------------------------------------- registry


def test_registry_knows_every_contract_format() -> None:
    assert set(registry.RENDERERS) == {"table", "json", "sarif", "junit", "markdown", "html",
                                      "policyreport"}


@pytest.mark.parametrize("fmt", sorted(registry.RENDERER_MODULES))
def test_registry_renders_like_the_module(fmt: str) -> None:
    ctx = make_context(varied_findings())
    module = importlib.import_module(registry.RENDERER_MODULES[fmt])
    assert registry.render(fmt, ctx) == module.render(ctx)


def test_unknown_format_is_a_one_line_input_error() -> None:
    with pytest.raises(InputError) as caught:
        registry.render("yaml", make_context([]))
    message = str(caught.value)
    assert "yaml" in message and "sarif" in message and "\n" not in message


def test_registry_imports_no_renderer_dependency_until_used() -> None:
    probe = (
        "import sys, engine.outputs.registry as r\n"
        "print(sorted(m for m in ('rich', 'jinja2', 'altair', 'vl_convert') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------------- json


def test_json_report_follows_the_v1_contract_and_round_trips() -> None:
    findings = varied_findings()
    ctx = make_context(findings)
    parsed = json.loads(json_report.render(ctx))

    assert parsed["schema"] == "gpuwarden.report/v1"
    assert parsed["mode"] == "dry-run"
    assert datetime.fromisoformat(parsed["generated_at"]) == NOW
    assert len(parsed["findings"]) == len(findings)
    first = parsed["findings"][0]
    contract_keys = {
        "policy",
        "severity",
        "result",
        "resource",
        "message",
        "enforcement",
        "estimated_monthly_usd",
        "remediation",
    }
    assert contract_keys <= set(first)
    assert {"provider", "kind", "id", "name", "region", "namespace"} <= set(first["resource"])
    assert set(parsed["summary"]) >= {
        "resources",
        "findings",
        "by_policy",
        "by_severity",
        "estimated_monthly_usd",
    }
    assert Report.model_validate(parsed) == ctx.report


def test_json_report_is_indented_with_two_spaces() -> None:
    text = json_report.render(make_context(varied_findings()))
    assert text.splitlines()[1].startswith('  "schema"')


# ---------------------------------------------------------------------------- table


def test_table_is_plain_text_sorted_by_dollars() -> None:
    findings = varied_findings()
    text = table.render(make_context(findings))

    assert not ANSI_ESCAPE.search(text)
    order = [f.estimated_monthly_usd for f in failing_by_dollars(findings)]
    positions = [text.index(markdown.format_usd(usd)) for usd in order if usd > 0]
    assert positions == sorted(positions)
    for header in ("Severity", "Policy", "Resource", "Result", "$/month", "Message"):
        assert header in text


def test_table_summary_line_counts_and_separates_the_figures() -> None:
    findings = varied_findings()
    text = table.render(make_context(findings))
    failing = [f for f in findings if f.result == "fail"]
    savings = savings_total(failing)
    assert f"{len(failing)} failing, 1 unknown, 1 passed" in text
    assert f"savings {markdown.format_usd(savings)}/month" in " ".join(text.split())
    assert "spend with no owner" in text and "waste" not in text


def test_table_uses_the_engine_summary_when_present() -> None:
    summary = Summary(
        resources=40, findings=1, failed=1, estimated_monthly_usd=999.0, savings_usd=999.0,
        by_policy={"gpu-idle": 1}
    )
    report = Report(
        generated_at=NOW,
        findings=[make_finding("gpu-idle", "i-1", usd=1234.0)],
        summary=summary,
    )
    text = table.render(RenderContext(report=report))
    assert "on 40 resources" in text and "$999.00" in text.split("What to do first")[0]


def test_table_what_to_do_names_the_top_three_fixes_by_dollars() -> None:
    findings = varied_findings()
    text = table.render(make_context(findings))
    advice = text.split("What to do first:")[1]
    # one item per number, its wrapped continuation lines joined
    lines = [" ".join(item.split()) for item in re.split(r"\n(?=\s+\d\. )", advice.strip())]
    top = failing_by_dollars(findings)[:3]
    assert len(lines) == 3
    for line, finding in zip(lines, top, strict=True):
        assert markdown.format_usd(finding.estimated_monthly_usd) in line
    assert "Move `gpu[0]` to spot: saves about" in lines[0]  # an action, by what it saves


def test_table_prints_markup_like_text_literally() -> None:
    finding = make_finding("gpu-idle", 'aws_instance.gpu["a"]', message="[bold]idle[/bold]")
    text = table.render(make_context([finding])).split("What to do first")[0]
    assert "[bold]idle[/bold]" in text
    assert 'aws_instance.gpu["a"]' in text.replace("\n", "").replace("│", "").replace(" ", "")


def test_table_shows_the_costliest_rows_and_counts_the_rest() -> None:
    findings = [make_finding("gpu-idle", f"i-{i:05d}", usd=i) for i in range(table.MAX_ROWS + 25)]
    text = table.render(make_context(findings))
    assert "… 25 more findings not shown" in text
    assert f"i-{table.MAX_ROWS + 24:05d}" in text  # the most expensive is shown
    assert "i-00000" not in text and "i-00024" not in text  # the cheapest are cut
    assert f"{table.MAX_ROWS + 25} failing" in text


def test_table_without_findings_says_so() -> None:
    text = table.render(make_context([]))
    assert "No findings." in text and "0 failing" in text


# ---------------------------------------------------------------------------- sarif


def sarif_run(findings: list[Finding], **overrides: Any) -> Any:
    log = json.loads(sarif.render(make_context(findings, **overrides)))
    assert log["version"] == "2.1.0"
    assert log["$schema"] == "https://json.schemastore.org/sarif-2.1.0.json"
    assert len(log["runs"]) == 1
    return log["runs"][0]


def test_sarif_has_one_rule_per_policy_and_matching_rule_indexes() -> None:
    findings = varied_findings()
    run = sarif_run(findings)
    rules = run["tool"]["driver"]["rules"]
    assert sorted(rule["id"] for rule in rules) == sorted({f.policy for f in findings})
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]


def test_sarif_driver_and_rule_metadata() -> None:
    run = sarif_run(varied_findings(), tool_version="1.2.3")
    driver = run["tool"]["driver"]
    assert driver["name"] == "gpuwarden" and driver["version"] == "1.2.3"
    assert driver["informationUri"].startswith("https://")
    rules = {rule["id"]: rule for rule in driver["rules"]}
    spot = rules["gpu-spot-required"]
    assert spot["name"] == "GpuSpotRequired"
    assert spot["shortDescription"]["text"] == POLICIES["gpu-spot-required"].title
    assert spot["fullDescription"]["text"] == POLICIES["gpu-spot-required"].description
    assert "Request spot capacity" in spot["help"]["markdown"]
    assert spot["helpUri"] == POLICIES["gpu-spot-required"].help_uri
    assert spot["defaultConfiguration"]["level"] == "error"
    assert {"gpu", "finops"} <= set(spot["properties"]["tags"])
    assert "security-severity" not in spot["properties"]
    assert rules["encryption-at-rest"]["properties"]["security-severity"] == "8.0"
    assert rules["gpu-off-hours-shutdown"]["defaultConfiguration"]["level"] == "note"


@pytest.mark.parametrize(
    ("severity", "result", "level"),
    [
        (Severity.CRITICAL, "fail", "error"),
        (Severity.HIGH, "fail", "error"),
        (Severity.MEDIUM, "fail", "warning"),
        (Severity.LOW, "fail", "note"),
        (Severity.INFO, "fail", "note"),
        (Severity.CRITICAL, "unknown", "note"),
    ],
)
def test_sarif_level_follows_severity_and_result(
    severity: Severity, result: str, level: str
) -> None:
    run = sarif_run([make_finding("gpu-idle", "i-1", severity=severity, result=result)])
    (only,) = run["results"]
    assert only["level"] == level
    assert only["properties"]["result"] == result


def test_sarif_leaves_passed_findings_out() -> None:
    run = sarif_run(varied_findings())
    results = run["results"]
    assert "gpu-mig-for-small-jobs" not in {r["ruleId"] for r in results}
    assert len(results) == sum(1 for f in varied_findings() if f.result != "pass")


def test_sarif_fingerprints_are_stable_and_per_policy_and_resource() -> None:
    first = sarif_run(varied_findings())["results"]
    second = sarif_run(list(reversed(varied_findings())))["results"]

    def prints(results: Any) -> dict[tuple[str, str], str]:
        return {
            (r["ruleId"], r["locations"][0]["logicalLocations"][0]["fullyQualifiedName"]): r[
                "partialFingerprints"
            ]["gpuwardenFinding/v1"]
            for r in results
        }

    assert prints(first) == prints(second)
    for (policy, resource_id), value in prints(first).items():
        assert value == hashlib.sha256(f"{policy}|{resource_id}".encode()).hexdigest()
    assert len(set(prints(first).values())) == len(prints(first))


def test_sarif_locations_map_to_file_and_line_else_the_scanned_file() -> None:
    run = sarif_run(varied_findings(), source_file="plans/gpu plan.json")
    by_key = {(r["ruleId"]): r["locations"][0] for r in run["results"]}

    spot = by_key["gpu-spot-required"]["physicalLocation"]
    assert spot["artifactLocation"] == {"uri": "infra/train.tf", "uriBaseId": "%SRCROOT%"}
    assert spot["region"] == {"startLine": 3}

    idle = by_key["gpu-idle"]["physicalLocation"]  # "./infra\\live.tf", no line
    assert idle["artifactLocation"]["uri"] == "infra/live.tf"
    assert idle["region"] == {"startLine": 1}

    fallback = by_key["gpu-underutilized"]["physicalLocation"]
    assert fallback["artifactLocation"] == {
        "uri": "plans/gpu%20plan.json",
        "uriBaseId": "%SRCROOT%",
    }
    assert fallback["region"] == {"startLine": 1}

    logical = by_key["gpu-underutilized"]["logicalLocations"][0]
    assert logical["fullyQualifiedName"] == "aws_instance.small"


def test_sarif_absolute_paths_become_file_uris() -> None:
    assert sarif.artifact_location("/srv/infra/main.tf") == {"uri": "file:///srv/infra/main.tf"}
    assert sarif.artifact_location("C:\\infra\\main.tf") == {"uri": "file:///C:/infra/main.tf"}


def test_sarif_without_any_file_keeps_the_logical_location_only() -> None:
    run = sarif_run([make_finding("gpu-idle", "i-1")], source_file=None)
    (location,) = run["results"][0]["locations"]
    assert "physicalLocation" not in location
    assert location["logicalLocations"][0]["fullyQualifiedName"] == "i-1"


def test_sarif_message_carries_dollars_and_resource() -> None:
    run = sarif_run([make_finding("gpu-idle", "i-1", usd=1234.5, message="idle GPU")])
    result = run["results"][0]
    assert "idle GPU" in result["message"]["text"]
    assert "$1,234.50/month" in result["message"]["text"]
    assert result["properties"]["estimated_monthly_usd"] == 1234.5


# ---------------------------------------------------------------------------- junit


def test_junit_parses_back_with_counts_matching_the_findings() -> None:
    findings = varied_findings()
    root = ET.fromstring(junit.render(make_context(findings)))

    assert root.tag == "testsuites"
    assert int(root.get("tests", "-1")) == len(findings)
    assert int(root.get("failures", "-1")) == sum(f.result == "fail" for f in findings)
    assert int(root.get("skipped", "-1")) == sum(f.result == "unknown" for f in findings)
    suites = root.findall("testsuite")
    assert sorted(s.get("name", "") for s in suites) == sorted({f.policy for f in findings})
    for suite in suites:
        mine = [f for f in findings if f.policy == suite.get("name")]
        cases = suite.findall("testcase")
        assert int(suite.get("tests", "-1")) == len(cases) == len(mine)
        assert int(suite.get("failures", "-1")) == len(
            [c for c in cases if c.find("failure") is not None]
        )
        assert int(suite.get("skipped", "-1")) == len(
            [c for c in cases if c.find("skipped") is not None]
        )
        assert {c.get("name") for c in cases} == {f.resource.id for f in mine}
        assert {c.get("classname") for c in cases} == {suite.get("name")}


def test_junit_failure_skipped_and_plain_cases() -> None:
    root = ET.fromstring(junit.render(make_context(varied_findings())))
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}

    failure = cases[("gpu-idle", "i-0abc")].find("failure")
    assert failure is not None
    assert failure.get("type") == "critical"
    assert failure.get("message") == "average GPU activity 1.2% over 1h"
    assert "$2,400.00" in (failure.text or "")

    skipped = cases[("encryption-at-rest", "aws_ebs_volume.data")].find("skipped")
    assert skipped is not None and "after apply" in (skipped.get("message") or "")

    passed = cases[("gpu-mig-for-small-jobs", "Deployment/ml/infer")]
    assert list(passed) == []


def test_junit_survives_characters_xml_cannot_hold() -> None:
    finding = make_finding(
        "gpu-idle", "i-\x01bad", message="tag value \x07 with <markup> & \x1b[0m"
    )
    root = ET.fromstring(junit.render(make_context([finding])))
    case = root.find("testsuite/testcase")
    assert case is not None
    failure = case.find("failure")
    assert failure is not None and "<markup> &" in (failure.get("message") or "")


def test_junit_timestamp_is_zoneless_utc() -> None:
    root = ET.fromstring(junit.render(make_context(varied_findings())))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("timestamp") == "2025-03-04T21:30:00"


# ---------------------------------------------------------------------------- markdown


def table_rows(text: str, header: str) -> list[str]:
    section = text.split(header, 1)[1]
    rows = []
    for line in section.splitlines()[2:]:
        if not line.startswith("| "):
            break
        if line.startswith("| ---"):
            continue
        rows.append(line)
    return rows


def test_markdown_headline_table_details_unknowns_and_footer() -> None:
    findings = varied_findings()
    text = markdown.render(make_context(findings))
    failing = failing_by_dollars(findings)
    total = sum(f.estimated_monthly_usd for f in failing)

    assert f"{len(failing)} failing, 1 unknown" in text.splitlines()[1]
    assert markdown.format_usd(total) in text.splitlines()[1]

    rows = table_rows(text, "| Severity | Policy | Resource | $/month | Message |")
    assert len(rows) == len(failing)
    for row, finding in zip(rows, failing, strict=True):
        assert finding.resource.id in row and finding.policy in row

    resources = {f.resource.id for f in failing}
    assert text.count("<details>") == len(resources) == text.count("</details>")
    unknown_section = text.split("### Unknown", 1)[1]
    assert "aws_ebs_volume.data" in unknown_section
    assert "aws_ebs_volume.data" not in text.split("### Unknown", 1)[0]
    assert "Deployment/ml/infer" not in text  # passes are counted, not listed
    assert "gpuwarden 0.1.0" in text.rstrip().splitlines()[-1]


def test_markdown_cells_cannot_break_the_table_or_inject_html() -> None:
    nasty = make_finding(
        "gpu-idle",
        "aws_instance.a|b",
        usd=10,
        message="line one | pipe\nline two <script>alert(1)</script></details>",
    )
    text = markdown.render(make_context([nasty]))
    rows = table_rows(text, "| Severity | Policy | Resource | $/month | Message |")
    assert len(rows) == 1
    (row,) = rows
    assert "line one \\| pipe<br>line two &lt;script&gt;" in row
    assert len(re.split(r"(?<!\\)\|", row)) == 5 + 2  # five cells between the outer pipes
    assert "<script>" not in text and "</details></details>" not in text
    assert text.count("</details>") == 1


def test_markdown_10000_findings_stay_under_budget_and_count_what_was_left_out() -> None:
    findings = [
        make_finding(
            "gpu-spot-required" if i % 3 else "required-cost-tags",
            f"module.fleet.aws_instance.gpu[{i}]",
            result="unknown" if i % 10 == 0 else "fail",
            usd=float(i % 997),
            message=f"finding number {i} with a reasonably long explanation of the problem",
        )
        for i in range(10_000)
    ]
    ctx = make_context(findings)
    text = markdown.render(ctx)

    assert len(text) <= ctx.max_chars
    assert len(text) > ctx.max_chars * 0.8  # the budget is used, not thrown away
    failing_shown = len(table_rows(text, "| Severity | Policy | Resource | $/month | Message |"))
    unknown_shown = len(table_rows(text, "| Severity | Policy | Resource | Message |"))
    hidden = [
        int(n) for n in re.findall(r"… (\d+) more findings not shown; see the full report", text)
    ]
    failing_total = sum(f.result == "fail" for f in findings)
    unknown_total = sum(f.result == "unknown" for f in findings)
    assert sum(hidden) == failing_total + unknown_total - failing_shown - unknown_shown
    assert failing_shown > 0 and hidden[0] == failing_total - failing_shown
    # the headline still counts everything
    assert f"{failing_total} failing, {unknown_total} unknown" in text


@pytest.mark.parametrize("max_chars", [3_000, 400, 40])
def test_markdown_respects_small_budgets(max_chars: int) -> None:
    findings = [make_finding("gpu-idle", f"i-{i}", usd=i) for i in range(200)]
    text = markdown.render(make_context(findings, max_chars=max_chars))
    assert len(text) <= max_chars
    assert "more findings not shown" in text[:max_chars] or max_chars < len(
        TRUNCATION_NOTICE.format(count=200)
    )


def test_markdown_within_budget_is_not_truncated() -> None:
    text = markdown.render(make_context(varied_findings()))
    assert "not shown" not in text


# ---------------------------------------------------------------------------- html


class _TagCollector(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_is_self_contained_and_escapes_everything() -> None:
    findings = [
        *varied_findings(),
        make_finding("gpu-idle", "i-evil", usd=1, message="<script>alert('x')</script> & co"),
    ]
    page = html_output.render(make_context(findings))
    parser = _TagCollector()
    parser.feed(page)
    tags = [tag for tag, _ in parser.tags]

    assert page.startswith("<!DOCTYPE html>")
    assert "style" in tags and tags.count("script") == 1  # the page's own, inline, no src
    assert not any(tag == "link" or "src" in attrs for tag, attrs in parser.tags)
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; co" in page
    assert "<script>alert('x')</script> & co" in "".join(parser.text)


def test_html_has_the_same_content_as_markdown() -> None:
    findings = varied_findings()
    page = html_output.render(make_context(findings))
    failing = failing_by_dollars(findings)
    failing_table = page.split('id="failing"')[1].split("</table>")[0]
    amounts = [figure(f) for f in failing]
    positions = [failing_table.index(f'"usd">{amount}<') for amount in amounts]
    assert positions == sorted(positions)
    for finding in findings:
        assert finding.resource.id in page
    assert page.count("<details>") == len({f.resource.id for f in failing}) + 1  # + passed
    assert 'id="unknown"' in page and "aws_ebs_volume.data" in page.split('id="unknown"')[1]
    assert markdown.format_usd(savings_total(failing)) in page
