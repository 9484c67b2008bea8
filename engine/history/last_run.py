"""The last recorded run's failing findings: for `--notify` with `--history`, "new" is new since
that run (the caller hands the keys to `engine.notify`, which imports nothing from here)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from engine.core.errors import InputError
from engine.history.store import Run, Store
from engine.history.urls import open_store

LOOK_BACK = timedelta(days=31)  # an older last run: every failing finding is news
MAX_KEYS = 200_000


def known_from_history(url: str, before: datetime,
                       warn: Callable[[str], None]) -> frozenset[str] | None:
    """`previous_failing`, or None (the state file then decides) with one warning when the
    history cannot be read: a notification never fails a scan."""
    try:
        return previous_failing(url, before)
    except InputError as exc:
        warn(f"notify: the history cannot be read, the state file is used: {exc}")
        return None


def previous_failing(url: str, before: datetime) -> frozenset[str]:
    """The keys (policy, provider, resource id, as `engine.notify.digest.finding_key`) of the
    failing findings of the last run recorded before `before`; empty when there is none within
    LOOK_BACK. A store that cannot be read raises InputError."""
    store = open_store(url)
    local = getattr(store, "path", None)  # an SQLite file not created yet holds no run
    if isinstance(local, str) and not Path(local).exists():
        return frozenset()
    last = _last_run(store, before)
    findings = last.report.get("findings") if last is not None else None
    return frozenset(key for finding in (findings if isinstance(findings, list) else [])[:MAX_KEYS]
                     if (key := _failing_key(finding)) is not None)


def _last_run(store: Store, before: datetime) -> Run | None:
    since = before - LOOK_BACK
    latest = getattr(store, "latest_before", None)  # S3: one object read, not a month of runs
    if callable(latest):
        found: Run | None = latest(before, since)
        return found
    runs = [run for run in store.runs(since) if run.at < before]
    return max(runs, key=lambda run: run.at) if runs else None


def _failing_key(finding: Any) -> str | None:
    if not isinstance(finding, dict) or finding.get("result") != "fail":
        return None
    resource = finding.get("resource")
    if not isinstance(resource, dict):
        return None
    return f"{finding.get('policy')}|{resource.get('provider')}|{resource.get('id')}"
