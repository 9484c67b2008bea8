"""Helpers of the readers: paginated list/describe calls, and responses as plain JSON data."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import date, datetime
from typing import Any


def plain(value: Any) -> Any:
    """A boto3 response as plain JSON data: datetimes as ISO strings, no ResponseMetadata."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items() if k != "ResponseMetadata"}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def pages(client: Any, operation: str, key: str, **params: Any) -> Iterator[Any]:
    """Every item under `key` of a list/describe call, following its pagination."""
    if client.can_paginate(operation):
        for page in client.get_paginator(operation).paginate(**params):
            yield from page.get(key) or []
    else:
        yield from getattr(client, operation)(**params).get(key) or []
