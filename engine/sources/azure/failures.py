"""Azure API and credential failures as one line each, and a subscription that could not be
listed.
"""

from __future__ import annotations

from typing import Any


class SubscriptionFailed(Exception):
    """One subscription could not be listed; `auth` when the credential was refused."""

    def __init__(self, message: str, *, auth: bool) -> None:
        super().__init__(message)
        self.auth = auth


def describe_error(exc: BaseException) -> tuple[str, bool]:
    """One line for an API or credential failure, and whether it is an auth failure."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ResourceNotFoundError,
        ServiceRequestError,
    )

    if isinstance(exc, ClientAuthenticationError):
        return f"credentials rejected or unavailable: {_error_message(exc)}", True
    if isinstance(exc, ResourceNotFoundError):
        return f"not found (HTTP 404): {_error_message(exc)}", False
    if isinstance(exc, HttpResponseError):
        status = exc.status_code
        if status == 403:
            return f"permission denied (HTTP 403): {_error_message(exc)}", True
        if status == 429:
            return f"throttled (HTTP 429) after retries: {_error_message(exc)}", False
        return f"API error (HTTP {status}): {_error_message(exc)}", False
    if isinstance(exc, ServiceRequestError):
        return f"cannot reach Azure Resource Manager: {_first_line(exc)}", False
    return f"unexpected failure: {_first_line(exc)}", False


def _error_message(exc: Any) -> str:
    error = getattr(exc, "error", None)
    code, message = getattr(error, "code", None), getattr(error, "message", None)
    if message:
        return _first_line(f"{code}: {message}" if code else message)
    return _first_line(getattr(exc, "message", None) or exc)


def _first_line(value: object) -> str:
    text = " ".join(str(value).split())
    return text[:300] or "no detail"
