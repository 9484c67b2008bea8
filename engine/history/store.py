"""What a history store keeps, and which store a `--history URL` names."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

MAX_RUNS = 10_000  # runs read back in one listing
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024  # one stored report or snapshot


@dataclass(frozen=True, slots=True)
class Run:
    """One recorded run. `snapshot`: the collected state (`kind: Snapshot`, as `--save-snapshot`
    writes it) or, for check-plan, `kind: Resources` with the normalized resources."""

    at: datetime
    command: str
    source: str
    report: dict[str, Any]
    snapshot: dict[str, Any]
    id: int = 0


class Store(Protocol):
    def append(self, run: Run) -> int: ...

    def runs(self, since: datetime | None = None) -> list[Run]: ...
