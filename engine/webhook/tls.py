"""The uvicorn server: TLS from files, reloaded in place when they change (cert-manager rotates
the Secret; kubelet swaps the mounted files), plain HTTP only when asked for explicitly, client
certificates required on the admission endpoints when a client CA is given (mutual TLS with the
API server; see connections.py).

Connection limits: at most `limit_concurrency` open connections or requests in progress (then
503), request heads of at most `max_header_bytes`, each request read whole within
`request_read_seconds` (connections.py), silent kept-alive connections closed after
`keep_alive_seconds`. Bodies are capped by the app (review.MAX_BODY_BYTES) while they stream in.

Reloading calls `load_cert_chain` on the live `SSLContext` uvicorn listens with, so new
connections get the new certificate while open ones keep theirs. A pair that does not load
(a half-written rotation, a key that does not match) is first tried on a scratch context and
never reaches the live one; the next poll tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import uvicorn
from cryptography import x509

from engine.core.errors import InputError
from engine.webhook.connections import webhook_protocol

log = logging.getLogger("gpuwarden.webhook")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "0.0.0.0"
    port: int = 8443
    cert: Path | None = None
    key: Path | None = None
    insecure_http: bool = False
    reload_interval: float = 10.0
    log_level: str = "info"
    access_log: bool = False
    client_ca: Path | None = None  # PEM bundle: admission calls need a certificate it signed
    limit_concurrency: int = 256
    request_read_seconds: float = 5.0
    keep_alive_seconds: int = 30
    max_header_bytes: int = 16 * 1024


def certificate_not_after(cert_pem: bytes) -> datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


class CertificateReloader:
    """Watches the cert and key files; reloads them into `context` when either changes."""

    def __init__(self, context: ssl.SSLContext, cert: Path, key: Path, *,
                 on_load: Callable[[datetime], None] | None = None,
                 on_failure: Callable[[str], None] | None = None):
        self.context = context
        self.cert = cert
        self.key = key
        self.on_load = on_load
        self.on_failure = on_failure
        self._seen = self._signature()
        self.loads = 0

    def _signature(self) -> tuple[tuple[int, int, int], ...]:
        signature = []
        for path in (self.cert, self.key):
            try:
                stat = os.stat(path)  # follows kubelet's ..data symlink to the live file
                signature.append((stat.st_mtime_ns, stat.st_size, stat.st_ino))
            except OSError:
                signature.append((0, 0, 0))
        return tuple(signature)

    def initial(self) -> None:
        """Report the expiry of the certificate uvicorn loaded at start."""
        if self.on_load is not None:
            self.on_load(certificate_not_after(self.cert.read_bytes()))

    def check(self) -> bool:
        """Reload when the files changed since the last successful load; True when reloaded."""
        signature = self._signature()
        if signature == self._seen:
            return False
        try:
            not_after = self._load_pair()
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.warning("TLS reload failed, keeping the current certificate: %s", exc)
            if self.on_failure is not None:
                self.on_failure(str(exc))
            return False  # _seen unchanged: retried on the next poll
        self._seen = signature
        self.loads += 1
        log.info("TLS certificate reloaded; expires %s", not_after.isoformat())
        if self.on_load is not None:
            self.on_load(not_after)
        return True

    def _load_pair(self) -> datetime:
        # One read of each file, so the scratch check and the live load see the same bytes.
        cert_pem, key_pem = self.cert.read_bytes(), self.key.read_bytes()
        not_after = certificate_not_after(cert_pem)
        with tempfile.TemporaryDirectory(prefix="gpuwarden-tls-") as scratch:
            cert_copy, key_copy = Path(scratch, "tls.crt"), Path(scratch, "tls.key")
            cert_copy.write_bytes(cert_pem)
            key_copy.write_bytes(key_pem)
            os.chmod(key_copy, 0o600)
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_copy, key_copy)
            self.context.load_cert_chain(cert_copy, key_copy)
        return not_after

    async def watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.check()


class WebhookServer(uvicorn.Server):
    """uvicorn's server plus the certificate watcher, running while the server runs."""

    def __init__(self, app: Any, settings: ServerSettings, *,
                 on_cert_load: Callable[[datetime], None] | None = None,
                 on_cert_failure: Callable[[str], None] | None = None):
        if not settings.insecure_http and (settings.cert is None or settings.key is None):
            raise ValueError("TLS needs both a certificate and a key (or insecure_http)")
        if settings.insecure_http and settings.client_ca is not None:
            raise ValueError("a client CA needs TLS")
        config = uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            ssl_certfile=None if settings.insecure_http else str(settings.cert),
            ssl_keyfile=None if settings.insecure_http else str(settings.key),
            ssl_ca_certs=str(settings.client_ca) if settings.client_ca else None,
            # Optional at the TLS layer so the kubelet's probes get through; connections.py
            # closes the admission endpoints to connections that presented no certificate.
            ssl_cert_reqs=ssl.CERT_OPTIONAL if settings.client_ca else ssl.CERT_NONE,
            log_level=settings.log_level,
            access_log=settings.access_log,
            lifespan="on",
            http=webhook_protocol(settings.request_read_seconds, settings.client_ca is not None),
            ws="none",
            limit_concurrency=settings.limit_concurrency,
            timeout_keep_alive=settings.keep_alive_seconds,  # the API server reuses connections
            h11_max_incomplete_event_size=settings.max_header_bytes,
            server_header=False,
        )
        super().__init__(config)
        self.settings = settings
        self.reloader: CertificateReloader | None = None
        self._on_cert_load = on_cert_load
        self._on_cert_failure = on_cert_failure

    async def serve(self, sockets: list[Any] | None = None) -> None:
        if not self.config.loaded:
            self.config.load()
        watcher: asyncio.Task[None] | None = None
        if self.config.ssl is not None:
            assert self.settings.cert is not None and self.settings.key is not None
            self.reloader = CertificateReloader(
                self.config.ssl, self.settings.cert, self.settings.key,
                on_load=self._on_cert_load, on_failure=self._on_cert_failure,
            )
            self.reloader.initial()
            watcher = asyncio.create_task(self.reloader.watch(self.settings.reload_interval))
        try:
            await super().serve(sockets)
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher

    @property
    def bound_port(self) -> int | None:
        """The port actually listened on (useful with port 0)."""
        for server in getattr(self, "servers", []):
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return None


