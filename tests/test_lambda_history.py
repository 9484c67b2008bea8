"""The scheduled Lambda records every run in the run history, in S3 by default: under the report
bucket's prefix, partitioned by date, readable by `gpuwarden history` (moto in server mode)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from engine.core.errors import InputError
from engine.lambda_config import ENV_HISTORY, parse_run_config
from engine.lambda_handler import handler
from tests import test_lambda_handler as lambda_tests
from tests import test_notify
from tests.conftest import BUSINESS_HOURS, OFF_HOURS
from tests.test_cli import run_cli
from tests.test_lambda_handler import BUCKET, Estate, FakeContext, logged
from tests.test_notify import Receiver

# The handler tests' fixtures: moto on loopback, a seeded account, its bucket.
moto_endpoint = lambda_tests.moto_endpoint
estate = lambda_tests.estate
bucket = lambda_tests.bucket
api_calls = lambda_tests.api_calls
receiver = test_notify.receiver  # a loopback JSON webhook

HISTORY = f"s3://{BUCKET}/gpuwarden/history/"


def test_each_run_is_recorded_by_date_and_history_reads_it(
    estate: Estate, bucket: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    night = handler({"now": OFF_HOURS.isoformat()}, FakeContext(aws_request_id="night"))
    noon = handler({"now": BUSINESS_HOURS.isoformat()}, FakeContext(aws_request_id="noon"))
    assert night["history"] == noon["history"] == HISTORY
    assert night["errors"] == noon["errors"] == []

    stored = estate.objects(history=True)
    dates = sorted(key.split("/")[2] for key in stored)
    assert dates == sorted([f"date={OFF_HOURS.date()}", f"date={BUSINESS_HOURS.date()}"])
    documents = [json.loads(body) for body in stored.values()]
    assert {doc["command"] for doc in documents} == {"scan"}
    assert {doc["source"] for doc in documents} == {"aws"}
    assert all(doc["snapshot"]["kind"] == "Snapshot" for doc in documents)
    by_time = {doc["at"]: doc["report"] for doc in documents}
    assert by_time[OFF_HOURS.isoformat()]["summary"]["failed"] == night["failed"]
    assert by_time[BUSINESS_HOURS.isoformat()]["summary"]["failed"] == noon["failed"]
    capsys.readouterr()

    code, out, err = run_cli(["history", "--history", HISTORY, "--format", "json"], capsys,
                             monkeypatch)
    assert code == 0, err
    runs = json.loads(out)["runs"]
    assert [run["failed"] for run in runs] == [night["failed"], noon["failed"]]
    fixed = {item["policy"] for item in runs[1]["fixed"]}
    assert "gpu-off-hours-shutdown" in fixed  # at noon the dev GPUs are inside on-hours


def test_a_history_url_from_the_environment_or_off(
    estate: Estate, bucket: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    estate.client("s3").create_bucket(Bucket="finops")
    monkeypatch.setenv(ENV_HISTORY, "s3://finops/gpu/")
    summary = handler({"now": OFF_HOURS.isoformat()}, FakeContext())
    assert summary["history"] == "s3://finops/gpu/" and summary["errors"] == []
    keys = [o["Key"] for o in estate.client("s3").list_objects_v2(Bucket="finops")["Contents"]]
    assert len(keys) == 1 and keys[0].startswith(f"gpu/date={OFF_HOURS.date()}/run-")

    monkeypatch.setenv(ENV_HISTORY, "off")
    summary = handler({"now": OFF_HOURS.isoformat()}, FakeContext())
    assert summary["history"] is None and estate.objects(history=True) == {}
    assert len(estate.client("s3").list_objects_v2(Bucket="finops")["Contents"]) == 1


def test_without_a_report_bucket_nothing_is_recorded(estate: Estate) -> None:
    summary = handler({"now": OFF_HOURS.isoformat()}, FakeContext())
    assert summary["history"] is None and summary["errors"] == []


@pytest.mark.parametrize("value", ["/tmp/history.db", "s3://", "sqlite:///x.db", "s3://b/\x07"])
def test_a_bad_history_setting_is_one_error_and_acts_on_nothing(
    value: str, estate: Estate, bucket: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(ENV_HISTORY, value)
    summary: dict[str, Any] = handler({"now": OFF_HOURS.isoformat()}, FakeContext())
    assert set(summary) == {"error"} and summary["error"].startswith(f"{ENV_HISTORY}: ")
    assert estate.objects() == {} and estate.objects(history=True) == {}
    assert [line["phase"] for line in logged(capsys)] == ["config"]


def test_the_default_follows_the_report_prefix() -> None:
    environ = {"GPUWARDEN_REPORT_BUCKET": "r", "GPUWARDEN_REPORT_PREFIX": "/a/b/"}
    assert parse_run_config({}, environ).history == "s3://r/a/b/history/"
    assert parse_run_config({}, {**environ, "GPUWARDEN_REPORT_PREFIX": ""}).history \
        == "s3://r/history/"
    with pytest.raises(InputError, match="unknown event field 'history'"):
        parse_run_config({"history": "s3://elsewhere/"}, environ)  # events cannot redirect it


def test_notifications_are_new_since_the_last_run_in_the_s3_history(
    estate: Estate, bucket: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
    api_calls: list[str],
) -> None:
    """Each run reads one history object back (the last), not the month of runs."""
    monkeypatch.setenv("GPUWARDEN_NOTIFY", receiver.url)
    night = handler({"now": OFF_HOURS.isoformat()}, FakeContext(aws_request_id="night"))
    [first] = receiver.bodies
    assert first["new_findings"] == night["failed"] > 0 and night["errors"] == []

    later = OFF_HOURS + timedelta(hours=1)
    handler({"now": later.isoformat()}, FakeContext(aws_request_id="later"))
    assert len(receiver.bodies) == 1  # the same findings: nothing new
    reads = api_calls.count("s3:GetObject")
    assert reads == 1  # the night's run, the only one before `later`

    handler({"now": BUSINESS_HOURS.isoformat()}, FakeContext(aws_request_id="noon"))
    assert len(receiver.bodies) == 1  # fewer failing at noon: nothing new
    assert api_calls.count("s3:GetObject") == reads + 1  # one read, two runs recorded before

    handler({"now": (OFF_HOURS + timedelta(days=1)).isoformat()},
            FakeContext(aws_request_id="next-night"))
    [_, second] = receiver.bodies
    assert second["new_findings"] == 2  # the two dev GPUs: fixed at noon, off-hours again
    assert {f["policy"] for f in second["findings"]} == {"gpu-off-hours-shutdown"}
    s3_calls = {call for call in api_calls if call.startswith("s3:")}
    assert s3_calls == {"s3:PutObject", "s3:ListObjectsV2", "s3:GetObject"}


def test_the_module_lets_the_function_read_back_only_its_history() -> None:
    """ListObjectsV2 needs s3:ListBucket (on the bucket, for the history prefix), GetObject
    s3:GetObject (on the history's objects): granted there and nowhere else."""
    from tests.test_scheduled_enforcement_tf import MODULE, blocks_of, parse_dir

    function = blocks_of(parse_dir(MODULE), "data", "aws_iam_policy_document")["function"]
    reads = {statement["sid"]: statement for statement in function["statement"]
             if {"s3:GetObject", "s3:ListBucket"} & set(statement["actions"])}
    assert set(reads) == {"ReadRunHistory", "ListRunHistory"}
    assert reads["ReadRunHistory"]["actions"] == ["s3:GetObject"]
    assert reads["ReadRunHistory"]["resources"] == [
        "${aws_s3_bucket.reports.arn}/${var.report_prefix}/history/*"]
    assert reads["ListRunHistory"]["actions"] == ["s3:ListBucket"]
    [condition] = reads["ListRunHistory"]["condition"]
    assert (condition["test"], condition["variable"], condition["values"]) == (
        "StringLike", "s3:prefix", ["${var.report_prefix}/history/*"])
