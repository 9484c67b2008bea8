"""Google Cloud API clients of one scan: how to reach the APIs (`GcpSettings`), the clients over
the REST transport, and the retry policy for throttling and unavailability. The SDKs are
imported inside functions only.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.core.errors import InputError, install_hint
from engine.sources.gcp.container_api import ContainerApi, authorized_session

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


@dataclass(frozen=True)
class GcpSettings:
    """How to reach the APIs. Tests point the endpoints at a loopback server."""

    credentials: Any = None  # None: Application Default Credentials
    compute_endpoint: str | None = None  # e.g. "http://127.0.0.1:8080"
    resource_manager_endpoint: str | None = None
    container_endpoint: str | None = None  # GKE; default https://container.googleapis.com
    max_attempts: int = 5  # per request, for 429 and 503 answers
    max_retry_wait_s: float = 60.0  # longest Retry-After honoured


@dataclass
class GcpClients:
    """The API clients of one scan; the remediation executor reuses them."""

    instances: Any  # compute_v1.InstancesClient
    disks: Any  # compute_v1.DisksClient
    projects: Any  # resourcemanager_v3.ProjectsClient
    retry: Any = None  # applied to every call
    machine_types: Any = None  # compute_v1.MachineTypesClient (types the catalog lacks)
    folders: Any = None  # resourcemanager_v3.FoldersClient (--folder walks)
    container: Any = None  # container_api.ContainerApi (GKE clusters and node pools)
    group_managers: Any = None  # compute_v1.InstanceGroupManagersClient (node pool sizes)


class RetryAfter:
    """A retry decorator for throttling (429) and unavailability (503) answers.

    Waits what the server's Retry-After header asks (capped), else backs off exponentially
    with jitter; gives up after `max_attempts` tries and re-raises the last error.
    """

    def __init__(self, max_attempts: int, max_wait_s: float,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.max_attempts = max(1, max_attempts)
        self.max_wait_s = max_wait_s
        self.sleep = sleep

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        from google.api_core.exceptions import ServiceUnavailable, TooManyRequests

        def retried(*args: Any, **kwargs: Any) -> Any:
            for attempt in range(1, self.max_attempts + 1):
                try:
                    return func(*args, **kwargs)
                except (TooManyRequests, ServiceUnavailable) as exc:
                    if attempt == self.max_attempts:
                        raise
                    self.sleep(self._wait(exc, attempt))
            raise AssertionError("unreachable")

        return retried

    def _wait(self, exc: BaseException, attempt: int) -> float:
        response = getattr(exc, "response", None)
        header = response.headers.get("Retry-After") if response is not None else None
        try:
            asked = float(header) if header is not None else None
        except ValueError:
            asked = None  # an HTTP date: fall back to backing off
        if asked is None:
            asked = min(2.0 ** (attempt - 1), 32.0) * (0.5 + random.random() / 2)
        return max(0.0, min(asked, self.max_wait_s))


def connect(settings: GcpSettings | None = None) -> GcpClients:
    """Clients over the REST transport, with Application Default Credentials unless given."""
    settings = settings or GcpSettings()
    try:
        from google.cloud import compute_v1, resourcemanager_v3
    except ModuleNotFoundError as exc:
        raise InputError(f"source 'gcp' needs a package that is not installed: {exc.name} "
                         f"({install_hint('gcp')})") from None
    credentials = settings.credentials or _default_credentials()

    def options(endpoint: str | None) -> dict[str, str] | None:
        return {"api_endpoint": endpoint} if endpoint else None

    compute_options = options(settings.compute_endpoint)
    retry = RetryAfter(settings.max_attempts, settings.max_retry_wait_s)
    return GcpClients(
        instances=compute_v1.InstancesClient(credentials=credentials, transport="rest",
                                             client_options=compute_options),
        disks=compute_v1.DisksClient(credentials=credentials, transport="rest",
                                     client_options=compute_options),
        projects=resourcemanager_v3.ProjectsClient(
            credentials=credentials, transport="rest",
            client_options=options(settings.resource_manager_endpoint)),
        retry=retry,
        machine_types=compute_v1.MachineTypesClient(
            credentials=credentials, transport="rest", client_options=compute_options),
        folders=resourcemanager_v3.FoldersClient(
            credentials=credentials, transport="rest",
            client_options=options(settings.resource_manager_endpoint)),
        container=ContainerApi(authorized_session(credentials), settings.container_endpoint,
                               retry),
        group_managers=compute_v1.InstanceGroupManagersClient(
            credentials=credentials, transport="rest", client_options=compute_options),
    )


def _default_credentials() -> Any:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, _ = google.auth.default(scopes=list(SCOPES))
    except DefaultCredentialsError:
        raise InputError("gcp: no Application Default Credentials found (run `gcloud auth "
                         "application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS)"
                         ) from None
    return credentials
