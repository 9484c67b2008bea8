"""Per-connection rules uvicorn lacks: a read deadline per request, client certificates.

uvicorn closes a kept-alive connection only while it is silent, and waits for a new
connection's first request forever; every open connection counts against `limit_concurrency`.
A client that connects and sends nothing, or sends a request a byte at a time (slow loris),
would hold its place indefinitely. Here a request must arrive whole (head and body) within
`read_seconds` of the connection opening, or of its first byte on a kept-alive connection;
otherwise the connection is dropped.

With a client CA, TLS asks every client for a certificate and verifies any it gets
(CERT_OPTIONAL); a connection without one may only GET the health and metrics endpoints (the
kubelet's probes and scrapers present none) and gets 403 for everything else, the admission
endpoints included.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("gpuwarden.webhook")
_WAITING_FOR_REQUEST = (h11.IDLE, h11.SEND_BODY)
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})  # GET without a client certificate


class WebhookH11Protocol(H11Protocol):
    read_seconds: float = 5.0
    client_cert_required: bool = False
    _read_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.client_cert_required and not transport.get_extra_info("peercert"):
            self.app = _open_paths_only(self.app)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._read_timer is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the first bytes of the next request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state not in _WAITING_FOR_REQUEST:
            self._disarm()  # whole request read (or the connection is done with)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(self.read_seconds, self._read_expired)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_expired(self) -> None:
        self._read_timer = None
        if self.conn.their_state in _WAITING_FOR_REQUEST and not self.transport.is_closing():
            log.info("dropped a connection from %s: no whole request within %.0f s",
                     self.client, self.read_seconds)
            self.transport.abort()


def webhook_protocol(read_seconds: float, client_cert_required: bool) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a `read_seconds` deadline on every request and, when asked,
    the admission endpoints closed to connections without a verified client certificate."""

    class Protocol(WebhookH11Protocol):
        pass

    Protocol.read_seconds = read_seconds
    Protocol.client_cert_required = client_cert_required
    return Protocol


def _open_paths_only(app: Any) -> Any:
    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or (scope["method"] == "GET" and scope["path"] in OPEN_PATHS):
            await app(scope, receive, send)
            return
        body = b"gpuwarden: a client certificate is required"
        await send({"type": "http.response.start", "status": 403, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return guarded
