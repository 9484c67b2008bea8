"""`gpuwarden catalog refresh --cloud gcp` against a loopback server replaying the Cloud Billing
Catalog API's documented `services.skus.list` pages (skus, category, serviceRegions, pricingInfo
with tieredRates in units + nanos, nextPageToken). Prices are Compute Engine's us-central1 list
prices; a GPU machine is priced as vCPUs × core SKU + GiB × RAM SKU + GPUs × GPU SKU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.core.catalog import builtin_catalog
from engine.core.errors import InputError
from engine.loading.catalog_files import read_catalog_file
from engine.pricing.gcp import gcp_prices

RUNNER = CliRunner()
KEY = "test-api-key-123"


def sku(description: str, group: str, usage: str, usd: float, unit: str = "h",
        regions: tuple[str, ...] = ("us-central1",), family: str = "Compute") -> dict[str, Any]:
    units, nanos = int(usd), round((usd - int(usd)) * 1e9)
    return {
        "name": f"services/6F81-5844-456A/skus/{abs(hash(description)) % 10**8}",
        "description": description,
        "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": family,
                     "resourceGroup": group, "usageType": usage},
        "serviceRegions": list(regions),
        "pricingInfo": [{
            "effectiveTime": "2026-11-20T08:00:00.000Z", "summary": "",
            "pricingExpression": {"usageUnit": unit, "displayQuantity": 1, "tieredRates": [
                {"startUsageAmount": 0,
                 "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos}}]},
            "currencyConversionRate": 1}],
        "serviceProviderName": "Google",
    }


PAGES: list[list[dict[str, Any]]] = [
    [sku("A2 Instance Core running in Americas", "CPU", "OnDemand", 0.031611),
     sku("A2 Instance Ram running in Americas", "RAM", "OnDemand", 0.004237, unit="GiBy.h"),
     sku("Spot Preemptible A2 Instance Core running in Americas", "CPU", "Preemptible", 0.012644),
     sku("Commitment v1: A2 Cpu in Americas for 1 Year", "CPU", "Commit1Yr", 0.019915),
     sku("Network Vpn Internet Egress from Americas to Africa", "VPNInternetEgress", "OnDemand",
         0.12, unit="GiBy", family="Network")],
    [sku("Spot Preemptible A2 Instance Ram running in Americas", "RAM", "Preemptible", 0.001695,
         unit="GiBy.h"),
     sku("Nvidia Tesla A100 GPU running in Americas", "GPU", "OnDemand", 2.933908),
     sku("Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas", "GPU",
         "Preemptible", 1.17356),
     sku("Nvidia Tesla T4 GPU running in Americas", "GPU", "OnDemand", 0.35),
     sku("Nvidia L4 GPU running in Americas", "GPU", "OnDemand", 0.560000),
     # G2's RAM SKU is missing from this replay: no G2 price, never a partial one
     sku("G2 Instance Core running in Americas", "CPU", "OnDemand", 0.024988),
     sku("Nvidia Tesla T4 GPU running in Frankfurt", "GPU", "OnDemand", 0.41,
         regions=("europe-west3",))],
]


class Replay(BaseHTTPRequestHandler):
    seen: list[dict[str, list[str]]]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        parts = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parts.query)
        self.seen.append({"path": [parts.path], **query})
        page = 1 if query.get("pageToken") == ["page-2"] else 0
        body: dict[str, Any] = {"skus": PAGES[page]}
        if page == 0:
            body["nextPageToken"] = "page-2"
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, list[str]]]]]:
    seen: list[dict[str, list[str]]] = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (Replay,), {"seen": seen}))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()
    httpd.server_close()


def test_gcp_refresh_composes_machine_prices_from_core_ram_and_gpu_skus(
        server: tuple[str, list[dict[str, list[str]]]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, seen = server
    monkeypatch.setenv("GPUWARDEN_GCP_API_KEY", KEY)
    out = tmp_path / "gcp.csv"
    result = RUNNER.invoke(app, ["catalog", "refresh", "--cloud", "gcp", "--region", "us-central1",
                                 "--endpoint-url", url, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert [s["path"] for s in seen] == [["/v1/services/6F81-5844-456A/skus"]] * 2
    assert seen[0]["key"] == [KEY] and seen[0]["currencyCode"] == ["USD"]
    assert seen[1]["pageToken"] == ["page-2"]
    catalog = read_catalog_file(builtin_catalog(), out)
    # a2-highgpu-1g: 12 vCPUs, 85 GiB, 1 × A100 40GB — Google lists it at $3.6734/h
    on_demand = catalog.hourly_price("a2-highgpu-1g", "us-central1", "on_demand")
    assert on_demand is not None
    assert on_demand.usd_per_h == pytest.approx(12 * 0.031611 + 85 * 0.004237 + 2.933908)
    assert on_demand.usd_per_h == pytest.approx(3.6734, abs=1e-4)
    assert on_demand.as_of == "2026-11-20"
    spot = catalog.hourly_price("a2-highgpu-8g", "us-central1", "spot")
    assert spot is not None
    assert spot.usd_per_h == pytest.approx(96 * 0.012644 + 680 * 0.001695 + 8 * 1.17356)
    # the replay holds no A100 80GB SKU: the a2-ultragpu types are named, not half-priced
    assert "fully priced" in result.output and "a2-ultragpu-1g" in result.output
    text = out.read_text()
    assert "g2-standard-4," not in text  # G2 RAM unpriced: no row rather than a partial sum
    assert "europe-west3" not in text  # a region nobody asked for


def test_gcp_refresh_without_a_key_is_one_line_exit_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GPUWARDEN_GCP_API_KEY"}
    result = subprocess.run(
        [sys.executable, "-m", "engine", "catalog", "refresh", "--cloud", "gcp",
         "--endpoint-url", "http://127.0.0.1:9", "-o", str(tmp_path / "x.csv")],
        capture_output=True, text=True, timeout=60, check=False, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "GPUWARDEN_GCP_API_KEY" in result.stderr


def test_gcp_unreachable_api_does_not_print_the_key(tmp_path: Path) -> None:
    env = {**os.environ, "GPUWARDEN_GCP_API_KEY": KEY}
    for endpoint in ("http://127.0.0.1:9", "file:///etc/passwd"):
        result = subprocess.run(
            [sys.executable, "-m", "engine", "catalog", "refresh", "--cloud", "gcp",
             "--endpoint-url", endpoint, "-o", str(tmp_path / "x.csv")],
            capture_output=True, text=True, timeout=60, check=False, env=env)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and KEY not in result.stderr
        assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("page", [
    b"<html>quota exceeded</html>",
    json.dumps({"error": {"code": 403, "message": "API key not valid"}}).encode(),
    json.dumps({"skus": "nope"}).encode(),
    json.dumps({"skus": [{"category": "x", "pricingInfo": [{"pricingExpression": 7}]},
                         {"description": None, "category": {"resourceFamily": "Compute",
                                                            "resourceGroup": "GPU",
                                                            "usageType": "OnDemand"},
                          "serviceRegions": "us-central1", "pricingInfo": "free"}]}).encode(),
])
def test_gcp_hostile_pages_are_input_errors_or_ignored(page: bytes) -> None:
    specs = [s for s in builtin_catalog().table.gpu_types() if s.cloud == "gcp"]
    try:
        rows = gcp_prices(["us-central1"], specs, KEY, fetch=lambda url: page)
    except InputError as exc:
        assert "Cloud Billing Catalog API" in str(exc)
    else:
        assert rows == []


def test_a_page_token_that_never_ends_is_bounded() -> None:
    page = json.dumps({"skus": [], "nextPageToken": "again"}).encode()
    with pytest.raises(InputError, match="pages"):
        gcp_prices(["us-central1"], [], KEY, fetch=lambda url: page)
