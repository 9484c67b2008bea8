"""SageMaker notebook instances, resumed at on-hours, against moto in server mode: off-hours
enforcement at 22:00 UTC on a weekday tags the notebook with gpuwarden's stop mark, then stops it;
at 08:00 the next weekday only a notebook still Stopped and still marked is started again and
its mark deleted. A notebook stopped by hand stays stopped; one started by hand since is left
alone; dry-run sends no mutating call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from remediations.planning import RESUME_SCHEDULE_TAG, STOPPED_BY_TAG
from tests.conftest_aws import (
    ACCOUNT,
    COST_TAGS,
    AwsLab,
    Estate,
    aws_fixture,  # noqa: F401
    estate_fixture,  # noqa: F401
    moto_endpoint_fixture,  # noqa: F401
    tag_list,
)
from tests.test_resume import EVENING, MORNING, resumes, scan

NOTEBOOK = "research"  # the estate's non-production GPU notebook (ml.p3.2xlarge)


def notebook(aws: AwsLab, name: str = NOTEBOOK) -> dict[str, Any]:
    return dict(aws.client("sagemaker").describe_notebook_instance(NotebookInstanceName=name))


def notebook_tags(aws: AwsLab, name: str = NOTEBOOK) -> dict[str, str]:
    arn = notebook(aws, name)["NotebookInstanceArn"]
    return {t["Key"]: t["Value"] for t in aws.client("sagemaker").list_tags(
        ResourceArn=arn).get("Tags") or []}


def notebook_calls(aws: AwsLab) -> list[str]:
    return [operation for _, service, operation, _ in aws.mutating_calls()
            if service == "sagemaker"]


def by_hand(aws: AwsLab, name: str) -> str:
    """A second non-production GPU notebook, stopped by someone else (no mark)."""
    sagemaker = aws.client("sagemaker")
    arn = str(sagemaker.create_notebook_instance(
        NotebookInstanceName=name, InstanceType="ml.p2.xlarge",
        RoleArn=f"arn:aws:iam::{ACCOUNT}:role/sagemaker",
        Tags=tag_list(COST_TAGS))["NotebookInstanceArn"])
    sagemaker.stop_notebook_instance(NotebookInstanceName=name)
    return arn


def test_off_hours_stop_marks_then_on_hours_start(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = aws.record_calls()
    audit = tmp_path / "audit.jsonl"
    scan(audit, EVENING, capsys, monkeypatch, "--enforce")
    assert notebook(aws)["NotebookInstanceStatus"] == "Stopped"
    marks = notebook_tags(aws)
    assert marks[STOPPED_BY_TAG] == "gpu-off-hours-shutdown@2026-12-01T22:00:00+00:00"
    assert marks[RESUME_SCHEDULE_TAG] == "off=(M-F,19);on=(M-F,7);tz=utc"
    assert notebook_calls(aws) == ["AddTags", "StopNotebookInstance"]  # the mark first
    other = by_hand(aws, "by-hand")

    calls.clear()
    planned = resumes(scan(tmp_path / "dry.jsonl", MORNING, capsys, monkeypatch))
    assert planned[estate["notebook"]] == {
        "action": "resume", "status": "planned",
        "detail": f"would resume {estate['notebook']} (stopped at 2026-12-01T22:00:00+00:00)"}
    assert other not in planned
    assert notebook_calls(aws) == []  # dry-run: nothing sent
    assert notebook(aws)["NotebookInstanceStatus"] == "Stopped"

    report = scan(audit, MORNING, capsys, monkeypatch, "--enforce")
    assert resumes(report)[estate["notebook"]]["status"] == "applied"
    assert notebook_calls(aws) == ["StartNotebookInstance", "DeleteTags"]
    assert notebook(aws)["NotebookInstanceStatus"] in ("Pending", "InService")
    assert notebook_tags(aws) == COST_TAGS  # the mark deleted, the rest kept
    assert notebook(aws, "by-hand")["NotebookInstanceStatus"] == "Stopped"

    again = scan(audit, MORNING, capsys, monkeypatch, "--enforce")
    assert estate["notebook"] not in resumes(again)


def test_a_marked_notebook_started_by_hand_is_left_alone(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    audit = tmp_path / "audit.jsonl"
    scan(audit, EVENING, capsys, monkeypatch, "--enforce")
    aws.client("sagemaker").start_notebook_instance(NotebookInstanceName=NOTEBOOK)
    calls = aws.record_calls()
    report = scan(audit, MORNING, capsys, monkeypatch, "--enforce")
    resumed = resumes(report)[estate["notebook"]]
    assert resumed["status"] == "skipped"
    assert resumed["detail"] == f"notebook instance {NOTEBOOK} is InService, not Stopped"
    assert not [c for c in calls if c[1] == "sagemaker" and c[2] in ("StartNotebookInstance",
                                                                    "DeleteTags")]
    assert STOPPED_BY_TAG in notebook_tags(aws)  # its mark is not gpuwarden's to drop now
