"""Memos bounded in size: what the engine remembers is keyed by input (types, schedules, tag
keys, prices), so no table may grow with it."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def remember(table: dict[K, V], key: K, value: V, most: int) -> V:
    """`value`, kept under `key` in `table`, which holds at most `most` entries: a full table
    starts again."""
    if len(table) >= most:
        table.clear()
    table[key] = value
    return value
