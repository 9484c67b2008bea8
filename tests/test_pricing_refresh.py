"""`gpuwarden catalog refresh` against a loopback server replaying the providers' documented
response shapes: Azure Retail Prices pages (Items, NextPageLink, currencyCode), the AWS Price
List Query API (JSON 1.1, PriceList strings, NextToken) and EC2 DescribeSpotPriceHistory (XML)."""

from __future__ import annotations

import json
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
from engine.loading.catalog_files import read_catalog_file

RUNNER = CliRunner()


def _azure_item(size: str, price: float, sku: str, product: str = "NC A100 v4 Series",
                currency: str = "USD") -> dict[str, Any]:
    return {"currencyCode": currency, "retailPrice": price, "unitPrice": price,
            "armRegionName": "westus2", "location": "US West 2", "effectiveStartDate":
            "2026-09-01T00:00:00Z", "meterName": sku, "productName": f"Virtual Machines {product}",
            "skuName": sku, "serviceName": "Virtual Machines", "armSkuName": size,
            "unitOfMeasure": "1 Hour", "type": "Consumption", "isPrimaryMeterRegion": True}


AZURE_PAGES = [
    [_azure_item("Standard_NC24ads_A100_v4", 4.10, "NC24ads A100 v4"),
     _azure_item("Standard_NC24ads_A100_v4", 5.90, "NC24ads A100 v4",
                 product="NC A100 v4 Series Windows")],
    [_azure_item("Standard_NC24ads_A100_v4", 0.81, "NC24ads A100 v4 Spot"),
     _azure_item("Standard_NC24ads_A100_v4", 0.60, "NC24ads A100 v4 Low Priority"),
     _azure_item("Standard_NC24ads_A100_v4", 3.00, "NC24ads A100 v4", currency="EUR"),
     _azure_item("Standard_D2s_v3", 0.1, "D2s v3"),
     _azure_item("Standard_NZ99_v9", 9.0, "NZ99 v9")],
]


def _price_list(name: str, region: str, usd: str) -> str:
    return json.dumps({
        "product": {"productFamily": "Compute Instance", "sku": "SKU1",
                    "attributes": {"instanceType": name, "regionCode": region,
                                   "operatingSystem": "Linux", "tenancy": "Shared"}},
        "serviceCode": "AmazonEC2", "publicationDate": "2026-09-10T00:00:00Z",
        "terms": {"OnDemand": {"SKU1.JRTCKXETXF": {
            "effectiveDate": "2026-09-01T00:00:00Z", "offerTermCode": "JRTCKXETXF",
            "priceDimensions": {"SKU1.JRTCKXETXF.6YS6EN2CT7": {
                "unit": "Hrs", "pricePerUnit": {"USD": usd},
                "description": f"${usd} per On Demand Linux {name} Instance Hour"}}}}}})


SPOT_XML = """<?xml version="1.0" encoding="UTF-8"?>
<DescribeSpotPriceHistoryResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
<requestId>r-1</requestId><spotPriceHistorySet>{items}</spotPriceHistorySet><nextToken/>
</DescribeSpotPriceHistoryResponse>"""
SPOT_ITEM = ("<item><instanceType>{t}</instanceType><productDescription>Linux/UNIX"
             "</productDescription><spotPrice>{p}</spotPrice><timestamp>{ts}</timestamp>"
             "<availabilityZone>{z}</availabilityZone></item>")


