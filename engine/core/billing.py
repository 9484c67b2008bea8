"""Billed rates (`scan --billing FILE`): what a resource really cost per hour in a cost export,
keyed by its resource id. The core only reads them: `engine.loading.focus` builds them from a
FOCUS export, and `with_billed_rates` hands them to the catalog that prices resources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

AWS_ARN_RESOURCE = ":instance/"
GCP_API_PREFIX = "//compute.googleapis.com/"


@dataclass(frozen=True, slots=True)
class BilledRate:
    usd_per_h: float
    window: str  # "2026-09-01 to 2026-10-01", the export's charge period
    source: str  # the export file


BilledRates = Mapping[str, BilledRate]  # billing_key(resource id) → rate


def billing_key(resource_id: str) -> str:
    """One spelling for a resource id in a cost export and in a scan: case-insensitive (Azure
    ids differ in case between APIs and exports), an EC2 instance ARN as its instance id, a GCP
    full resource name without its API host."""
    key = resource_id.strip().casefold()
    if key.startswith("arn:") and AWS_ARN_RESOURCE in key:
        return key.rsplit(AWS_ARN_RESOURCE, 1)[1]
    if key.startswith(GCP_API_PREFIX):
        return key[len(GCP_API_PREFIX):]
    return key
