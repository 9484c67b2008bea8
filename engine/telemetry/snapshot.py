"""The `telemetry:` section of a snapshot bundle: GPU readings and the objects that join them.

    telemetry:
      source: prometheus http://prometheus:9090     # informational
      end: "2026-11-30T08:00:00Z"                    # when the window ended
      window_seconds: 3600
      gpus:                                          # one GpuSeries per GPU/slice and pod
        - {hostname: node-a, uuid: GPU-..., gpu: "0", model: NVIDIA A100-SXM4-80GB,
           pod: notebook-7c9d-x2x7q, namespace: research, activity_pct: 1.2,
           activity_metric: DCGM_FI_PROF_GR_ENGINE_ACTIVE, samples: 120, window_seconds: 3600,
           memory_used_mib: 7680, memory_total_mib: 81920}
      owners:                                        # Pods / ReplicaSets / Jobs, for the join
        - {kind: Pod, metadata: {name: notebook-7c9d-x2x7q, namespace: research,
           ownerReferences: [{kind: ReplicaSet, name: notebook-7c9d, controller: true}]}}

The section holds no resources of its own: `gpuwarden scan` joins its readings to the bundle's
(and the live sources') resources after collection (`engine.telemetry.attach_telemetry`).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from engine.core.errors import InputError
from engine.core.model import Resource
from engine.telemetry.series import GpuSeries, TelemetrySection

if TYPE_CHECKING:
    from engine.sources.snapshot import SnapshotContext


def parse_section(value: Any, file: str | None = None) -> TelemetrySection:
    """The section as a model; a malformed one is an InputError naming the bad field."""
    try:
        return TelemetrySection.model_validate(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        where = f"telemetry.{where}" if where else "telemetry"
        raise InputError(f"{where}: {error['msg']}", file=file) from None


def read_section(value: Any, ctx: SnapshotContext) -> list[Resource]:
    """Snapshot reader: checks the section; its readings are joined later, so no resources."""
    parse_section(value, ctx.file)
    return []


def section_document(readings: list[GpuSeries], owners: list[dict[str, Any]], *,
                     source: str | None, end: datetime | None, window_seconds: int | None
                     ) -> dict[str, Any]:
    """The section as saved by `--save-snapshot` or `gpuwarden telemetry ... --save`."""
    section = TelemetrySection(source=source, end=end, window_seconds=window_seconds,
                               gpus=readings, owners=owners)
    return section.model_dump(mode="json", exclude_defaults=True)
