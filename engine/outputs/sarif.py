"""SARIF 2.1.0 for GitHub code scanning: one rule per policy, a result per failing/unknown finding.

Passed findings are left out: every SARIF result becomes an open alert in code scanning.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

import orjson

from engine.core.model import Finding, Severity, SourceLocation
from engine.outputs import PolicyMeta, RenderContext
from engine.outputs.actions import figure

SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
TOOL_NAME = "gpuwarden"
INFORMATION_URI = "https://github.com/gpuwarden/gpuwarden"
FINGERPRINT_KEY = "gpuwardenFinding/v1"
SRCROOT = "%SRCROOT%"

LEVEL_BY_SEVERITY = {
    Severity.CRITICAL: "error",
    Severity.HIGH: "error",
    Severity.MEDIUM: "warning",
    Severity.LOW: "note",
    Severity.INFO: "note",
}
PROBLEM_SEVERITY_BY_LEVEL = {"error": "error", "warning": "warning", "note": "recommendation"}
# GitHub ranks alerts that carry `security-severity` as security alerts: 9.0+ critical,
# 7.0-8.9 high, 4.0-6.9 medium, 0.1-3.9 low. Only security policies get one.
SECURITY_SEVERITY = {
    Severity.CRITICAL: "9.5",
    Severity.HIGH: "8.0",
    Severity.MEDIUM: "5.5",
    Severity.LOW: "3.0",
    Severity.INFO: "1.0",
}
SECURITY_POLICIES = frozenset(
    {"encryption-at-rest", "untrusted-gpu-sandboxed", "gpu-namespace-network-policy"}
)

_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:/")
_SEVERITY_NAMES = frozenset(s.value for s in Severity)


def render(ctx: RenderContext) -> str:
    data: bytes = orjson.dumps(sarif_log(ctx), option=orjson.OPT_INDENT_2)
    return data.decode("utf-8") + "\n"


def sarif_log(ctx: RenderContext) -> dict[str, Any]:
    findings = ctx.report.findings
    policy_ids = sorted({f.policy for f in findings})
    rule_index = {policy_id: index for index, policy_id in enumerate(policy_ids)}
    rules = [_rule(policy_id, ctx.policies.get(policy_id), findings) for policy_id in policy_ids]
    results = [
        _result(f, rule_index[f.policy], ctx.source_file) for f in findings if f.result != "pass"
    ]
    return {
        "$schema": SARIF_SCHEMA_URI,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {"driver": _driver(ctx.tool_version, rules)},
                "originalUriBaseIds": {
                    SRCROOT: {"description": {"text": "The root of the scanned repository."}}
                },
                "columnKind": "utf16CodeUnits",
                "results": results,
                "properties": {
                    "mode": ctx.report.mode,
                    "generated_at": ctx.report.generated_at.isoformat(),
                },
            }
        ],
    }


def _driver(version: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": TOOL_NAME,
        "version": version,
        "semanticVersion": version,
        "informationUri": INFORMATION_URI,
        "rules": rules,
    }


# ---------------------------------------------------------------------------- rules


def rule_name(policy_id: str) -> str:
    """`gpu-spot-required` → `GpuSpotRequired` (SARIF's reportingDescriptor.name)."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^0-9A-Za-z]+", policy_id))


def _rule(policy_id: str, meta: PolicyMeta | None, findings: Iterable[Finding]) -> dict[str, Any]:
    first = next(f for f in findings if f.policy == policy_id)
    title = (meta.title if meta else "") or first.title or policy_id
    description = (meta.description if meta else "") or title
    severity = _rule_severity(meta, first)
    level = LEVEL_BY_SEVERITY[severity]
    rule: dict[str, Any] = {
        "id": policy_id,
        "name": rule_name(policy_id) or policy_id,
        "shortDescription": {"text": title},
        "fullDescription": {"text": description},
        "help": _help(title, description, meta),
        "defaultConfiguration": {"level": level},
        "properties": _rule_properties(policy_id, severity, level),
    }
    if meta is not None and meta.help_uri:
        rule["helpUri"] = meta.help_uri
    return rule


def _rule_severity(meta: PolicyMeta | None, first: Finding) -> Severity:
    if meta is not None and meta.severity in _SEVERITY_NAMES:
        return Severity(meta.severity)
    return Severity(first.severity)


def _help(title: str, description: str, meta: PolicyMeta | None) -> dict[str, str]:
    fix = meta.help if meta is not None else ""
    text = description if not fix else f"{description}\n\nHow to fix: {fix}"
    markdown = f"**{title}**\n\n{description}"
    if fix:
        markdown += f"\n\n**How to fix:** {fix}"
    if meta is not None and meta.help_uri:
        markdown += f"\n\n[Policy documentation]({meta.help_uri})"
    return {"text": text, "markdown": markdown}


def _rule_properties(policy_id: str, severity: Severity, level: str) -> dict[str, Any]:
    security = policy_id in SECURITY_POLICIES
    tags = ["gpu", "finops", "cost", "policy-as-code"]
    if security:
        tags.append("security")
    properties: dict[str, Any] = {
        "tags": tags,
        "precision": "very-high",
        "problem.severity": PROBLEM_SEVERITY_BY_LEVEL[level],
    }
    if security:
        properties["security-severity"] = SECURITY_SEVERITY[severity]
    return properties


# ---------------------------------------------------------------------------- results


def fingerprint(policy_id: str, resource_id: str) -> str:
    """Stable across runs: the same policy on the same resource is the same alert."""
    return hashlib.sha256(f"{policy_id}|{resource_id}".encode()).hexdigest()


def _result(finding: Finding, rule_index: int, source_file: str | None) -> dict[str, Any]:
    level = "note" if finding.result == "unknown" else LEVEL_BY_SEVERITY[Severity(finding.severity)]
    result = {
        "ruleId": finding.policy,
        "ruleIndex": rule_index,
        "level": level,
        "message": {"text": _message(finding)},
        "locations": [_location(finding, source_file)],
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint(finding.policy, finding.resource.id)},
        "properties": {
            "result": finding.result,
            "severity": str(finding.severity),
            "enforcement": finding.enforcement,
            "estimated_monthly_usd": finding.estimated_monthly_usd,
            "cost_kind": finding.cost_kind,
            "resource_kind": finding.resource.kind,
        },
    }
    definition = finding.location.definition if finding.location else None
    if definition is not None and _usable_path(definition.file):
        result["relatedLocations"] = [_related_location(definition)]
    return result


