"""`--format policyreport` validated against the wgpolicyk8s.io/v1alpha2 CRD schema."""

from __future__ import annotations

import copy
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from engine.cli import main
from engine.core.evaluate import Engine
from engine.core.model import Finding, Report
from engine.demo import demo_snapshot_path
from engine.outputs import RenderContext
from engine.outputs.policyreport import policy_reports, render
from engine.pipeline import policy_meta
from engine.sources.snapshot import load_snapshot_resources
from tests.conftest import OFF_HOURS

SCHEMA_FILE = Path(__file__).parent / "fixtures" / "policyreport-crd-v1alpha2.yaml"


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The CRD schema with unknown fields forbidden: the API server would prune them silently."""
    schema = copy.deepcopy(schema)

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(strict(yaml.safe_load(SCHEMA_FILE.read_text())))


@pytest.fixture(scope="module")
def demo_report(builtin_engine: Engine) -> tuple[Report, RenderContext]:
    resources = load_snapshot_resources(demo_snapshot_path(), builtin_engine.catalog)
    report = builtin_engine.evaluate(resources, OFF_HOURS, show_passed=True)
    return report, RenderContext(report=report, policies=policy_meta(builtin_engine.policies))


def documents(ctx: RenderContext) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(render(ctx)) if doc is not None]


def test_every_report_validates_against_the_crd_schema(
    demo_report: tuple[Report, RenderContext], validator: jsonschema.Draft7Validator,
) -> None:
    docs = documents(demo_report[1])
    assert len(docs) >= 2
    for doc in docs:
        errors = [error.message for error in validator.iter_errors(doc)]
        assert errors == [], f"{doc['kind']} {doc['metadata']['name']}: {errors[:3]}"


def test_one_report_per_namespace_then_the_cluster_report(
    demo_report: tuple[Report, RenderContext],
) -> None:
    report, ctx = demo_report
    docs = documents(ctx)
    *namespaced, cluster = docs
    assert cluster["kind"] == "ClusterPolicyReport" and "namespace" not in cluster["metadata"]
    assert all(doc["apiVersion"] == "wgpolicyk8s.io/v1alpha2" for doc in docs)
    expected = sorted({f.resource.namespace for f in report.findings
                       if f.resource.provider == "kubernetes" and f.resource.namespace})
    assert [doc["metadata"]["namespace"] for doc in namespaced] == expected
    for doc in namespaced:
        assert doc["kind"] == "PolicyReport"
        assert {ref["namespace"] for r in doc["results"] for ref in r["resources"]} == {
            doc["metadata"]["namespace"]}
    cloud = [f for f in report.findings if f.resource.provider != "kubernetes"]
    assert len(cluster["results"]) == len(cloud) > 0


def test_results_carry_each_finding_once_with_summary_counts(
    demo_report: tuple[Report, RenderContext],
) -> None:
    report, ctx = demo_report
    docs = documents(ctx)
    results = [result for doc in docs for result in doc["results"]]
    assert len(results) == len(report.findings)
    expected = Counter({"fail": "fail", "unknown": "skip", "pass": "pass"}[f.result]
                       for f in report.findings)
    assert Counter(r["result"] for r in results) == expected
    assert {"fail", "skip", "pass"} <= set(expected)
    for doc in docs:
        counted = Counter(r["result"] for r in doc["results"])
        assert doc["summary"] == {k: counted.get(k, 0)
                                  for k in ("pass", "fail", "warn", "error", "skip")}
    assert all(r["source"] == "gpuwarden" for r in results)


def test_result_fields_follow_the_finding(demo_report: tuple[Report, RenderContext]) -> None:
    report, ctx = demo_report
    finding = next(f for f in report.findings
                   if f.result == "fail" and f.resource.kind == "Deployment")
    result = find_result(policy_reports(ctx), finding)
    assert result["policy"] == finding.policy
    assert result["severity"] == finding.severity.value
    assert result["message"] == finding.message
    assert result["scored"] is (finding.enforcement == "deny")
    assert result["resources"] == [{"apiVersion": "apps/v1", "kind": "Deployment",
                                    "name": finding.resource.name,
                                    "namespace": finding.resource.namespace}]
    assert result["properties"]["estimated_monthly_usd"] == f"{finding.estimated_monthly_usd:.2f}"
    assert result["timestamp"] == {"seconds": int(OFF_HOURS.timestamp()), "nanos": 0}


def find_result(docs: list[dict[str, Any]], finding: Finding) -> dict[str, Any]:
    for doc in docs:
        for result in doc["results"]:
            if (result["policy"] == finding.policy
                    and result["properties"]["resource_id"] == finding.resource.id):
                return dict(result)
    raise AssertionError(f"no result for {finding.policy} {finding.resource.id}")


def test_schema_rejects_what_the_crd_would_reject(
    demo_report: tuple[Report, RenderContext], validator: jsonschema.Draft7Validator,
) -> None:
    doc = documents(demo_report[1])[0]
    bad = copy.deepcopy(doc)
    bad["results"][0]["severity"] = "urgent"
    assert not validator.is_valid(bad)
    bad = copy.deepcopy(doc)
    bad["results"][0]["properties"]["estimated_monthly_usd"] = 12.5
    assert not validator.is_valid(bad)


def test_empty_report_is_a_single_empty_cluster_report(
    validator: jsonschema.Draft7Validator,
) -> None:
    ctx = RenderContext(report=Report(generated_at=OFF_HOURS))
    docs = documents(ctx)
    assert [d["kind"] for d in docs] == ["ClusterPolicyReport"]
    assert docs[0]["results"] == [] and validator.is_valid(docs[0])


def test_cli_format_policyreport(capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["gpuwarden", "scan", "--demo", "-f", "policyreport",
                                      "--now", OFF_HOURS.isoformat(), "--soft-fail"])
    with pytest.raises(SystemExit) as exited:
        main()
    out, _ = capsys.readouterr()
    assert exited.value.code in (0, None)
    kinds = [doc["kind"] for doc in yaml.safe_load_all(out) if doc]
    assert kinds[-1] == "ClusterPolicyReport" and "PolicyReport" in kinds
