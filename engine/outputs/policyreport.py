"""`--format policyreport`: findings as `wgpolicyk8s.io/v1alpha2` PolicyReports (YAML stream).

One namespaced PolicyReport per Kubernetes namespace with findings, then one ClusterPolicyReport
for everything else (cluster-scoped objects and cloud resources), so `kubectl apply -f -` and
policy-report UIs (Policy Reporter, Kyverno's) show gpuwarden results beside other engines'.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

import yaml

from engine.core.model import Finding
from engine.outputs import RenderContext

API_VERSION = "wgpolicyk8s.io/v1alpha2"
SOURCE = "gpuwarden"
CLUSTER_REPORT_NAME = "gpuwarden-cluster"
_RESULTS = {"fail": "fail", "unknown": "skip", "pass": "pass"}
_API_VERSIONS = {
    "Pod": "v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "ReplicaSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
}


def render(ctx: RenderContext) -> str:
    return yaml.safe_dump_all(policy_reports(ctx), sort_keys=False, width=100,
                              allow_unicode=True)


def policy_reports(ctx: RenderContext) -> list[dict[str, Any]]:
    """The PolicyReports (by namespace, sorted) followed by the ClusterPolicyReport."""
    by_namespace: dict[str, list[Finding]] = {}
    cluster_wide: list[Finding] = []
    for finding in ctx.report.findings:
        namespace = _namespace_of(finding)
        if namespace is None:
            cluster_wide.append(finding)
        else:
            by_namespace.setdefault(namespace, []).append(finding)
    stamp = _timestamp(ctx.report.generated_at)
    reports = [
        _report("PolicyReport", f"gpuwarden-{namespace}", namespace, findings, ctx, stamp)
        for namespace, findings in sorted(by_namespace.items())
    ]
    reports.append(_report("ClusterPolicyReport", CLUSTER_REPORT_NAME, None, cluster_wide, ctx,
                           stamp))
    return reports


def _namespace_of(finding: Finding) -> str | None:
    resource = finding.resource
    return resource.namespace if resource.provider == "kubernetes" else None


def _report(kind: str, name: str, namespace: str | None, findings: list[Finding],
            ctx: RenderContext, stamp: dict[str, int]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = {"app.kubernetes.io/managed-by": SOURCE}
    results = [_result(finding, ctx, stamp) for finding in findings]
    counts = Counter(result["result"] for result in results)
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": metadata,
        "summary": {key: counts.get(key, 0) for key in ("pass", "fail", "warn", "error", "skip")},
        "results": results,
    }


def _result(finding: Finding, ctx: RenderContext, stamp: dict[str, int]) -> dict[str, Any]:
    meta = ctx.policies.get(finding.policy)
    result: dict[str, Any] = {
        "source": SOURCE,
        "policy": finding.policy,
        "rule": finding.policy,
        "category": "GPU spend",
        "result": _RESULTS[finding.result],
        "severity": finding.severity.value,
        "scored": finding.enforcement == "deny",
        "timestamp": dict(stamp),  # a copy: shared dicts would become YAML aliases
        "message": finding.message or (meta.title if meta else finding.title),
        "resources": [_reference(finding)],
        "properties": _properties(finding),
    }
    return result


def _reference(finding: Finding) -> dict[str, str]:
    resource = finding.resource
    reference: dict[str, str] = {}
    if resource.provider == "kubernetes" and resource.kind in _API_VERSIONS:
        reference["apiVersion"] = _API_VERSIONS[resource.kind]
    reference["kind"] = resource.kind
    # Cloud resources have no Kubernetes name: their id (ARN, address) names them.
    reference["name"] = resource.name if resource.provider == "kubernetes" else resource.id
    if resource.namespace is not None and resource.provider == "kubernetes":
        reference["namespace"] = resource.namespace
    return reference


def _properties(finding: Finding) -> dict[str, str]:
    """Extra facts as the CRD allows them: a flat map of strings."""
    properties = {
        "estimated_monthly_usd": f"{finding.estimated_monthly_usd:.2f}",
        "cost_kind": finding.cost_kind,
        "enforcement": finding.enforcement,
        "provider": finding.resource.provider,
        "resource_id": finding.resource.id,
    }
    if finding.cost_basis:
        properties["cost_basis"] = finding.cost_basis
    if finding.resource.region:
        properties["region"] = finding.resource.region
    if finding.remediation is not None:
        properties["remediation"] = finding.remediation.action
        properties["remediation_status"] = finding.remediation.status
    return properties


def _timestamp(instant: datetime) -> dict[str, int]:
    seconds = int(instant.timestamp())
    return {"seconds": seconds, "nanos": instant.microsecond * 1000}
