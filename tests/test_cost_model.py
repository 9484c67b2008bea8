"""The cost model (issue 14): kinds of money that never add up together, one spend per resource
that is real (stopped, templates, empty groups, spot), savings combined as rates, billing tags."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.core.budget import run_rate
from engine.core.catalog import builtin_catalog
from engine.core.costs import estimate, resource_spend
from engine.core.enrich import enrich
from engine.core.evaluate import Engine, combined_savings, summarize
from engine.core.model import Finding, Resource, ResourceRef
from engine.outputs import RenderContext, markdown, table
from engine.outputs.markdown import ResourceGroup
from engine.pipeline import build_engine
from engine.sources.aws.compute import node_group_resource
from tests.conftest import BUSINESS_HOURS, OFF_HOURS

Make = Callable[..., Resource]
TAGS = {"team": "ml", "project": "llm", "cost-center": "42"}
HOURS = 730
DEMO_NOW = "2026-12-01T21:00:00Z"


def _finding(resource_id: str, usd: float, kind: str, spend: float | None = None) -> Finding:
    details: dict[str, Any] = {} if spend is None else {"resource_monthly_spend_usd": spend}
    return Finding(policy=f"p-{kind}-{usd}", severity="high", result="fail",
                   resource=ResourceRef(provider="aws", kind="aws_instance", id=resource_id,
                                        name=resource_id),
                   message="m", enforcement="deny", estimated_monthly_usd=usd, cost_kind=kind,
                   details=details)


# ---------------------------------------------------------------------------- spend that is real


def test_a_running_on_demand_instance_costs_its_list_price_times_its_count(make_resource: Make
                                                                            ) -> None:
    box = make_resource(instance_type="p3.2xlarge", capacity="on-demand", count=3)
    spend = resource_spend(box, builtin_catalog())
    assert spend.monthly_usd == pytest.approx(3.06 * 3 * HOURS)
    assert "× 3 × 730 h" in spend.basis


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"state": "stopped"}, "stopped"),
        ({"category": "launch_template", "kind": "aws_launch_template", "state": "planned"},
         "template"),
        ({"category": "node_group", "kind": "aws_eks_node_group", "count": 0}, "desired size 0"),
    ],
)
def test_what_does_not_run_costs_no_compute(make_resource: Make, fields: dict[str, Any],
                                            why: str) -> None:
    resource = make_resource(instance_type="p3.2xlarge", capacity="on-demand", **fields)
    spend = resource_spend(resource, builtin_catalog())
    assert spend.monthly_usd == 0.0 and why in spend.basis
    spot = estimate("spot-savings", resource, builtin_catalog(), {})
    assert spot.monthly_usd == 0.0 and spot.kind == "savings"


def test_a_stopped_instance_saves_nothing_and_adds_no_spend(builtin_engine: Engine,
                                                            make_resource: Make) -> None:
    stopped = make_resource(instance_type="p3.2xlarge", capacity="on-demand", state="stopped",
                            tags={"team": "ml"})
    report = builtin_engine.evaluate([stopped], OFF_HOURS)
    assert report.summary.monthly_spend_usd == 0.0
    assert report.summary.savings_usd == 0.0 and report.summary.unallocated_usd == 0.0
    assert all(f.estimated_monthly_usd == 0.0 for f in report.findings)


def test_a_spot_resource_is_priced_at_its_spot_rate_everywhere(make_resource: Make) -> None:
    catalog = builtin_catalog()
    job = make_resource(instance_type="g5.12xlarge", capacity="spot", tags=TAGS)
    on_demand = 5.672 * HOURS
    spend = resource_spend(job, catalog).monthly_usd
    assert spend is not None and spend < on_demand
    off = estimate("offhours-share", job, catalog, {"off_fraction": 0.64})
    assert off.monthly_usd == pytest.approx(spend * 0.64, abs=0.01)
    assert off.monthly_usd < spend
    # the team budget prices the same resource at the same rate
    assert run_rate(job, catalog).monthly_usd == pytest.approx(spend, abs=0.01)
    assert estimate("full", job, catalog, {}).monthly_usd == pytest.approx(spend, abs=0.01)


def test_reserved_capacity_saves_nothing_by_stopping(make_resource: Make) -> None:
    box = make_resource(instance_type="p3.2xlarge", capacity="reserved")
    spend = resource_spend(box, builtin_catalog()).monthly_usd
    assert spend == pytest.approx(3.06 * HOURS)  # billed whether it runs or not
    off = estimate("offhours-share", box, builtin_catalog(), {"off_fraction": 0.64})
    assert off.monthly_usd == 0.0 and "reserved" in off.basis


def test_spot_discount_is_the_catalogs_regional_spot_price_where_listed(make_resource: Make
                                                                        ) -> None:
    catalog = builtin_catalog()
    vm = make_resource(provider="gcp", kind="google_compute_instance",
                       instance_type="a2-highgpu-1g", region="us-central1", capacity="on-demand")
    spot = catalog.hourly_price("a2-highgpu-1g", "us-central1", "spot")
    on_demand = catalog.hourly_price("a2-highgpu-1g", "us-central1", "on_demand")
    assert spot is not None and on_demand is not None
    saving = estimate("spot-savings", vm, catalog, {})
    spend = resource_spend(vm, catalog).monthly_usd
    assert spend is not None
    listed_discount = 1 - spot.usd_per_h / on_demand.usd_per_h
    if spot.estimate:  # no listed spot price: the cloud's typical discount
        listed_discount = catalog.spot_discount("gcp")
    assert saving.monthly_usd == pytest.approx(spend * listed_discount, abs=0.01)
    assert "us-central1" in saving.basis or "estimate" in saving.basis


# ---------------------------------------------------------------------------- kinds and totals


def test_savings_combine_as_rates_not_as_a_sum() -> None:
    # spot 60% off and off 50% of the hours: 1 − 0.4 × 0.5 = 80% of 1,000, not 110%
    findings = [_finding("i-1", 600.0, "savings", 1000.0), _finding("i-1", 500.0, "savings",
                                                                    1000.0)]
    assert combined_savings(findings) == pytest.approx(800.0)
    summary = summarize(findings, resources=1, passed=0, spend_usd=1000.0)
    assert summary.savings_usd == pytest.approx(800.0) == summary.estimated_monthly_usd
    assert summary.monthly_spend_usd == 1000.0


def test_savings_never_exceed_spend() -> None:
    findings = [_finding("i-1", 1000.0, "savings", 1000.0), _finding("i-1", 700.0, "savings",
                                                                     1000.0)]
    assert combined_savings(findings) == pytest.approx(1000.0)


def test_kinds_are_totalled_apart_and_unallocated_once_per_resource() -> None:
    findings = [
        _finding("i-1", 300.0, "savings", 1000.0),
        _finding("i-1", 1000.0, "unallocated"),
        _finding("i-1", 1000.0, "unallocated"),  # a second tag policy: the same spend
        _finding("team/ml", 250.0, "over_budget"),
        _finding("i-2", 4000.0, "none"),  # a full-cost custom policy: context, not a total
    ]
    summary = summarize(findings, resources=3, passed=0, spend_usd=5000.0)
    assert (summary.savings_usd, summary.unallocated_usd, summary.over_budget_usd) == (
        300.0, 1000.0, 250.0)
    assert summary.estimated_monthly_usd == summary.savings_usd


def test_engine_summary_on_one_untagged_on_demand_box(builtin_engine: Engine,
                                                      make_resource: Make) -> None:
    box = make_resource(instance_type="p3.2xlarge", capacity="on-demand")
    report = builtin_engine.evaluate([box], OFF_HOURS)
    spend = 3.06 * HOURS
    summary = report.summary
    assert summary.monthly_spend_usd == pytest.approx(spend, abs=0.01)
    kinds = {f.policy: f.cost_kind for f in report.findings}
    assert kinds["required-cost-tags"] == "unallocated"
    assert kinds["gpu-spot-required"] == "savings"
    assert summary.unallocated_usd == pytest.approx(spend, abs=0.01)
    savings = [f.estimated_monthly_usd for f in report.findings if f.cost_kind == "savings"]
    assert max(savings) <= summary.savings_usd <= spend
    assert report.prices is not None and report.prices.currency == "USD"
    assert report.prices.as_of  # the catalog price's date


def test_the_price_override_file_is_named_in_the_report(tmp_path: Path, make_resource: Make
                                                        ) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_text("instance_type,on_demand_usd_hr\np3.2xlarge,2.00\n")
    engine = build_engine(None, prices)
    report = engine.evaluate([make_resource(instance_type="p3.2xlarge", capacity="on-demand")],
                             BUSINESS_HOURS)
    assert report.prices is not None and report.prices.override_file == str(prices)


# ---------------------------------------------------------------------------- billing tags


def _cost_tags_verdict(engine: Engine, resource: Resource) -> str:
    report = engine.evaluate([resource], BUSINESS_HOURS, show_passed=True)
    return next(f.result for f in report.findings if f.policy == "required-cost-tags")


def test_node_labels_do_not_allocate_a_node_groups_cost(builtin_engine: Engine) -> None:
    group = {"nodegroupName": "gpu", "nodegroupArn": "arn:aws:eks:us-east-1:1:nodegroup/c/gpu",
             "clusterName": "c", "instanceTypes": ["g5.xlarge"],
             "scalingConfig": {"desiredSize": 2}, "labels": TAGS, "tags": {}}

    class _Region:
        name = "us-east-1"

        catalog = builtin_catalog()

        def resource(self, **fields: Any) -> Resource:
            return enrich(Resource(provider="aws", region="us-east-1", **fields), self.catalog)

        def node_group_instances(self, group: Any) -> tuple[str, ...]:
            return ()

    labelled = node_group_resource(_Region(), group)  # type: ignore[arg-type]
    assert labelled.tags == TAGS and labelled.billing_tags == {}
    assert _cost_tags_verdict(builtin_engine, labelled) == "fail"


def test_billing_tags_decide_cost_allocation_for_cloud_resources(builtin_engine: Engine,
                                                                 make_resource: Make) -> None:
    labels_only = make_resource(kind="aws_eks_node_group", category="node_group", id="ng-1",
                                instance_type="g5.xlarge", capacity="on-demand", count=2,
                                tags=TAGS, billing_tags={})
    report = builtin_engine.evaluate([labels_only], BUSINESS_HOURS)
    [tags] = [f for f in report.findings if f.policy == "required-cost-tags"]
    assert tags.details["labels_billing_never_sees"] == ["team", "project", "cost-center"]
    assert "billing never sees" in tags.message
    billed = labels_only.model_copy(update={"billing_tags": TAGS})
    assert _cost_tags_verdict(builtin_engine, billed) == "pass"


def test_workloads_keep_using_their_labels(builtin_engine: Engine, make_resource: Make) -> None:
    pod = make_resource(provider="kubernetes", kind="Deployment", category="workload",
                        id="Deployment/ml/train", namespace="ml", tags=TAGS,
                        gpu={"model": "NVIDIA A100 80GB SXM", "count": 1})
    assert _cost_tags_verdict(builtin_engine, pod) == "pass"


# ---------------------------------------------------------------------------- outputs


def test_outputs_show_the_figures_apart_and_rank_actions_by_savings(
    builtin_engine: Engine, make_resource: Make,
) -> None:
    untagged = make_resource(id="i-big", name="big", instance_type="p4d.24xlarge",
                             capacity="on-demand")
    tagged = make_resource(id="i-small", name="small", instance_type="g5.xlarge",
                           capacity="on-demand", tags=TAGS)
    report = builtin_engine.evaluate([untagged, tagged], BUSINESS_HOURS)
    text = " ".join(table.render(RenderContext(report=report)).split())
    assert "waste" not in text
    assert "spend with no owner" in text and "GPU spend" in text
    todo = text.split("What to do first:")[1].split("Spend with no owner")[0]
    assert todo.startswith(" 1. Move `big` to spot: saves about")
    assert "cost-allocation" not in todo and "add team" not in todo
    assert "`big`" in text.split("Spend with no owner")[1]
    comment = markdown.render(RenderContext(report=report))
    assert "### Spend with no owner" in comment and "waste" not in comment


def test_per_resource_details_combine_savings_and_keep_unallocated_apart() -> None:
    findings = (_finding("i-1", 600.0, "savings", 1000.0), _finding("i-1", 500.0, "savings",
                                                                    1000.0),
                _finding("i-1", 1000.0, "unallocated"))
    group = ResourceGroup(resource=findings[0].resource, findings=findings, location=None)
    assert group.savings_usd == pytest.approx(800.0)  # not 1,100 and not 2,100
    assert group.unallocated_usd == 1000.0


# ---------------------------------------------------------------------------- the demo


@pytest.fixture(scope="module")
def demo() -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", "from engine.cli import main; main()", "scan",
                           "--demo", "--now", DEMO_NOW, "--format", "json"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_demo_savings_never_exceed_a_resources_spend(demo: dict[str, Any]) -> None:
    by_resource: dict[str, list[dict[str, Any]]] = {}
    for finding in demo["findings"]:
        assert finding["cost_kind"] in {"savings", "unallocated", "over_budget", "none"}
        if finding["cost_kind"] == "savings" and finding["result"] == "fail":
            by_resource.setdefault(finding["resource"]["id"], []).append(finding)
    assert by_resource
    for findings in by_resource.values():
        spend = findings[0]["details"].get("resource_monthly_spend_usd")
        if spend is None:
            continue
        kept = 1.0
        for finding in findings:
            assert finding["estimated_monthly_usd"] <= spend + 0.01
            kept *= 1 - finding["estimated_monthly_usd"] / spend if spend else 1
        assert spend * (1 - kept) <= spend + 0.01


def test_demo_headline_separates_the_figures(demo: dict[str, Any]) -> None:
    summary = demo["summary"]
    assert summary["estimated_monthly_usd"] == summary["savings_usd"]
    assert 0 < summary["savings_usd"] < summary["monthly_spend_usd"]
    assert 0 < summary["unallocated_usd"] <= summary["monthly_spend_usd"]
    assert summary["over_budget_usd"] > 0
    assert demo["prices"]["currency"] == "USD" and demo["prices"]["source"]


def test_demo_stopped_resources_carry_no_compute_spend(demo: dict[str, Any]) -> None:
    stopped = [f for f in demo["findings"] if "stopped" in f["resource"]["id"]]
    assert stopped
    assert all(f["estimated_monthly_usd"] == 0.0 for f in stopped)


def test_a_gpu_type_sold_without_a_list_price_is_priced_as_its_gpus_and_says_so(
        make_resource: Make) -> None:
    """p5e.48xlarge is sold through capacity blocks: no list price in the catalog. Its
    eight H200 are priced at the catalog's lowest $/GPU-hour for the H200, an estimate the
    basis names; a type with a list price never reads so."""
    catalog = builtin_catalog()
    assert catalog.hourly_price("p5e.48xlarge") is None
    unlisted = make_resource(instance_type="p5e.48xlarge", capacity="on-demand")
    spend = resource_spend(unlisted, catalog)
    per_gpu = catalog.gpu_hourly("NVIDIA H200 141GB")
    assert per_gpu is not None and spend.monthly_usd == pytest.approx(8 * per_gpu * 730)
    assert spend.basis.startswith("no list price for p5e.48xlarge, estimated as 8 × NVIDIA H200")
    listed = resource_spend(make_resource(instance_type="p5en.48xlarge",
                                          capacity="on-demand"), catalog)
    assert "no list price" not in listed.basis and "list price" in listed.basis
