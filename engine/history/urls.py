"""Which history store a `--history URL` names."""

from __future__ import annotations

from engine.core.errors import InputError, printable
from engine.history.store import Store


def open_store(url: str) -> Store:
    """`sqlite:///path.db` or a plain path: an SQLite file; `s3://bucket/prefix/`: S3."""
    if url.startswith("s3://"):
        from engine.history.s3 import S3Store

        return S3Store(url)
    if "://" in url and not url.startswith("sqlite:///"):
        raise InputError(f"--history: not a sqlite:/// URL or a path: {printable(url)!r}")
    from engine.history.sqlite import SqliteStore

    return SqliteStore(url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url)
