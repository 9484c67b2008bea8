"""Live spot prices at the runtime door: an AWS scan asks EC2 `DescribeSpotPriceHistory` for the
GPU types a region runs, and spot savings come from the market price of that type in that region
(the median of its zones) instead of the typical 60% discount. moto in server mode answers every
type at $0.00001, so the tests put a market in front of its backend, in the shape EC2 documents;
moto's own answer doubles as the implausible price that must be ignored."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest_aws import (
    COST_TAGS,
    EAST,
    AwsLab,
    aws_fixture,  # noqa: F401
    moto_endpoint_fixture,  # noqa: F401
    run_instance,
)
from tests.test_aws_source import deny
from tests.test_cli import run_cli

NOW = "2026-12-01T03:00:00Z"  # off-hours, a Tuesday
G5_XLARGE_LIST = 1.006  # us-east-1 on-demand, the built-in catalog
ZONES = {"us-east-1a": "0.4100", "us-east-1b": "0.3900", "us-east-1c": "0.4500"}


def market(prices: dict[str, str], asked: list[dict[str, Any]]) -> Callable[[Any], Any]:
    from moto.core.responses import ActionResult

    def describe_spot_price_history(self: Any) -> Any:
        asked.append({"types": self._get_param("InstanceTypes", []),
                      "products": self._get_param("ProductDescriptions", [])})
        history = [
            {"InstanceType": name, "ProductDescription": "Linux/UNIX", "SpotPrice": price,
             "AvailabilityZone": zone, "Timestamp": "2026-11-30T18:00:00Z"}
            for name in self._get_param("InstanceTypes", []) for zone, price in prices.items()]
        history.append({"InstanceType": "g5.xlarge", "ProductDescription": "Linux/UNIX",
                        "SpotPrice": "0.9000", "AvailabilityZone": "us-east-1a",
                        "Timestamp": "2026-10-01T00:00:00Z"})  # older: not the zone's price
        return ActionResult({"SpotPriceHistory": history})

    return describe_spot_price_history


def spot_finding(report: dict[str, Any], instance: str) -> dict[str, Any]:
    return next(f for f in report["findings"]
                if f["resource"]["id"] == instance and f["policy"] == "gpu-spot-required")


def scan(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
         *extra: str) -> dict[str, Any]:
    code, out, err = run_cli(["scan", "--source", "aws", "--region", EAST, "--now", NOW,
                              "-f", "json", *extra], capsys, monkeypatch)
    assert code == 1, err
    report: dict[str, Any] = json.loads(out)
    return report


def test_spot_savings_use_the_market_price_of_the_type_in_the_region(
        aws: AwsLab, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    from moto.ec2.responses.spot_instances import SpotInstances

    asked: list[dict[str, Any]] = []
    monkeypatch.setattr(SpotInstances, "describe_spot_price_history", market(ZONES, asked))
    instance = run_instance(aws.client("ec2"), "g5.xlarge", {"env": "dev", **COST_TAGS})
    saved = tmp_path / "aws.snapshot.json"
    finding = spot_finding(scan(capsys, monkeypatch, "--save-snapshot", str(saved)), instance)
    assert asked and asked[0]["types"] == ["g5.xlarge"] and asked[0]["products"] == [
        "Linux/UNIX"]
    median = 0.41  # of 0.41, 0.39, 0.45: each zone's latest price
    discount = 1 - median / G5_XLARGE_LIST
    assert f"spot discount {discount:.0%}" in finding["cost_basis"]
    assert "spot market $0.41/h vs on-demand $1.01/h in us-east-1, read live" in finding[
        "cost_basis"]
    assert finding["estimated_monthly_usd"] == pytest.approx(
        G5_XLARGE_LIST * 730 * discount, abs=1.0)

    calls = len(asked)
    code, out, err = run_cli(["scan", "--source", f"snapshot:{saved}", "--now", NOW, "-f",
                              "json"], capsys, monkeypatch)
    assert code == 1, err
    replay = spot_finding(json.loads(out), instance)
    assert len(asked) == calls  # the snapshot replays the prices offline
    assert replay["cost_basis"] == finding["cost_basis"]


def test_an_implausible_price_leaves_the_typical_discount(
        aws: AwsLab, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    instance = run_instance(aws.client("ec2"), "g5.xlarge", {"env": "dev", **COST_TAGS})
    # moto's own answer: $0.00001 in every zone, not a price a market asks for a GPU
    finding = spot_finding(scan(capsys, monkeypatch), instance)
    assert "estimated spot discount 60%" in finding["cost_basis"]


def test_a_denied_price_history_is_a_warning_not_a_failure(
        aws: AwsLab, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    aws.hooks.append(deny("UnauthorizedOperation", operation="DescribeSpotPriceHistory"))
    instance = run_instance(aws.client("ec2"), "g5.xlarge", {"env": "dev", **COST_TAGS})
    code, out, err = run_cli(["scan", "--source", "aws", "--region", EAST, "--now", NOW,
                              "-f", "json"], capsys, monkeypatch)
    assert code == 1 and "DescribeSpotPriceHistory" in err
    finding = spot_finding(json.loads(out), instance)
    assert finding["result"] == "fail"
    assert "estimated spot discount 60%" in finding["cost_basis"]


def test_the_documented_read_policy_lists_every_action_the_scan_reads_with() -> None:
    from engine.sources.aws import read_actions
    from tests.conftest import REPO

    for page in ("aws.md", "runtime.md"):
        text = (REPO / "docs" / page).read_text(encoding="utf-8")
        missing = sorted(action for action in read_actions() if action not in text)
        assert not missing, f"docs/{page} does not list {missing}"
