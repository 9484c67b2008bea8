"""Baselines: accept today's findings, fail only on new ones (keyed by policy and resource id,
which for a plan is the resource address, so the key survives re-planning)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import orjson

from engine.core.errors import InputError
from engine.core.evaluate import summarize
from engine.core.model import Report

BASELINE_SCHEMA = "gpuwarden.baseline/v1"
Key = tuple[str, str]


def read_baseline(path: Path) -> set[Key]:
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise InputError(f"cannot read baseline: {exc.strerror or exc}", file=str(path)) from None
    except orjson.JSONDecodeError as exc:
        raise InputError(f"baseline is not valid JSON: {exc}", file=str(path)) from None
    entries = data.get("accepted") if isinstance(data, dict) else None
    if data.get("schema") != BASELINE_SCHEMA or not isinstance(entries, list):
        raise InputError(f"not a gpuwarden baseline (schema {BASELINE_SCHEMA})", file=str(path))
    keys: set[Key] = set()
    for entry in entries:
        if not isinstance(entry, dict) or not {"policy", "resource"} <= entry.keys():
            raise InputError("baseline entries need 'policy' and 'resource'", file=str(path))
        keys.add((str(entry["policy"]), str(entry["resource"])))
    return keys


def baseline_document(report: Report, created: datetime) -> bytes:
    accepted = sorted({(f.policy, f.resource.id) for f in report.findings if f.result != "pass"})
    return orjson.dumps(
        {
            "schema": BASELINE_SCHEMA,
            "created_at": created.isoformat(),
            "accepted": [{"policy": p, "resource": r} for p, r in accepted],
        },
        option=orjson.OPT_INDENT_2,
    )


def apply_baseline(report: Report, accepted: set[Key]) -> Report:
    """Drop accepted findings; the summary is recomputed over what is left."""
    kept = [f for f in report.findings if (f.policy, f.resource.id) not in accepted]
    summary = summarize(kept, report.summary.resources, report.summary.passed,
                        report.summary.exempted, spend_usd=report.summary.monthly_spend_usd)
    summary.baselined = len(report.findings) - len(kept)
    return report.model_copy(update={"findings": kept, "summary": summary})
