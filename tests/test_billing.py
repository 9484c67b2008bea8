"""`scan --billing FILE`: a FOCUS 1.x export prices the resources it lists at their billed
EffectiveCost per hour of the export's window; the others keep list prices."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.core.billing import billing_key
from engine.loading.focus import read_focus_export

SAMPLE = Path(__file__).parent / "data" / "focus" / "focus-sample.csv"
AZURE_VM = ("/subscriptions/6f1d3a52-8c4e-4b7a-9d21-0a3e5c7b9f10/resourceGroups/rg-ml/providers/"
            "Microsoft.Compute/virtualMachines/win-v100")


def test_sample_rates_are_usage_effective_cost_per_hour_of_the_window() -> None:
    rates = read_focus_export(SAMPLE)
    assert rates[billing_key("i-0a1b2c3d4e5f60001")].usd_per_h == pytest.approx(46.80 / 24)
    assert rates[billing_key(AZURE_VM)].usd_per_h == pytest.approx(9.00)  # case-insensitive
    gcp = billing_key("projects/ml-dev/zones/us-central1-a/instances/trainer-t4")
    assert rates[gcp].usd_per_h == pytest.approx(0.50)
    assert rates[gcp].window == "2026-09-01 to 2026-09-02"


def _demo_scan(*extra: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["scan", "--demo", "--format", "json", "--soft-fail",
                                      "--quiet", *extra])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _finding(report: dict[str, Any], name: str, policy: str) -> dict[str, Any]:
    return next(f for f in report["findings"]
                if f["resource"]["name"] == name and f["policy"] == policy)


def test_scan_prices_listed_resources_at_their_billed_rate() -> None:
    listed, billed = _demo_scan(), _demo_scan("--billing", str(SAMPLE))
    tags = _finding(billed, "cv-experiments", "required-cost-tags")
    assert tags["estimated_monthly_usd"] == pytest.approx(1.95 * 730)
    assert tags["cost_basis"].startswith("billed $1.95/h (EffectiveCost in focus-sample.csv")
    spot = _finding(billed, "win-v100", "gpu-spot-required")
    assert spot["estimated_monthly_usd"] == pytest.approx(9.00 * 730 * 0.6)
    # not in the export: its list price, the same figure as without --billing
    other = _finding(billed, "batch-embed", "gpu-idle")
    assert "billed" not in other["cost_basis"]
    assert other == _finding(listed, "batch-embed", "gpu-idle")
    list_spend = {"cv-experiments": 3.06 * 730, "win-v100": 12.24 * 730, "trainer-t4": 0.70 * 730}
    billed_spend = {"cv-experiments": 1.95 * 730, "win-v100": 9.00 * 730, "trainer-t4": 0.50 * 730}
    expected = listed["summary"]["monthly_spend_usd"] - sum(list_spend.values()) + sum(
        billed_spend.values())
    assert billed["summary"]["monthly_spend_usd"] == pytest.approx(expected, abs=1.0)
    assert "billed rates from focus-sample.csv" in billed["prices"]["source"]


HEADER = "ResourceId,EffectiveCost,ChargePeriodStart,ChargePeriodEnd,BillingCurrency\n"


@pytest.mark.parametrize("text", [
    "ResourceId,EffectiveCost\ni-1,3\n",
    HEADER + "i-1,3,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,EUR\n",
    HEADER + "i-1,3,yesterday,2026-09-02T00:00:00Z,USD\n",
    HEADER + "i-1,lots,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,USD\n",
    HEADER + "i-1,3,2026-09-02T00:00:00Z,2026-09-01T00:00:00Z,USD\n",
    "\udcff",
])
def test_bad_exports_are_one_line_exit_2(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    result = subprocess.run(
        [sys.executable, "-m", "engine", "scan", "--demo", "--billing", str(path), "--quiet"],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "gpuwarden: error:" in result.stderr


def test_parquet_export_gives_the_csv_rates(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    parquet = tmp_path / "focus.parquet"
    connection = duckdb.connect(":memory:")
    connection.execute(  # typed as exports write them: timestamps with zone, costs as decimals
        "COPY (SELECT * REPLACE (CAST(ChargePeriodStart AS TIMESTAMPTZ) AS ChargePeriodStart, "
        "CAST(ChargePeriodEnd AS TIMESTAMPTZ) AS ChargePeriodEnd, "
        "CAST(EffectiveCost AS DECIMAL(18, 6)) AS EffectiveCost) "
        f"FROM read_csv('{SAMPLE}', all_varchar = true)) TO '{parquet}' (FORMAT parquet)")
    connection.close()
    from_csv, from_parquet = read_focus_export(SAMPLE), read_focus_export(parquet)
    assert from_parquet.keys() == from_csv.keys()
    for key, rate in from_csv.items():
        assert from_parquet[key].usd_per_h == pytest.approx(rate.usd_per_h)
        assert from_parquet[key].window == rate.window