def _related_location(definition: SourceLocation) -> dict[str, Any]:
    """The resource block inside the module whose call the result points at."""
    physical = _physical_location(definition, None)
    return {"id": 1, "physicalLocation": physical,
            "message": {"text": "the resource block in the module"}}


def _message(finding: Finding) -> str:
    prefix = "Unknown (depends on values not known yet): " if finding.result == "unknown" else ""
    cost = f"Estimated {figure(finding)}/month."
    return f"{prefix}{finding.message.rstrip()} [{finding.resource.id}] {cost}"


def _location(finding: Finding, source_file: str | None) -> dict[str, Any]:
    location: dict[str, Any] = {
        "logicalLocations": [
            {
                "name": finding.resource.name or finding.resource.id,
                "fullyQualifiedName": finding.resource.id,
                "kind": "resource",
            }
        ]
    }
    physical = _physical_location(finding.location, source_file)
    if physical is not None:
        location["physicalLocation"] = physical
    return location


def _physical_location(
    location: SourceLocation | None, source_file: str | None
) -> dict[str, Any] | None:
    """The finding's own file and line (1 when unknown); else the scanned file at line 1."""
    if location is not None and _usable_path(location.file):
        line = location.line if location.line is not None and location.line >= 1 else 1
        return {"artifactLocation": artifact_location(location.file), "region": {"startLine": line}}
    if source_file is not None and _usable_path(source_file):
        return {"artifactLocation": artifact_location(source_file), "region": {"startLine": 1}}
    return None


def _usable_path(path: str) -> bool:
    return bool(path.strip()) and path.strip() != "-"


def artifact_location(path: str) -> Mapping[str, str]:
    """A relative path becomes a %SRCROOT%-based URI with forward slashes; absolute → file URI."""
    normalized = path.strip().replace("\\", "/")
    if normalized.startswith("/") or _WINDOWS_DRIVE.match(normalized):
        root = "" if normalized.startswith("/") else "/"
        return {"uri": "file://" + root + quote(normalized, safe="/:")}
    while normalized.startswith("./"):
        normalized = normalized[2:]
    return {"uri": quote(normalized, safe="/"), "uriBaseId": SRCROOT}
