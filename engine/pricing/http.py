"""Reading one page of a public price API: http(s) only, bounded in time and bytes, and parsed as
one JSON object. Errors are one line naming the API (`InputError`); `scrub` removes what must
never be printed (an API key in the address)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from engine.core.errors import InputError


def get_page(url: str, api: str, *, max_bytes: int, timeout_s: float,
             scrub: Callable[[str], str] = str) -> bytes:
    """The body at `url`, at most `max_bytes`."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise InputError(f"{api}: the address must be http(s)")
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body: bytes = response.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"{api} unreachable: {scrub(str(exc))[:300]}") from None
    if len(body) > max_bytes:
        raise InputError(f"{api}: a page over {max_bytes // 2**20} MiB")
    return body


def json_page(body: bytes, api: str, what: str = "a JSON page") -> dict[str, Any]:
    """`body` as one JSON object; an API's own `{"error": {"message": ...}}` is its error."""
    try:
        page = json.loads(body)
    except ValueError:
        page = None
    if not isinstance(page, dict):
        raise InputError(f"{api} did not answer {what}")
    error = page.get("error")
    if isinstance(error, dict):
        raise InputError(f"{api}: {str(error.get('message') or '')[:200]}")
    return page
