"""Which resources get a planned `resume`: gpuwarden's stop mark in AWS/Azure tags, GCP labels or
Kubernetes annotations, read back the way each executor writes it; anything else stays stopped."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from engine.core.model import Category, Report, Resource
from remediations.gcp_actions import stop_mark_labels
from remediations.planning import (
    RESUME_SCHEDULE_ANNOTATION,
    RESUME_SCHEDULE_TAG,
    STOPPED_BY_ANNOTATION,
    STOPPED_BY_TAG,
    plan_resumes,
    stop_mark,
)

STOPPED_AT = datetime(2026, 12, 1, 22, tzinfo=UTC)
MORNING = datetime(2026, 12, 2, 8, tzinfo=UTC)  # on-hours by the default schedule
NIGHT = datetime(2026, 12, 2, 23, tzinfo=UTC)
MARK = f"gpu-off-hours-shutdown@{STOPPED_AT.isoformat()}"


def resource(kind: str, provider: str = "aws", **fields: Any) -> Resource:
    return Resource(provider=provider, kind=kind, category=Category.INSTANCE, id=f"{kind}/x",
                    name="x", **fields)


def planned(resources: list[Resource], now: datetime = MORNING) -> dict[str, str]:
    report = plan_resumes(Report(generated_at=now, findings=[]), resources, now)
    return {f.resource.id: f.remediation.detail for f in report.findings if f.remediation}


def test_each_cloud_s_mark_is_read_back() -> None:
    aws = resource("aws_eks_node_group", tags={STOPPED_BY_TAG: MARK})
    azure = resource("azurerm_kubernetes_cluster_node_pool", "azure",
                     tags={STOPPED_BY_TAG: MARK, RESUME_SCHEDULE_TAG: "off=(M-F,19);on=(M-F,7)"})
    gcp = resource("google_compute_instance", "gcp", tags=stop_mark_labels(
        "gpu-off-hours-shutdown", STOPPED_AT, "off=(M-F,19);on=(M-F,7);tz=utc"))
    k8s = resource("Deployment", "kubernetes", annotations={
        STOPPED_BY_ANNOTATION: MARK, RESUME_SCHEDULE_ANNOTATION: "off=(M-F,19);on=(M-F,7)"})
    for found in (aws, azure, gcp, k8s):
        assert stop_mark(found) is not None, found.kind
        policy, at, _ = stop_mark(found)  # type: ignore[misc]
        assert (policy, at) == ("gpu-off-hours-shutdown", STOPPED_AT.isoformat())
    assert set(planned([aws, azure, gcp, k8s])) == {r.id for r in (aws, azure, gcp, k8s)}
    assert planned([aws, azure, gcp, k8s], NIGHT) == {}  # still off-hours: nothing planned


def test_the_resource_s_own_schedule_when_none_was_marked() -> None:
    weekend_only = resource("aws_instance", tags={
        STOPPED_BY_TAG: MARK, "gpuwarden-offhours": "off=(F,18);on=(M,8)"})
    assert planned([weekend_only], datetime(2026, 12, 5, 12, tzinfo=UTC)) == {}  # Saturday
    assert planned([weekend_only], datetime(2026, 12, 7, 9, tzinfo=UTC))  # Monday 09:00


@pytest.mark.parametrize("tags", [
    {},  # stopped by someone else
    {STOPPED_BY_TAG: ""},
    {STOPPED_BY_TAG: "no-time-here"},
    {STOPPED_BY_TAG: "@2026-12-01T22:00:00+00:00"},
    {STOPPED_BY_TAG: "policy_20261301t990000z"},  # no such instant
    {STOPPED_BY_TAG: "p@" + "x" * 5000},  # longer than any mark gpuwarden writes
    {STOPPED_BY_TAG: MARK, RESUME_SCHEDULE_TAG: "off=(M-X,19)"},  # unreadable: stays off
    {STOPPED_BY_TAG: MARK, RESUME_SCHEDULE_TAG: "off"},  # opted out: never off, so on
])
def test_no_readable_mark_means_no_resume(tags: dict[str, str]) -> None:
    expected = {"aws_instance/x"} if tags.get(RESUME_SCHEDULE_TAG) == "off" else set()
    assert set(planned([resource("aws_instance", tags=tags)])) == expected


def test_a_kind_without_a_resume_action_is_not_planned() -> None:
    assert planned([resource("aws_sagemaker_endpoint", tags={STOPPED_BY_TAG: MARK}),
                    resource("DaemonSet", "kubernetes",
                             annotations={STOPPED_BY_ANNOTATION: MARK})]) == {}
