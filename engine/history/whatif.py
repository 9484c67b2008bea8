"""`gpuwarden what-if`: the stored snapshots evaluated again with candidate policies, at each
run's own time, beside what the stored run found. Dry-run only: actions are planned, never run."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.core.errors import InputError
from engine.core.model import Report, Resource
from engine.history.record import RESOURCES_KIND
from engine.history.store import Run
from engine.history.trend import failing_keys

if TYPE_CHECKING:
    from engine.core.evaluate import Engine


def snapshot_resources(run: Run, engine: Engine) -> list[Resource]:
    if run.snapshot.get("kind") == RESOURCES_KIND:
        try:
            return [Resource.model_validate(item) for item in run.snapshot.get("resources") or []]
        except ValueError:
            raise InputError(f"history: run {run.id}: damaged resources") from None
    from engine.sources.registry import ScanOptions, collect_sources

    options = ScanOptions()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"run-{run.id}.json"
        path.write_text(json.dumps(run.snapshot), "utf-8")
        collected = collect_sources([f"snapshot:{path}"], options, engine.catalog)
    if "telemetry" in collected.snapshot:  # as the scan joined it
        from engine.telemetry import attach_telemetry

        collected = attach_telemetry(collected, options, run.at, engine.catalog)
    return list(collected.resources)


def _planned_actions(report: Report, max_actions: int) -> int:
    planned = sum(1 for f in report.findings
                  if f.remediation is not None and f.remediation.status == "planned")
    return min(planned, max_actions)


def replay(runs: Sequence[Run], engine: Engine, max_actions: int) -> dict[str, Any]:
    from engine.pipeline import evaluate_and_plan

    rows: list[dict[str, Any]] = []
    for run in runs:
        report = evaluate_and_plan(engine, snapshot_resources(run, engine), run.at)
        stored = run.report.get("summary")
        stored = stored if isinstance(stored, dict) else {}
        rows.append({
            "run": run.id, "at": run.at.isoformat(), "command": run.command,
            "stored": {"failed": len(failing_keys(run.report)),
                       "savings_usd": stored.get("savings_usd") or 0.0},
            "candidate": {"failed": report.summary.failed,
                          "savings_usd": report.summary.savings_usd or 0.0,
                          "actions": _planned_actions(report, max_actions)}})
    total = {side: {name: sum(row[side].get(name, 0) for row in rows)
                    for name in rows[0][side]} for side in ("stored", "candidate")} if rows else {}
    return {"runs": rows, "total": total, "max_actions": max_actions}


def render_whatif(result: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(result, indent=2)
    lines = [f"{'run':>4}  {'at':<25}  {'failed now':>10}  {'would fail':>10}  "
             f"{'savings now':>12}  {'would save':>12}  {'actions':>7}"]
    rows = [*result["runs"], {"run": "all", "at": "", **result["total"]}] if result["runs"] else []
    for row in rows:
        stored, candidate = row["stored"], row["candidate"]
        lines.append(
            f"{row['run']:>4}  {row['at']:<25}  {stored['failed']:>10}  {candidate['failed']:>10}"
            f"  {stored['savings_usd']:>12,.2f}  {candidate['savings_usd']:>12,.2f}  "
            f"{candidate['actions']:>7}")
    return "\n".join(lines)
