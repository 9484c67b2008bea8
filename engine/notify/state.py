"""Which failing findings were already notified: a JSON state file of finding keys. With a run
history, the caller passes the last recorded run's failing findings instead
(`engine.history.last_run`)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

STATE_LIMIT = 16 * 1024 * 1024  # bytes read from a state file
KEY_LIMIT = 200_000
STATE_NAME = "gpuwarden-notified.json"


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

