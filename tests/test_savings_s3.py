"""`gpuwarden savings --audit-log s3://...` reads the scheduled Lambda's audit logs from S3 as it
reads a local file: the Lambda enforces off-hours at 03:00 and resumes at 12:00 (moto in server
mode), uploading one audit log per run; the ledger over the prefix is the ledger over the two
logs joined, and each stop saved the nine hours between."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine import lambda_handler
from engine.lambda_handler import handler
from tests import test_lambda_handler as lambda_tests
from tests.conftest import BUSINESS_HOURS, OFF_HOURS
from tests.test_cli import run_cli
from tests.test_lambda_handler import BUCKET, Estate, FakeContext

# The handler tests' fixtures: moto on loopback, a seeded account, its bucket.
moto_endpoint = lambda_tests.moto_endpoint
estate = lambda_tests.estate
bucket = lambda_tests.bucket

UNTIL = "2026-12-05T00:00:00Z"


def enforce_at(monkeypatch: pytest.MonkeyPatch, instant: Any, request_id: str) -> str:
    """One enforce run of the Lambda at `instant`; the S3 URL of its audit log."""
    monkeypatch.setattr(lambda_handler, "utc_now", lambda: instant)
    summary = handler({"mode": "enforce"}, FakeContext(aws_request_id=request_id))
    assert summary["errors"] == [] and summary["audit_log"], summary
    return str(summary["audit_log"])


def savings(location: str, capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    code, out, err = run_cli(["savings", "--audit-log", location, "--format", "json",
                              "--until", UNTIL], capsys, monkeypatch)
    assert code == 0, err
    return dict(json.loads(out))


@pytest.fixture
def two_runs(estate: Estate, bucket: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return [enforce_at(monkeypatch, OFF_HOURS, "night"),
            enforce_at(monkeypatch, BUSINESS_HOURS, "noon")]


def test_the_ledger_over_an_s3_prefix_is_the_ledger_of_the_runs_joined(
    estate: Estate, two_runs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    night, noon = two_runs
    assert night.endswith(".audit.jsonl") and noon.endswith(".audit.jsonl")
    local = tmp_path / "joined.jsonl"
    local.write_bytes(b"".join(estate.objects()[url.removeprefix(f"s3://{BUCKET}/")]
                               for url in two_runs))

    from_s3 = savings(f"s3://{BUCKET}/gpuwarden/", capsys, monkeypatch)
    assert from_s3 == savings(str(local), capsys, monkeypatch)
    assert savings(f"s3://{BUCKET}/gpuwarden", capsys, monkeypatch) == from_s3

    stopped = {estate.ids["dev-gpu"], estate.ids["dev-spot-gpu"]}
    by_resource = {action["resource"]: action for action in from_s3["actions"]}
    assert set(by_resource) == stopped
    hours = (BUSINESS_HOURS - OFF_HOURS).total_seconds() / 3600
    for action in by_resource.values():
        assert action["hours"] == hours and action["until"] == BUSINESS_HOURS.isoformat()
        assert action["usd"] == round(hours * action["usd_per_h"], 2) and action["usd"] > 0
    assert from_s3["total_usd"] == pytest.approx(sum(a["usd"] for a in from_s3["actions"]))


def test_one_audit_log_by_its_key(
    two_runs: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    night = savings(two_runs[0], capsys, monkeypatch)
    # the stops alone: nothing resumed them in this log, so they run until --until
    assert night["actions"] and all(a["until"] == "2026-12-05T00:00:00+00:00"
                                    for a in night["actions"])


@pytest.mark.parametrize(("location", "message"), [
    ("s3://no-such-bucket/gpuwarden/", "S3 NoSuchBucket"),
    (f"s3://{BUCKET}/elsewhere/", "no audit log there"),
    ("s3:///key", "no bucket"),
])
def test_an_unreadable_location_is_one_error_line_exit_2(
    location: str, message: str, estate: Estate, bucket: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = run_cli(["savings", "--audit-log", location], capsys, monkeypatch)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_bad_line_in_s3_is_one_error_naming_the_location(
    estate: Estate, bucket: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    estate.client("s3").put_object(Bucket=BUCKET, Key="gpuwarden/2026/12/01/x.audit.jsonl",
                                   Body=b'{"phase": "after"}\n[1, 2]\n')
    code, out, err = run_cli(["savings", "--audit-log", f"s3://{BUCKET}/gpuwarden/"], capsys,
                             monkeypatch)
    assert code == 2 and out == ""
    assert "audit log line 2 is not a JSON object" in err and f"s3://{BUCKET}/gpuwarden/" in err