def webhook_server(app: Any, settings: ServerSettings) -> WebhookServer:
    """A server for a `create_app` app, reporting certificate loads to the app's metrics."""
    metrics = app.state.webhook.metrics

    def loaded(not_after: datetime) -> None:
        metrics.cert_expiry.set(not_after.timestamp())
        metrics.cert_reloads.labels("loaded").inc()

    return WebhookServer(app, settings, on_cert_load=loaded,
                         on_cert_failure=lambda _: metrics.cert_reloads.labels("failed").inc())


def check_client_ca(settings: ServerSettings) -> None:
    """InputError unless the client CA, when given, is a readable PEM bundle served over TLS."""
    if settings.client_ca is None:
        return
    if settings.insecure_http:
        raise InputError("a client CA needs TLS (drop --insecure-http)")
    try:
        ssl.create_default_context(cafile=str(settings.client_ca))
    except (OSError, ssl.SSLError) as exc:
        raise InputError(f"not a readable PEM CA bundle ({exc.strerror or exc})",
                         file=str(settings.client_ca)) from None


def run_server(app: Any, settings: ServerSettings) -> None:
    """Serve until SIGINT/SIGTERM (the CLI's entry point)."""
    check_client_ca(settings)
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Evaluations run in worker threads beside the event loop; the default 5 ms GIL switch
    # interval lets one of them hold up the loop's TLS I/O for that long.
    sys.setswitchinterval(0.001)
    webhook_server(app, settings).run()
