"""Negotiated discounts in a `--prices FILE`: `CLOUD:PATTERN` rows with a `discount_pct` take a
percent off on-demand list prices (the most specific pattern wins), never off spot, and every
figure built on such a price says so in its cost basis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.core.catalog import builtin_catalog, with_price_overrides
from engine.core.errors import InputError
from tests.test_cli import GPU_PLAN, run_cli

PRICES = """instance_type,on_demand_usd_hr,discount_pct
aws:*,,10
aws:p5.*,,25
azure:standard_nc*,,5
"""


def test_the_most_specific_pattern_discounts_on_demand_only() -> None:
    base = builtin_catalog()
    catalog = with_price_overrides(base, PRICES, "edp.csv")
    for name, kept in (("p5.48xlarge", 0.75), ("g5.xlarge", 0.90),
                       ("Standard_NC24ads_A100_v4", 0.95), ("a2-highgpu-1g", 1.0)):
        listed = base.hourly_price(name, None, "on_demand")
        priced = catalog.hourly_price(name, None, "on_demand")
        assert listed is not None and priced is not None
        assert priced.usd_per_h == pytest.approx(listed.usd_per_h * kept, rel=1e-6), name
        assert ("negotiated" in priced.basis) == (kept < 1), priced.basis
    spot, listed_spot = (c.hourly_price("p5.48xlarge", None, "spot") for c in (catalog, base))
    assert spot == listed_spot  # market prices are not discounted
    p5 = catalog.hourly_price("p5.48xlarge", None, "on_demand")
    assert p5 is not None and "less a negotiated 25% (edp.csv)" in p5.basis


def test_gpu_hour_prices_of_workloads_take_the_discount_too() -> None:
    base = builtin_catalog()
    everything = with_price_overrides(base, "instance_type,on_demand_usd_hr,discount_pct\n"
                                            "aws:*,,20\ngcp:*,,20\nazure:*,,20\n", "edp.csv")
    listed, priced = base.gpu_hourly("NVIDIA H100"), everything.gpu_hourly("NVIDIA H100")
    assert listed is not None and priced == pytest.approx(listed * 0.8)


def test_a_price_row_and_discount_rows_live_in_one_file() -> None:
    catalog = with_price_overrides(builtin_catalog(), PRICES + "g5.xlarge,1.00,\n", "f.csv")
    quote = catalog.hourly_price("g5.xlarge", None, "on_demand")
    assert quote is not None and quote.usd_per_h == pytest.approx(0.90)


@pytest.mark.parametrize("row", [
    "oracle:*,,10", "aws:,,10", "aws:*,,0", "aws:*,,100", "aws:*,,ten", "aws:*,,",
    "aws:" + "x" * 200 + ",,10",
])
def test_bad_discount_rows_are_input_errors(row: str) -> None:
    with pytest.raises(InputError):
        with_price_overrides(builtin_catalog(), f"instance_type,on_demand_usd_hr,discount_pct\n"
                                                f"{row}\n", "bad.csv")


def test_check_plan_states_the_discount_in_the_cost_basis(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(GPU_PLAN))
    prices = tmp_path / "edp.csv"
    prices.write_text("instance_type,on_demand_usd_hr,discount_pct\naws:g5.*,,30\n")
    reports = []
    for extra in ([], ["--prices", str(prices)]):
        code, out, err = run_cli(["check-plan", str(plan), "-f", "json", *extra], capsys,
                                 monkeypatch)
        assert code == 1, err
        reports.append(json.loads(out))
    listed, discounted = (next(f for f in r["findings"] if f["policy"] == "gpu-spot-required")
                          for r in reports)
    assert "negotiated 30%" in discounted["cost_basis"]
    assert discounted["estimated_monthly_usd"] < listed["estimated_monthly_usd"]


def test_a_price_the_input_gave_is_not_called_discounted() -> None:
    catalog = with_price_overrides(builtin_catalog(), PRICES, "edp.csv")
    quote = catalog.hourly_price("g5.xlarge", "us-east-1", "on_demand")
    assert quote is not None
    assert catalog.discount_note("g5.xlarge", "us-east-1", quote.usd_per_h) == (
        " less a negotiated 10% (edp.csv)")
    assert catalog.discount_note("g5.xlarge", "us-east-1", 1.006) == ""  # a snapshot's own
    assert builtin_catalog().discount_note("g5.xlarge", "us-east-1", 1.006) == ""
