"""Which failing findings were already notified: a JSON state file of finding keys, or, when the
run has a history (`--history`), the failing findings of the last run recorded there."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

STATE_LIMIT = 16 * 1024 * 1024  # bytes read from a state file
KEY_LIMIT = 200_000
STATE_NAME = "gpuwarden-notified.json"
HISTORY_LOOK_BACK = timedelta(days=31)  # an older last run: every failing finding is news


def default_state_path(audit_log: Path | None) -> Path:
    """Next to the audit log, else in the user's cache directory."""
    if audit_log is not None:
        return audit_log.parent / STATE_NAME
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuwarden" / STATE_NAME


def read_state(path: Path) -> set[str]:
    """The notified keys; an absent, unreadable or malformed file is an empty state (the
    worst case is one repeated notification, never a failed scan)."""
    try:
        with path.open("rb") as handle:
            document = json.loads(handle.read(STATE_LIMIT + 1)[:STATE_LIMIT])
    except (OSError, ValueError):
        return set()
    keys = document.get("notified") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        return set()
    return {key for key in keys[:KEY_LIMIT] if isinstance(key, str)}


def write_state(path: Path, keys: Iterable[str]) -> None:
    """Atomically: a crash mid-write leaves the previous state."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"version": 1, "notified": sorted(keys)[:KEY_LIMIT]}
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".notified-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(document, out)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def previous_failing(history: str, before: datetime) -> set[str]:
    """The keys (policy, provider, resource id: `engine.notify.digest.finding_key`) of the
    failing findings of the last run recorded in `history` before `before`; empty when there is
    none within HISTORY_LOOK_BACK. A store that cannot be read raises InputError."""
    from engine.history.urls import open_store

    store = open_store(history)
    local = getattr(store, "path", None)  # an SQLite file not created yet holds no run
    if isinstance(local, str) and not Path(local).exists():
        return set()
    last = _last_run(store, before)
    if last is None:
        return set()
    findings = last.report.get("findings")
    return {key for finding in (findings if isinstance(findings, list) else [])[:KEY_LIMIT]
            if (key := _failing_key(finding)) is not None}


def _last_run(store: Any, before: datetime) -> Any:
    since = before - HISTORY_LOOK_BACK
    latest = getattr(store, "latest_before", None)  # S3: one object read, not a month of runs
    if callable(latest):
        return latest(before, since)
    runs = [run for run in store.runs(since) if run.at < before]
    return max(runs, key=lambda run: run.at) if runs else None


def _failing_key(finding: Any) -> str | None:
    if not isinstance(finding, dict) or finding.get("result") != "fail":
        return None
    resource = finding.get("resource")
    if not isinstance(resource, dict):
        return None
    return f"{finding.get('policy')}|{resource.get('provider')}|{resource.get('id')}"
