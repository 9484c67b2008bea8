"""Each built-in policy's exact semantics on normalized resources: pass, fail and unknown."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest

from engine.core.evaluate import Engine
from engine.core.model import Door, GpuSpec, Resource, Telemetry
from engine.pipeline import evaluate_and_plan
from tests.conftest import BUSINESS_HOURS, OFF_HOURS

Make = Callable[..., Resource]
TAGS = {"team": "ml", "project": "llm", "cost-center": "cc-1"}


def verdicts(engine: Engine, resource: Resource, *, now: datetime = BUSINESS_HOURS,
             door: Door | None = None) -> dict[str, str]:
    report = engine.evaluate([resource], now, door=door, show_passed=True)
    return {f.policy: f.result for f in report.findings}


# --- gpu-spot-required ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"capacity": "on-demand"}, "fail"),
        ({"capacity": "spot"}, "pass"),
        ({"capacity": "unknown"}, "unknown"),
        ({"capacity": "on-demand", "tags": {"env": "prod"}}, None),
        ({"capacity": "on-demand", "tags": {"Environment": "Production"}}, None),
        ({"capacity": "on-demand", "tags": {"env": "production-like"}}, None),  # prod…: fail safe
        ({"capacity": "on-demand", "tags": {"env": "non-prod"}}, "fail"),
        ({"capacity": "on-demand", "tags": {"gpuwarden-exempt": "gpu-spot-required"}}, None),
        ({"capacity": "on-demand", "tags": {"gpuwarden.io/exempt": "all"}}, None),
        ({"capacity": "on-demand", "tags": {"gpuwarden-exempt": "gpu-idle_gpu-spot-required"}},
         None),
        ({"capacity": "on-demand", "instance_type": "m5.large"}, None),
        ({"capacity": "on-demand", "unknown": frozenset({"tags"})}, "unknown"),
    ],
)
def test_spot_required(builtin_engine: Engine, make_resource: Make,
                       fields: dict[str, object], expected: str | None) -> None:
    resource = make_resource(instance_type=fields.pop("instance_type", "p3.2xlarge"), **fields)
    assert verdicts(builtin_engine, resource).get("gpu-spot-required") == expected


def test_spot_required_on_kubernetes_uses_namespace_labels_for_production(
    builtin_engine: Engine, make_resource: Make,
) -> None:
    workload = dict(provider="kubernetes", kind="Job", category="workload", id="Job/ml/t",
                    gpu=GpuSpec(count=1, model="NVIDIA-L4"), capacity="on-demand")
    prod_ns = make_resource(**workload, namespace_labels={"env": "prod"})
    dev_label_in_prod_ns = make_resource(**workload, tags={"env": "dev"},
                                         namespace_labels={"env": "prod"})
    assert "gpu-spot-required" not in verdicts(builtin_engine, prod_ns)
    assert verdicts(builtin_engine, dev_label_in_prod_ns)["gpu-spot-required"] == "fail"


def test_spot_savings_are_priced_from_the_catalog(builtin_engine: Engine,
                                                  make_resource: Make) -> None:
    resource = make_resource(instance_type="p4d.24xlarge", capacity="on-demand", count=2)
    [finding] = [f for f in evaluate_and_plan(builtin_engine, [resource], BUSINESS_HOURS).findings
                 if f.policy == "gpu-spot-required"]
    # 21.957642 $/h × 2 instances × 730 h × 60% estimated spot discount
    assert finding.estimated_monthly_usd == pytest.approx(21.957642 * 2 * 730 * 0.6, abs=0.01)
    assert "spot discount 60%" in finding.cost_basis
    assert finding.remediation is not None and finding.remediation.action == "advise-spot"


# --- gpu-mig-for-small-jobs ------------------------------------------------------------------


def _pod(make_resource: Make, **gpu: object) -> Resource:
    spec = {"count": 1, "model": "NVIDIA-A100-SXM4-80GB", **gpu}
    return make_resource(provider="kubernetes", kind="Deployment", category="workload",
                         id="Deployment/ml/nb", capacity="spot", tags=TAGS,
                         gpu=GpuSpec.model_validate(spec))


@pytest.mark.parametrize(
    ("gpu", "expected", "profile"),
    [
        ({"declared_memory_gib": 12}, "fail", "nvidia.com/mig-1g.20gb"),  # 12×1.2=14.4 → 20 GB
        ({"declared_memory_gib": 8}, "fail", "nvidia.com/mig-1g.10gb"),  # 9.6 fits 10 GB
        ({"declared_memory_gib": 34}, "fail", "nvidia.com/mig-3g.40gb"),  # 40.8? no: see below
        ({"declared_memory_gib": 40}, "pass", None),  # 48 GB needs more than half of 80 GB
        ({"observed_peak_memory_gib": 3}, "fail", "nvidia.com/mig-1g.10gb"),
        ({}, "unknown", None),
        ({"model": "NVIDIA-L4", "declared_memory_gib": 3}, None, None),  # not MIG-capable
        ({"model": None, "declared_memory_gib": 3}, None, None),  # model unknown: not judged
        ({"model": "NVIDIA-H200", "declared_memory_gib": 8}, "fail", "nvidia.com/mig-1g.18gb"),
        ({"mig_profile": "1g.10gb", "mig_count": 1, "count": 0, "declared_memory_gib": 3}, None,
         None),
    ],
)
def test_mig_for_small_jobs(builtin_engine: Engine, make_resource: Make,
                            gpu: dict[str, object], expected: str | None,
                            profile: str | None) -> None:
    if gpu.get("declared_memory_gib") == 34:
        gpu["declared_memory_gib"] = 30  # 36 GB with headroom → 3g.40gb, exactly half
    resource = _pod(make_resource, **gpu)
    report = builtin_engine.evaluate([resource], BUSINESS_HOURS, show_passed=True)
    found = {f.policy: f for f in report.findings}
    finding = found.get("gpu-mig-for-small-jobs")
    assert (finding.result if finding else None) == expected
    if profile is not None:
        assert finding is not None
        assert finding.details["mig_resource"] == profile
        assert profile in finding.message


def test_mig_uses_telemetry_peak_when_nothing_declared(builtin_engine: Engine,
                                                       make_resource: Make) -> None:
    resource = _pod(make_resource).model_copy(
        update={"telemetry": Telemetry(average_activity_pct=50, samples=10, peak_memory_gib=4)}
    )
    assert verdicts(builtin_engine, resource)["gpu-mig-for-small-jobs"] == "fail"


def test_mig_is_off_at_the_plan_door(builtin_engine: Engine, make_resource: Make) -> None:
    resource = _pod(make_resource, declared_memory_gib=4)
    assert "gpu-mig-for-small-jobs" not in verdicts(builtin_engine, resource, door="plan")
    assert verdicts(builtin_engine, resource, door="admission")["gpu-mig-for-small-jobs"] == "fail"


# --- gpu-off-hours-shutdown -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "now", "expected"),
    [
        ({}, OFF_HOURS, "fail"),
        ({}, BUSINESS_HOURS, "pass"),
        ({"state": "stopped"}, OFF_HOURS, None),
        ({"tags": {**TAGS, "env": "prod"}}, OFF_HOURS, None),
        # 03:00 UTC is 19:00 the day before in Pacific time: off under this schedule too.
        ({"tags": {**TAGS, "gpuwarden-offhours": "off=(M-F,18);on=(M-F,8);tz=pt"}}, OFF_HOURS,
         "fail"),
        # A team in India: 12:00 UTC is 17:30 there, but their day ends at 17:00 → off.
        ({"tags": {**TAGS, "gpuwarden-offhours": "off=(M-F,17);on=(M-F,8);tz=Asia/Kolkata"}},
         BUSINESS_HOURS, "fail"),
        ({"tags": {**TAGS, "gpuwarden-offhours": "off=(Q,25)"}}, OFF_HOURS, "unknown"),
    ],
)
def test_off_hours(builtin_engine: Engine, make_resource: Make, fields: dict[str, object],
                   now: datetime, expected: str | None) -> None:
    fields = {"tags": TAGS, "capacity": "spot", **fields}
    resource = make_resource(instance_type="g5.xlarge", **fields)
    assert verdicts(builtin_engine, resource, now=now).get("gpu-off-hours-shutdown") == expected


def test_off_hours_finding_plans_a_stop_and_prices_the_off_share(
    builtin_engine: Engine, make_resource: Make,
) -> None:
    resource = make_resource(instance_type="g5.xlarge", tags=TAGS, capacity="spot")
    [finding] = [f for f in evaluate_and_plan(builtin_engine, [resource], OFF_HOURS).findings
                 if f.policy == "gpu-off-hours-shutdown"]
    off_share = (7 * 24 - 5 * 12) / (7 * 24)
    spot_rate = 1 - builtin_engine.catalog.spot_discount("aws")  # a spot resource's own price
    assert finding.estimated_monthly_usd == pytest.approx(1.006 * 730 * spot_rate * off_share,
                                                          abs=0.01)
    assert finding.enforcement == "deny"
    assert finding.remediation is not None
    assert (finding.remediation.action, finding.remediation.status) == ("stop", "planned")


# --- required-cost-tags ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tags", "expected", "missing"),
    [
        (TAGS, "pass", []),
        ({"Team": "ml", "PROJECT": "x", "cost_center": "1"}, "pass", []),
        ({"team": "ml", "project": "x"}, "fail", ["cost-center"]),
        ({"team": "", "project": "x", "cost-center": "1"}, "fail", ["team"]),
        ({}, "fail", ["team", "project", "cost-center"]),
    ],
)
def test_required_cost_tags(builtin_engine: Engine, make_resource: Make, tags: dict[str, str],
                            expected: str, missing: list[str]) -> None:
    resource = make_resource(instance_type="g5.xlarge", capacity="spot", tags=tags)
    report = builtin_engine.evaluate([resource], BUSINESS_HOURS, show_passed=True)
    [finding] = [f for f in report.findings if f.policy == "required-cost-tags"]
    assert finding.result == expected
    if expected == "fail":
        assert finding.details["missing_tags"] == missing


def test_required_cost_tags_unknown_when_tags_are_computed(builtin_engine: Engine,
                                                           make_resource: Make) -> None:
    resource = make_resource(instance_type="g5.xlarge", unknown=frozenset({"tags"}),
                             state="planned")
    assert verdicts(builtin_engine, resource)["required-cost-tags"] == "unknown"


# --- encryption-at-rest ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"encrypted": True}, "pass"),
        ({"encrypted": False}, "fail"),
        ({"encrypted": None, "unknown": frozenset({"encrypted"})}, "unknown"),
    ],
)
def test_encryption_at_rest(builtin_engine: Engine, make_resource: Make,
                            fields: dict[str, object], expected: str) -> None:
    volume = make_resource(kind="aws_ebs_volume", category="volume", id="vol-1", **fields)
    assert verdicts(builtin_engine, volume)["encryption-at-rest"] == expected


def test_encryption_with_customer_key_required(tmp_path: object, make_resource: Make) -> None:
    from pathlib import Path

    from engine.loading.policies import load_policies

    override = Path(str(tmp_path)) / "cmk.yaml"
    override.write_text(
        "overrides:\n  encryption-at-rest:\n    parameters: {require_customer_key: true}\n"
    )
    engine = Engine(load_policies(["builtin", str(override)]))
    platform = make_resource(kind="google_compute_disk", provider="gcp", category="volume",
                             encrypted=True, customer_key=False)
    cmek = make_resource(kind="google_compute_disk", provider="gcp", category="volume",
                         encrypted=True, customer_key=True)
    assert verdicts(engine, platform)["encryption-at-rest"] == "fail"
    assert verdicts(engine, cmek)["encryption-at-rest"] == "pass"


# --- gpu-idle and gpu-underutilized --------------------------------------------------------


@pytest.mark.parametrize(
    ("telemetry", "idle", "under"),
    [
        (Telemetry(average_activity_pct=2, samples=60), "fail", None),
        (Telemetry(average_activity_pct=20, samples=60), "pass", "fail"),
        (Telemetry(average_activity_pct=75, samples=60), "pass", "pass"),
        (Telemetry(average_activity_pct=None, samples=0), "unknown", "unknown"),
        (None, "unknown", "unknown"),
    ],
)
def test_idle_and_underutilized(builtin_engine: Engine, make_resource: Make,
                                telemetry: Telemetry | None, idle: str,
                                under: str | None) -> None:
    resource = make_resource(instance_type="g5.xlarge", tags=TAGS, capacity="spot",
                             telemetry=telemetry)
    found = verdicts(builtin_engine, resource)
    assert found.get("gpu-idle") == idle
    assert found.get("gpu-underutilized") == under


def test_idle_is_priced_by_its_idle_share(builtin_engine: Engine, make_resource: Make) -> None:
    resource = make_resource(instance_type="p3.2xlarge", tags=TAGS, capacity="spot",
                             telemetry=Telemetry(average_activity_pct=2, samples=60))
    [finding] = [f for f in builtin_engine.evaluate([resource], BUSINESS_HOURS).findings
                 if f.policy == "gpu-idle"]
    spot_rate = 1 - builtin_engine.catalog.spot_discount("aws")  # a spot resource's own price
    assert finding.estimated_monthly_usd == pytest.approx(3.06 * 730 * spot_rate * 0.98, abs=0.01)
    assert finding.details["average_activity_pct"] == 2
    assert "2" in finding.message


def test_runtime_remediation_never_touches_production(builtin_engine: Engine,
                                                      make_resource: Make) -> None:
    resource = make_resource(instance_type="g5.xlarge", tags={**TAGS, "env": "prod"},
                             telemetry=Telemetry(average_activity_pct=1, samples=60))
    [finding] = [f for f in evaluate_and_plan(builtin_engine, [resource], BUSINESS_HOURS).findings
                 if f.policy == "gpu-idle"]
    assert finding.remediation is not None
    assert finding.remediation.status == "skipped"
    assert "production" in finding.remediation.detail
