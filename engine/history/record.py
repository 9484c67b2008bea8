"""Recording a run: its JSON report and the snapshot it evaluated."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.core.model import Resource
from engine.history.store import Run
from engine.history.urls import open_store

if TYPE_CHECKING:
    from engine.sources.registry import Collected

RESOURCES_KIND = "Resources"


def collected_snapshot(collected: Collected, now: datetime) -> dict[str, Any]:
    """The snapshot `--save-snapshot` would write, through the same writer."""
    from engine.sources.registry import write_snapshot

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "snapshot.json"
        write_snapshot(collected, path, now.isoformat())
        value: dict[str, Any] = json.loads(path.read_bytes())
    return value


def resources_snapshot(resources: Iterable[Resource]) -> dict[str, Any]:
    return {"apiVersion": "gpuwarden.io/v1", "kind": RESOURCES_KIND,
            "resources": [r.model_dump(mode="json") for r in resources]}


def record_run(url: str, *, at: datetime, command: str, source: str, report_json: str,
               snapshot: dict[str, Any]) -> int:
    """Append one run: `report_json` is the run's report as `--format json` renders it."""
    run = Run(at=at, command=command, source=source, report=json.loads(report_json),
              snapshot=snapshot)
    return open_store(url).append(run)
