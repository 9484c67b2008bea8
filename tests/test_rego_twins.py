"""The Rego twins in policies/rego give the same findings as their YAML twins on the same inputs:
gpu-spot-required over plan JSON, required-cost-tags over admission requests; and the
Gatekeeper-style constraint runs as Gatekeeper would run it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.core.evaluate import Engine
from engine.core.model import Category, Finding, Report, State
from engine.core.policy import CompiledPolicy
from engine.loading.policies import load_policies
from engine.rego.inputs import (
    admission_request,
    plan_documents,
    request_for_manifest,
    request_of,
)
from engine.sources.kubernetes import workload_resource
from engine.sources.terraform import plan_resources, read_plan
from tests.conftest import REFERENCE

pytest.importorskip("regorus")

REPO = Path(__file__).resolve().parents[1]
REGO_PACK = REPO / "policies" / "rego"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PLANS = sorted([*(REPO / "tests" / "fixtures" / "plans").glob("*.json"),
                *(REFERENCE / "terraform-plans").glob("*.json"),
                REPO / "tests" / "data" / "terraform-capacity" / "plan.json"])


def builtin(policy_id: str) -> Engine:
    return Engine([p for p in load_policies(["builtin"]) if p.id == policy_id])


def twin(name: str, *extra: str) -> Engine:
    return Engine(load_policies([str(REGO_PACK / name), *extra]))


def comparable(report: Report) -> list[tuple[Any, ...]]:
    """What must agree: who, what verdict, what it does at the door, what it costs, the fix."""
    return sorted(
        (f.policy, f.resource.id, f.result, f.enforcement, f.severity.value,
         f.estimated_monthly_usd, f.remediation.action if f.remediation else None,
         f.remediation.detail if f.remediation else None, tuple(f.details.get("missing_tags", ())))
        for f in report.findings
    )


# ---------------------------------------------------------------------------- gpu-spot-required


@pytest.fixture(scope="module")
def spot_engines() -> tuple[Engine, Engine]:
    return builtin("gpu-spot-required"), twin("gpu_spot_required.yaml")


def check_spot_plan(path: Path, engines: tuple[Engine, Engine]) -> list[Finding]:
    yaml_engine, rego_engine = engines
    plan = read_plan(str(path))
    resources = plan_resources(plan, str(path), yaml_engine.catalog)
    expected = yaml_engine.evaluate(resources, NOW, door="plan")
    actual = rego_engine.evaluate(resources, NOW, door="plan", documents=plan_documents([plan]))
    assert comparable(actual) == comparable(expected)
    assert actual.summary.failed == expected.summary.failed
    assert actual.summary.unknown == expected.summary.unknown
    for finding in actual.findings:
        assert finding.resource.id in finding.message
    return actual.findings


@pytest.mark.parametrize("path", PLANS, ids=[p.name for p in PLANS])
def test_spot_twin_agrees_on_real_and_fixture_plans(
    path: Path, spot_engines: tuple[Engine, Engine]
) -> None:
    check_spot_plan(path, spot_engines)


def test_spot_twin_finds_the_fixture_violations(spot_engines: tuple[Engine, Engine]) -> None:
    """Agreement is not vacuous: the fixture plans hold failing and undecidable resources."""
    findings = [f for name in ("aws", "azure", "gcp")
                for f in check_spot_plan(REPO / "tests" / "fixtures" / "plans" /
                                         f"{name}-gpu-plan.json", spot_engines)]
    assert {f.result for f in findings} == {"fail", "unknown"}
    assert "aws_eks_node_group.ondemand_gpu" in {f.resource.id for f in findings}


@pytest.mark.parametrize("seed", [3, 11])
def test_spot_twin_agrees_on_generated_plans(
    tmp_path: Path, seed: int, spot_engines: tuple[Engine, Engine]
) -> None:
    out = tmp_path / "plan.json"
    subprocess.run([sys.executable, str(REPO / "bench" / "gen_plan.py"), "-n", "250",
                    "--seed", str(seed), "-o", str(out)], check=True, capture_output=True)
    findings = check_spot_plan(out, spot_engines)
    assert len(findings) > 10


# Prepaid/reserved capacity settings (as engine/sources/terraform/reservations.py reads them)
# put on a failing on-demand resource: it passes. Known only after apply, in a plan without the
# configuration to say it is set, it is the provider's default (no reservation): still fails.
RESERVED_CASES = [
    ("gcp", "google_container_node_pool.a100_ondemand",
     {"queued_provisioning": [{"enabled": True}]}, {}, None),
    ("gcp", "google_container_node_pool.a100_ondemand",
     {"node_config": "reservation_affinity"}, {}, None),
    ("azure", "azurerm_windows_virtual_machine.viz",
     {"capacity_reservation_group_id": "/subscriptions/s/capacityReservationGroups/g"}, {}, None),
    ("azure", "azurerm_windows_virtual_machine.viz",
     {"capacity_reservation_group_id": None}, {"capacity_reservation_group_id": True}, "fail"),
]


def _with_settings(change: dict[str, Any], after: dict[str, Any],
                   unknown: dict[str, Any]) -> None:
    if after == {"node_config": "reservation_affinity"}:
        change["change"]["after"]["node_config"][0]["reservation_affinity"] = [
            {"consume_reservation_type": "SPECIFIC_RESERVATION", "key": "k", "values": ["r"]}]
        return
    change["change"]["after"].update(after)
    change["change"].setdefault("after_unknown", {}).update(unknown)


@pytest.mark.parametrize(("cloud", "address", "after", "unknown", "expected"), RESERVED_CASES)
def test_spot_twin_passes_reserved_capacity_like_the_yaml_one(
    tmp_path: Path, cloud: str, address: str, after: dict[str, Any], unknown: dict[str, Any],
    expected: str | None, spot_engines: tuple[Engine, Engine],
) -> None:
    original = REPO / "tests" / "fixtures" / "plans" / f"{cloud}-gpu-plan.json"
    before = {f.resource.id: f.result for f in check_spot_plan(original, spot_engines)}
    assert before[address] == "fail"  # on-demand as the fixture has it
    plan = json.loads(original.read_text())
    for change in plan["resource_changes"]:
        if change["address"] == address:
            _with_settings(change, after, unknown)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    results = {f.resource.id: f.result for f in check_spot_plan(path, spot_engines)}
    assert results.get(address) == expected


def test_spot_twin_honours_tag_exemptions_like_the_yaml_one(
    tmp_path: Path, spot_engines: tuple[Engine, Engine]
) -> None:
    plan = json.loads((REPO / "tests" / "fixtures" / "plans" / "aws-gpu-plan.json").read_text())
    for change in plan["resource_changes"]:
        if change["address"] == "aws_eks_node_group.ondemand_gpu":
            change["change"]["after"]["tags_all"]["gpuwarden-exempt"] = "gpu-spot-required"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    ids = {f.resource.id for f in check_spot_plan(path, spot_engines)}
    assert "aws_eks_node_group.ondemand_gpu" not in ids


# ---------------------------------------------------------------------------- required-cost-tags


def admission_documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted((REFERENCE / "admission").iterdir()):
        text = path.read_text("utf-8")
        documents = yaml.safe_load_all(text) if path.suffix == ".yaml" else [json.loads(text)]
        for index, document in enumerate(documents):
            if document:
                yield f"{path.name}#{index}", document


def labelled_variants() -> Iterator[tuple[str, dict[str, Any]]]:
    """The reference GPU workloads with cost labels partly present, in several spellings."""
    base = next(d for name, d in admission_documents() if name.startswith("kyverno-gpu-pod-bad"))
    deployment = next(d for name, d in admission_documents()
                      if name.startswith("kyverno-gpu-podcontrollers-bad"))
    variants: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("some labels", base, {"team": "ml", "project": "llm"}),
        ("spellings", base, {"Team": "ml", "PROJECT": "x", "Cost_Center": "cc-1"}),
        ("empty value", base, {"team": " ", "project": "x", "cost-center": "cc"}),
        ("numbers and booleans", base, {"team": 7, "project": True, "cost-center": "cc"}),
        ("controller labels", deployment, {"team": "ml"}),
    ]
    for name, document, labels in variants:
        obj = copy.deepcopy(document)
        obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}), **labels}
        yield name, obj
    template = copy.deepcopy(deployment)
    template["spec"]["template"].setdefault("metadata", {})["labels"] = {
        "project": "p", "cost-center": "c"}
    template["metadata"]["labels"] = {"team": "t"}
    yield "template labels", template
    mig = copy.deepcopy(base)
    mig["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": 1}}
    yield "MIG slice", mig
    bad_quantity = copy.deepcopy(base)
    bad_quantity["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1.5"}}
    yield "unreadable quantity", bad_quantity


MANIFESTS = REPO / "tests" / "data" / "manifests"


def corpus_manifests() -> Iterator[tuple[str, dict[str, Any]]]:
    """The public GPU manifests of every kind (training jobs, Ray, LWS, JobSet, Volcano, KServe,
    Spark, DRA, HAMi), none with cost labels, and each GPU one with all labels on its object."""
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        if path.name == "expected.yaml":
            continue
        for index, document in enumerate(yaml.safe_load_all(path.read_text("utf-8"))):
            if isinstance(document, dict) and document.get("kind"):
                name = f"{path.relative_to(MANIFESTS)}#{index}"
                yield name, document
                labelled = copy.deepcopy(document)
                labelled.setdefault("metadata", {})["labels"] = {
                    "team": "t", "project": "p", "cost-center": "c"}
                yield f"{name} labelled", labelled


CASES = [*admission_documents(), *labelled_variants(), *corpus_manifests()]


def admit(engine: Engine, document: dict[str, Any]) -> Report | None:
    request = request_of(document) or request_for_manifest(document)
    obj = request.get("object")
    if request.get("operation") not in ("CREATE", "UPDATE") or not isinstance(obj, dict):
        return None
    metadata = obj.get("metadata") or {}
    if not metadata.get("namespace") and request.get("namespace"):
        obj = {**obj, "metadata": {**metadata, "namespace": request["namespace"]}}
    resource = workload_resource(obj, {}, catalog=engine.catalog, state=State.PLANNED)
    if resource is None or resource.category is not Category.WORKLOAD:
        return None  # the twin is for workloads (a Karpenter NodePool is a node group)
    with admission_request({**request, "object": obj}):
        return engine.evaluate([resource], NOW, door="admission")


@pytest.fixture(scope="module")
def tag_engines() -> tuple[Engine, Engine]:
    return builtin("required-cost-tags"), twin("required_cost_tags.yaml")


@pytest.mark.parametrize(("name", "document"), CASES, ids=[name for name, _ in CASES])
def test_cost_tags_twin_agrees_on_admission_requests(
    name: str, document: dict[str, Any], tag_engines: tuple[Engine, Engine]
) -> None:
    yaml_engine, rego_engine = tag_engines
    expected, actual = admit(yaml_engine, document), admit(rego_engine, document)
    if expected is None:
        assert actual is None
        return
    assert actual is not None
    assert comparable(actual) == comparable(expected)


def test_cost_tags_cases_cover_both_verdicts(tag_engines: tuple[Engine, Engine]) -> None:
    reports = [admit(tag_engines[1], document) for _, document in CASES]
    failing = sum(1 for r in reports if r and r.summary.failed)
    passing = sum(1 for r in reports if r and not r.findings)
    assert failing >= 8 and passing >= 5


def test_required_tags_overrides_reach_the_rego_twin(tmp_path: Path,
                                                     tag_engines: tuple[Engine, Engine]) -> None:
    override = tmp_path / "o.yaml"
    override.write_text("overrides:\n  required-cost-tags:\n    parameters:\n"
                        "      required_tags: [team]\n", "utf-8")
    yaml_engine = Engine([p for p in load_policies(["builtin", str(override)])
                          if p.id == "required-cost-tags"])
    rego_engine = twin("required_cost_tags.yaml", str(override))
    for _, document in CASES:
        expected, actual = admit(yaml_engine, document), admit(rego_engine, document)
        assert (comparable(actual) if actual else None) == (
            comparable(expected) if expected else None)


# ---------------------------------------------------------------------------- Gatekeeper port


def test_gatekeeper_template_rego_is_v0_and_reads_gatekeepers_input() -> None:
    text = (REGO_PACK / "gatekeeper" / "k8srequiredlabels.rego").read_text("utf-8")
    assert "violation[{" in text and "input.review.object" in text
    assert "input.parameters" in text and "import rego.v1" not in text


@pytest.fixture(scope="module")
def constraint() -> CompiledPolicy:
    [policy] = load_policies([str(REGO_PACK / "gatekeeper" / "required_labels.yaml")])
    return policy


def test_constraint_flags_missing_and_malformed_labels(constraint: CompiledPolicy) -> None:
    engine = Engine([constraint])
    pod = next(d for name, d in admission_documents() if name.startswith("kyverno-gpu-pod-bad"))
    pod = copy.deepcopy(pod)
    pod["metadata"]["labels"] = {"team": "ML Platform"}
    report = admit(engine, pod)
    assert report is not None
    [finding] = report.findings
    assert (finding.result, finding.enforcement) == ("fail", "warn")
    assert finding.details["missing_labels"] == ["owner"]
    assert "does not match" in finding.message and "owner" in finding.message
    pod["metadata"]["labels"] = {"team": "ml-platform", "owner": "alice"}
    assert admit(engine, pod) is not None and admit(engine, pod).findings == []  # type: ignore[union-attr]


def test_constraint_audits_live_workloads_at_runtime(constraint: CompiledPolicy) -> None:
    pod = next(d for name, d in admission_documents() if name.startswith("kyverno-gpu-pod-bad"))
    resource = workload_resource(copy.deepcopy(pod), {}, state=State.RUNNING)
    assert resource is not None
    [finding] = Engine([constraint]).evaluate([resource], NOW).findings
    assert finding.enforcement == "audit" and finding.resource.id == resource.id
