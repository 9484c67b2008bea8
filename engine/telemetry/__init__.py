"""GPU telemetry joined to resources (placeholder until the telemetry sources land)."""

from __future__ import annotations

from datetime import datetime

from engine.catalog import Catalog
from engine.sources.registry import Collected, ScanOptions


def attach_telemetry(
    collected: Collected, options: ScanOptions, now: datetime, catalog: Catalog
) -> Collected:
    """Return `collected` with telemetry attached to its resources."""
    collected.warnings.append("GPU telemetry sources are not available in this build")
    return collected
