"""`gpuwarden savings` over a real audit log: off-hours enforcement at 22:00 against moto, resume
at 08:00 the next weekday; each stop saved 10 hours × the rate its audit line recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.core.catalog import builtin_catalog
from tests.conftest_aws import (
    AwsLab,
    Estate,
    aws_fixture,  # noqa: F401
    estate_fixture,  # noqa: F401
    moto_endpoint_fixture,  # noqa: F401
)
from tests.test_cli import run_cli
from tests.test_resume import EVENING, MORNING, STOPPED_INSTANCES, scan


def test_savings_reports_hours_times_rate_per_stop(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    audit = tmp_path / "audit.jsonl"
    scan(audit, EVENING, capsys, monkeypatch, "--enforce")
    scan(audit, MORNING, capsys, monkeypatch, "--enforce")
    code, out, _ = run_cli(["savings", "--audit-log", str(audit), "--format", "json",
                            "--until", "2026-12-05T00:00:00Z"], capsys, monkeypatch)
    assert code == 0
    ledger = json.loads(out)
    by_resource = {a["resource"]: a for a in ledger["actions"]}
    catalog = builtin_catalog()
    for name in STOPPED_INSTANCES:
        action = by_resource.pop(estate[name])
        assert action["hours"] == 10.0 and action["until"] == "2026-12-02T08:00:00+00:00"
        described = aws.client("ec2", "us-west-2" if name == "west" else "us-east-1")
        instance_type = described.describe_instances(InstanceIds=[estate[name]])[
            "Reservations"][0]["Instances"][0]["InstanceType"]
        quote = catalog.hourly_price(instance_type, "us-west-2" if name == "west"
                                     else "us-east-1")
        assert quote is not None and action["usd_per_h"] == quote.usd_per_h
        assert action["usd"] == round(10 * quote.usd_per_h, 2)
    # the autoscaling group, node group and notebook are resumed at 08:00 too (a span left
    # open until --until: tests/test_savings_s3.py)
    for name in ("asg", "nodegroup", "notebook"):
        assert by_resource.pop(estate[name])["until"] == "2026-12-02T08:00:00+00:00"
    assert by_resource == {}
    assert ledger["total_usd"] == pytest.approx(sum(a["usd"] for a in ledger["actions"]))
    assert ledger["by_policy"]["gpu-off-hours-shutdown"] == pytest.approx(ledger["total_usd"])
    assert ledger["by_month"] == {"2026-12": pytest.approx(ledger["total_usd"])}
    assert sum(ledger["by_team"].values()) == pytest.approx(ledger["total_usd"])

    code, out, _ = run_cli(["savings", "--audit-log", str(audit), "--until",
                            "2026-12-05T00:00:00Z"], capsys, monkeypatch)
    assert code == 0 and out.splitlines()[-1].split()[-1] == f"{ledger['total_usd']:.2f}"


def test_a_bad_audit_line_is_one_error_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    audit = tmp_path / "audit.jsonl"
    audit.write_text('{"phase": "after"}\nnot json\n')
    code, out, err = run_cli(["savings", "--audit-log", str(audit)], capsys, monkeypatch)
    assert code == 2 and out == ""
    assert "audit log line 2 is not a JSON object" in err and len(err.strip().splitlines()) == 1
