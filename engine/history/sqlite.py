"""A history store in one SQLite file (the standard library's sqlite3)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.core.errors import InputError
from engine.history.store import MAX_DOCUMENT_BYTES, MAX_RUNS, Run

SCHEMA = """CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, command TEXT NOT NULL,
    source TEXT NOT NULL, report TEXT NOT NULL, snapshot TEXT NOT NULL)"""


class SqliteStore:
    def __init__(self, path: str) -> None:
        self.path = path

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        try:
            with closing(sqlite3.connect(self.path, timeout=10)) as connection, connection:
                connection.execute(SCHEMA)
                yield connection
        except sqlite3.Error as exc:
            raise InputError(f"history: not a readable SQLite history ({exc})",
                             file=self.path) from None

    def append(self, run: Run) -> int:
        with self._connection() as connection:
            cursor = connection.execute(
                "INSERT INTO runs (at, command, source, report, snapshot) VALUES (?,?,?,?,?)",
                (run.at.isoformat(), run.command, run.source, json.dumps(run.report),
                 json.dumps(run.snapshot)))
            return int(cursor.lastrowid or 0)

    def runs(self, since: datetime | None = None) -> list[Run]:
        if not Path(self.path).is_file():
            raise InputError("history: no such file", file=self.path)
        with self._connection() as connection:
            rows = connection.execute(
                "SELECT id, at, command, source, report, snapshot FROM runs ORDER BY at, id "
                "LIMIT ?", (MAX_RUNS,)).fetchall()
        runs = [self._run(row) for row in rows]
        return [run for run in runs if since is None or run.at >= since]

    def _run(self, row: tuple[Any, ...]) -> Run:
        ident, at, command, source, report, snapshot = row
        try:
            return Run(id=int(ident), at=datetime.fromisoformat(str(at)), command=str(command),
                       source=str(source), report=_document(report), snapshot=_document(snapshot))
        except (ValueError, TypeError, RecursionError):
            raise InputError(f"history: run {ident!r} is damaged", file=self.path) from None


def _document(text: object) -> dict[str, Any]:
    if not isinstance(text, str) or len(text) > MAX_DOCUMENT_BYTES:
        raise ValueError("not a stored document")
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value
