"""JUnit XML: one testsuite per policy, one testcase per finding (resource).

fail → <failure type=severity>, unknown → <skipped>, pass (listed with --show-passed) → a plain
testcase. CI systems that read JUnit show a policy as a suite and a resource as a test.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import UTC, datetime

from engine.core.model import Finding, Report
from engine.outputs import RenderContext
from engine.outputs.actions import figure

SUITES_NAME = "gpuwarden"
# Characters XML 1.0 cannot carry at all, even escaped; user-supplied tags may contain them.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def render(ctx: RenderContext) -> str:
    root = testsuites(ctx.report)
    ET.indent(root)
    body = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"


def testsuites(report: Report) -> ET.Element:
    by_policy: dict[str, list[Finding]] = {}
    for finding in report.findings:
        by_policy.setdefault(finding.policy, []).append(finding)
    timestamp = junit_timestamp(report.generated_at)
    suites = [_testsuite(policy, by_policy[policy], timestamp) for policy in sorted(by_policy)]
    root = ET.Element("testsuites", _counts(report.findings, name=SUITES_NAME))
    root.extend(suites)
    return root


def junit_timestamp(moment: datetime) -> str:
    """JUnit's schema wants a zone-less ISO 8601 date-time: we write UTC."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment.replace(microsecond=0).isoformat()


def _testsuite(policy: str, findings: Sequence[Finding], timestamp: str) -> ET.Element:
    suite = ET.Element("testsuite", _counts(findings, name=policy, timestamp=timestamp))
    suite.extend(_testcase(f) for f in findings)
    return suite


def _counts(findings: Sequence[Finding], **attributes: str) -> dict[str, str]:
    counts = {
        "tests": len(findings),
        "failures": sum(1 for f in findings if f.result == "fail"),
        "skipped": sum(1 for f in findings if f.result == "unknown"),
        "errors": 0,
    }
    return {**{k: _clean(v) for k, v in attributes.items()}, **_text(counts), "time": "0"}


def _text(counts: dict[str, int]) -> dict[str, str]:
    return {key: str(value) for key, value in counts.items()}


def _testcase(finding: Finding) -> ET.Element:
    case = ET.Element(
        "testcase",
        {"classname": _clean(finding.policy), "name": _clean(finding.resource.id), "time": "0"},
    )
    if finding.result == "fail":
        failure = ET.SubElement(
            case, "failure", {"message": _clean(finding.message), "type": str(finding.severity)}
        )
        failure.text = _clean(_failure_body(finding))
    elif finding.result == "unknown":
        ET.SubElement(case, "skipped", {"message": _clean(f"unknown: {finding.message}")})
    return case


def _failure_body(finding: Finding) -> str:
    resource = finding.resource
    lines = [
        finding.message,
        f"resource: {resource.kind} {resource.id} ({resource.provider})",
        f"severity: {finding.severity}; enforcement: {finding.enforcement}",
        f"estimated per month: {figure(finding)} ({finding.cost_kind})",
    ]
    if finding.location is not None:
        line = "" if finding.location.line is None else f":{finding.location.line}"
        lines.append(f"location: {finding.location.file}{line}")
    if finding.remediation is not None:
        lines.append(
            f"remediation: {finding.remediation.action} ({finding.remediation.status})"
            + (f" {finding.remediation.detail}" if finding.remediation.detail else "")
        )
    return "\n".join(lines)


def _clean(text: str) -> str:
    return _XML_ILLEGAL.sub("\ufffd", text)
