"""What `gpuwarden telemetry ...` prints: GPU readings as a text table or JSON.

`nvml` reads this node through NVML (and can save the readings as a snapshot bundle for a
scan); `show` gathers readings the way `gpuwarden scan` does and prints where each one joined.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from engine.core.catalog import Catalog
from engine.core.durations import format_duration
from engine.core.errors import InputError
from engine.sources.registry import Collected, ScanOptions
from engine.telemetry.join import Join
from engine.telemetry.series import GpuSeries


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 1024:.1f}"


def _memory(reading: GpuSeries) -> str:
    if reading.memory_used_mib is None and reading.memory_total_mib is None:
        return "-"
    return f"{_mib(reading.memory_used_mib)}/{_mib(reading.memory_total_mib)} GiB"


def _activity(reading: GpuSeries) -> str:
    if reading.activity_pct is None:
        return "-"
    return f"{reading.activity_pct:.1f}%"


def gpu_label(reading: GpuSeries) -> str:
    label = f"{reading.hostname or '?'} #{reading.gpu if reading.gpu is not None else '?'}"
    if reading.is_mig_slice:
        label += f" {reading.mig_profile or 'mig'}"
        if reading.mig_instance is not None:
            label += f"/{reading.mig_instance}"
    return label


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart; no trailing blanks."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
             .rstrip() for row in [header, *rows]]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- nvml


def nvml_rows(readings: Sequence[GpuSeries]) -> list[list[str]]:
    rows = []
    for reading in readings:
        processes = ", ".join(str(p.pid) for p in reading.processes) or "-"
        rows.append([
            gpu_label(reading), reading.model or "-", reading.uuid or "-", _activity(reading),
            _memory(reading), "on" if reading.mig_mode else "off" if reading.mig_mode is False
            else "-", "-" if reading.power_w is None else f"{reading.power_w:.0f} W", processes,
        ])
    return rows


def render_nvml(readings: Sequence[GpuSeries], fmt: str, driver: str | None) -> str:
    if fmt == "json":
        document = {"source": "nvml", "driver_version": driver,
                    "gpus": [r.model_dump(mode="json", exclude_defaults=True) for r in readings]}
        return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n"
    if not readings:
        return "NVML sees no GPUs on this machine\n"
    header = ["GPU", "MODEL", "UUID", "UTIL", "MEMORY", "MIG", "POWER", "PIDS"]
    return text_table(header, nvml_rows(readings))


def save_snapshot(path: Path, readings: Sequence[GpuSeries], *, source: str, now: datetime,
                  window_seconds: int) -> None:
    """A snapshot bundle holding only the readings, for `--source snapshot:FILE`."""
    from engine.sources.snapshot import dump_snapshot
    from engine.telemetry.snapshot import section_document

    bundle: dict[str, Any] = {
        "apiVersion": "gpuwarden.io/v1", "kind": "Snapshot", "captured_at": now.isoformat(),
        "telemetry": section_document(list(readings), [], source=source, end=now,
                                      window_seconds=window_seconds),
    }
    try:
        path.write_bytes(dump_snapshot(bundle))
    except OSError as exc:
        raise InputError(f"cannot write snapshot: {exc.strerror or exc}", file=str(path)) from None


# ---------------------------------------------------------------------------- show


def gather_and_join(collected: Collected, options: ScanOptions, now: datetime,
                    catalog: Catalog) -> tuple[list[Join], list[str]]:
    """Readings and where they joined, as `gpuwarden scan` would attach them."""
    from engine.telemetry.gather import gather, kubernetes_objects
    from engine.telemetry.join import join_readings

    gathered = gather(collected, options, now)
    objects, cluster = kubernetes_objects(collected)
    result = join_readings(collected.resources, gathered.readings, catalog=catalog,
                           objects=objects, owners=gathered.owners, cluster=cluster,
                           outage=gathered.outage)
    return result.joins, [*collected.warnings, *gathered.warnings, *result.warnings]


def render_joins(joins: Sequence[Join], fmt: str) -> str:
    if fmt == "json":
        document = [{"reading": j.reading.model_dump(mode="json", exclude_defaults=True),
                     "joined_to": list(j.targets)} for j in joins]
        return orjson.dumps({"gpus": document}, option=orjson.OPT_INDENT_2).decode() + "\n"
    if not joins:
        return "no GPU readings\n"
    rows = []
    for join in joins:
        reading = join.reading
        pod = f"{reading.namespace or '?'}/{reading.pod}" if reading.pod else "-"
        activity = _activity(reading) if reading.problem is None else "unknown"
        window = format_duration(reading.window_seconds) if reading.window_seconds else "instant"
        rows.append([gpu_label(reading), pod, activity, window, _memory(reading),
                     ", ".join(join.targets) or "(no owner)"])
    header = ["GPU", "POD", "ACTIVITY", "WINDOW", "MEMORY", "JOINED TO"]
    problems = [f"  {gpu_label(j.reading)}: {j.reading.problem}" for j in joins
                if j.reading.problem]
    text = text_table(header, rows)
    if problems:
        text += "\nunknown readings:\n" + "\n".join(problems) + "\n"
    return text
