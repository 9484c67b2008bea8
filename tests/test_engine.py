"""Engine behaviour around the policies: doors, exemptions, summary, ordering, catalog prices."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.core.catalog import builtin_catalog
from engine.core.errors import InputError
from engine.core.evaluate import Engine
from engine.core.model import GpuSpec, Resource
from engine.loading.policies import load_policies
from engine.loading.prices import read_price_overrides
from tests.conftest import BUSINESS_HOURS, OFF_HOURS

Make = Callable[..., Resource]


def test_planned_resources_meet_the_plan_door(builtin_engine: Engine, make_resource: Make) -> None:
    planned = make_resource(instance_type="p3.2xlarge", capacity="on-demand", state="planned")
    report = builtin_engine.evaluate([planned], OFF_HOURS)
    policies = {f.policy: f.enforcement for f in report.findings}
    # off-hours is off at the plan door, so a planned GPU box is not judged by the clock
    assert "gpu-off-hours-shutdown" not in policies
    assert policies["gpu-spot-required"] == "deny"
    assert policies["required-cost-tags"] == "deny"


def test_runtime_door_uses_runtime_enforcement(builtin_engine: Engine, make_resource: Make) -> None:
    running = make_resource(instance_type="p3.2xlarge", capacity="on-demand")
    report = builtin_engine.evaluate([running], OFF_HOURS)
    policies = {f.policy: f.enforcement for f in report.findings}
    assert policies["gpu-spot-required"] == "audit"
    assert policies["gpu-off-hours-shutdown"] == "deny"


def test_policy_level_exempt_globs(tmp_path: Path, make_resource: Make) -> None:
    override = tmp_path / "o.yaml"
    override.write_text("overrides:\n  gpu-spot-required:\n    exempt: ['i-legacy-*']\n")
    engine = Engine(load_policies(["builtin", str(override)]))
    legacy = make_resource(id="i-legacy-1", instance_type="p3.2xlarge", capacity="on-demand")
    other = make_resource(id="i-new-1", instance_type="p3.2xlarge", capacity="on-demand")
    report = engine.evaluate([legacy, other], BUSINESS_HOURS)
    spot = [f.resource.id for f in report.findings if f.policy == "gpu-spot-required"]
    assert spot == ["i-new-1"]
    assert report.summary.exempted >= 1


def test_exemption_by_kubernetes_annotation(builtin_engine: Engine, make_resource: Make) -> None:
    workload = make_resource(
        provider="kubernetes", kind="Pod", category="workload", id="Pod/ml/p",
        gpu=GpuSpec(count=1, model="NVIDIA-L4"), capacity="on-demand",
        annotations={"gpuwarden.io/exempt": "gpu-spot-required, required-cost-tags"},
    )
    report = builtin_engine.evaluate([workload], BUSINESS_HOURS)
    assert {"gpu-spot-required", "required-cost-tags"}.isdisjoint(f.policy for f in report.findings)


def test_summary_counts_and_overlap_free_total(builtin_engine: Engine, make_resource: Make) -> None:
    box = make_resource(instance_type="p3.2xlarge", capacity="on-demand")
    volume = make_resource(kind="aws_ebs_volume", category="volume", id="vol-1", encrypted=False)
    report = builtin_engine.evaluate([box, volume], OFF_HOURS)
    summary = report.summary
    assert summary.resources == 2
    assert summary.findings == len(report.findings)
    assert summary.failed + summary.unknown == summary.findings
    assert sum(summary.by_policy.values()) == summary.findings
    savings = [f.estimated_monthly_usd for f in report.findings
               if f.resource.id == "i-0abc" and f.cost_kind == "savings"]
    spend = 3.06 * 730
    # one resource: its savings combine as rates (never their sum, never above its spend)
    kept = 1.0
    for saving in savings:
        kept *= 1 - saving / spend
    assert summary.estimated_monthly_usd == summary.savings_usd
    assert summary.savings_usd == pytest.approx(spend * (1 - kept), abs=0.02)
    assert max(savings) < summary.savings_usd < min(sum(savings), spend)


def test_findings_sorted_by_dollars(builtin_engine: Engine, make_resource: Make) -> None:
    small = make_resource(id="i-small", instance_type="g4dn.xlarge", capacity="on-demand")
    big = make_resource(id="i-big", instance_type="p4d.24xlarge", capacity="on-demand")
    report = builtin_engine.evaluate([small, big], BUSINESS_HOURS)
    dollars = [f.estimated_monthly_usd for f in report.findings]
    assert dollars == sorted(dollars, reverse=True)
    assert report.findings[0].resource.id == "i-big"


def test_evaluation_is_pure_and_repeatable(builtin_engine: Engine, make_resource: Make) -> None:
    resources = [make_resource(id=f"i-{n}", instance_type="g5.xlarge", capacity="on-demand")
                 for n in range(5)]
    first = builtin_engine.evaluate(resources, OFF_HOURS).to_json_dict()
    second = builtin_engine.evaluate(resources, OFF_HOURS).to_json_dict()
    assert first == second
    assert first["schema"] == "gpuwarden.report/v1"


def test_unknown_finding_explains_what_is_missing(builtin_engine: Engine,
                                                  make_resource: Make) -> None:
    box = make_resource(instance_type="g5.xlarge", capacity="spot",
                        tags={"team": "a", "project": "b", "cost-center": "c"})
    [idle] = [f for f in builtin_engine.evaluate([box], BUSINESS_HOURS).findings
              if f.policy == "gpu-idle"]
    assert idle.result == "unknown"
    assert "no GPU telemetry" in idle.message
    assert idle.estimated_monthly_usd == 0


def test_price_override_file_changes_estimates(tmp_path: Path, make_resource: Make) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_text("instance_type,on_demand_usd_hr\np3.2xlarge,1.00\n")
    catalog = read_price_overrides(builtin_catalog(), prices)
    assert catalog.instance("p3.2xlarge") is not None
    assert catalog.instance("p3.2xlarge").on_demand_usd_hr == 1.0  # type: ignore[union-attr]
    assert builtin_catalog().instance("p3.2xlarge").on_demand_usd_hr == 3.06  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("instance_type,on_demand_usd_hr\np3.2xlarge,cheap\n", ":2: expected columns"),
        ("instance_type,on_demand_usd_hr\nq9.huge,1\n", "unknown instance type 'q9.huge'"),
    ],
)
def test_bad_price_file(tmp_path: Path, text: str, fragment: str) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_text(text)
    with pytest.raises(InputError, match=fragment):
        read_price_overrides(builtin_catalog(), prices)


def test_catalog_mig_tables_follow_the_gpu_model() -> None:
    catalog = builtin_catalog()
    assert catalog.mig_family("NVIDIA-A100-SXM4-40GB") == "A100 40GB"
    assert catalog.mig_family("NVIDIA A100 80GB PCIe") == "A100 80GB"
    assert catalog.mig_family("NVIDIA-H200") == "H200 141GB"
    assert catalog.mig_family("Tesla-T4") is None
    h200 = catalog.smallest_mig_fit("H200 141GB", 9)
    assert h200 is not None and h200.name == "1g.18gb"  # an H200 has no 1g.10gb
    assert catalog.smallest_mig_fit("A100 40GB", 30) is None  # 36 GB > half of 40 GB
