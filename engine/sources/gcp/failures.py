"""Google Cloud API failures as one line each, and a project that could not be listed.
"""

from __future__ import annotations

import re
from typing import Any

_REQUEST_PREFIX = re.compile(r"^[A-Z]+ \S+: ")


class ProjectFailed(Exception):
    """One project could not be listed; `auth` when the credentials were refused."""

    def __init__(self, message: str, *, auth: bool) -> None:
        super().__init__(message)
        self.auth = auth


def describe_error(exc: BaseException) -> tuple[str, bool]:
    """One line for an API or credentials failure, and whether it is an auth failure."""
    from google.api_core import exceptions as api
    from google.auth.exceptions import GoogleAuthError

    if isinstance(exc, GoogleAuthError):
        return f"credentials rejected or expired: {first_line(exc)}", True
    if isinstance(exc, api.Unauthorized):
        return f"credentials rejected (HTTP 401): {_api_message(exc)}", True
    if isinstance(exc, api.Forbidden):
        return f"permission denied (HTTP 403): {_api_message(exc)}", True
    if isinstance(exc, api.TooManyRequests):
        return f"throttled (HTTP 429) after retries: {_api_message(exc)}", False
    if isinstance(exc, api.NotFound):
        return f"not found (HTTP 404): {_api_message(exc)}", False
    if isinstance(exc, api.GoogleAPICallError):
        return f"API error (HTTP {exc.code}): {_api_message(exc)}", False
    return f"cannot reach the API: {first_line(exc)}", False


def _api_message(exc: Any) -> str:
    # the client prefixes the request ("GET https://...: "); the server's message is the news
    text = first_line(getattr(exc, "message", None) or exc)
    return _REQUEST_PREFIX.sub("", text, count=1) or text


def first_line(value: object) -> str:
    text = " ".join(str(value).split())
    return text[:300] or "no detail"
