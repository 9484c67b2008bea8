"""The GKE (Kubernetes Engine) REST API, v1, over an authorized HTTP session: no client library
for it is a dependency, so its few calls go through google-auth's `AuthorizedSession` with the
scan's credentials. Non-2xx answers become google-api-core's exceptions
(`from_http_response`), so `describe_error` and the retry policy treat them like the other
clients' errors. Every answer is bounded in size.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

DEFAULT_ENDPOINT = "https://container.googleapis.com"
MAX_ANSWER_BYTES = 32 * 1024 * 1024
TIMEOUT_S = 60.0
OPERATION_POLL_S = 5.0
OPERATION_WAIT_S = 600.0  # GKE runs one operation per cluster at a time: each is waited for


class ContainerApi:
    """`get`, `post` and `put` on `{endpoint}/v1/{path}`, with the scan's retry policy."""

    def __init__(self, session: Any, endpoint: str | None, retry: Callable[..., Any] | None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.session = session
        self.endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self.retry = retry
        self.sleep = sleep

    def get(self, path: str) -> dict[str, Any]:
        return self._call("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", path, body)

    def put(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("PUT", path, body)

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        call = self.retry(self._request) if self.retry else self._request
        answer: dict[str, Any] = call(method, path, body)
        return answer

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        from google.api_core.exceptions import from_http_response

        response = self.session.request(method, f"{self.endpoint}/v1/{path}", json=body,
                                        timeout=TIMEOUT_S)
        if response.status_code >= 400:
            raise from_http_response(response)  # type: ignore[no-untyped-call]
        if len(response.content) > MAX_ANSWER_BYTES:
            raise ValueError(f"GKE answer larger than {MAX_ANSWER_BYTES} bytes")
        found = json.loads(response.content or b"{}")
        if not isinstance(found, dict):
            raise ValueError("GKE answer is not a JSON object")
        return found

    def wait(self, operation: dict[str, Any], location_path: str) -> dict[str, Any]:
        """The operation once DONE (polled under `location_path`, `projects/P/locations/L`);
        ValueError when it failed or ran past OPERATION_WAIT_S."""
        waited = 0.0
        while str(operation.get("status") or "") != "DONE":
            if waited >= OPERATION_WAIT_S:
                raise ValueError(f"operation {operation.get('name')} still "
                                 f"{operation.get('status')} after {OPERATION_WAIT_S:.0f} s")
            self.sleep(OPERATION_POLL_S)
            waited += OPERATION_POLL_S
            operation = self.get(f"{location_path}/operations/{operation.get('name')}")
        error = operation.get("error") or {}
        if error.get("message") or operation.get("statusMessage"):
            raise ValueError(str(error.get("message") or operation.get("statusMessage"))[:300])
        return operation


def authorized_session(credentials: Any) -> Any:
    from google.auth.transport.requests import AuthorizedSession

    return AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
