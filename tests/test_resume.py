"""Resume at on-hours against moto in server mode: off-hours enforcement at 22:00 UTC on a
weekday stops and marks the non-production GPU instances; enforcement at 08:00 the next weekday
starts exactly those again and removes the mark, leaves an instance stopped by hand alone, and
dry-run only plans the resumes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remediations.aws_actions import PREVIOUS_SIZE_TAG
from remediations.planning import RESUME_SCHEDULE_TAG, STOPPED_BY_TAG
from tests.conftest_aws import (
    EAST,
    WEST,
    AwsLab,
    Estate,
    aws_fixture,  # noqa: F401
    estate_fixture,  # noqa: F401
    moto_endpoint_fixture,  # noqa: F401
    run_instance,
)
from tests.test_aws_enforce import group_size, node_group
from tests.test_cli import run_cli

EVENING = "2026-12-01T22:00:00Z"  # a Tuesday, off-hours by the default schedule
MORNING = "2026-12-02T08:00:00Z"  # the next weekday, on-hours
STOPPED_INSTANCES = ("dev", "spot", "west")


def scan(audit: Path, now: str, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch, *extra: str) -> dict[str, Any]:
    _, out, _ = run_cli(["scan", "--source", "aws", "--region", EAST, "--region", WEST,
                         "--now", now, "-f", "json", "--audit-log", str(audit), *extra],
                        capsys, monkeypatch)
    return dict(json.loads(out))


def resumes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["resource"]["id"]: f["remediation"] for f in report["findings"]
            if (f.get("remediation") or {}).get("action") == "resume"}


def instance(aws: AwsLab, instance_id: str) -> dict[str, Any]:
    region = WEST if instance_id.startswith("west") else EAST
    for name in (EAST, WEST):
        found = aws.client("ec2", name).describe_instances(
            Filters=[{"Name": "instance-id", "Values": [instance_id]}])["Reservations"]
        if found:
            return dict(found[0]["Instances"][0])
    raise AssertionError(f"{instance_id} not in {region}")


def tags(aws: AwsLab, instance_id: str) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance(aws, instance_id).get("Tags") or []}


def state(aws: AwsLab, instance_id: str) -> str:
    return str(instance(aws, instance_id)["State"]["Name"])


def test_off_hours_stop_then_on_hours_resume(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    audit = tmp_path / "audit.jsonl"
    scan(audit, EVENING, capsys, monkeypatch, "--enforce")
    for name in STOPPED_INSTANCES:
        assert state(aws, estate[name]) == "stopped"
        marks = tags(aws, estate[name])
        assert marks[STOPPED_BY_TAG] == "gpu-off-hours-shutdown@2026-12-01T22:00:00+00:00"
        assert marks[RESUME_SCHEDULE_TAG].startswith("off=")
    by_hand = run_instance(aws.client("ec2", EAST), "g5.xlarge", {"env": "dev"})
    aws.client("ec2", EAST).stop_instances(InstanceIds=[by_hand])

    assert group_size(aws)[:3] == (0, 4, 0)
    nodes = node_group(aws)
    assert nodes["scalingConfig"]["desiredSize"] == 0
    assert nodes["tags"][STOPPED_BY_TAG] == "gpu-off-hours-shutdown@2026-12-01T22:00:00+00:00"
    planned = resumes(scan(tmp_path / "dry.jsonl", MORNING, capsys, monkeypatch))
    assert planned.pop(estate["asg"])["status"] == "planned"
    assert planned.pop(estate["nodegroup"])["status"] == "planned"
    assert planned.pop(estate["notebook"])["status"] == "planned"  # tests/test_resume_notebooks
    assert node_group(aws)["scalingConfig"]["desiredSize"] == 0
    assert planned == {estate[n]: {"action": "resume", "status": "planned",
                                   "detail": f"would resume {estate[n]} (stopped at "
                                             "2026-12-01T22:00:00+00:00)"}
                       for n in STOPPED_INSTANCES}
    assert all(state(aws, estate[n]) == "stopped" for n in STOPPED_INSTANCES)

    report = scan(audit, MORNING, capsys, monkeypatch, "--enforce")
    assert {rid: r["status"] for rid, r in resumes(report).items()} == {
        estate[n]: "applied" for n in (*STOPPED_INSTANCES, "asg", "nodegroup", "notebook")}
    minimum, maximum, desired, group_tags = group_size(aws)
    assert (minimum, maximum, desired) == (1, 4, 2)
    assert not {STOPPED_BY_TAG, RESUME_SCHEDULE_TAG, PREVIOUS_SIZE_TAG} & set(group_tags)
    nodes = node_group(aws)
    assert nodes["scalingConfig"] == {"minSize": 1, "maxSize": 3, "desiredSize": 2}
    assert not {STOPPED_BY_TAG, RESUME_SCHEDULE_TAG, PREVIOUS_SIZE_TAG} & set(nodes["tags"])
    assert nodes["tags"]["team"] == "ml"
    for name in STOPPED_INSTANCES:
        assert state(aws, estate[name]) in ("pending", "running")
        assert STOPPED_BY_TAG not in tags(aws, estate[name])
    assert state(aws, by_hand) == "stopped"
    assert state(aws, estate["prod"]) == "running"

    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    resumed = [(line["resource"], line["phase"]) for line in lines if line["action"] == "resume"]
    assert sorted(resumed) == sorted((estate[n], phase)
                                     for n in (*STOPPED_INSTANCES, "asg", "nodegroup",
                                               "notebook")
                                     for phase in ("before", "after"))
    again = scan(audit, MORNING, capsys, monkeypatch, "--enforce")
    assert resumes(again) == {}


def test_resume_respects_max_actions(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    audit = tmp_path / "audit.jsonl"
    scan(audit, EVENING, capsys, monkeypatch, "--enforce")
    report = scan(audit, MORNING, capsys, monkeypatch, "--enforce", "--max-actions", "1")
    statuses = sorted(r["status"] for r in resumes(report).values())
    assert statuses == ["applied", "skipped", "skipped", "skipped", "skipped", "skipped"]
    resumed = sum(state(aws, estate[n]) != "stopped" for n in STOPPED_INSTANCES)
    resumed += node_group(aws)["scalingConfig"]["desiredSize"] != 0
    resumed += aws.client("sagemaker", EAST).describe_notebook_instance(
        NotebookInstanceName="research")["NotebookInstanceStatus"] != "Stopped"
    assert resumed + (group_size(aws)[2] != 0) == 1
