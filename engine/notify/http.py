"""POST a JSON document, within a few seconds, without following redirects."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

TIMEOUT_S = 5.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a webhook that redirects gets a failed delivery, not a second request


_OPENER = urllib.request.build_opener(_NoRedirect)


def post_json(url: str, document: dict[str, Any], timeout: float = TIMEOUT_S) -> None:
    """Raises OSError (urllib's errors are OSErrors) on failure or a non-2xx answer."""
    body = json.dumps(document).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "gpuwarden"})
    with _OPENER.open(request, timeout=timeout) as response:
        response.read(65536)
        if not 200 <= response.status < 300:
            raise OSError(f"HTTP {response.status}")