class Replay(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        self.seen.append({"azure": query})
        page = int(query.get("$skip", ["0"])[0]) // 100
        host = f"http://127.0.0.1:{self.server.server_address[1]}"
        link = (f"{host}/api/retail/prices?{urllib.parse.urlencode({**query, '$skip': 100})}"
                if page == 0 else None)
        self._send({"BillingCurrency": "USD", "CustomerEntityId": "Default",
                    "Items": AZURE_PAGES[page], "NextPageLink": link,
                    "Count": len(AZURE_PAGES[page])}, "application/json")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        target = self.headers.get("X-Amz-Target", "")
        if target == "AWSPriceListService.GetProducts":
            request = json.loads(body)
            self.seen.append({"pricing": request})
            self._send(self._products(request), "application/x-amz-json-1.1")
            return
        form = urllib.parse.parse_qs(body)
        self.seen.append({"ec2": form})
        items = "".join(SPOT_ITEM.format(t="p4d.24xlarge", p=p, z=z, ts=ts) for p, z, ts in (
            ("7.10", "us-west-2a", "2026-09-10T00:00:00Z"),
            ("9.00", "us-west-2a", "2026-09-01T00:00:00Z"),  # older: not the zone's price
            ("6.50", "us-west-2b", "2026-09-10T00:00:00Z"),
            ("8.00", "us-west-2c", "2026-09-10T00:00:00Z")))
        self._send_text(SPOT_XML.format(items=items), "text/xml")

    @staticmethod
    def _products(request: dict[str, Any]) -> dict[str, Any]:
        fields = {f["Field"]: f["Value"] for f in request["Filters"]}
        if fields["instanceType"] != "p4d.24xlarge":
            return {"FormatVersion": "aws_v1", "PriceList": []}
        if request.get("NextToken") != "page2":  # the first page holds no price, only a token
            return {"FormatVersion": "aws_v1", "PriceList": [], "NextToken": "page2"}
        return {"FormatVersion": "aws_v1",
                "PriceList": [_price_list("p4d.24xlarge", fields["regionCode"], "22.9")]}

    def _send(self, document: dict[str, Any], kind: str) -> None:
        self._send_text(json.dumps(document), kind)

    def _send_text(self, text: str, kind: str) -> None:
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    handler = type("Handler", (Replay,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()
    httpd.server_close()


def test_azure_refresh_follows_pages_and_keeps_linux_usd_prices(
        server: tuple[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    url, seen = server
    out = tmp_path / "azure.csv"
    result = RUNNER.invoke(app, ["catalog", "refresh", "--cloud", "azure", "--region", "westus2",
                                 "--endpoint-url", f"{url}/api/retail/prices", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert len(seen) == 2  # both pages
    first = seen[0]["azure"]
    assert first["currencyCode"] == ["USD"]
    assert "armRegionName eq 'westus2'" in first["$filter"][0]
    assert "priceType eq 'Consumption'" in first["$filter"][0]
    assert "Standard_NZ99_v9" in result.output  # priced but not in the catalog: said, left out
    catalog = read_catalog_file(builtin_catalog(), out)
    on_demand = catalog.hourly_price("Standard_NC24ads_A100_v4", "westus2", "on_demand")
    spot = catalog.hourly_price("Standard_NC24ads_A100_v4", "westus2", "spot")
    assert on_demand is not None and on_demand.usd_per_h == pytest.approx(4.10)
    assert spot is not None and spot.usd_per_h == pytest.approx(0.81)
    assert on_demand.as_of == "2026-09-01"
    assert "Standard_D2s_v3" not in out.read_text()  # CPU-only sizes are not written


def test_aws_refresh_reads_price_list_terms_and_spot_history(
        server: tuple[str, list[dict[str, Any]]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, seen = server
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    out = tmp_path / "aws.csv"
    result = RUNNER.invoke(app, ["catalog", "refresh", "--cloud", "aws", "--region", "us-west-2",
                                 "--endpoint-url", url, "-o", str(out)])
    assert result.exit_code == 0, result.output
    pricing = [s["pricing"] for s in seen if "pricing" in s]
    asked = {f["Field"]: f["Value"] for f in pricing[0]["Filters"]}
    assert pricing[0]["ServiceCode"] == "AmazonEC2"
    assert asked["regionCode"] == "us-west-2" and asked["operatingSystem"] == "Linux"
    assert asked["tenancy"] == "Shared" and asked["capacitystatus"] == "Used"
    assert any(p.get("NextToken") == "page2" for p in pricing)  # followed the token
    spot_requests = [s["ec2"] for s in seen if "ec2" in s]
    assert spot_requests[0]["Action"] == ["DescribeSpotPriceHistory"]
    assert spot_requests[0]["ProductDescription.1"] == ["Linux/UNIX"]
    catalog = read_catalog_file(builtin_catalog(), out)
    on_demand = catalog.hourly_price("p4d.24xlarge", "us-west-2", "on_demand")
    spot = catalog.hourly_price("p4d.24xlarge", "us-west-2", "spot")
    assert on_demand is not None and on_demand.usd_per_h == pytest.approx(22.9)
    assert on_demand.region == "us-west-2"
    # the latest price per zone (7.10, 6.50, 8.00), median over the zones
    assert spot is not None and spot.usd_per_h == pytest.approx(7.10)


def test_refresh_bad_cloud_and_unreachable_api_are_one_line_exit_2(tmp_path: Path) -> None:
    for args in (["--cloud", "oracle"],
                 ["--cloud", "azure", "--endpoint-url", "http://127.0.0.1:9/api/retail/prices"],
                 ["--cloud", "azure", "--endpoint-url", "file:///etc/passwd"]):
        result = subprocess.run(
            [sys.executable, "-m", "engine", "catalog", "refresh", *args, "-o",
             str(tmp_path / "x.csv")], capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "gpuwarden: error:" in result.stderr
        assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("pages", [
    [b"<html>maintenance</html>"],
    [json.dumps({"Items": [], "NextPageLink": "https://elsewhere.example/prices"}).encode()],
    [json.dumps({"Items": "nope", "NextPageLink": None}).encode()],
])
def test_azure_hostile_pages_are_input_errors_or_ignored(pages: list[bytes]) -> None:
    from engine.core.errors import InputError
    from engine.pricing.azure import azure_prices

    answers = iter(pages)
    try:
        rows = azure_prices(["eastus"], "https://prices.azure.com/api/retail/prices",
                            fetch=lambda url: next(answers))
    except InputError as exc:
        assert "Azure Retail Prices API" in str(exc)
    else:
        assert rows == []
