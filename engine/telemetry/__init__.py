"""GPU telemetry joined to resources: DCGM through Prometheus, a dcgm-exporter endpoint, NVML
snapshots (docs/telemetry.md).

`attach_telemetry` runs after the sources were collected and before evaluation: it gathers
readings (`gather`), joins them to the resources by stable keys (`join`), adds one resource per
GPU nobody owns, and records the readings in the scan's snapshot so a saved scan replays the
same verdicts. Submodules are imported only when a scan asks for telemetry.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.core.catalog import Catalog
    from engine.sources.registry import Collected, ScanOptions


def attach_telemetry(
    collected: Collected, options: ScanOptions, now: datetime, catalog: Catalog
) -> Collected:
    """Return `collected` with telemetry attached to its resources (and unowned GPUs added)."""
    from engine.telemetry.gather import gather, kubernetes_objects
    from engine.telemetry.join import join_readings
    from engine.telemetry.snapshot import section_document

    gathered = gather(collected, options, now)
    objects, cluster = kubernetes_objects(collected)
    result = join_readings(collected.resources, gathered.readings, catalog=catalog,
                           objects=objects, owners=gathered.owners, cluster=cluster,
                           outage=gathered.outage)
    collected.resources = [*result.resources, *result.unowned]
    collected.warnings.extend([*gathered.warnings, *result.warnings])
    live = bool(options.prometheus_url or options.dcgm_url)
    collected.snapshot["telemetry"] = section_document(
        gathered.readings, gathered.owners, source=", ".join(gathered.sources) or None,
        end=now if live else _recorded_end(collected),
        window_seconds=options.telemetry_window_s if live else None)
    return collected


def _recorded_end(collected: Collected) -> datetime | None:
    section = collected.snapshot.get("telemetry")
    if not isinstance(section, dict) or section.get("end") is None:
        return None
    from engine.telemetry.snapshot import parse_section

    return parse_section(section).end
